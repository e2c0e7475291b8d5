package redisstore_test

import (
	"context"
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
	redisstore "github.com/rampmeter/ratelimit/store/redis"
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
//     milliseconds), windows aligned to the epoch, and w₁ the start of the
//     first window after t₁'s: the first (partial) window admits Q at
//     once; in each later window, by elapsed whole milliseconds e, the
//     counter admits cur(e) = Q − ⌈prev·(Pm−e)/Pm⌉ (from prev·(Pm−e) +
//     cur·Pm ≤ Q·Pm), so with demand in every millisecond N(t) tracks
//     Q + Q·(t − w₁)/P from below, losing ⌈Q/Pm⌉ units at each window
//     boundary (the last millisecond of a window weighs prev by 1/Pm) and
//     less than one unit to rounding. The upper bound holds whatever the
//     demand (each window's count is at most Q and weighs on the next);
//     the lower one needs demand until each window's end, so a window that
//     saw no request in its last g µs (a stalled machine) lowers it by
//     ⌈Q·g/P⌉. The test asserts
//     Q + ⌊Q·(t₂ − w₁)/P⌋ − b·⌈Q/Pm⌉ − 2 − Σ⌈Q·g/P⌉ ≤ N ≤ Q + ⌊Q·(t₂ − w₁)/P⌋,
//     with b the number of window boundaries in (w₁, t₂]. Compared with the
//     token-bucket formula from t₁, the counter admits Q·(w₁ − t₁)/P fewer:
//     the first window's quota is spent at once rather than accrued.
func TestExactUnderDistribution(t *testing.T) {
	if testing.Short() {
		t.Skip("hammers Redis for a few seconds")
	}
	addr := redistest.Addr(t)
	const (
		instances = 5
		perInst   = 64
		runFor    = 1200 * time.Millisecond
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
				stores[i], err = resilient.New(primary, resilient.WithClock(now), resilient.WithTimeout(5*time.Second),
					resilient.WithFallback(local, resilient.EvenShare(instances)))
				require.NoError(t, err)
				lims[i], err = ratelimit.New(stores[i], ratelimit.WithLimits(tc.limit), ratelimit.WithStoreTimeout(5*time.Second))
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
						}
						mu.Lock()
						decisions = append(decisions, mine...)
						mu.Unlock()
					})
				}
			}
			ready.Wait()
			time.AfterFunc(runFor, cancel)
			close(start)
			wg.Wait()
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
			periodUS := l.Period().Microseconds()
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
				w1 := t1 - t1%periodUS + periodUS
				require.Greater(t, t2, w1, "the run must reach the second window")
				boundaries := (t2 - w1) / periodUS
				hi = q + q*(t2-w1)/periodUS
				lo = hi - boundaries*((q+pm-1)/pm) - 2
				// A window that saw no request in its last g µs (the
				// machine stalled) leaves up to ⌈Q·g/P⌉ of its quota unused.
				for w := w1; w <= t2; w += periodUS {
					i, _ := slices.BinarySearchFunc(decisions, w, func(d decision, w int64) int { return int(d.at - w) })
					if i > 0 {
						lo -= (q*(w-decisions[i-1].at) + periodUS - 1) / periodUS
					}
				}
				require.GreaterOrEqual(t, n, lo)
				require.LessOrEqual(t, n, hi)
				want = hi
			}
			t.Logf("%s: %d decisions (%d admitted) from 5×%d goroutines, longest pause between decisions %v; from decision %d to the last refusal, %.6f s of Redis TIME: admitted %d, expected %d (range [%d, %d])",
				tc.name, len(decisions), total, perInst, time.Duration(maxGap)*time.Microsecond, from, float64(t2-t1)/1e6, n, want, lo, hi)
		})
	}
}
