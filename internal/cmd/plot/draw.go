package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/internal/svgplot"
)

// Layout, in pixels. Six rows (algorithms) of three panels (scenarios);
// 880 pixels wide fits GitHub's README column without scaling.
const (
	width      = 880.0
	rowLabelX  = 34.0  // the algorithm names
	firstX     = 170.0 // the left edge of the first column's panels
	panelW     = 202.0
	columnGap  = 46.0 // room for the y tick labels
	firstY     = 134.0
	panelH     = 86.0
	rowGap     = 16.0
	xMin       = -6.0 // seconds: a margin so jumps at 0 s stand clear of the frame
	xMax       = 180.0
	annotation = 10.0 // font size of the counts in the panels
)

var (
	offeredStroke  = svgplot.Stroke{Color: "#c3cad2", Width: 4}
	admittedStroke = svgplot.Stroke{Color: "#0969da", Width: 1.75}
	sentStroke     = svgplot.Stroke{Color: "#bc4c00", Width: 1.75, Dash: "4 2.5"}
	noteColor      = "#59636e"
)

// rowLabels names each algorithm as the README does.
var rowLabels = map[ratelimit.Algorithm][]string{
	ratelimit.TokenBucket:   {"token bucket", "(the default)"},
	ratelimit.GCRA:          {"GCRA"},
	ratelimit.LeakyBucket:   {"leaky bucket", "(a queue)"},
	ratelimit.SlidingWindow: {"sliding-window", "counter"},
	ratelimit.SlidingLog:    {"sliding log"},
	ratelimit.FixedWindow:   {"fixed window"},
}

// draw runs every algorithm on every scenario and returns the SVG.
func draw() ([]byte, error) {
	scs := scenarios()
	height := firstY + float64(len(algorithms))*(panelH+rowGap) - rowGap + 52
	f := svgplot.New(width, height,
		"Admitted requests over time for six rate-limit algorithms under the same traffic, PerMinute(100)")

	f.Text(rowLabelX-20, 30, "Six algorithms, one limit, the same traffic: PerMinute(100) on one key", svgplot.Font{Size: 17, Bold: true})
	f.Text(rowLabelX-20, 50, "Quota Q = capacity C = 100 per period P = 60 s, rate R = one per 600 ms; the rampmeter Limiter on the memory store, with a fake clock.",
		svgplot.Font{Size: 11.5, Color: noteColor})
	f.Text(rowLabelX-20, 66, "Each panel: requests so far (y) against time in seconds (x). Vertical grid lines are the minute boundaries, where windows start.",
		svgplot.Font{Size: 11.5, Color: noteColor})
	f.Key(rowLabelX-20, 88, "offered: every request the client sends", offeredStroke, svgplot.Font{Size: 12})
	f.Key(rowLabelX+270, 88, "admitted (Result.Allowed)", admittedStroke, svgplot.Font{Size: 12})
	f.Key(rowLabelX+480, 88, "leaky bucket: sent, after Result.Delay", sentStroke, svgplot.Font{Size: 12})

	for col, sc := range scs {
		x := firstX + float64(col)*(panelW+columnGap)
		f.Text(x, firstY-20, sc.title, svgplot.Font{Size: 12.5, Bold: true})
		f.Text(x, firstY-6, sc.subtitle, svgplot.Font{Size: 11, Color: noteColor})
	}
	f.Text(rowLabelX-20, firstY+(float64(len(algorithms))*(panelH+rowGap)-rowGap)/2, "requests so far (cumulative)",
		svgplot.Font{Size: 11, Anchor: svgplot.Middle, Color: noteColor, Vertical: true})

	for row, a := range algorithms {
		y := firstY + float64(row)*(panelH+rowGap)
		for i, line := range rowLabels[a] {
			font := svgplot.Font{Size: 12.5, Bold: i == 0}
			if i > 0 {
				font = svgplot.Font{Size: 11, Color: noteColor}
			}
			f.Text(rowLabelX, y+panelH/2-4+float64(i)*15, line, font)
		}
		last := row == len(algorithms)-1
		for col, sc := range scs {
			r, err := measure(a, sc)
			if err != nil {
				return nil, err
			}
			x := firstX + float64(col)*(panelW+columnGap)
			top := float64(len(sc.requests))
			var yTicks []float64
			for v := 0.0; v <= top; v += 100 {
				yTicks = append(yTicks, v)
			}
			p := f.Panel(x, y, panelW, panelH,
				svgplot.Axis{Min: xMin, Max: xMax, Ticks: []float64{0, 60, 120, 180}, Labels: last},
				svgplot.Axis{Min: 0, Max: top * 1.1, Ticks: yTicks, Labels: true})
			p.Line(cumulative(sc.requests), offeredStroke)
			p.Line(cumulative(r.admitted), admittedStroke)
			if r.sent != nil {
				p.Line(cumulative(r.sent), sentStroke)
			}
			// The counts go where the lines are not: bottom right in (a) and
			// (b), top left (before the first burst) in (c).
			ns := notes(col, r)
			for i, n := range ns {
				font := svgplot.Font{Size: annotation, Color: n.color, Halo: true}
				var at svgplot.Point
				if col == 2 {
					at = p.At(svgplot.Point{X: xMin, Y: top * 1.1})
					at = svgplot.Point{X: at.X + 4, Y: at.Y + 12 + float64(i)*12}
				} else {
					font.Anchor = svgplot.End
					at = p.At(svgplot.Point{X: xMax, Y: 0})
					at = svgplot.Point{X: at.X - 4, Y: at.Y - 5 - float64(len(ns)-1-i)*12}
				}
				f.Text(at.X, at.Y, n.text, font)
			}
			if last {
				f.Text(x+panelW/2, y+panelH+30, "time (s)", svgplot.Font{Size: 11, Anchor: svgplot.Middle, Color: noteColor})
			}
		}
	}
	f.Text(rowLabelX-20, height-8, "Drawn by go run ./internal/cmd/plot; the counts are those of the README's algorithm table (TestAlgorithmTable).",
		svgplot.Font{Size: 10, Color: noteColor})
	return f.Render()
}

