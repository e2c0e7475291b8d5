// Package svgplot draws small line charts as SVG: a figure of panels, each
// with two linear axes, grid lines at the ticks, polylines and text.
//
// The output is deterministic, so a committed picture can be compared byte
// for byte with a fresh drawing: elements appear in the order they were
// drawn, every coordinate is written with at most two decimals (1/100 px),
// and every product is rounded explicitly before it is added (a float64
// conversion, which the Go specification says prevents a fused
// multiply-add), so the same calls give the same bytes on every
// architecture. Polylines are simplified (Ramer–Douglas–Peucker) to within
// a quarter of a pixel, so a staircase of thousands of steps costs a few
// points wherever it reads as a straight line.
//
// A figure has an explicit white background, so it reads the same in light
// and dark page themes. Text is not measured: the caller leaves room for it.
package svgplot

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Tolerance is the largest distance, in pixels, by which a simplified
// polyline may deviate from the points it was given.
const Tolerance = 0.25

// Default colours: text, axis frame and grid lines.
const (
	TextColor  = "#1f2328"
	FrameColor = "#8c959f"
	GridColor  = "#e6e8eb"
)

// fontFamily is the system sans-serif stack GitHub uses for its own pages.
const fontFamily = "-apple-system, 'Segoe UI', 'Noto Sans', Helvetica, Arial, sans-serif"

// Point is a position: in data units inside a Panel, in pixels (from the
// figure's top-left corner, y downwards) on a Figure.
type Point struct{ X, Y float64 }

// Stroke says how a line is drawn.
type Stroke struct {
	// Color is an SVG colour such as "#0969da"; empty means TextColor.
	Color string
	// Width is the line width in pixels; 0 means 1.
	Width float64
	// Dash is an SVG stroke-dasharray in pixels such as "5 3"; empty
	// means solid.
	Dash string
}

// Anchor is the point of a text that its position names.
type Anchor int

// Text anchors.
const (
	Start  Anchor = iota // the text begins at the position
	Middle               // the text is centred on the position
	End                  // the text ends at the position
)

// Font says how a text is drawn. The position of a text is its baseline.
type Font struct {
	// Size is the font size in pixels; 0 means 12.
	Size float64
	// Anchor is the point of the text at its position.
	Anchor Anchor
	// Bold selects a bold face.
	Bold bool
	// Color is an SVG colour; empty means TextColor.
	Color string
	// Vertical turns the text a quarter-turn counter-clockwise about its
	// position, to read bottom to top (a y-axis label).
	Vertical bool
	// Halo outlines the glyphs in white under their fill, so the text
	// stays readable where it crosses a line.
	Halo bool
}

// Axis is a linear axis of a Panel.
type Axis struct {
	// Min and Max are the data values at the panel's edges (left and
	// right, or bottom and top); Min < Max, both finite.
	Min, Max float64
	// Ticks are the data values that get a grid line and a tick mark, in
	// the order given; values outside [Min, Max] are an error.
	Ticks []float64
	// Labels selects tick labels: below the panel for the x axis, left of
	// it for the y axis.
	Labels bool
	// Format writes a tick label; nil writes the shortest decimal that
	// reads back as the value (strconv 'f', -1).
	Format func(float64) string
}

// Figure is an SVG document being drawn. Drawing methods record the first
// invalid argument; Render and WriteTo report it.
type Figure struct {
	width, height float64
	title         string
	body          bytes.Buffer
	err           error
}

// New starts a figure of width × height pixels on a white background.
// The title is the document's accessible name (its <title> element), not
// drawn; draw a visible title with Text.
func New(width, height float64, title string) *Figure {
	f := &Figure{width: width, height: height, title: title}
	if !(width > 0 && height > 0) || math.IsInf(width, 0) || math.IsInf(height, 0) {
		f.fail(fmt.Errorf("figure size %v × %v: want positive, finite pixels", width, height))
	}
	return f
}

func (f *Figure) fail(err error) {
	if f.err == nil {
		f.err = fmt.Errorf("svgplot: %w", err)
	}
}

// Text draws s at (x, y) pixels.
func (f *Figure) Text(x, y float64, s string, font Font) {
	if !finite(x, y) || !finite(font.Size) || font.Size < 0 {
		f.fail(fmt.Errorf("text %q at (%v, %v), size %v: want finite coordinates and a size ≥ 0", s, x, y, font.Size))
		return
	}
	b := &f.body
	b.WriteString(`<text x="`)
	b.WriteString(num(x))
	b.WriteString(`" y="`)
	b.WriteString(num(y))
	b.WriteString(`"`)
	if font.Size != 0 && font.Size != 12 {
		attr(b, "font-size", num(font.Size))
	}
	switch font.Anchor {
	case Middle:
		attr(b, "text-anchor", "middle")
	case End:
		attr(b, "text-anchor", "end")
	}
	if font.Bold {
		attr(b, "font-weight", "bold")
	}
	if font.Color != "" && font.Color != TextColor {
		attr(b, "fill", font.Color)
	}
	if font.Halo {
		b.WriteString(` stroke="#ffffff" stroke-width="3" stroke-linejoin="round" paint-order="stroke"`)
	}
	if font.Vertical {
		attr(b, "transform", "rotate(-90 "+num(x)+" "+num(y)+")")
	}
	b.WriteString(`>`)
	escape(b, s)
	b.WriteString("</text>\n")
}

