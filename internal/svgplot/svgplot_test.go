package svgplot

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A panel at (20, 10) of 100 × 50 pixels with x in [0, 10] and y in [0, 5]
// maps data (x, y) to pixels (20 + 10x, 60 − 10y): (0, 0) is the bottom-left
// corner (20, 60), (10, 5) the top-right (120, 10). The three collinear
// points of the line keep only their ends. Tick labels sit 15 pixels below
// the panel (x) and 6 to its left, 3.5 below the tick (y); tick marks are 4
// pixels long.
func TestFigure(t *testing.T) {
	f := New(200, 100, "a <b> & c")
	p := f.Panel(20, 10, 100, 50,
		Axis{Min: 0, Max: 10, Ticks: []float64{0, 10}, Labels: true},
		Axis{Min: 0, Max: 5, Ticks: []float64{5}, Labels: true, Format: func(v float64) string { return fmt.Sprint(v, " s") }})
	p.Line([]Point{{0, 0}, {5, 2.5}, {10, 5}}, Stroke{Color: "#0969da", Width: 1.5, Dash: "4 2"})
	f.Text(150, 20, "x < y", Font{Size: 10, Anchor: End, Bold: true, Halo: true, Vertical: true})
	got, err := f.Render()
	require.NoError(t, err)
	want := `<svg xmlns="http://www.w3.org/2000/svg" width="200" height="100" viewBox="0 0 200 100" font-family="-apple-system, 'Segoe UI', 'Noto Sans', Helvetica, Arial, sans-serif" font-size="12">
<title>a &lt;b&gt; &amp; c</title>
<rect width="200" height="100" fill="#ffffff"/>
<text x="20" y="75" font-size="10" text-anchor="middle">0</text>
<text x="120" y="75" font-size="10" text-anchor="middle">10</text>
<text x="14" y="13.5" font-size="10" text-anchor="end">5 s</text>
<path d="M20 10L20 60 M120 10L120 60 M20 10L120 10" fill="none" stroke="#e6e8eb"/>
<path d="M20 60L20 64 M120 60L120 64 M16 10L20 10" fill="none" stroke="#8c959f"/>
<rect x="20" y="10" width="100" height="50" fill="none" stroke="#8c959f"/>
<polyline points="20,60 120,10" fill="none" stroke="#0969da" stroke-width="1.5" stroke-dasharray="4 2" stroke-linejoin="round"/>
<text x="150" y="20" font-size="10" text-anchor="end" font-weight="bold" stroke="#ffffff" stroke-width="3" stroke-linejoin="round" paint-order="stroke" transform="rotate(-90 150 20)">x &lt; y</text>
</svg>
`
	assert.Equal(t, want, string(got))

	var w bytes.Buffer
	n, err := f.WriteTo(&w)
	require.NoError(t, err)
	assert.Equal(t, int64(len(want)), n)
	assert.Equal(t, want, w.String())
}

// A legend key: a 24-pixel sample centred on y, the label 30 pixels right
// of x with its baseline 0.35 em below y (12 × 0.35 = 4.2).
func TestKey(t *testing.T) {
	f := New(100, 20, "")
	f.Key(5, 10, "offered", Stroke{Color: "#c3cad2", Width: 4}, Font{})
	got, err := f.Render()
	require.NoError(t, err)
	_, body, _ := strings.Cut(string(got), `fill="#ffffff"/>`+"\n")
	assert.Equal(t, `<polyline points="5,10 29,10" fill="none" stroke="#c3cad2" stroke-width="4" stroke-linejoin="round"/>
<text x="35" y="14.2">offered</text>
</svg>
`, body)
}

func TestNum(t *testing.T) {
	for v, want := range map[float64]string{
		0: "0", 3: "3", -3: "-3", 12.5: "12.5", 12.25: "12.25",
		1.0 / 3: "0.33", 2.0 / 3: "0.67", -0.001: "0", 0.004: "0", 0.006: "0.01",
		123456.789: "123456.79", 1e-9: "0",
	} {
		assert.Equal(t, want, num(v), "num(%v)", v)
	}
}

