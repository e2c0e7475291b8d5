package ratelimit_test

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/memory"
	"github.com/rampmeter/ratelimit/store/redisstore"
)

// The algorithms under traffic, through the public API (ratelimit.New,
// Limiter.Take) on real stores with a manual clock: a burst after idling,
// three servers sharing one budget, a leaky bucket smoothing a burst, and
// the measurements behind the README's algorithm table.

// trafficEpoch is a whole number of days after the Unix epoch, so
// epoch-aligned windows of a minute begin there.
var trafficEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// manualClock is a manual clock; stores built on it decide by it.
type manualClock struct{ now time.Time }

func (c *manualClock) Now() time.Time          { return c.now }
func (c *manualClock) set(d time.Duration)     { c.now = trafficEpoch.Add(d) }
func (c *manualClock) advance(d time.Duration) { c.now = c.now.Add(d) }

func memoryOn(t testing.TB, c *manualClock) ratelimit.Store {
	t.Helper()
	s, err := memory.New(memory.WithClock(c.Now))
	require.NoError(t, err)
	return s
}

// miniredisOn returns a Redis store on a miniredis of its own (deciding
// by c), and a function returning more stores on the same miniredis, each
// with its own client: separate processes sharing one Redis.
func miniredisOn(t testing.TB, c *manualClock) func() ratelimit.Store {
	t.Helper()
	mr := miniredis.RunT(t)
	return func() ratelimit.Store {
		client := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = client.Close() })
		s, err := redisstore.New(client, redisstore.WithClock(c.Now))
		require.NoError(t, err)
		return s
	}
}

func trafficLimiter(t testing.TB, store ratelimit.Store, limits ...ratelimit.Limit) *ratelimit.Limiter {
	t.Helper()
	// A generous store timeout: miniredis on a busy test machine can take
	// longer than the default, and these tests measure counts, not time.
	// One name for the servers of one deployment: they share the state
	// on purpose (see WithName).
	lim, err := ratelimit.New(store, ratelimit.WithName("api"), ratelimit.WithKey(ratelimit.KeyByAPIKey()), ratelimit.WithLimits(limits...),
		ratelimit.WithStoreTimeout(10*time.Second))
	require.NoError(t, err)
	return lim
}

// take calls lim.Take for key and requires no error.
func takeOne(t testing.TB, lim *ratelimit.Limiter, key string) ratelimit.Result {
	t.Helper()
	res, err := lim.Take(t.Context(), key)
	require.NoError(t, err)
	return res
}

// A token bucket of 10 per second with capacity 50, idle
// for 30 seconds, receives 60 requests at once. Idle 30 s refills 300
// tokens, but the bucket holds 50: exactly 50 are allowed. The 51st waits
// for one token, 100 ms.
func TestTokenBucketBurstAfterIdle(t *testing.T) {
	for _, name := range []string{"memory", "miniredis"} {
		t.Run(name, func(t *testing.T) {
			c := &manualClock{now: trafficEpoch}
			var store ratelimit.Store
			if name == "memory" {
				store = memoryOn(t, c)
			} else {
				store = miniredisOn(t, c)()
			}
			lim := trafficLimiter(t, store, ratelimit.PerSecond(10).WithBurst(50))
			// The key was busy (empty bucket) 30 s ago.
			res := takeOne(t, lim, "client")
			require.True(t, res.Allowed)
			for range 49 {
				takeOne(t, lim, "client")
			}
			require.False(t, takeOne(t, lim, "client").Allowed, "empty before idling")
			c.advance(30 * time.Second)
			allowed := 0
			var last ratelimit.Result
			for range 60 {
				if last = takeOne(t, lim, "client"); last.Allowed {
					allowed++
				}
			}
			assert.Equal(t, 50, allowed, "60 at once after 30 s idle")
			assert.Equal(t, 100*time.Millisecond, last.RetryAfter, "the 60th waits for one token")
		})
	}
}

