package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/lease"
)

// TestConcurrencyCapPassesThrough: a concurrency cap is never leased, however
// hot its key: every Take reaches the backing store, which holds every slot
// of two instances (a cap of 3 admits 3 across them, not 3 each), and every
// release reaches it too.
func TestConcurrencyCapPassesThrough(t *testing.T) {
	f := newFleet(t, 2, lease.WithHotThreshold(1))
	l := ptr(ratelimit.Concurrent(3, time.Minute))
	calls := f.backing.calls()
	var held []ratelimit.Decision
	for i := range 5 {
		if d := f.take1(i%2, "k", l, 1); d.Allowed {
			held = append(held, d)
		}
	}
	require.Equal(t, calls+5, f.backing.calls(), "one backing call per Take")
	require.Len(t, held, 3, "the cap across both instances")
	require.Equal(t, int64(0), f.peek("k", l).Remaining)
	out := make([]ratelimit.Decision, 1)
	require.NoError(t, f.stores[1].Adjust(context.Background(), []ratelimit.Request{{Key: "k", Limit: l, Cost: -1, At: held[0].At}}, out))
	require.Equal(t, int64(1), f.peek("k", l).Remaining, "released in the backing store")
	for _, s := range f.stores {
		require.Zero(t, s.Stats().Local, "nothing decided locally")
	}
}
