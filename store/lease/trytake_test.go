package lease_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	rmprom "github.com/rampmeter/ratelimit/metrics/prometheus"
	"github.com/rampmeter/ratelimit/store/lease"
	"github.com/rampmeter/ratelimit/store/resilient"
)

// TestTryTakeUndecided: TryTake and TryTakeOne decide nothing (false, all
// zeros) for every call that Take would not decide locally at once, and
// then have changed nothing: the Stats, the backing calls and out are as
// before, and the Take that follows decides exactly as the Take of a twin
// fleet that was never tried (demand counted once: the twins stay equal).
//
// The fleet: hot at once, PerSecond(100) (burst 100, leases ≤ 10): at t0
// a Take of 1 on "k" leases 2 more (its demand + 1); a LeakyBucket limit
// on "k" is tracked and passes through.
func TestTryTakeUndecided(t *testing.T) {
	l := ptr(ratelimit.PerSecond(100).Named("rps"))
	other := ptr(ratelimit.PerSecond(100).Named("other"))
	leaky := ptr(ratelimit.PerSecond(100).WithAlgorithm(ratelimit.LeakyBucket).Named("leaky"))
	req := func(key string, l *ratelimit.Limit, cost int64) ratelimit.Request {
		return ratelimit.Request{Key: key, Limit: l, Cost: cost}
	}
	var nine []ratelimit.Request
	for i := range 9 {
		nine = append(nine, req(fmt.Sprint("k", i), l, 1))
	}
	setup := func(t *testing.T) *fleet {
		f := newFleet(t, 1, lease.WithHotThreshold(1))
		f.take1(0, "k", l, 1)
		f.take1(0, "k", leaky, 1)
		for _, r := range nine {
			f.take(0, r)
		}
		require.Equal(t, int64(2), f.stores[0].Stats().Held-9*2)
		return f
	}
	for _, c := range []struct {
		name    string
		reqs    []ratelimit.Request
		before  func(f *fleet) // on both twins
		badCall bool           // Take returns an error wrapping ErrInvalidRequest
	}{
		{name: "cold key", reqs: []ratelimit.Request{req("new", l, 1)}},
		{name: "lease short", reqs: []ratelimit.Request{req("k", l, 3)}},
		{name: "lease ended", reqs: []ratelimit.Request{req("k", l, 1)}, before: func(f *fleet) { f.at(time.Second) }},
		{name: "peek", reqs: []ratelimit.Request{req("k", l, 0)}},
		{name: "above burst", reqs: []ratelimit.Request{req("k", l, 101)}},
		{name: "pair twice", reqs: []ratelimit.Request{req("k", l, 1), req("k", l, 1)}},
		{name: "leaky bucket", reqs: []ratelimit.Request{req("k", leaky, 1)}},
		{name: "stack with a cold limit", reqs: []ratelimit.Request{req("k", l, 1), req("k", other, 1)}},
		{name: "stack of 9", reqs: nine},
		{name: "closed", reqs: []ratelimit.Request{req("k", l, 1)}, before: func(f *fleet) { require.NoError(t, f.stores[0].Close()) }},
		{name: "empty key", reqs: []ratelimit.Request{req("", l, 1)}, badCall: true},
		{name: "nil limit", reqs: []ratelimit.Request{req("k", nil, 1)}, badCall: true},
		{name: "negative cost", reqs: []ratelimit.Request{req("k", l, -1)}, badCall: true},
		{name: "invalid limit", reqs: []ratelimit.Request{req("k", &ratelimit.Limit{}, 1)}, badCall: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, twin := setup(t), setup(t)
			if c.before != nil {
				c.before(f)
				c.before(twin)
			}
			s := f.stores[0]
			st, calls := s.Stats(), f.backing.calls()
			sentinel := ratelimit.Decision{Remaining: -7}
			out := make([]ratelimit.Decision, len(c.reqs))
			for i := range out {
				out[i] = sentinel
			}
			require.False(t, s.TryTake(c.reqs, out))
			zero := []any{false, false, int64(0), time.Duration(0), time.Duration(0), time.Duration(0), int64(0)}
			switch len(c.reqs) {
			case 1:
				decided, allowed, remaining, reset, retryAfter, delay, at := s.TryTakeOne(c.reqs[0])
				require.Equal(t, zero, []any{decided, allowed, remaining, reset, retryAfter, delay, at})
			case 2:
				a, b := c.reqs[0], c.reqs[1]
				decided, allowedA, remainingA, resetA, retryAfterA, delayA, atA, allowedB, remainingB, resetB, retryAfterB, delayB, atB := s.TryTakeTwo(a.Key, a.Limit, a.Cost, b.Key, b.Limit, b.Cost)
				require.Equal(t, append(zero, zero[1:]...), []any{decided, allowedA, remainingA, resetA, retryAfterA, delayA, atA, allowedB, remainingB, resetB, retryAfterB, delayB, atB})
			}
			require.Equal(t, st, s.Stats(), "nothing counted")
			require.Equal(t, calls, f.backing.calls(), "no backing call")
			for i := range out {
				require.Equal(t, sentinel, out[i], "nothing written")
			}
			got, want := make([]ratelimit.Decision, len(c.reqs)), make([]ratelimit.Decision, len(c.reqs))
			err, wantErr := s.Take(context.Background(), c.reqs, got), twin.stores[0].Take(context.Background(), c.reqs, want)
			if c.badCall {
				require.ErrorIs(t, err, ratelimit.ErrInvalidRequest)
				require.Equal(t, wantErr, err)
				return
			}
			require.NoError(t, err)
			require.NoError(t, wantErr)
			require.Equal(t, want, got)
			require.Equal(t, twin.stores[0].Stats(), s.Stats())
			require.Equal(t, twin.backing.calls(), f.backing.calls())
		})
	}
	t.Run("short out", func(t *testing.T) {
		f := setup(t)
		st := f.stores[0].Stats()
		require.False(t, f.stores[0].TryTake([]ratelimit.Request{req("k", l, 1)}, nil))
		require.Equal(t, st, f.stores[0].Stats())
	})
	t.Run("refill in flight", func(t *testing.T) {
		// A Take of 3 refills the lease (2 left: need 1 more); while its
		// backing call is in flight, the lease is busy: TryTake of 1,
		// which the 2 units would cover, must not decide (Take would wait
		// for the refill) and changes nothing.
		f := setup(t)
		s := f.stores[0]
		tried := false
		f.backing.setBefore(func([]ratelimit.Request) {
			f.backing.setBefore(nil)
			st := s.Stats()
			out := make([]ratelimit.Decision, 1)
			require.False(t, s.TryTake([]ratelimit.Request{req("k", l, 1)}, out))
			decided, _, _, _, _, _, _ := s.TryTakeOne(req("k", l, 1))
			require.False(t, decided)
			require.Equal(t, st, s.Stats())
			require.Equal(t, ratelimit.Decision{}, out[0])
			tried = true
		})
		require.True(t, f.take1(0, "k", l, 3).Allowed)
		require.True(t, tried)
	})
}