// cumulative returns the staircase of the count of times so far: 0 from
// xMin, then a jump at every distinct time, held until xMax. times must be
// sorted.
func cumulative(times []time.Duration) []svgplot.Point {
	pts := []svgplot.Point{{X: xMin, Y: 0}}
	for i := 0; i < len(times); {
		j := i
		for j < len(times) && times[j] == times[i] {
			j++
		}
		x := seconds(times[i])
		pts = append(pts, svgplot.Point{X: x, Y: float64(i)}, svgplot.Point{X: x, Y: float64(j)})
		i = j
	}
	return append(pts, svgplot.Point{X: xMax, Y: float64(len(times))})
}

// A note is a line of text in a panel.
type note struct{ text, color string }

// notes are the counts written in a panel of column col, the numbers of
// the README's table: for the admissions and, for the leaky bucket, the
// sends.
func notes(col int, r run) []note {
	var out []note
	if col == 2 {
		out = append(out, note{"most in 60 s:", noteColor})
	}
	for i, times := range [][]time.Duration{r.admitted, r.sent} {
		if i == 1 && times == nil {
			break
		}
		verb, color := "admitted", admittedStroke.Color
		if i == 1 {
			verb, color = "sent", sentStroke.Color
		}
		switch col {
		case 0:
			if i == 0 {
				out = append(out, note{fmt.Sprintf("%s %d", verb, len(times)), color})
			} else {
				out = append(out, note{fmt.Sprintf("%s by %s s", verb, secondsText(times[len(times)-1])), color})
			}
		case 1:
			first := countBefore(times, period)
			second := countBefore(times, 2*period) - first
			out = append(out, note{fmt.Sprintf("%s %d, then %d", verb, first, second), color})
		case 2:
			most, spread := mostWithin(times, period)
			out = append(out, note{fmt.Sprintf("%s %d", verb, most), color})
			if spread > 0 && spread < time.Second {
				out = append(out, note{"within " + secondsText(spread) + " s", color})
			}
		}
	}
	return out
}

func seconds(d time.Duration) float64 { return d.Seconds() }

func secondsText(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64)
}