// Three servers each enforcing 100 per minute with an
// in-memory limiter admit 300 per minute across them; with a shared store
// they admit 100. Requests for one API key arrive round-robin across the
// three servers. The limits are the default token bucket (a burst of 300
// requests at one instant) and a fixed window (600 requests spread evenly
// over one minute-aligned window, one every 100 ms), the two readings of
// "100 per minute".
func TestThreeServersShareOneBudget(t *testing.T) {
	limits := map[string]ratelimit.Limit{
		"token-bucket": ratelimit.PerMinute(100),
		"fixed-window": ratelimit.PerMinute(100).WithAlgorithm(ratelimit.FixedWindow),
	}
	// run sends n requests round-robin over the servers, every step
	// (0: all at once) and returns how many were admitted.
	run := func(t *testing.T, c *manualClock, servers [3]*ratelimit.Limiter, n int, step time.Duration) int {
		admitted := 0
		for i := range n {
			if takeOne(t, servers[i%3], "api-key-1").Allowed {
				admitted++
			}
			c.advance(step)
		}
		return admitted
	}
	for name, l := range limits {
		n, step := 300, time.Duration(0)
		if name == "fixed-window" {
			n, step = 600, 100*time.Millisecond // 600 × 100 ms = one window, [0, 60 s)
		}
		t.Run(name+"/separate memory stores", func(t *testing.T) {
			c := &manualClock{now: trafficEpoch}
			var servers [3]*ratelimit.Limiter
			for i := range servers {
				servers[i] = trafficLimiter(t, memoryOn(t, c), l)
			}
			// Each server sees a third of the requests and admits 100 of
			// them: 3 × 100.
			assert.Equal(t, 300, run(t, c, servers, n, step))
		})
		t.Run(name+"/one shared memory store", func(t *testing.T) {
			c := &manualClock{now: trafficEpoch}
			shared := memoryOn(t, c)
			var servers [3]*ratelimit.Limiter
			for i := range servers {
				servers[i] = trafficLimiter(t, shared, l)
			}
			assert.Equal(t, 100, run(t, c, servers, n, step))
		})
		t.Run(name+"/shared miniredis", func(t *testing.T) {
			c := &manualClock{now: trafficEpoch}
			newStore := miniredisOn(t, c)
			var servers [3]*ratelimit.Limiter
			for i := range servers {
				servers[i] = trafficLimiter(t, newStore(), l) // own client and Store, one Redis
			}
			assert.Equal(t, 100, run(t, c, servers, n, step))
		})
	}
}

// A leaky bucket smoothing a burst of 100 requests to an
// external service limited to 100 per minute never sends more than 100 in
// any 60 s span. Each admitted request is sent at its arrival plus
// Result.Delay: the i-th of the burst at i × 600 ms. Half a minute later
// another 100 arrive: the 50 units that drained make room for 50 of
// them, queued behind the first burst, and the rest are refused; every
// send is still 600 ms after the previous one.
func TestLeakyBucketSmoothsABurst(t *testing.T) {
	for _, name := range []string{"memory", "miniredis"} {
		t.Run(name, func(t *testing.T) {
			c := &manualClock{now: trafficEpoch}
			var store ratelimit.Store
			if name == "memory" {
				store = memoryOn(t, c)
			} else {
				store = miniredisOn(t, c)()
			}
			lim := trafficLimiter(t, store, ratelimit.PerMinute(100).WithAlgorithm(ratelimit.LeakyBucket))
			var sends []time.Time
			burst := func() int {
				admitted := 0
				for range 100 {
					res := takeOne(t, lim, "vendor")
					if res.Allowed {
						admitted++
						sends = append(sends, c.Now().Add(res.Delay))
					}
				}
				return admitted
			}
			require.Equal(t, 100, burst(), "the first burst is queued whole")
			for i, s := range sends {
				require.Equal(t, trafficEpoch.Add(time.Duration(i)*600*time.Millisecond), s, "send %d", i)
			}
			c.advance(30 * time.Second)
			require.Equal(t, 50, burst(), "half the queue drained in 30 s")
			for i := 1; i < len(sends); i++ {
				require.Equal(t, 600*time.Millisecond, sends[i].Sub(sends[i-1]), "send %d", i)
			}
			assert.Equal(t, 100, mostInSpan(sends, time.Minute), "most sends in any 60 s span")
		})
	}
}