// TestTryTakeDecides: TryTake and TryTakeOne decide, from the lease or by
// a remembered refusal, exactly as Take decides on a twin fleet, with the
// same effect on the Stats (Local) and no backing call.
//
// Hot at once, PerSecond(100) (burst 100, 10 ms per unit, leases ≤ 10).
func TestTryTakeDecides(t *testing.T) {
	l := ptr(ratelimit.PerSecond(100))
	for _, one := range []bool{false, true} {
		t.Run(map[bool]string{false: "TryTake", true: "TryTakeOne"}[one], func(t *testing.T) {
			f, twin := newFleet(t, 1, lease.WithHotThreshold(1)), newFleet(t, 1, lease.WithHotThreshold(1))
			s := f.stores[0]
			try := func(cost int64) ratelimit.Decision {
				t.Helper()
				r := ratelimit.Request{Key: "k", Limit: l, Cost: cost}
				calls := f.backing.calls()
				defer func() { require.Equal(t, calls, f.backing.calls(), "no backing call") }()
				if one {
					decided, allowed, remaining, reset, retryAfter, delay, at := s.TryTakeOne(r)
					require.True(t, decided)
					return ratelimit.Decision{Limit: l, Allowed: allowed, Remaining: remaining, Reset: reset, RetryAfter: retryAfter, Delay: delay, At: at}
				}
				out := make([]ratelimit.Decision, 1)
				require.True(t, s.TryTake([]ratelimit.Request{r}, out))
				return out[0]
			}
			// At t0 a Take of 1 leases 2 (demand 1, + 1): backing 97 left.
			f.take1(0, "k", l, 1)
			twin.take1(0, "k", l, 1)
			// A TryTake of 2 is served from the lease: Remaining 97 + 0,
			// Reset 30 ms (3 units used), as the twin's Take says.
			got := try(2)
			f.check(decision(l, true, 97, ms(30), 0), got)
			require.Equal(t, twin.take1(0, "k", l, 2), got)
			require.Equal(t, twin.stores[0].Stats(), s.Stats())
			require.Equal(t, uint64(1), s.Stats().Local)
			// Another process spends the 97 left in the backing store; a
			// Take of 5 is then refused by it, and remembered 100 ms.
			for _, g := range []*fleet{f, twin} {
				drain := make([]ratelimit.Decision, 1)
				require.NoError(t, g.mem.Take(context.Background(), []ratelimit.Request{{Key: "k", Limit: l, Cost: 97}}, drain))
				require.True(t, drain[0].Allowed)
				require.False(t, g.take1(0, "k", l, 5).Allowed)
			}
			// At t0+10ms a TryTake of 5 is refused from the remembered
			// refusal: RetryAfter 90 ms, nothing charged.
			f.at(ms(10))
			twin.at(ms(10))
			got = try(5)
			f.check(decision(l, false, 0, ms(990), ms(90)), got)
			require.Equal(t, twin.take1(0, "k", l, 5), got)
			require.Equal(t, twin.stores[0].Stats(), s.Stats())
			require.Equal(t, twin.backing.chargedTo("k", l), f.backing.chargedTo("k", l))
		})
	}
}

