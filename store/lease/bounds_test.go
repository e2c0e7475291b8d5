package lease_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/lease"
)

// admission is units admitted at a time, local µs (with the fake clock and
// no latency, also the backing store's).
type admission struct{ at, units int64 }

// maxInSpan returns the most units admitted within any closed span
// [s, s+span] (µs): the maximum is reached with s at an admission.
func maxInSpan(adm []admission, span int64) int64 {
	adm = slices.Clone(adm)
	slices.SortStableFunc(adm, func(a, b admission) int { return int(a.at - b.at) })
	var best, sum int64
	j := 0
	for i := range adm {
		for j < len(adm) && adm[j].at <= adm[i].at+span {
			sum += adm[j].units
			j++
		}
		best = max(best, sum)
		sum -= adm[i].units
	}
	return best
}

// bucketBound is the most a token bucket (or GCRA) limit l leased with
// lifetime life admits in any closed span of span µs, by the derivation in
// the package documentation: every unit is handed out less than life after
// its charge, so the units admitted in [s, s+span] were charged within
// [s − life + 1µs, s+span], a closed span of span + life − 1 µs, in which
// the bucket can charge Burst + ⌊(span + life − 1)·Quota/Period⌋ units.
func bucketBound(l *ratelimit.Limit, span, life int64) int64 {
	return l.Burst() + (span+life-1)*l.Quota()/l.Period().Microseconds()
}

