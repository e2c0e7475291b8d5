package llm

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// TestOpenAIDurationIsDurationString holds appendOpenAIDuration to the
// bytes it replaces: Duration.String of the duration rounded up to whole
// milliseconds ("0s" for d ≤ 0).
func TestOpenAIDurationIsDurationString(t *testing.T) {
	want := func(d time.Duration) string {
		if d <= 0 {
			return "0s"
		}
		return ((d + time.Millisecond - 1) / time.Millisecond * time.Millisecond).String()
	}
	ds := []time.Duration{math.MinInt64, -1, 0, 1, 999_999, time.Millisecond, time.Millisecond + 1,
		999 * time.Millisecond, 999*time.Millisecond + 1, time.Second, time.Second + 1, 1500 * time.Millisecond,
		1050 * time.Millisecond, 1001 * time.Millisecond, 59_999 * time.Millisecond, time.Minute, time.Minute + time.Millisecond,
		86_400 * time.Millisecond, 864 * time.Second, time.Hour, time.Hour + time.Second, 100 * time.Hour,
		100 * 365 * 24 * time.Hour, math.MaxInt64 - 1_000_000, math.MaxInt64 - 999_999, math.MaxInt64 - 1, math.MaxInt64}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100_000 { // magnitudes from 1 ns to 2^62 ns
		ds = append(ds, time.Duration(rng.Int64N(1<<uint(rng.IntN(62)+1))))
	}
	for _, d := range ds {
		if got := string(appendOpenAIDuration([]byte("x"), d)); got != "x"+want(d) {
			t.Fatalf("appendOpenAIDuration(%d) = %q, want %q", int64(d), got[1:], want(d))
		}
	}
}