// Line draws a polyline through pts, in pixels, simplified to within
// Tolerance. Fewer than two points draw nothing.
func (f *Figure) Line(pts []Point, s Stroke) {
	for _, p := range pts {
		if !finite(p.X, p.Y) {
			f.fail(fmt.Errorf("line point (%v, %v): want finite coordinates", p.X, p.Y))
			return
		}
	}
	if !finite(s.Width) || s.Width < 0 {
		f.fail(fmt.Errorf("stroke width %v: want a finite width ≥ 0", s.Width))
		return
	}
	pts = simplify(pts, Tolerance)
	if len(pts) < 2 {
		return
	}
	b := &f.body
	b.WriteString(`<polyline points="`)
	for i, p := range pts {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(num(p.X))
		b.WriteByte(',')
		b.WriteString(num(p.Y))
	}
	b.WriteString(`" fill="none"`)
	f.stroke(s)
	b.WriteString(" stroke-linejoin=\"round\"/>\n")
}

// segments draws the line segments segs as one path.
func (f *Figure) segments(segs [][2]Point, s Stroke) {
	if len(segs) == 0 {
		return
	}
	b := &f.body
	b.WriteString(`<path d="`)
	for i, sg := range segs {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("M" + num(sg[0].X) + " " + num(sg[0].Y) + "L" + num(sg[1].X) + " " + num(sg[1].Y))
	}
	b.WriteString(`" fill="none"`)
	f.stroke(s)
	b.WriteString("/>\n")
}

// stroke writes the attributes of s.
func (f *Figure) stroke(s Stroke) {
	b := &f.body
	color := s.Color
	if color == "" {
		color = TextColor
	}
	attr(b, "stroke", color)
	if s.Width != 0 && s.Width != 1 {
		attr(b, "stroke-width", num(s.Width))
	}
	if s.Dash != "" {
		attr(b, "stroke-dasharray", s.Dash)
	}
}

// Key draws a legend entry at (x, y) pixels: a 24-pixel sample of the
// stroke, its middle at height y, then the label.
func (f *Figure) Key(x, y float64, label string, s Stroke, font Font) {
	f.Line([]Point{{x, y}, {x + 24, y}}, s)
	size := font.Size
	if size == 0 {
		size = 12
	}
	font.Anchor = Start
	f.Text(x+30, y+float64(size*0.35), label, font)
}

// Panel is a plotting area of a Figure with its two axes.
type Panel struct {
	f          *Figure
	x, y, w, h float64
	xAxis      Axis
	yAxis      Axis
}

// Panel draws a panel whose plotting area has its top-left corner at (x,
// y) pixels and is w × h pixels: grid lines and tick marks at the axes'
// ticks, tick labels where asked for, and a frame. Lines drawn on the
// panel after it are on top of them.
func (f *Figure) Panel(x, y, w, h float64, xAxis, yAxis Axis) *Panel {
	p := &Panel{f: f, x: x, y: y, w: w, h: h, xAxis: xAxis, yAxis: yAxis}
	if !finite(x, y, w, h) || !(w > 0 && h > 0) {
		f.fail(fmt.Errorf("panel at (%v, %v) of %v × %v: want finite coordinates and a positive size", x, y, w, h))
		return p
	}
	for _, a := range []struct {
		name string
		Axis
	}{{"x", xAxis}, {"y", yAxis}} {
		if !finite(a.Min, a.Max) || !(a.Min < a.Max) {
			f.fail(fmt.Errorf("panel %s axis [%v, %v]: want finite Min < Max", a.name, a.Min, a.Max))
			return p
		}
		for _, t := range a.Ticks {
			if !(t >= a.Min && t <= a.Max) {
				f.fail(fmt.Errorf("panel %s axis [%v, %v]: tick %v outside it", a.name, a.Min, a.Max, t))
				return p
			}
		}
	}
	var grid, marks [][2]Point
	small := Font{Size: 10}
	for _, t := range xAxis.Ticks {
		px := p.At(Point{t, yAxis.Min}).X
		grid = append(grid, [2]Point{{px, y}, {px, y + h}})
		marks = append(marks, [2]Point{{px, y + h}, {px, y + h + 4}})
		if xAxis.Labels {
			f.Text(px, y+h+15, label(xAxis, t), Font{Size: small.Size, Anchor: Middle})
		}
	}
	for _, t := range yAxis.Ticks {
		py := p.At(Point{xAxis.Min, t}).Y
		grid = append(grid, [2]Point{{x, py}, {x + w, py}})
		marks = append(marks, [2]Point{{x - 4, py}, {x, py}})
		if yAxis.Labels {
			f.Text(x-6, py+3.5, label(yAxis, t), Font{Size: small.Size, Anchor: End})
		}
	}
	f.segments(grid, Stroke{Color: GridColor})
	f.segments(marks, Stroke{Color: FrameColor})
	f.body.WriteString(`<rect x="` + num(x) + `" y="` + num(y) + `" width="` + num(w) + `" height="` + num(h) +
		`" fill="none" stroke="` + FrameColor + `"/>` + "\n")
	return p
}

