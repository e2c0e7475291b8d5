package redisstore_test

import (
	"context"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/internal/redistest"
	"github.com/rampmeter/ratelimit/store/memory"
	"github.com/rampmeter/ratelimit/store/redisstore"
	"github.com/rampmeter/ratelimit/store/resilient"
)

// Exactness under distribution (issue 5, item 5): five Limiter instances,
// each with its own go-redis client, its own 64 goroutines and a local
// clock skewed by a different amount (−2 min to +2 min), hammer one key on
// one real Redis for a bounded time. Each instance runs the production
// stack: Limiter → resilient (whose breaker and memory fallback run on the
// skewed clock) → Redis store on Redis TIME. The skew must not matter: the
// fallback never decides, and Redis's clock is the only one consulted.
//
// Every Decision carries At, the Redis TIME (µs) the script decided at, so
// the admissions can be checked against the rate exactly:
//
//  1. Replay. Redis runs the scripts one at a time, so the decisions,
//     ordered by At, must be exactly what the sequential pure function
//     (*Limit).TakeAt decides for that sequence (within one microsecond,
//     admissions come before refusals: with no time passing, a refusal is
//     followed only by refusals). Every decision is compared.
//
//  2. Closed form, token bucket and GCRA (identical admissions). Let t₁ be
//     the At of the last admission that found the bucket full (its
//     Remaining is C−1; on a fresh key under a demand that exceeds the rate
//     from the start, the first decision), t₂ the At of the last refusal,
//     Δ = t₂ − t₁, and N the admissions in [t₁, t₂]. The bucket is never
//     full again after t₁, so no refill is lost: the tokens before the decision
//     at t₂ are exactly C + R·Δ − N (R·Δ = Δ·Quota/Period, an exact
//     rational, as the integer arithmetic keeps it). Tokens are never
//     negative, so N ≤ C + R·Δ; the decision at t₂ refused a cost of 1, so
//     C + R·Δ − N < 1. Hence N = C + ⌊R·Δ⌋, exactly. (The "±1 at the
//     edges" of a looser measurement comes from ending the span at an
//     arbitrary instant: ending it at an admission that left a whole token,
//     or counting one too few or too many decisions at the end
//     microsecond. Ending it at the last refusal removes both.)
//
//  3. Bound, sliding-window counter. With Q = Quota, P = Period (Pm in
//     milliseconds), windows aligned to the epoch, t₁ the first decision
//     (the key is fresh), w₀ the start of its window, wₖ = w₀ + k·P, t₂ in
//     window K ≥ 1, cₖ the admissions in window k (c₋₁ = 0), and
//     Aₖ(e) = ⌊Q − cₖ₋₁·(Pm − e)/Pm⌋ what the rule cₖ₋₁·(Pm − e) +
//     count·Pm ≤ Q·Pm allows in window k at elapsed whole millisecond e
//     (≤ Q, increasing in e). The count never exceeds Aₖ(e), and a refusal
//     at e finds it exactly at Aₖ(e) (one more did not fit).
//     Upper bound, whatever the demand: c₀ … c_{K−2} ≤ Q each, and
//     window K's last admission (at e ≤ e₂, t₂'s millisecond) bounds
//     c_{K−1} + c_K by Q + c_{K−1}·e₂/Pm ≤ Q + Q·(t₂ − w_K)/P, so
//     N ≤ H = Q + ⌊Q·(t₂ − w₁)/P⌋.
//     Lower bound: window K holds A_K(e₂) ≥ ⌊Q·e₂/Pm⌋ ≥
//     ⌊Q·(t₂ − w_K)/P⌋ − ⌈Q/Pm⌉ at t₂; window 0 ends with Q − L₀ and
//     each window 0 < k < K with
//     Aₖ(Pm − 1) − Lₖ ≥ Q − ⌈Q/Pm⌉ − Lₖ, Lₖ being the quota it left
//     unused. So N ≥ H − K·⌈Q/Pm⌉ − ΣLₖ. Lₖ is bounded by the demand
//     the decisions show: after a last refusal at eᵣ the window ends with
//     at least Aₖ(eᵣ), so Lₖ ≤ Aₖ(Pm − 1) − Aₖ(eᵣ) ≤ ⌈Q·g/P⌉ if that
//     refusal came g µs before the window's end (demand that stopped: a
//     stalled machine); a window without a refusal never had demand
//     above its allowance, and Lₖ = Aₖ(Pm − 1) − cₖ. The second case is
//     not only a stall: window 0's whole quota is free at once, and a
//     loaded machine may not get through it before w₁ while every one of
//     its decisions is an admission. Compared with the token-bucket
//     formula from t₁, the counter admits Q·(w₁ − t₁)/P fewer: the first
//     window's quota is spent at once rather than accrued.
//
// The run lasts runFor, and longer if needed (at most maxRun) until it has
// what the checks need, however slow the machine: a refusal, and for the
// window a refusal after w₁.
func TestExactUnderDistribution(t *testing.T) {
	if testing.Short() {
		t.Skip("hammers Redis for a few seconds")
	}
	addr := redistest.Addr(t)
	const (
		instances = 5
		perInst   = 64
		runFor    = 1200 * time.Millisecond
		maxRun    = 30 * time.Second
		maxCalls  = 200_000 // per instance: bounds the loop whatever the speed
	)
	for _, tc := range []struct {
		name  string
		limit ratelimit.Limit
	}{
		{"token-bucket", ratelimit.PerSecond(500).WithBurst(100).Named("tb")},
		{"gcra", ratelimit.PerSecond(500).WithBurst(100).WithAlgorithm(ratelimit.GCRA).Named("gcra")},
		{"sliding-window", ratelimit.PerSecond(500).WithAlgorithm(ratelimit.SlidingWindow).Named("sw")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, tc.limit.Err())
			prefix := redistest.Prefix(t)
			type decision struct {
				at        int64
				allowed   bool
				remaining int64
			}
			var (
				mu        sync.Mutex
				decisions []decision
			)
			clients := make([]*redis.Client, instances)
			stores := make([]*resilient.Store, instances)
			lims := make([]*ratelimit.Limiter, instances)
			for i := range instances {
				client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: perInst})
				t.Cleanup(func() { _ = client.Close() })
				clients[i] = client
				primary, err := redisstore.New(client, redisstore.WithPrefix(prefix))
				require.NoError(t, err)
				skew := time.Duration(i-2) * time.Minute
				now := func() time.Time { return time.Now().Add(skew) }
				local, err := memory.New(memory.WithClock(now))
				require.NoError(t, err)
				// Deadlines of a minute: the exact count needs every call
				// decided by Redis, and a loaded machine under -race has
				// paused this test for most of a second.
				stores[i], err = resilient.New(primary, resilient.WithClock(now), resilient.WithTimeout(time.Minute),
					resilient.WithFallback(local, resilient.EvenShare(instances)))
				require.NoError(t, err)
				lims[i], err = ratelimit.New(stores[i], ratelimit.WithLimits(tc.limit), ratelimit.WithStoreTimeout(time.Minute))
				require.NoError(t, err)
			}
			t.Cleanup(func() {
				c := redis.NewClient(&redis.Options{Addr: addr})
				defer c.Close()
				deletePrefix(t, c, prefix)
			})

			// Every goroutine opens its connection first, then all start
			// at once, so that demand exceeds the rate from the start.
			start := make(chan struct{})
			var ready, wg sync.WaitGroup
			var errs atomic.Int64
			// The first decision and the last refusal seen so far (Redis
			// TIME, µs), for the end of the run.
			var firstAt, lastRefusal atomic.Int64
			firstAt.Store(math.MaxInt64)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			for i := range instances {
				var calls atomic.Int64
				for range perInst {
					ready.Add(1)
					wg.Go(func() {
						err := clients[i].Ping(ctx).Err()
						ready.Done()
						if err != nil {
							errs.Add(1)
							return
						}
						<-start
						var mine []decision
						for ctx.Err() == nil && calls.Add(1) <= maxCalls {
							res, err := lims[i].Take(context.WithoutCancel(ctx), "hot")
							if err != nil || res.Bypassed {
								errs.Add(1)
								continue
							}
							d := res.Decisions[0]
							mine = append(mine, decision{at: d.At, allowed: d.Allowed, remaining: d.Remaining})
							for v := firstAt.Load(); d.At < v && !firstAt.CompareAndSwap(v, d.At); v = firstAt.Load() {
							}
							for v := lastRefusal.Load(); !d.Allowed && d.At > v && !lastRefusal.CompareAndSwap(v, d.At); v = lastRefusal.Load() {
							}
						}
						mu.Lock()
						decisions = append(decisions, mine...)
						mu.Unlock()
					})
				}
			}
			ready.Wait()
			close(start)
			begin := time.Now()
			done := make(chan struct{})
			go func() {
				wg.Wait()
				close(done)
			}()
			periodUS := tc.limit.Period().Microseconds()
			enough := func() bool {
				r := lastRefusal.Load()
				if tc.limit.Algorithm() == ratelimit.SlidingWindow {
					// firstAt only falls as decisions come in, so the w₁ it
					// gives is never earlier than the true one.
					f := firstAt.Load()
					return r > f-f%periodUS+periodUS
				}
				return r > 0
			}
			tick := time.NewTicker(10 * time.Millisecond)
			for running := true; running; {
				select {
				case <-done:
					running = false
				case <-tick.C:
					if el := time.Since(begin); el >= runFor && (enough() || el >= maxRun) {
						running = false
					}
				}
			}
			tick.Stop()
			cancel()
			<-done
			require.Zero(t, errs.Load(), "store errors: the exact count needs every call decided")
			for _, s := range stores {
				require.Zero(t, s.Stats().Fallbacks, "the fallback (on a skewed clock) must not have decided")
			}

			// 1. Replay, in Redis's order.
			slices.SortFunc(decisions, func(a, b decision) int {
				if a.at != b.at {
					return int(a.at - b.at)
				}
				switch {
				case a.allowed == b.allowed:
					return 0
				case a.allowed:
					return -1
				}
				return 1
			})
			l := tc.limit
			var st ratelimit.State
			for i, d := range decisions {
				want := l.TakeAt(&st, d.at, 1)
				if want.Allowed != d.allowed {
					t.Fatalf("decision %d of %d at %d µs: Redis said allowed=%v, the sequential model %v",
						i, len(decisions), d.at, d.allowed, want.Allowed)
				}
			}

			// 2 and 3. Closed form up to the last refusal.
			require.True(t, decisions[0].allowed, "the first decision on a fresh key is an admission")
			end := -1
			for i := len(decisions) - 1; i >= 0; i-- {
				if !decisions[i].allowed {
					end = i
					break
				}
			}
			require.GreaterOrEqual(t, end, 0, "demand never exceeded the limit: no refusal")
			t2 := decisions[end].at
			// t₁: for the buckets, the last admission that found the bucket
			// full (Remaining C−1 after it; normally the very first), after
			// which no refill is lost; for the window, the first decision.
			from := 0
			if l.Algorithm() != ratelimit.SlidingWindow {
				for i, d := range decisions[:end] {
					if d.allowed && d.remaining == l.Burst()-1 {
						from = i
					}
				}
			}
			t1 := decisions[from].at
			n := int64(0)
			for _, d := range decisions[from : end+1] {
				if d.allowed {
					n++
				}
			}
			total := 0
			for _, d := range decisions {
				if d.allowed {
					total++
				}
			}
			var maxGap int64
			for i := 1; i < len(decisions); i++ {
				maxGap = max(maxGap, decisions[i].at-decisions[i-1].at)
			}
			var want, lo, hi int64
			switch l.Algorithm() {
			case ratelimit.TokenBucket, ratelimit.GCRA:
				// Whatever happened in between, never more than C + ⌊R·Δ⌋
				// from the first decision on.
				var all int64
				for _, d := range decisions[:end+1] {
					if d.allowed {
						all++
					}
				}
				require.LessOrEqual(t, all, l.Burst()+(t2-decisions[0].at)*l.Quota()/periodUS)
				want = l.Burst() + (t2-t1)*l.Quota()/periodUS
				require.Equal(t, want, n, "admitted up to the last refusal: C + ⌊R·Δ⌋")
				lo, hi = want, want
			case ratelimit.SlidingWindow:
				q, pm := l.Quota(), l.Period().Milliseconds()
				w0 := t1 - t1%periodUS
				w1 := w0 + periodUS
				require.Greater(t, t2, w1, "the run must reach the second window")
				k2 := (t2 - w0) / periodUS // t₂'s window, K
				// Admissions per window, and the elapsed millisecond of
				// each window's last refusal (−1: none).
				c, er := make([]int64, k2+1), make([]int64, k2+1)
				for k := range er {
					er[k] = -1
				}
				for _, d := range decisions[from : end+1] {
					k := (d.at - w0) / periodUS
					if d.allowed {
						c[k]++
					} else {
						er[k] = (d.at - w0 - k*periodUS) / 1000
					}
				}
				allows := func(prev, e int64) int64 { return (q*pm - prev*(pm-e)) / pm } // Aₖ(e) ≥ 0
				hi = q + q*(t2-w1)/periodUS
				lo = hi - k2*((q+pm-1)/pm)
				var unused []int64
				for k := range k2 {
					prev := int64(0)
					if k > 0 {
						prev = c[k-1]
					}
					loss := allows(prev, pm-1) - c[k]
					if er[k] >= 0 {
						loss = allows(prev, pm-1) - allows(prev, er[k])
					}
					unused = append(unused, loss)
					lo -= loss
				}
				require.GreaterOrEqual(t, n, lo, "admissions per window %v, last refusals at ms %v, quota left unused at most %v", c, er, unused)
				require.LessOrEqual(t, n, hi)
				want = hi
			}
			t.Logf("%s: %d decisions (%d admitted) from 5×%d goroutines, longest pause between decisions %v; from decision %d to the last refusal, %.6f s of Redis TIME: admitted %d, expected %d (range [%d, %d])",
				tc.name, len(decisions), total, perInst, time.Duration(maxGap)*time.Microsecond, from, float64(t2-t1)/1e6, n, want, lo, hi)
		})
	}
}