// TestTryTakeMatchesTake drives three fleets of two instances in lockstep
// through the same random calls (single limits of the four leasable
// algorithms and a LeakyBucket, stacks, a pair named twice, peeks, costs
// above the burst, a table of 6 pairs that fills, expiry passes, a Close):
// the first with Take alone, the second with TryTake and Take when it did
// not decide, the third with TryTakeOne and TakeOne for single requests
// and TryTakeTwo and TakeTwo for stacks.
// Every decision, error, Stats and charge must be the same: an attempt
// that did not decide changed nothing, and one that did is the Take.
func TestTryTakeMatchesTake(t *testing.T) {
	limits := []*ratelimit.Limit{
		ptr(ratelimit.Every(200, time.Second).WithBurst(40).Named("bucket")),
		ptr(ratelimit.PerSecond(400).WithAlgorithm(ratelimit.GCRA).WithBurst(30).Named("gcra")),
		ptr(ratelimit.PerSecond(300).WithAlgorithm(ratelimit.FixedWindow).Named("fixed")),
		ptr(ratelimit.PerSecond(2000).WithAlgorithm(ratelimit.SlidingWindow).Named("sliding")),
		ptr(ratelimit.PerSecond(100).WithAlgorithm(ratelimit.LeakyBucket).Named("leaky")),
	}
	for seed := range uint64(10) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			opts := []lease.Option{lease.WithHotThreshold(2), lease.WithMaxShare(0.3), lease.WithLifetime(100 * time.Millisecond), lease.WithMaxKeys(6)}
			fleets := []*fleet{newFleet(t, 2, opts...), newFleet(t, 2, opts...), newFleet(t, 2, opts...)}
			rng := rand.New(rand.NewPCG(seed, 11))
			now := time.Duration(0)
			var decided [3]int
			for step := range 3000 {
				now += time.Duration(rng.Int64N(4000)) * time.Microsecond
				key := fmt.Sprint("k", rng.IntN(3))
				cost := func(l *ratelimit.Limit) int64 {
					switch rng.IntN(20) {
					case 0:
						return 0
					case 1:
						return l.Burst() + 1
					}
					return rng.Int64N(12)
				}
				var reqs []ratelimit.Request
				switch rng.IntN(6) {
				case 0: // a stack of two
					a, b := limits[rng.IntN(4)], limits[rng.IntN(4)]
					reqs = []ratelimit.Request{{Key: key, Limit: a, Cost: cost(a)}, {Key: key, Limit: b, Cost: cost(b)}}
				default:
					l := limits[rng.IntN(len(limits))]
					reqs = []ratelimit.Request{{Key: key, Limit: l, Cost: cost(l)}}
				}
				i := rng.IntN(2)
				expire, closeAt := rng.IntN(40) == 0, step == 2500
				var outs [3][]ratelimit.Decision
				var errs [3]error
				for m, f := range fleets {
					f.at(now)
					s := f.stores[i]
					out := make([]ratelimit.Decision, len(reqs))
					switch {
					case m == 2 && len(reqs) == 2:
						a, b := reqs[0], reqs[1]
						ok, allowedA, remainingA, resetA, retryAfterA, delayA, atA, allowedB, remainingB, resetB, retryAfterB, delayB, atB := s.TryTakeTwo(a.Key, a.Limit, a.Cost, b.Key, b.Limit, b.Cost)
						if ok {
							decided[m]++
						} else {
							allowedA, remainingA, resetA, retryAfterA, delayA, atA, allowedB, remainingB, resetB, retryAfterB, delayB, atB, errs[m] = s.TakeTwo(context.Background(), a.Key, a.Limit, a.Cost, b.Key, b.Limit, b.Cost)
						}
						if errs[m] == nil {
							out[0] = ratelimit.Decision{Limit: a.Limit, Allowed: allowedA, Remaining: remainingA, Reset: resetA, RetryAfter: retryAfterA, Delay: delayA, At: atA}
							out[1] = ratelimit.Decision{Limit: b.Limit, Allowed: allowedB, Remaining: remainingB, Reset: resetB, RetryAfter: retryAfterB, Delay: delayB, At: atB}
						}
					case m == 2 && len(reqs) == 1:
						ok, allowed, remaining, reset, retryAfter, delay, at := s.TryTakeOne(reqs[0])
						if ok {
							decided[m]++
							out[0] = ratelimit.Decision{Limit: reqs[0].Limit, Allowed: allowed, Remaining: remaining, Reset: reset, RetryAfter: retryAfter, Delay: delay, At: at}
							break
						}
						allowed, remaining, reset, retryAfter, delay, at, err := s.TakeOne(context.Background(), reqs[0])
						errs[m] = err
						if err == nil {
							out[0] = ratelimit.Decision{Limit: reqs[0].Limit, Allowed: allowed, Remaining: remaining, Reset: reset, RetryAfter: retryAfter, Delay: delay, At: at}
						}
					case m >= 1 && s.TryTake(reqs, out):
						decided[m]++
					default:
						errs[m] = s.Take(context.Background(), reqs, out)
					}
					outs[m] = out
					if expire {
						require.NoError(t, s.Expire(context.Background()))
					}
					if closeAt {
						require.NoError(t, f.stores[0].Close())
					}
				}
				for m := 1; m < 3; m++ {
					require.Equal(t, errs[0], errs[m], "step %d mode %d", step, m)
					require.Equal(t, outs[0], outs[m], "step %d mode %d: %v", step, m, reqs)
					for j := range fleets[0].stores {
						require.Equal(t, fleets[0].stores[j].Stats(), fleets[m].stores[j].Stats(), "step %d mode %d instance %d", step, m, j)
					}
				}
			}
			for m, f := range fleets {
				for _, s := range f.stores {
					require.NoError(t, s.Close())
				}
				if m > 0 {
					for _, key := range []string{"k0", "k1", "k2"} {
						for _, l := range limits {
							require.Equal(t, fleets[0].backing.chargedTo(key, l), f.backing.chargedTo(key, l), "%s %s", key, l.ID())
						}
					}
				}
			}
			// The attempts decided a fair share of the calls (a test
			// that never decided would prove little).
			require.Greater(t, decided[1], 150)
			require.Greater(t, decided[2], 150)
		})
	}
}

