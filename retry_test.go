package ratelimit_test

import (
	"context"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
)

// On a 429 the binding limit's t is Retry-After, for every algorithm
// (draft -11 §6: the two reference the same point in time). Each limit
// admits 3 per period; 3 requests at epoch (03:04:05, 5 s into an
// epoch-aligned 10 s window) spend it, and a fourth 2 s later waits:
//   - TokenBucket, LeakyBucket (3 per 10 s): a unit refills in 10/3 s, and
//     0.6 of one has after 2 s: 1.33 s more → 2;
//   - GCRA (3 per 9 s, whole µs per unit): 3 s per unit, 1 s more → 1;
//   - FixedWindow: the window ends at 03:04:10, 3 s later → 3;
//   - SlidingLog: the oldest entry leaves 10 s after it came, 8 s later;
//   - SlidingWindow: in the next window (3 s away) the 3 units weigh
//     3 × (10 − e)/10, and one more fits once that is ≤ 2: e ≥ 3.334 s
//     (whole ms) → 6.334 s → 7.
func TestRefusalTIsRetryAfterForEveryAlgorithm(t *testing.T) {
	for _, tt := range []struct {
		limit ratelimit.Limit
		want  string
	}{
		{ratelimit.Every(3, 10*time.Second), "2"},
		{ratelimit.Every(3, 10*time.Second).WithAlgorithm(ratelimit.LeakyBucket), "2"},
		{ratelimit.Every(3, 9*time.Second).WithAlgorithm(ratelimit.GCRA), "1"},
		{ratelimit.Every(3, 10*time.Second).WithAlgorithm(ratelimit.FixedWindow), "3"},
		{ratelimit.Every(3, 10*time.Second).WithAlgorithm(ratelimit.SlidingLog), "8"},
		{ratelimit.Every(3, 10*time.Second).WithAlgorithm(ratelimit.SlidingWindow), "7"},
	} {
		t.Run(tt.limit.Algorithm().String(), func(t *testing.T) {
			lim, _, clock := newLimiter(t, ratelimit.WithLimits(tt.limit))
			ratelimit.SetSleep(lim, func(context.Context, time.Duration) error { return nil }) // the queue's slots
			h := lim.Handler(okHandler)
			for range 3 {
				require.Equal(t, http.StatusOK, serve(h, request("GET", "/", "k", -1)).Code)
			}
			clock.Advance(2 * time.Second)
			w := serve(h, request("GET", "/", "k", -1))
			require.Equal(t, http.StatusTooManyRequests, w.Code)
			assert.Equal(t, tt.want, w.Header().Get("Retry-After"))
			assert.Equal(t, `"requests";r=0;t=`+tt.want, w.Header().Get("RateLimit"))
			assert.Contains(t, w.Body.String(), `"retry-after-seconds":`+tt.want+`}`)
		})
	}
}

func TestRetryJitter(t *testing.T) {
	var seen []time.Duration
	capture := headerFunc(func(_ http.Header, res ratelimit.Result) { seen = append(seen, res.RetryAfter) })
	var decided []time.Duration
	lim, _, _ := newLimiter(t, ratelimit.WithLimits(ratelimit.Every(1, 2500*time.Millisecond)),
		ratelimit.WithRetryJitter(0.5), ratelimit.WithHeaders(ratelimit.HeadersIETF, capture),
		ratelimit.WithHooks(ratelimit.Hooks{OnDecision: func(_ context.Context, res ratelimit.Result) {
			decided = append(decided, res.RetryAfter)
		}}))
	randoms := []float64{0, 0.4, 0.999}
	ratelimit.SetRetryRandom(lim, func() float64 { r := randoms[0]; randoms = randoms[1:]; return r })
	h := lim.Handler(okHandler)
	require.Equal(t, http.StatusOK, serve(h, request("GET", "/", "k", -1)).Code)
	// The true wait is 2.5 s each time (the clock stands still); the
	// client is told 2.5 s × (1 + 0.5 × random): 2.5 s, 3 s, 3.74875 s.
	// Retry-After, the binding t and the body's retry-after-seconds are
	// that, rounded up; hooks see the true wait.
	for _, want := range []struct {
		told time.Duration
		secs string
	}{{2500 * time.Millisecond, "3"}, {3 * time.Second, "3"}, {3748750 * time.Microsecond, "4"}} {
		w := serve(h, request("GET", "/", "k", -1))
		require.Equal(t, http.StatusTooManyRequests, w.Code)
		assert.Equal(t, want.secs, w.Header().Get("Retry-After"))
		assert.Equal(t, `"requests";r=0;t=`+want.secs, w.Header().Get("RateLimit"))
		assert.Contains(t, w.Body.String(), `"retry-after-seconds":`+want.secs+`}`)
		assert.Equal(t, want.told, seen[len(seen)-1])
	}
	assert.Equal(t, []time.Duration{0, 2500 * time.Millisecond, 2500 * time.Millisecond, 2500 * time.Millisecond}, decided)

	// The default is no jitter: the exact wait.
	plain, _, _ := newLimiter(t, ratelimit.WithLimits(ratelimit.Every(1, 2500*time.Millisecond)))
	serve(plain.Handler(okHandler), request("GET", "/", "k", -1))
	for range 20 {
		assert.Equal(t, "3", serve(plain.Handler(okHandler), request("GET", "/", "k", -1)).Header().Get("Retry-After"))
	}

	for _, bad := range []float64{-0.1, 1.1, math.NaN(), math.Inf(1)} {
		_, err := ratelimit.New(newStore(t, time.Now), ratelimit.WithLimits(ratelimit.PerMinute(1)), ratelimit.WithRetryJitter(bad))
		assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig, "%v", bad)
	}
}

