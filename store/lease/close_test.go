package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/lease"
)

// TestCloseDuringRefusedRefill: Close runs while a refill that reserved
// units from a live lease is in flight, and the refill is then refused
// (another instance spent the rest) or fails (its context is cancelled).
// The reserved units were out of the lease when Close swept it; the refill
// puts them back after Close has run. They must then go back to the
// backing store, as everything held does on Close: after Close, what the
// backing store keeps charged is exactly what was admitted.
//
// Every(1000, time.Second), hot at once, leases ≤ 500: the first request
// of 100 leases 101 more (its demand, 100 units, + 1). The second, of 150,
// reserves those 101 and needs 49 from the backing store.
func TestCloseDuringRefusedRefill(t *testing.T) {
	for _, how := range []string{"refused", "cancelled"} {
		t.Run(how, func(t *testing.T) {
			f := newFleet(t, 1, lease.WithHotThreshold(1), lease.WithMaxShare(0.5))
			s := f.stores[0]
			l := ptr(ratelimit.Every(1000, time.Second))
			require.True(t, f.take1(0, "a", l, 100).Allowed)
			require.Equal(t, int64(101), s.Stats().Held)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			f.backing.setBefore(func(reqs []ratelimit.Request) {
				f.backing.setBefore(nil)
				require.NoError(t, s.Close())
				switch how {
				case "refused": // another instance spends the 799 left
					// (on the memory store itself: not counted as this
					// instance's charge)
					spent := f.peek("a", l).Remaining
					out := make([]ratelimit.Decision, 1)
					require.NoError(t, f.mem.Take(context.Background(), []ratelimit.Request{{Key: "a", Limit: l, Cost: spent}}, out))
					require.True(t, out[0].Allowed)
				case "cancelled":
					cancel()
				}
			})
			out := make([]ratelimit.Decision, 1)
			err := s.Take(ctx, []ratelimit.Request{{Key: "a", Limit: l, Cost: 150}}, out)
			if how == "refused" {
				require.NoError(t, err)
				require.False(t, out[0].Allowed)
			} else {
				require.ErrorIs(t, err, context.Canceled)
			}
			require.Equal(t, int64(0), s.Stats().Held, "nothing held after Close")
			require.Equal(t, int64(100), f.backing.chargedTo("a", l), "charged = admitted after Close")
		})
	}
}
