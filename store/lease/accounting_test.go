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
// by some instance, exactly (nothing is lost without a failure, nothing
// admitted without a charge), for each (key, limit) pair.
func TestAccountingExact(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			f := newFleet(t, 3, lease.WithHotThreshold(2), lease.WithMaxShare(0.3), lease.WithLifetime(100*time.Millisecond))
			rng := rand.New(rand.NewPCG(seed, 7))
			rps := ptr(ratelimit.Every(200, time.Second).WithBurst(40).Named("rps"))
			tokens := ptr(ratelimit.Every(2000, time.Second).WithBurst(300).Named("tokens"))
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
			for _, s := range f.stores {
				require.NoError(t, s.Close())
			}
			for _, key := range []string{"k0", "k1", "k2"} {
				for _, l := range []*ratelimit.Limit{rps, tokens} {
					require.Equal(t, admitted[key+"|"+l.ID()], f.backing.chargedTo(key, l), "%s %s", key, l.Name())
				}
			}
		})
	}
}