// TestBucketBoundIsTight builds the schedule that comes closest to the
// bound: one instance leases a whole burst and spends it at the last
// microsecond of its lease, a second leases all that refilled meanwhile at
// that same microsecond, and a third takes every unit as it refills. One
// span of 2 s then holds Burst + ⌊(T + L − 1 µs)·R⌋ − 1 units: the bound
// less the unit the first lease's own request spent at its charge.
//
// main: Every(10, time.Second).WithBurst(100), one unit per 100 ms. The
// lifetime is 1 s, so a single shared bucket admits at most 100 + 20 in a
// closed span of 2 s, and the leased fleet at most 100 + 29.
func TestBucketBoundIsTight(t *testing.T) {
	f := newFleet(t, 0)
	mk := func(opts ...lease.Option) *lease.Store {
		s, err := lease.New(f.backing, append([]lease.Option{lease.WithClock(f.clock.Now), lease.WithExpiryInterval(0),
			lease.WithCallTimeout(time.Minute)}, opts...)...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	a := mk(lease.WithHotThreshold(1), lease.WithMaxShare(1))
	b := mk(lease.WithHotThreshold(1), lease.WithMaxShare(1))
	c := mk(lease.WithHotThreshold(math.MaxInt64)) // never leases
	main := ptr(ratelimit.Every(10, time.Second).WithBurst(100).Named("main"))
	gate := ptr(ratelimit.PerDay(1).Named("gate")) // spent: every stack with it is refused
	var adm []admission
	take := func(s *lease.Store, reqs ...ratelimit.Request) bool {
		out := make([]ratelimit.Decision, len(reqs))
		require.NoError(t, s.Take(context.Background(), reqs, out))
		for i := range out {
			if !out[i].Allowed {
				return false
			}
		}
		adm = append(adm, admission{ratelimit.Micros(f.clock.Now()), reqs[0].Cost})
		return true
	}
	one := func(s *lease.Store, cost int64) bool {
		return take(s, ratelimit.Request{Key: "k", Limit: main, Cost: cost})
	}
	// prime makes an instance's demand for main 99 units without charging
	// it: the stack is refused by the spent gate.
	prime := func(s *lease.Store) {
		require.False(t, take(s, ratelimit.Request{Key: "k", Limit: main, Cost: 99}, ratelimit.Request{Key: "k", Limit: gate, Cost: 1}))
	}
	out := make([]ratelimit.Decision, 1)
	require.NoError(t, f.backing.Take(context.Background(), []ratelimit.Request{{Key: "k", Limit: gate, Cost: 1}}, out))

	x := 500 * time.Millisecond
	f.at(x - 100*time.Millisecond)
	prime(a)
	prime(a)
	// At x, a's request of 1 leases 99 (its demand, 199 units in 1.5 s:
	// 132 per lifetime, capped by the burst less the request): the whole
	// burst is charged at x.
	f.at(x)
	require.True(t, one(a, 1))
	require.Equal(t, int64(99), a.Stats().Held)
	f.at(x + 900*time.Millisecond)
	prime(b)
	// At s = x + 1 s − 1 µs, the last microsecond of a's lease: a spends
	// its 99; b's refill (its demand 100 units in 1.5 s: a lease of 66 + 1)
	// finds 9 units refilled (999,999 µs at 100 ms per unit) and, after a
	// refused first Take, leases the 8 beyond its request, which it
	// spends too.
	s := x + time.Second - time.Microsecond
	f.at(s)
	require.True(t, one(a, 99))
	require.True(t, one(b, 1))
	require.Equal(t, int64(8), b.Stats().Held)
	require.True(t, one(b, 8))
	// From x + 1 s on, c takes each unit as it refills (every 100 ms).
	for k := 10; k <= 30; k++ {
		f.at(x + time.Duration(k)*100*time.Millisecond)
		require.True(t, one(c, 1), "unit %d", k)
		if k < 30 {
			f.at(x + time.Duration(k)*100*time.Millisecond + 99*time.Millisecond)
			require.False(t, one(c, 1), "nothing refilled since unit %d", k)
		}
	}
	span := (2 * time.Second).Microseconds()
	life := time.Second.Microseconds()
	// In [s, s + 2 s]: 99 + 9 + the units 10..29 = 128 = 100 + 29 − 1.
	require.Equal(t, int64(129), bucketBound(main, span, life))
	require.Equal(t, int64(128), maxInSpan(adm, span))
	require.Equal(t, int64(100+20), bucketBound(main, span, 1), "a single shared bucket")
}

// TestBoundsUnderRandomLoad drives 5 instances with random costs at random
// times and checks, after every call, that no pair has admitted more units
// than the backing store charged it, and at the end the span bound of the
// token bucket and GCRA for several spans and the exact per-window quota of
// the window algorithms.
func TestBoundsUnderRandomLoad(t *testing.T) {
	limits := []ratelimit.Limit{
		ratelimit.Every(50, time.Second).WithBurst(20).Named("bucket"),
		ratelimit.PerSecond(50).WithAlgorithm(ratelimit.GCRA).Named("gcra"),
		ratelimit.PerSecond(40).WithAlgorithm(ratelimit.FixedWindow).Named("fixed"),
		ratelimit.Every(40, time.Second).WithAlgorithm(ratelimit.FixedWindow).AlignToFirstHit().Named("first-hit"),
		ratelimit.PerSecond(40).WithAlgorithm(ratelimit.SlidingWindow).Named("sliding"),
	}
	for _, life := range []time.Duration{50 * time.Millisecond, 300 * time.Millisecond, time.Second} {
		for i := range limits {
			l := &limits[i]
			t.Run(fmt.Sprintf("%s/L=%v", l.Name(), life), func(t *testing.T) {
				f := newFleet(t, 5, lease.WithLifetime(life), lease.WithHotThreshold(3), lease.WithMaxShare(0.4))
				rng := rand.New(rand.NewPCG(uint64(i), uint64(life)))
				var adm []admission
				ctx := context.Background()
				out := make([]ratelimit.Decision, 1)
				now := time.Duration(0)
				var total int64
				for step := range 20_000 {
					now += time.Duration(rng.Int64N(4000)) * time.Microsecond
					f.at(now)
					inst := rng.IntN(5)
					if rng.IntN(3) == 0 {
						inst = 0 // skewed: instance 0 has 7/15 of the load
					}
					cost := 1 + rng.Int64N(3)
					require.NoError(t, f.stores[inst].Take(ctx, []ratelimit.Request{{Key: "k", Limit: l, Cost: cost}}, out))
					if out[0].Allowed {
						adm = append(adm, admission{ratelimit.Micros(f.clock.Now()), cost})
						total += cost
					}
					if step%97 == 0 {
						require.NoError(t, f.stores[rng.IntN(5)].Expire(ctx))
					}
					require.LessOrEqual(t, total, f.backing.chargedTo("k", l), "step %d: admitted more than charged", step)
				}
				switch l.Algorithm() {
				case ratelimit.TokenBucket, ratelimit.GCRA:
					for _, span := range []time.Duration{0, 10 * time.Millisecond, 100 * time.Millisecond, time.Second, 5 * time.Second} {
						got, bound := maxInSpan(adm, span.Microseconds()), bucketBound(l, span.Microseconds(), life.Microseconds())
						require.LessOrEqual(t, got, bound, "span %v", span)
						t.Logf("span %v: at most %d admitted, bound %d, one shared bucket %d", span, got, bound,
							bucketBound(l, span.Microseconds(), 1))
					}
				case ratelimit.FixedWindow:
					checkWindows(t, l, adm)
				case ratelimit.SlidingWindow:
					checkSliding(t, l, adm)
				}
			})
		}
	}
}

// checkWindows asserts that no fixed window admitted more than its quota.
// Windows aligned to the first hit open at the first admission after the
// previous window closed.
func checkWindows(t *testing.T, l *ratelimit.Limit, adm []admission) {
	t.Helper()
	p := l.Period().Microseconds()
	var start, sum int64 = -1, 0
	for _, a := range adm {
		w := a.at - a.at%p
		if l.AlignsToFirstHit() {
			w = start
			if start < 0 || a.at >= start+p {
				w = a.at
			}
		}
		if w != start {
			start, sum = w, 0
		}
		sum += a.units
		require.LessOrEqual(t, sum, l.Quota(), "window at %d", start)
	}
}

// checkSliding asserts that at every admission the sliding-window estimate
// over the admitted units (the previous window's count weighted by its
// share of the sliding window, in whole milliseconds as the algorithm
// counts, plus the current window's) is within the quota.
func checkSliding(t *testing.T, l *ratelimit.Limit, adm []admission) {
	t.Helper()
	p := l.Period().Microseconds()
	pm := l.Period().Milliseconds()
	count := map[int64]int64{}
	for _, a := range adm {
		w := a.at - a.at%p
		count[w] += a.units
		em := (a.at - w) / 1000
		used := count[w-p]*(pm-em) + count[w]*pm
		require.LessOrEqual(t, used, l.Quota()*pm, "at %d", a.at)
	}
}

// TestBucketBoundWithIdleLeases: leases that sit unused while the bucket
// drains must not let their return create capacity that refilled anyway.
//
// Five instances each hold a lease of 30 units (WithMaxShare(0.3)) of
// main, Every(10, time.Second).WithBurst(100), and use one unit of it per
// lifetime (1 s): at its slot (instance i at i × 200 ms into each second)
// each instance's demand is primed to 100 units by a stack the spent gate
// refuses (nothing charged), and a request of 1 then returns the ended
// lease and takes 1 + 30. The fleet uses 5 units per second while the
// bucket refills 10: one shared bucket would be full (100 units), and it
// may admit at most 100 + ⌊(T + L − 1 µs) × 10/s⌋ in any span T.
//
// After 100 such seconds, a sixth instance that never leases takes every
// unit there is, at each slot just before and just after the instance of
// that slot returns its lease (Expire). A return credits units that the
// backing bucket had drained while they sat in the lease, and the bucket
// being nearly empty of anything else, each return makes room that one
// shared bucket never had. The bound (100 + 19 in a span of 1 s) must
// hold.
func TestBucketBoundWithIdleLeases(t *testing.T) {
	const n = 5
	f := newFleet(t, n, lease.WithHotThreshold(1), lease.WithMaxShare(0.3))
	q, err := lease.New(f.backing, lease.WithClock(f.clock.Now), lease.WithExpiryInterval(0),
		lease.WithCallTimeout(time.Minute), lease.WithHotThreshold(math.MaxInt64))
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Close() })
	main := ptr(ratelimit.Every(10, time.Second).WithBurst(100).Named("main"))
	gate := ptr(ratelimit.PerDay(1).Named("gate"))
	out := make([]ratelimit.Decision, 2)
	require.NoError(t, f.backing.Take(context.Background(), []ratelimit.Request{{Key: "k", Limit: gate, Cost: 1}}, out[:1]))
	var adm []admission
	admit := func(s *lease.Store, reqs ...ratelimit.Request) bool {
		require.NoError(t, s.Take(context.Background(), reqs, out[:len(reqs)]))
		for i := range reqs {
			if !out[i].Allowed {
				return false
			}
		}
		adm = append(adm, admission{ratelimit.Micros(f.clock.Now()), reqs[0].Cost})
		return true
	}
	drain := func() { // the sixth instance takes all there is
		if left := f.peek("k", main).Remaining; left > 0 {
			require.True(t, admit(q, ratelimit.Request{Key: "k", Limit: main, Cost: left}))
		}
	}
	const periods = 100
	for k := range periods + 1 {
		for i, s := range f.stores {
			f.at(time.Duration(k)*time.Second + time.Duration(i)*200*time.Millisecond)
			if k == periods {
				drain()
				f.expire(i)
				drain()
				continue
			}
			require.False(t, admit(s, ratelimit.Request{Key: "k", Limit: main, Cost: 99}, ratelimit.Request{Key: "k", Limit: gate, Cost: 1}))
			require.True(t, admit(s, ratelimit.Request{Key: "k", Limit: main, Cost: 1}))
		}
	}
	span, life := time.Second.Microseconds(), time.Second.Microseconds()
	require.Equal(t, int64(119), bucketBound(main, span, life))
	require.LessOrEqual(t, maxInSpan(adm, span), bucketBound(main, span, life))
}