// TestTakeOneMatchesTake: TakeOne returns Take's decision field by field,
// and all zeros with Take's error.
func TestTakeOneMatchesTake(t *testing.T) {
	f := newFleet(t, 1, lease.WithHotThreshold(1))
	s := f.stores[0]
	l := ptr(ratelimit.PerSecond(100))
	allowed, remaining, reset, retryAfter, delay, at, err := s.TakeOne(context.Background(), ratelimit.Request{Key: "k", Limit: l, Cost: 3})
	require.NoError(t, err)
	f.check(decision(l, true, 97, ms(30), 0),
		ratelimit.Decision{Limit: l, Allowed: allowed, Remaining: remaining, Reset: reset, RetryAfter: retryAfter, Delay: delay, At: at})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []struct {
		ctx  context.Context
		r    ratelimit.Request
		want error
	}{
		{ctx, ratelimit.Request{Key: "k", Limit: l, Cost: 1}, context.Canceled},
		{context.Background(), ratelimit.Request{Key: "", Limit: l, Cost: 1}, ratelimit.ErrInvalidRequest},
	} {
		allowed, remaining, reset, retryAfter, delay, at, err := s.TakeOne(c.ctx, c.r)
		require.ErrorIs(t, err, c.want)
		require.Equal(t, []any{false, int64(0), time.Duration(0), time.Duration(0), time.Duration(0), int64(0)},
			[]any{allowed, remaining, reset, retryAfter, delay, at})
	}
}

