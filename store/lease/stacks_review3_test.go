package lease_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/lease"
)

// TestReview3TryTakeStacksMatchTake: the store-level lockstep of
// TestTryTakeMatchesTake, for what it does not draw: stacks of 1 to 9
// requests on different caller keys (TryTake's slice path; TryTakeTwo with
// keyA ≠ keyB), members of cost 0, a pair named twice anywhere in the
// stack, Adjusts (charges and refunds) between the Takes, expiry passes,
// a table that fills, and a Close. Mode 0 calls Take alone; mode 1
// TryTake, then Take; mode 2 TryTakeOne / TryTakeTwo for one and two
// requests, TryTake for more, then TakeOne / TakeTwo / Take. Every
// decision, error, Stats and charge must be the same.
func TestReview3TryTakeStacksMatchTake(t *testing.T) {
	limits := []*ratelimit.Limit{
		ptr(ratelimit.Every(200, time.Second).WithBurst(40).Named("bucket")),
		ptr(ratelimit.PerSecond(400).WithAlgorithm(ratelimit.GCRA).WithBurst(30).Named("gcra")),
		ptr(ratelimit.PerSecond(300).WithAlgorithm(ratelimit.FixedWindow).Named("fixed")),
		ptr(ratelimit.PerSecond(2000).WithAlgorithm(ratelimit.SlidingWindow).Named("sliding")),
		ptr(ratelimit.PerSecond(100).WithAlgorithm(ratelimit.LeakyBucket).Named("leaky")),
		ptr(ratelimit.PerSecond(3000).WithAlgorithm(ratelimit.FixedWindow).AlignToFirstHit().Named("firsthit")),
	}
	for seed := range uint64(10) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			opts := []lease.Option{lease.WithHotThreshold(2), lease.WithMaxShare(0.3), lease.WithLifetime(50 * time.Millisecond), lease.WithMaxKeys(16)}
			fleets := []*fleet{newFleet(t, 2, opts...), newFleet(t, 2, opts...), newFleet(t, 2, opts...)}
			rng := rand.New(rand.NewPCG(seed, 21))
			now := time.Duration(0)
			var decided [3]int
			bigDecided := 0
			for step := range 4000 {
				now += time.Duration(rng.Int64N(2500)) * time.Microsecond
				n := 1 + rng.IntN(3)
				if rng.IntN(8) == 0 {
					n = 3 + rng.IntN(7)
				}
				var reqs []ratelimit.Request
				for range n {
					l := limits[rng.IntN(len(limits)-1)]
					if rng.IntN(30) == 0 {
						l = limits[4] // leaky: passes through
					}
					if rng.IntN(6) == 0 {
						l = limits[5]
					}
					cost := rng.Int64N(8)
					switch rng.IntN(20) {
					case 0:
						cost = 0
					case 1:
						cost = l.Burst() + 1
					}
					reqs = append(reqs, ratelimit.Request{Key: fmt.Sprint("k", rng.IntN(3)), Limit: l, Cost: cost})
				}
				adjust := rng.IntN(25) == 0
				adj := ratelimit.Request{Key: fmt.Sprint("k", rng.IntN(3)), Limit: limits[rng.IntN(4)], Cost: rng.Int64N(9) - 4}
				i := rng.IntN(2)
				expire, closeAt := rng.IntN(30) == 0, step == 3500
				var outs [3][]ratelimit.Decision
				var errs [3]error
				for m, f := range fleets {
					f.at(now)
					var ok bool
					if m == 1 || m == 2 && n > 2 {
						out := make([]ratelimit.Decision, n)
						if ok = f.stores[i].TryTake(reqs, out); !ok {
							errs[m] = f.stores[i].Take(context.Background(), reqs, out)
						}
						outs[m] = out
					} else {
						outs[m], ok, errs[m] = f.tryTake(m, i, reqs...)
					}
					if ok {
						decided[m]++
						if m == 1 && n >= 3 {
							bigDecided++
						}
					}
					if adjust {
						out := make([]ratelimit.Decision, 1)
						require.NoError(t, f.stores[i].Adjust(context.Background(), []ratelimit.Request{adj}, out))
					}
					if expire {
						require.NoError(t, f.stores[i].Expire(context.Background()))
					}
					if closeAt {
						require.NoError(t, f.stores[0].Close())
					}
				}
				for m := 1; m < 3; m++ {
					require.Equal(t, errs[0], errs[m], "step %d mode %d", step, m)
					require.Equal(t, outs[0], outs[m], "step %d mode %d: %v", step, m, reqs)
					require.Equal(t, fleets[0].snapshot(), fleets[m].snapshot(), "step %d mode %d", step, m)
				}
			}
			for _, f := range fleets {
				for _, s := range f.stores {
					require.NoError(t, s.Close())
				}
			}
			require.Equal(t, fleets[0].snapshot(), fleets[1].snapshot())
			require.Equal(t, fleets[0].snapshot(), fleets[2].snapshot())
			t.Logf("decided %v of 4000, %d of them stacks of 3 or more", decided, bigDecided)
			require.Greater(t, decided[1], 80)
			require.Greater(t, decided[2], 80)
			require.Greater(t, bigDecided, 3)
		})
	}
}
