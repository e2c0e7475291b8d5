package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/internal/svgplot"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The committed picture is what the command draws now, byte for byte: a
// change to the limiter's decisions or to the drawing must come with the
// regenerated file, so the README never shows stale behaviour.
func TestCommittedPictureIsCurrent(t *testing.T) {
	got, err := draw()
	require.NoError(t, err)
	again, err := draw()
	require.NoError(t, err)
	require.True(t, bytes.Equal(got, again), "two drawings in one process differ: the drawing is not deterministic")

	committed, err := os.ReadFile(filepath.Join("..", "..", "..", output))
	require.NoError(t, err, "the picture is missing: run `go run ./internal/cmd/plot` from the repository root and commit %s", output)
	if !bytes.Equal(got, committed) {
		line, offset := firstDifference(got, committed)
		t.Fatalf("%s is not what the command draws (first difference: line %d, byte %d; %d bytes drawn, %d committed).\n"+
			"Regenerate it with `go run ./internal/cmd/plot` from the repository root, look at it, and commit it.",
			output, line, offset, len(got), len(committed))
	}
	// The README shows the picture at its own size: keep it small.
	assert.Less(t, len(got), 64<<10, "the picture's size in bytes")
}

// firstDifference returns the 1-based line and the 0-based byte offset of
// the first byte where a and b differ (or where the shorter one ends).
func firstDifference(a, b []byte) (line, offset int) {
	line = 1
	for offset < len(a) && offset < len(b) && a[offset] == b[offset] {
		if a[offset] == '\n' {
			line++
		}
		offset++
	}
	return line, offset
}

// The counts the picture writes in its panels are the README table's
// (TestAlgorithmTable in the root package derives them), on the same
// limit PerMinute(100): C = Q = 100, one unit per 600 ms.
//
//   - (a) 200 at 0 s on a full key: every algorithm admits C = 100; the
//     leaky bucket sends them at 0, 0.6, ..., 99 × 0.6 = 59.4 s.
//   - (b) request k at 300k ms: the buckets find 100 − k/2 tokens, so
//     admit k = 0..198 (199) in the first minute, then one per 600 ms (100)
//     in the second; the leaky bucket admits the same and sends at R: 100
//     in each minute. The windows admit 100 by 29.7 s; in the second
//     minute the fixed window and the log admit 100, the sliding-window
//     counter (its previous window full) every other request: 99.
//   - (c) 100 at 59.9 s, 100 at 60 s, 100 at 119.8 s. The buckets admit
//     100, then none (0.1 s refilled a sixth of a unit), then the 99.83
//     units refilled in 59.9 s: 99, so 199 within [59.9 s, 119.8 s]. The
//     sliding-window counter weighs the 100 of window [0, 60 s) fully at
//     60 s (none), by 0.2/60 at 119.8 s: 99 more, 199. The log admits none
//     while the first 100 are less than 60 s old: 100. The fixed window
//     admits 100 in window [0, 60 s) and 100 at 60 s, none at 119.8 s
//     (window [60 s, 120 s) is full): 200 within 0.1 s. The leaky bucket
//     sends at most one per 600 ms: 100 in any 60 s.
func TestPanelCounts(t *testing.T) {
	want := map[ratelimit.Algorithm][3][]string{
		ratelimit.TokenBucket:   {{"admitted 100"}, {"admitted 199, then 100"}, {"most in 60 s:", "admitted 199"}},
		ratelimit.GCRA:          {{"admitted 100"}, {"admitted 199, then 100"}, {"most in 60 s:", "admitted 199"}},
		ratelimit.LeakyBucket:   {{"admitted 100", "sent by 59.4 s"}, {"admitted 199, then 100", "sent 100, then 100"}, {"most in 60 s:", "admitted 199", "sent 100"}},
		ratelimit.SlidingWindow: {{"admitted 100"}, {"admitted 100, then 99"}, {"most in 60 s:", "admitted 199"}},
		ratelimit.SlidingLog:    {{"admitted 100"}, {"admitted 100, then 100"}, {"most in 60 s:", "admitted 100"}},
		ratelimit.FixedWindow:   {{"admitted 100"}, {"admitted 100, then 100"}, {"most in 60 s:", "admitted 200", "within 0.1 s"}},
	}
	for _, a := range algorithms {
		t.Run(a.String(), func(t *testing.T) {
			for col, sc := range scenarios() {
				r, err := measure(a, sc)
				require.NoError(t, err)
				var got []string
				for _, n := range notes(col, r) {
					got = append(got, n.text)
				}
				assert.Equal(t, want[a][col], got, "scenario %s", sc.title)
			}
		})
	}
}

// The leaky bucket's sends in (a) are exactly its schedule: the i-th at
// i × 600 ms.
func TestLeakyBucketSends(t *testing.T) {
	r, err := measure(ratelimit.LeakyBucket, scenarios()[0])
	require.NoError(t, err)
	require.Len(t, r.sent, 100)
	for i, at := range r.sent {
		require.Equal(t, time.Duration(i)*600*time.Millisecond, at, "send %d", i)
	}
}

func TestMostWithin(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	for _, tc := range []struct {
		times  []time.Duration
		most   int
		spread time.Duration
	}{
		{nil, 0, 0},
		{ms(5), 1, 0},
		{ms(0, 0, 0), 3, 0},
		// The span is half-open: [0, 1000) does not hold 1000.
		{ms(0, 1000), 1, 0},
		// [0, 1000) holds 0 and 999 (999 ms apart), [999, 1999) holds 999
		// and 1000 (1 ms apart): the tighter pair's spread is reported.
		{ms(0, 999, 1000), 2, time.Millisecond},
		// Two groups of three, 900 ms and 2 ms from first to last.
		{ms(0, 500, 900, 5000, 5001, 5002), 3, 2 * time.Millisecond},
	} {
		most, spread := mostWithin(tc.times, time.Second)
		assert.Equal(t, tc.most, most, "%v", tc.times)
		assert.Equal(t, tc.spread, spread, "%v", tc.times)
	}
}

// A staircase: a jump at every distinct time, held to the right edge.
func TestCumulative(t *testing.T) {
	got := cumulative([]time.Duration{0, 0, 2 * time.Second})
	assert.Equal(t, "(-6,0) (0,0) (0,2) (2,2) (2,3) (180,3)", pointsText(got))
}

func pointsText(pts []svgplot.Point) string {
	var parts []string
	for _, p := range pts {
		parts = append(parts, fmt.Sprintf("(%v,%v)", p.X, p.Y))
	}
	return strings.Join(parts, " ")
}

func TestWrite(t *testing.T) {
	out := filepath.Join(t.TempDir(), "algorithms.svg")
	var log bytes.Buffer
	require.NoError(t, write(out, &log))
	got, err := os.ReadFile(out)
	require.NoError(t, err)
	want, err := draw()
	require.NoError(t, err)
	assert.True(t, bytes.Equal(want, got), "the written file is the drawing")
	assert.Equal(t, fmt.Sprintf("wrote %s (%d bytes)\n", out, len(want)), log.String())

	err = write(filepath.Join(t.TempDir(), "no-such-dir", "algorithms.svg"), &log)
	require.Error(t, err)
	assert.True(t, strings.Contains(err.Error(), "run from the repository root"), err.Error())
}
