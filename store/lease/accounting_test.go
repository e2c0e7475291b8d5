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

// TestAccountingExact drives 3 instances with random stacks of two limits
// on a few keys, random costs and times, with expiry passes, and then
// closes them: every unit the backing store still has charged was admitted
// by some instance or drained from its bucket while held in a lease
// (Stats.Drained), exactly (nothing is lost without a failure, nothing
// admitted without a charge): over all pairs, and for each (key, limit)
// pair at least what it admitted. A sliding window's leftovers go back
// whole, dated: for it every pair's charge is exactly its admissions.
func TestAccountingExact(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			f := newFleet(t, 3, lease.WithHotThreshold(2), lease.WithMaxShare(0.3), lease.WithLifetime(100*time.Millisecond))
			rng := rand.New(rand.NewPCG(seed, 7))
			rps := ptr(ratelimit.Every(200, time.Second).WithBurst(40).Named("rps"))
			tokens := ptr(ratelimit.PerSecond(2000).WithAlgorithm(ratelimit.SlidingWindow).Named("tokens"))
			admitted := map[string]int64{}
			ctx := context.Background()
			now := time.Duration(0)
			out := make([]ratelimit.Decision, 2)
			for range 3000 {
				now += time.Duration(rng.Int64N(3000)) * time.Microsecond
				f.at(now)
				key := fmt.Sprint("k", rng.IntN(3))
				reqs := []ratelimit.Request{{Key: key, Limit: rps, Cost: 1}, {Key: key, Limit: tokens, Cost: rng.Int64N(30)}}
				if rng.IntN(4) == 0 {
					reqs = reqs[1:]
				}
				require.NoError(t, f.stores[rng.IntN(3)].Take(ctx, reqs, out[:len(reqs)]))
				ok := true
				for i := range reqs {
					ok = ok && out[i].Allowed
				}
				if ok {
					for _, r := range reqs {
						admitted[pairOf(r)] += r.Cost
					}
				}
				if rng.IntN(50) == 0 {
					require.NoError(t, f.stores[rng.IntN(3)].Expire(ctx))
				}
			}
			var drained int64
			for _, s := range f.stores {
				require.NoError(t, s.Close())
				st := s.Stats()
				require.Zero(t, st.Lost+st.Dropped)
				drained += int64(st.Drained)
			}
			var admittedRPS int64
			for _, key := range []string{"k0", "k1", "k2"} {
				admittedRPS += admitted[key+"|"+rps.ID()]
				require.LessOrEqual(t, admitted[key+"|"+rps.ID()], f.backing.chargedTo(key, rps), key)
				require.Equal(t, admitted[key+"|"+tokens.ID()], f.backing.chargedTo(key, tokens), key)
			}
			require.Positive(t, drained)
			require.Equal(t, admittedRPS+drained, f.backing.chargedAll(rps))
		})
	}
}