func label(a Axis, v float64) string {
	if a.Format != nil {
		return a.Format(v)
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// At returns the figure position, in pixels, of the data point pt.
func (p *Panel) At(pt Point) Point {
	if !(p.xAxis.Min < p.xAxis.Max && p.yAxis.Min < p.yAxis.Max) {
		return Point{p.x, p.y} // an invalid panel, already reported
	}
	dx := float64(float64(pt.X-p.xAxis.Min) * p.w / (p.xAxis.Max - p.xAxis.Min))
	dy := float64(float64(pt.Y-p.yAxis.Min) * p.h / (p.yAxis.Max - p.yAxis.Min))
	return Point{p.x + dx, p.y + p.h - dy}
}

// Line draws a polyline through pts, in data units, simplified to within
// Tolerance pixels. It is not clipped to the panel.
func (p *Panel) Line(pts []Point, s Stroke) {
	px := make([]Point, len(pts))
	for i, pt := range pts {
		if !finite(pt.X, pt.Y) {
			p.f.fail(fmt.Errorf("line point (%v, %v): want finite coordinates", pt.X, pt.Y))
			return
		}
		px[i] = p.At(pt)
	}
	p.f.Line(px, s)
}

// Render returns the SVG document, or the first invalid argument given to
// the figure's drawing methods.
func (f *Figure) Render() ([]byte, error) {
	if f.err != nil {
		return nil, f.err
	}
	var b bytes.Buffer
	w, h := num(f.width), num(f.height)
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%s" height="%s" viewBox="0 0 %s %s" font-family="%s" font-size="12">`+"\n",
		w, h, w, h, fontFamily)
	b.WriteString("<title>")
	escape(&b, f.title)
	b.WriteString("</title>\n")
	fmt.Fprintf(&b, `<rect width="%s" height="%s" fill="#ffffff"/>`+"\n", w, h)
	b.Write(f.body.Bytes())
	b.WriteString("</svg>\n")
	return b.Bytes(), nil
}

// WriteTo writes the SVG document to w; see Render.
func (f *Figure) WriteTo(w io.Writer) (int64, error) {
	doc, err := f.Render()
	if err != nil {
		return 0, err
	}
	n, err := w.Write(doc)
	return int64(n), err
}

// num formats v with at most two decimals and no trailing zeros; -0 is 0.
func num(v float64) string {
	s := strconv.FormatFloat(v, 'f', 2, 64)
	s = strings.TrimRight(s, "0")
	s = strings.TrimSuffix(s, ".")
	if s == "-0" {
		return "0"
	}
	return s
}

func attr(b *bytes.Buffer, name, value string) {
	b.WriteByte(' ')
	b.WriteString(name)
	b.WriteString(`="`)
	escape(b, value)
	b.WriteByte('"')
}

func escape(b *bytes.Buffer, s string) {
	_ = xml.EscapeText(b, []byte(s)) // a bytes.Buffer does not fail
}

func finite(vs ...float64) bool {
	for _, v := range vs {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return false
		}
	}
	return true
}

// simplify returns the points of pts that the Ramer–Douglas–Peucker
// algorithm keeps at tolerance tol: the ends, and recursively the point
// farthest from the segment joining the ends of a run while it is farther
// than tol. Every dropped point lies within tol of the result. Repeated
// points are dropped first.
func simplify(pts []Point, tol float64) []Point {
	dedup := make([]Point, 0, len(pts))
	for _, p := range pts {
		if n := len(dedup); n == 0 || dedup[n-1] != p {
			dedup = append(dedup, p)
		}
	}
	if len(dedup) <= 2 {
		return dedup
	}
	keep := make([]bool, len(dedup))
	keep[0], keep[len(dedup)-1] = true, true
	type run struct{ first, last int }
	stack := []run{{0, len(dedup) - 1}}
	for len(stack) > 0 {
		r := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		far, farthest := -1, tol
		for i := r.first + 1; i < r.last; i++ {
			if d := distance(dedup[i], dedup[r.first], dedup[r.last]); d > farthest {
				far, farthest = i, d
			}
		}
		if far >= 0 {
			keep[far] = true
			stack = append(stack, run{r.first, far}, run{far, r.last})
		}
	}
	out := dedup[:0]
	for i, p := range dedup {
		if keep[i] {
			out = append(out, p)
		}
	}
	return out
}

// distance is the distance from p to the segment ab.
func distance(p, a, b Point) float64 {
	dx, dy := b.X-a.X, b.Y-a.Y
	length2 := float64(dx*dx) + float64(dy*dy)
	t := 0.0
	if length2 > 0 {
		t = (float64((p.X-a.X)*dx) + float64((p.Y-a.Y)*dy)) / length2
		t = max(0, min(1, t))
	}
	cx, cy := a.X+float64(t*dx), a.Y+float64(t*dy)
	return math.Hypot(p.X-cx, p.Y-cy)
}