// TestLimiterTakeFromLeaseAllocatesNothing pins the budget of issue 10: a
// Limiter.Take that the lease store serves from its lease allocates
// nothing (no store-timeout context: TryTakeOne, and for a stack of two
// TryTakeTwo, decide it before the Limiter would build one). The leases are
// of a huge limit, on the frozen fake clock: every measured Take is
// served from them. No pool is involved, so the budget holds on the race
// detector too.
func TestLimiterTakeFromLeaseAllocatesNothing(t *testing.T) {
	for _, n := range []int{1, 2} {
		t.Run(fmt.Sprint(n, " limits"), func(t *testing.T) {
			f := newFleet(t, 1, lease.WithHotThreshold(1), lease.WithMaxShare(1))
			limits := []ratelimit.Limit{
				ratelimit.PerSecond(1_000_000).WithBurst(1 << 40).Named("requests"),
				ratelimit.PerSecond(1_000_000).WithBurst(1 << 40).Named("tokens"),
			}[:n]
			lim, err := ratelimit.New(f.stores[0], ratelimit.WithLimits(limits...))
			require.NoError(t, err)
			ctx := context.Background()
			// Hot at once: a Take of 10^6 leases 10^6 + 1 more of each.
			costs := []int64{1_000_000, 1_000_000}[:n]
			res, err := lim.Take(ctx, "k", costs...)
			require.NoError(t, err)
			require.True(t, res.Allowed)
			require.Equal(t, int64(n*1_000_001), f.stores[0].Stats().Held)
			local := f.stores[0].Stats().Local
			calls := f.backing.calls()
			allocs := testing.AllocsPerRun(100, func() {
				if res, err := lim.Take(ctx, "k"); err != nil || !res.Allowed {
					t.Fatal(res.Allowed, err)
				}
			})
			require.Zero(t, allocs)
			require.Equal(t, calls, f.backing.calls(), "every measured Take was served from the lease")
			require.Equal(t, local+101, f.stores[0].Stats().Local)
		})
	}
}