// With real randomness, every wait told is within [wait, wait × 1.1).
func TestRetryJitterBounds(t *testing.T) {
	lim, _, _ := newLimiter(t, ratelimit.WithLimits(ratelimit.Every(1, 9500*time.Millisecond)), ratelimit.WithRetryJitter(0.1))
	h := lim.Handler(okHandler)
	serve(h, request("GET", "/", "k", -1))
	seen := map[string]bool{}
	for range 200 {
		w := serve(h, request("GET", "/", "k", -1))
		n, err := strconv.Atoi(w.Header().Get("Retry-After"))
		require.NoError(t, err)
		// 9.5 s × [1, 1.1) = [9.5 s, 10.45 s), rounded up: 10 or 11.
		assert.True(t, n == 10 || n == 11, "Retry-After %d", n)
		seen[w.Header().Get("Retry-After")] = true
	}
	// 10 s is told for a draw below 0.5/0.95 ≈ 0.53, 11 s above: both
	// occur, but for a chance below 2 × 0.53^200 ≈ 10^-55.
	assert.Len(t, seen, 2)
}

func TestQueuedRequestAbandonedGets503WithRetryAfter(t *testing.T) {
	// 3 per 3 s as a queue: the third request's slot is 2 s away. Its
	// client leaves while it waits: 503, Retry-After the 2 s it was given.
	lim, _, _ := newLimiter(t, ratelimit.WithLimits(ratelimit.Every(3, 3*time.Second).WithAlgorithm(ratelimit.LeakyBucket)))
	ratelimit.SetSleep(lim, func(_ context.Context, d time.Duration) error {
		if d >= 2*time.Second {
			return context.Canceled
		}
		return nil
	})
	h := lim.Handler(okHandler)
	for range 2 {
		require.Equal(t, http.StatusOK, serve(h, request("GET", "/", "k", -1)).Code)
	}
	w := serve(h, request("GET", "/", "k", -1))
	require.Equal(t, http.StatusServiceUnavailable, w.Code)
	assert.Equal(t, "2", w.Header().Get("Retry-After"))
}

func TestUnitMustBePrintableASCII(t *testing.T) {
	for _, u := range []ratelimit.Unit{"tökens", "tab\tunit", `quo"te`, `back\slash`, "", ratelimit.Unit(strings.Repeat("u", 65))} {
		_, err := ratelimit.New(newStore(t, time.Now), ratelimit.WithLimits(ratelimit.PerMinute(1).Named("x").WithUnit(u)))
		assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig, "%q", u)
		assert.ErrorIs(t, err, ratelimit.ErrInvalidLimit, "%q", u)
	}
	_, err := ratelimit.New(newStore(t, time.Now), ratelimit.WithLimits(ratelimit.PerMinute(1).Named("x").WithUnit("GPU-seconds (A100)")))
	assert.NoError(t, err)
}

func TestSubSecondWindowsKeepTheRate(t *testing.T) {
	for _, tt := range []struct {
		quota  int64
		period time.Duration
		q, w   int64
	}{
		{60, time.Minute, 60, 60},                       // whole seconds: as given
		{2, 500 * time.Millisecond, 4, 1},               // 4 per second
		{5, 500 * time.Millisecond, 10, 1},              // 10 per second
		{10, 1500 * time.Millisecond, 20, 3},            // 20 per 3 s
		{3, 700 * time.Millisecond, 30, 7},              // 30 per 7 s
		{1, 999_999 * time.Microsecond, 1, 1},           // exact only at w = 999,999 s: 1 per 1 s, rounded down
		{7, 61500 * time.Millisecond, 14, 123},          // 14 per 123 s
		{1, 100*time.Second + time.Microsecond, 1, 101}, // 1 per 101 s (1.0099… in fact): rounded down
	} {
		q, w := ratelimit.WireWindow(tt.quota, tt.period)
		assert.Equal(t, [2]int64{tt.q, tt.w}, [2]int64{q, w}, "%d per %v", tt.quota, tt.period)
	}
}

func TestHeadersShadowNeedsIETF(t *testing.T) {
	_, err := ratelimit.New(newStore(t, time.Now), ratelimit.WithLimits(ratelimit.PerMinute(1)), ratelimit.WithHeaders(ratelimit.HeadersShadow))
	assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	_, err = ratelimit.New(newStore(t, time.Now), ratelimit.WithLimits(ratelimit.PerMinute(1)),
		ratelimit.WithHeaders(ratelimit.HeadersXRateLimit|ratelimit.HeadersShadow))
	assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
}