// mostInSpan returns the most times (sorted) that fall in one
// half-open span [t, t+span).
func mostInSpan(times []time.Time, span time.Duration) int {
	best := 0
	for i := range times {
		n := 0
		for _, u := range times[i:] {
			if u.Before(times[i].Add(span)) {
				n++
			}
		}
		best = max(best, n)
	}
	return best
}

// algorithmRow is one algorithm's measured behaviour for the README table,
// with Quota Q = 100 per Period P = 60 s and capacity C = Q = 100 (rate R =
// Q/P, one unit per 600 ms). Every count is of requests costing 1 on one
// key of one Limiter over the memory store.
type algorithmRow struct {
	// Burst is how many of 2C = 200 requests at one instant are admitted.
	Burst int
	// Stream is how many of a steady 2R stream (one request every 300 ms
	// from a minute boundary, 200 in [0, P)) are admitted in that period,
	// starting idle; Next is how many the same stream gets admitted in the
	// following period [P, 2P).
	Stream, Next int
	// Span is the most admitted within one Period-long span [t, t+P) by
	// adversarial timing: C requests at P − 100 ms, then (for every
	// algorithm but the fixed window, whose boundary is at P) as many as
	// are admitted at 2P − 200 ms, else C at P.
	Span int
	// Sent counts, for the leaky bucket, the requests sent (arrival +
	// Delay) within the measured period, and the most sent in one
	// Period-long span of the Span traffic: the queue's output.
	BurstSent, StreamSent, SpanSent int
}

// TestAlgorithmTable computes the numbers in README.md's algorithm table
// and holds them exactly. Derivations (Q = C = 100, P = 60 s, one unit per
// 600 ms):
//
//   - Burst, 2C at one instant: every algorithm admits C = 100 (the leaky
//     bucket queues them: one is sent at once, the rest every 600 ms).
//   - Stream from idle, request k at 300k ms: a bucket starts with 100
//     tokens and refills k/2 by request k, so request k finds 100 − k/2
//     tokens and is admitted while that is ≥ 1: k ≤ 198, 199 admissions.
//     GCRA is the same bucket. The leaky bucket admits the same 199 but
//     sends one per 600 ms: 100 within the period. The windows admit Q =
//     100 (by 29.7 s) and refuse the rest of the minute.
//   - Next period: the bucket, left with half a token, admits every
//     other request, one per 600 ms: 100. The fixed window and the log
//     admit 100 (the log as its entries from [0, 30 s) leave). The
//     sliding-window counter, its previous window full (100), admits
//     request j (at j × 300 ms into the window) iff 100 × (60000 −
//     300j)/60000 + cur + 1 ≤ 100, that is cur + 1 ≤ j/2: at j = 2, 4,
//     ..., 198: 99.
//   - Span: the buckets admit C at P − 100 ms and, 59.9 s later, the
//     99.83 units refilled: 99, so 199 in [P − 100 ms, 2P − 100 ms); the
//     leaky bucket sends them one per 600 ms, 100 in any 60 s. The
//     counter admits at 2P − 200 ms the cur with 100 × 200 + cur × 60000
//     ≤ 6,000,000: 99, so 199 too. The log admits nothing until the first
//     C leave: 100. The fixed window admits C before and C after its
//     boundary at P: 200 within 100 ms.
func TestAlgorithmTable(t *testing.T) {
	want := map[string]algorithmRow{
		"token-bucket":   {Burst: 100, Stream: 199, Next: 100, Span: 199},
		"gcra":           {Burst: 100, Stream: 199, Next: 100, Span: 199},
		"leaky-bucket":   {Burst: 100, Stream: 199, Next: 100, Span: 199, BurstSent: 1, StreamSent: 100, SpanSent: 100},
		"sliding-window": {Burst: 100, Stream: 100, Next: 99, Span: 199},
		"sliding-log":    {Burst: 100, Stream: 100, Next: 100, Span: 100},
		"fixed-window":   {Burst: 100, Stream: 100, Next: 100, Span: 200},
	}
	for _, a := range []ratelimit.Algorithm{ratelimit.TokenBucket, ratelimit.GCRA, ratelimit.LeakyBucket,
		ratelimit.SlidingWindow, ratelimit.SlidingLog, ratelimit.FixedWindow} {
		t.Run(a.String(), func(t *testing.T) {
			got := measureAlgorithm(t, ratelimit.PerMinute(100).WithAlgorithm(a))
			assert.Equal(t, want[a.String()], got)
			t.Logf("| %s | %d | %d | %d | %d | sent: burst %d, stream %d, span %d |", a,
				got.Burst, got.Stream, got.Next, got.Span, got.BurstSent, got.StreamSent, got.SpanSent)
		})
	}
}