// TestLimiterLocalTakeReported: through a Limiter, a Take the lease store
// decides at once is one store call (Hooks.OnStoreCall, Op take, no
// error), and so is one it does not, which reaches the backing store
// once; a Take whose context has ended is not decided locally, even with
// units in the lease: the store reports the context's error, as without
// the attempt.
func TestLimiterLocalTakeReported(t *testing.T) {
	f := newFleet(t, 1, lease.WithHotThreshold(1))
	var calls []ratelimit.StoreCall
	lim, err := ratelimit.New(f.stores[0], ratelimit.WithLimits(ratelimit.PerSecond(100)),
		ratelimit.WithHooks(ratelimit.Hooks{OnStoreCall: func(_ context.Context, c ratelimit.StoreCall) {
			c.Duration = 0
			calls = append(calls, c)
		}}))
	require.NoError(t, err)
	ctx := context.Background()
	for range 2 { // a refill leasing 2 units, then a Take served from them
		res, err := lim.Take(ctx, "k")
		require.NoError(t, err)
		require.True(t, res.Allowed)
	}
	call := ratelimit.StoreCall{Op: ratelimit.OpTake, Requests: 1, Store: f.stores[0]}
	require.Equal(t, []ratelimit.StoreCall{call, call}, calls)
	st := f.stores[0].Stats()
	require.Equal(t, uint64(1), st.Local)
	require.Equal(t, uint64(1), st.Refills)
	require.Equal(t, int64(1), st.Held)
	require.Equal(t, 1, f.backing.calls())

	ended, cancel := context.WithCancel(ctx)
	cancel()
	res, err := lim.Take(ended, "k")
	require.ErrorIs(t, err, context.Canceled)
	require.False(t, errors.Is(err, ratelimit.ErrStoreFailed))
	require.Equal(t, ratelimit.Result{}, res)
	require.Equal(t, st, f.stores[0].Stats(), "the lease's unit is still held")
	require.Len(t, calls, 3)
	require.ErrorIs(t, calls[2].Err, context.Canceled)
	require.Equal(t, uint64(2), lim.Stats().Allowed)
	require.Zero(t, lim.Stats().StoreErrors)
}

// TestWrappersDoNotForwardLocalTaker pins what ratelimit.LocalTaker's
// documentation says of the repository's wrapper stores: store/resilient
// (its breaker and fallback choose the store that decides) and
// metrics/prometheus's InstrumentStore (it measures every Take) do not
// implement it, so a Limiter over them makes every Take with the store
// timeout, through their Take. Should one of them forward it one day,
// this test is where to check that its TryTake does what its Take does.
func TestWrappersDoNotForwardLocalTaker(t *testing.T) {
	f := newFleet(t, 1)
	guarded, err := resilient.New(f.stores[0])
	require.NoError(t, err)
	m, err := rmprom.New(prometheus.NewRegistry())
	require.NoError(t, err)
	for name, s := range map[string]ratelimit.Store{"resilient": guarded, "InstrumentStore": m.InstrumentStore(f.stores[0])} {
		_, ok := s.(ratelimit.LocalTaker)
		require.False(t, ok, name)
	}
	var _ ratelimit.LocalTaker = f.stores[0]
}