func TestSimplify(t *testing.T) {
	// A staircase whose steps are smaller than the tolerance reads as its
	// diagonal: only the ends remain.
	var stairs []Point
	for i := range 100 {
		stairs = append(stairs, Point{float64(i) * 0.2, float64(i) * 0.2}, Point{float64(i+1) * 0.2, float64(i) * 0.2})
	}
	assert.Equal(t, []Point{stairs[0], stairs[len(stairs)-1]}, simplify(stairs, Tolerance))

	// A corner farther than the tolerance stays; repeated points go.
	corner := []Point{{0, 0}, {0, 0}, {0, 10}, {10, 10}, {10, 10}}
	assert.Equal(t, []Point{{0, 0}, {0, 10}, {10, 10}}, simplify(corner, Tolerance))

	// Every dropped point lies within the tolerance of the result: a
	// sine sampled finely keeps its extremes.
	var wave []Point
	for i := range 1000 {
		x := float64(i) / 10
		wave = append(wave, Point{x, 20 * math.Sin(x/5)})
	}
	kept := simplify(wave, Tolerance)
	assert.Less(t, len(kept), 100)
	for _, p := range wave {
		d := math.Inf(1)
		for i := 1; i < len(kept); i++ {
			d = min(d, distance(p, kept[i-1], kept[i]))
		}
		assert.LessOrEqual(t, d, Tolerance, "point %v", p)
	}

	assert.Empty(t, simplify(nil, Tolerance))
	assert.Equal(t, []Point{{1, 2}}, simplify([]Point{{1, 2}, {1, 2}}, Tolerance))
}

func TestDistance(t *testing.T) {
	a, b := Point{0, 0}, Point{10, 0}
	assert.Equal(t, 3.0, distance(Point{5, 3}, a, b), "above the middle")
	assert.Equal(t, 5.0, distance(Point{-3, 4}, a, b), "beyond an end: to the end")
	assert.Equal(t, 5.0, distance(Point{3, 4}, a, a), "a segment of one point")
}

// Invalid arguments are reported by Render, the first one only, and draw
// nothing.
func TestInvalidArguments(t *testing.T) {
	x := Axis{Min: 0, Max: 1}
	for name, tc := range map[string]struct {
		draw func(*Figure)
		want string
	}{
		"empty axis": {func(f *Figure) { f.Panel(0, 0, 10, 10, Axis{Min: 1, Max: 1}, x) },
			"svgplot: panel x axis [1, 1]: want finite Min < Max"},
		"NaN axis": {func(f *Figure) { f.Panel(0, 0, 10, 10, x, Axis{Min: math.NaN(), Max: 1}) },
			"svgplot: panel y axis [NaN, 1]: want finite Min < Max"},
		"tick outside": {func(f *Figure) { f.Panel(0, 0, 10, 10, Axis{Min: 0, Max: 1, Ticks: []float64{2}}, x) },
			"svgplot: panel x axis [0, 1]: tick 2 outside it"},
		"panel size": {func(f *Figure) { f.Panel(0, 0, 0, 10, x, x) },
			"svgplot: panel at (0, 0) of 0 × 10: want finite coordinates and a positive size"},
		"NaN point": {func(f *Figure) { f.Panel(0, 0, 10, 10, x, x).Line([]Point{{0, math.NaN()}}, Stroke{}) },
			"svgplot: line point (0, NaN): want finite coordinates"},
		"infinite text": {func(f *Figure) { f.Text(math.Inf(1), 0, "t", Font{}) },
			`svgplot: text "t" at (+Inf, 0), size 0: want finite coordinates and a size ≥ 0`},
		"negative width": {func(f *Figure) { f.Line([]Point{{0, 0}, {1, 1}}, Stroke{Width: -1}) },
			"svgplot: stroke width -1: want a finite width ≥ 0"},
		"first error wins": {func(f *Figure) { f.Text(math.NaN(), 0, "a", Font{}); f.Text(math.NaN(), 0, "b", Font{}) },
			`svgplot: text "a" at (NaN, 0), size 0: want finite coordinates and a size ≥ 0`},
	} {
		t.Run(name, func(t *testing.T) {
			f := New(10, 10, "")
			tc.draw(f)
			_, err := f.Render()
			require.EqualError(t, err, tc.want)
			_, err = f.WriteTo(&bytes.Buffer{})
			require.EqualError(t, err, tc.want)
		})
	}

	_, err := New(0, 10, "").Render()
	require.EqualError(t, err, "svgplot: figure size 0 × 10: want positive, finite pixels")
}