func measureAlgorithm(t *testing.T, l ratelimit.Limit) algorithmRow {
	var row algorithmRow
	leaky := l.Algorithm() == ratelimit.LeakyBucket
	fresh := func() (*manualClock, *ratelimit.Limiter) {
		c := &manualClock{now: trafficEpoch}
		return c, trafficLimiter(t, memoryOn(t, c), l)
	}
	// sent reports whether an admission's send time falls before end.
	sent := func(c *manualClock, res ratelimit.Result, end time.Time) bool {
		return res.Allowed && c.Now().Add(res.Delay).Before(end)
	}

	// Burst: 200 at one instant.
	c, lim := fresh()
	for range 200 {
		res := takeOne(t, lim, "k")
		if res.Allowed {
			row.Burst++
		}
		if leaky && sent(c, res, c.Now().Add(time.Nanosecond)) {
			row.BurstSent++
		}
	}

	// Stream: one request every 300 ms for two periods.
	c, lim = fresh()
	for k := range 400 {
		c.set(time.Duration(k) * 300 * time.Millisecond)
		res := takeOne(t, lim, "k")
		switch {
		case !res.Allowed:
		case k < 200:
			row.Stream++
			if leaky && sent(c, res, trafficEpoch.Add(time.Minute)) {
				row.StreamSent++
			}
		default:
			row.Next++
		}
	}

	// Span: C at P − 100 ms, then a second burst.
	c, lim = fresh()
	c.set(time.Minute - 100*time.Millisecond)
	var times, sends []time.Time
	admit := func() {
		if res := takeOne(t, lim, "k"); res.Allowed {
			times = append(times, c.Now())
			sends = append(sends, c.Now().Add(res.Delay))
		}
	}
	for range 100 {
		admit()
	}
	if l.Algorithm() == ratelimit.FixedWindow {
		c.set(time.Minute)
	} else {
		c.set(2*time.Minute - 200*time.Millisecond)
	}
	for range 200 {
		admit()
	}
	row.Span = mostInSpan(times, time.Minute)
	if leaky {
		row.SpanSent = mostInSpan(sends, time.Minute)
	}
	return row
}

// The sliding-window counter's other error, under-admission: after 100 at
// the very start of a window, at the start of the next window the log has
// room for 100 (those left the span at exactly 60 s) while the counter
// still weighs them fully and admits none; halfway through it admits 50,
// though the span holds nothing else.
func TestSlidingWindowCounterUnderAdmits(t *testing.T) {
	counts := func(a ratelimit.Algorithm) (atP, atHalf int) {
		c := &manualClock{now: trafficEpoch}
		lim := trafficLimiter(t, memoryOn(t, c), ratelimit.PerMinute(100).WithAlgorithm(a))
		for range 100 {
			require.True(t, takeOne(t, lim, "k").Allowed)
		}
		c.set(time.Minute)
		for range 100 {
			if takeOne(t, lim, "k").Allowed {
				atP++
			}
		}
		c2 := &manualClock{now: trafficEpoch}
		lim2 := trafficLimiter(t, memoryOn(t, c2), ratelimit.PerMinute(100).WithAlgorithm(a))
		for range 100 {
			require.True(t, takeOne(t, lim2, "k").Allowed)
		}
		c2.set(90 * time.Second)
		for range 100 {
			if takeOne(t, lim2, "k").Allowed {
				atHalf++
			}
		}
		return atP, atHalf
	}
	p, h := counts(ratelimit.SlidingWindow)
	assert.Equal(t, [2]int{0, 50}, [2]int{p, h}, "sliding-window counter at 60 s and 90 s")
	p, h = counts(ratelimit.SlidingLog)
	assert.Equal(t, [2]int{100, 100}, [2]int{p, h}, "sliding log at 60 s and 90 s")
}
