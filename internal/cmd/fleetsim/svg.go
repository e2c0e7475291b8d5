package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// A minimal SVG writer for the one figure this command draws: numbers are
// formatted with fixed precision so that the output is byte-for-byte
// repeatable (TestSVGUpToDate compares it with the committed file).

const (
	width, height = 960, 650
	font          = `font-family="Helvetica, Arial, sans-serif"`
)

var colors = struct{ global, fleet, bar1, bar2, grid, axis, event string }{
	global: "#1f77b4", fleet: "#ff7f0e", bar1: "#ff7f0e", bar2: "#2ca02c",
	grid: "#e6e6e6", axis: "#444444", event: "#888888",
}

type svg struct{ b strings.Builder }

func f1(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

func (s *svg) printf(format string, args ...any) { fmt.Fprintf(&s.b, format, args...) }

func (s *svg) text(x, y float64, size int, anchor, fill, text string) {
	s.printf(`<text x="%s" y="%s" font-size="%d" text-anchor="%s" fill="%s" %s>%s</text>`+"\n",
		f1(x), f1(y), size, anchor, fill, font, escape(text))
}

func (s *svg) line(x1, y1, x2, y2 float64, stroke string, w float64, dash string) {
	d := ""
	if dash != "" {
		d = ` stroke-dasharray="` + dash + `"`
	}
	s.printf(`<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="%s"%s/>`+"\n",
		f1(x1), f1(y1), f1(x2), f1(y2), stroke, f1(w), d)
}

func (s *svg) rect(x, y, w, h float64, fill string, opacity float64) {
	s.printf(`<rect x="%s" y="%s" width="%s" height="%s" fill="%s" fill-opacity="%s"/>`+"\n",
		f1(x), f1(y), f1(w), f1(h), fill, f1(opacity))
}

func (s *svg) polyline(pts [][2]float64, stroke string, w float64) {
	var b strings.Builder
	for i, p := range pts {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(f1(p[0]) + "," + f1(p[1]))
	}
	s.printf(`<polyline points="%s" fill="none" stroke="%s" stroke-width="%s" stroke-linejoin="round"/>`+"\n",
		b.String(), stroke, f1(w))
}

func escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// frame is a plot area in pixels with its data ranges.
type frame struct {
	x, y, w, h   float64 // pixels: left, top, width, height
	x0, x1       float64 // data range of x
	y0, y1       float64 // data range of y
	title, yName string
}

func (f frame) px(x float64) float64 { return f.x + (x-f.x0)/(f.x1-f.x0)*f.w }
func (f frame) py(y float64) float64 { return f.y + f.h - (y-f.y0)/(f.y1-f.y0)*f.h }

// axes draws the title, the y grid with its labels every yStep, and the
// frame's bottom and left axes.
func (s *svg) axes(f frame, yStep float64, yLabel func(float64) string) {
	s.text(f.x, f.y-12, 14, "start", colors.axis, f.title)
	for v := f.y0; v <= f.y1+1e-9; v += yStep {
		y := f.py(v)
		s.line(f.x, y, f.x+f.w, y, colors.grid, 1, "")
		s.text(f.x-6, y+4, 11, "end", colors.axis, yLabel(v))
	}
	s.line(f.x, f.y+f.h, f.x+f.w, f.y+f.h, colors.axis, 1, "")
	s.line(f.x, f.y, f.x, f.y+f.h, colors.axis, 1, "")
	if f.yName != "" {
		s.printf(`<text x="%s" y="%s" font-size="11" text-anchor="middle" fill="%s" %s transform="rotate(-90 %s %s)">%s</text>`+"\n",
			f1(f.x-44), f1(f.y+f.h/2), colors.axis, font, f1(f.x-44), f1(f.y+f.h/2), escape(f.yName))
	}
}

func (s *svg) legend(x, y float64, items [][2]string) {
	for i, it := range items {
		yy := y + float64(i)*16
		s.line(x, yy-4, x+18, yy-4, it[0], 3, "")
		s.text(x+24, yy, 11, "start", colors.axis, it[1])
	}
}

// render draws the figure: the hottest key per second in the run with
// lifetime seriesRun (admitted by the fleet and by the single global
// bucket), then, for every run, the backing-store calls per decision and
// how the admissions compare with the global bucket's.
func render(runs []*Run) []byte {
	var s svg
	s.printf(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">`+"\n", width, height, width, height)
	s.rect(0, 0, width, height, "#ffffff", 1)
	s.text(width/2, 26, 16, "middle", colors.axis,
		"store/lease: 100 instances, 20 Zipf keys, limits per key and per route (go run ./internal/cmd/fleetsim)")

	var series *Run
	for _, r := range runs {
		if r.Lifetime == seriesRun {
			series = r
		}
	}
	top := frame{x: 80, y: 70, w: 840, h: 230, x0: 0, x1: duration.Seconds(), y0: 0, y1: 1400,
		title: "Hottest key, admitted per second (limit 600/s; it asks 2,400/s, 6,400/s in the burst), lease lifetime " + seriesRun.String(),
		yName: "requests / s"}
	s.axes(top, 200, func(v float64) string { return strconv.Itoa(int(v)) })
	for sec := 0; sec <= int(duration.Seconds()); sec += 5 {
		x := top.px(float64(sec))
		s.line(x, top.y+top.h, x, top.y+top.h+4, colors.axis, 1, "")
		s.text(x, top.y+top.h+16, 11, "middle", colors.axis, strconv.Itoa(sec)+" s")
	}
	s.rect(top.px(burstFrom.Seconds()), top.y, top.px(burstTo.Seconds())-top.px(burstFrom.Seconds()), top.h, colors.event, 0.12)
	for _, ev := range []struct {
		at    time.Duration
		label string
	}{{joinAt, "+20 instances"}, {burstFrom, "burst +4,000/s"}, {crashAt, "1 crashes"}, {leaveAt, "10 leave"}} {
		x := top.px(ev.at.Seconds())
		s.line(x, top.y, x, top.y+top.h, colors.event, 1, "4 3")
		s.text(x+4, top.y+12, 11, "start", colors.event, ev.label)
	}
	s.line(top.x, top.py(600), top.x+top.w, top.py(600), colors.axis, 1, "2 2")
	if series != nil {
		var global, fleet [][2]float64
		for sec, v := range series.Series {
			x := top.px(float64(sec) + 0.5)
			global = append(global, [2]float64{x, top.py(float64(v.Global))})
			fleet = append(fleet, [2]float64{x, top.py(float64(v.Admitted))})
		}
		s.polyline(global, colors.global, 2)
		s.polyline(fleet, colors.fleet, 2)
		s.legend(top.x+top.w-330, top.y+36, [][2]string{
			{colors.global, "one global bucket deciding the same requests"},
			{colors.fleet, fmt.Sprintf("the fleet, leased (any 1 s: at most %d, bound %d)", series.Span, series.SpanBound)},
		})
	}

	n := float64(len(runs))
	calls := frame{x: 80, y: 370, w: 370, h: 190, x0: 0, x1: n, y0: 0, y1: 1.2,
		title: "Backing-store calls per decision", yName: "calls / decision"}
	s.axes(calls, 0.2, func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) })
	admit := frame{x: 550, y: 370, w: 370, h: 190, x0: 0, x1: n, y0: 0, y1: 16,
		title: "Admissions against one global bucket", yName: "% of requests"}
	s.axes(admit, 4, func(v float64) string { return strconv.Itoa(int(v)) + " %" })
	for i, r := range runs {
		c := float64(i) + 0.5
		label := lifetimeName(r.Lifetime)
		for _, f := range []frame{calls, admit} {
			s.text(f.px(c), f.y+f.h+16, 11, "middle", colors.axis, label)
		}
		cpd := r.CallsPerDecision()
		bw := calls.w / n * 0.5
		s.rect(calls.px(c)-bw/2, calls.py(cpd), bw, calls.py(0)-calls.py(cpd), colors.fleet, 0.9)
		s.text(calls.px(c), calls.py(cpd)-4, 11, "middle", colors.axis, strconv.FormatFloat(cpd, 'f', 2, 64))

		pct := func(v int64) float64 { return 100 * float64(v) / float64(r.Requests) }
		bw = admit.w / n * 0.25
		for k, b := range []struct {
			v     float64
			color string
			prec  int
		}{{pct(r.Missed), colors.bar1, 1}, {pct(r.Extra), colors.global, 1}, {max(0, pct(r.Global-r.Admitted)), colors.bar2, 2}} {
			x := admit.px(c) + (float64(k)-1.5)*bw
			s.rect(x, admit.py(b.v), bw, admit.py(0)-admit.py(b.v), b.color, 0.9)
			s.text(x+bw/2, admit.py(b.v)-4, 9, "middle", colors.axis, strconv.FormatFloat(b.v, 'f', b.prec, 64))
		}
	}
	s.legend(admit.x+12, admit.y+14, [][2]string{
		{colors.bar1, "refused by the fleet, admitted by the global bucket"},
		{colors.global, "admitted by the fleet, refused by the global bucket"},
		{colors.bar2, "net: admitted by the global bucket, not by the fleet"},
	})
	s.text(80, height-28, 11, "start", colors.axis,
		"Each run: 30 s, 8,000 requests/s, one fake clock; every request charges its key's 600/s and the route's 6,000/s, stacked; the global bucket")
	s.text(80, height-14, 11, "start", colors.axis,
		"decides the same requests in the same order. A stack whose per-key limit is cold on its instance still needs the backing store.")
	s.printf("</svg>\n")
	return []byte(s.b.String())
}
