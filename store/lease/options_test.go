package lease_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/lease"
	"github.com/rampmeter/ratelimit/store/memory"
)

func TestNewRejectsBadOptions(t *testing.T) {
	mem, err := memory.New()
	require.NoError(t, err)
	_, err = lease.New(nil)
	require.ErrorIs(t, err, lease.ErrInvalidOption)
	for name, o := range map[string]lease.Option{
		"nil option":        nil,
		"lifetime 0":        lease.WithLifetime(0),
		"lifetime 999µs":    lease.WithLifetime(999 * time.Microsecond),
		"lifetime 2h":       lease.WithLifetime(2 * time.Hour),
		"share 0":           lease.WithMaxShare(0),
		"share 1.5":         lease.WithMaxShare(1.5),
		"share NaN":         lease.WithMaxShare(math.NaN()),
		"hot 0":             lease.WithHotThreshold(0),
		"max keys 0":        lease.WithMaxKeys(0),
		"call timeout 0":    lease.WithCallTimeout(0),
		"expiry -1s":        lease.WithExpiryInterval(-time.Second),
		"expiry 10µs":       lease.WithExpiryInterval(10 * time.Microsecond),
		"nil clock":         lease.WithClock(nil),
		"share -0.1":        lease.WithMaxShare(-0.1),
		"share +Inf":        lease.WithMaxShare(math.Inf(1)),
		"lifetime negative": lease.WithLifetime(-time.Second),
	} {
		_, err := lease.New(mem, o)
		require.ErrorIs(t, err, lease.ErrInvalidOption, name)
	}
	s, err := lease.New(mem, lease.WithLifetime(time.Millisecond), lease.WithMaxShare(1), lease.WithExpiryInterval(time.Millisecond))
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.Same(t, mem, s.Unwrap())
}

// TestPassesThrough: what the Store does not decorate reaches the backing
// store unchanged, one call per call, however hot: LeakyBucket and
// SlidingLog limits, peeks, costs above the burst, a pair named twice, and
// requests for new pairs beyond WithMaxKeys; malformed calls fail as the
// backing store's do, without reaching it.
func TestPassesThrough(t *testing.T) {
	f := newFleet(t, 1, lease.WithHotThreshold(1), lease.WithMaxKeys(3))
	tb := ptr(ratelimit.PerSecond(100).Named("tb"))
	for _, tc := range []struct {
		name string
		reqs []ratelimit.Request
	}{
		{"leaky bucket", []ratelimit.Request{{Key: "a", Limit: ptr(ratelimit.PerSecond(100).WithAlgorithm(ratelimit.LeakyBucket)), Cost: 1}}},
		{"sliding log", []ratelimit.Request{{Key: "a", Limit: ptr(ratelimit.PerSecond(100).WithAlgorithm(ratelimit.SlidingLog)), Cost: 1}}},
		{"peek", []ratelimit.Request{{Key: "a", Limit: tb, Cost: 0}}},
		{"above the burst", []ratelimit.Request{{Key: "b", Limit: tb, Cost: 101}}},
		{"a pair twice", []ratelimit.Request{{Key: "c", Limit: tb, Cost: 1}, {Key: "c", Limit: tb, Cost: 1}}},
		{"beyond max keys", []ratelimit.Request{{Key: "d", Limit: tb, Cost: 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := f.backing.calls()
			for range 5 {
				f.take(0, tc.reqs...)
			}
			require.Equal(t, calls+5, f.backing.calls())
		})
	}
	st := f.stores[0].Stats()
	require.Equal(t, int64(3), st.Keys, "a's leaky bucket and sliding log and b's tb fill the table; c and d find it full")
	require.Zero(t, st.Local)

	out := make([]ratelimit.Decision, 1)
	calls := f.backing.calls()
	require.ErrorIs(t, f.stores[0].Take(context.Background(), []ratelimit.Request{{Key: "", Limit: tb, Cost: 1}}, out), ratelimit.ErrInvalidRequest)
	require.ErrorIs(t, f.stores[0].Take(context.Background(), []ratelimit.Request{{Key: "a", Limit: tb, Cost: -1}}, out), ratelimit.ErrInvalidRequest)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, f.stores[0].Take(ctx, []ratelimit.Request{{Key: "a", Limit: tb, Cost: 1}}, out), context.Canceled)
	require.Equal(t, calls, f.backing.calls())
}

// TestExpireForgetsIdleKeys: a pair neither leased nor asked for in the
// current lifetime-long interval or the one before is forgotten, so the
// table holds the recently busy pairs only.
func TestExpireForgetsIdleKeys(t *testing.T) {
	f := newFleet(t, 1, lease.WithHotThreshold(1), lease.WithLifetime(100*time.Millisecond))
	l := ptr(ratelimit.PerSecond(100))
	f.take1(0, "a", l, 1) // leases 1 + 1
	f.take1(0, "b", l, 1)
	f.at(150 * time.Millisecond) // interval 1: the leases have ended
	f.take1(0, "b", l, 1)
	f.expire(0)
	require.Equal(t, int64(2), f.stores[0].Stats().Keys, "a was asked in the interval before")
	f.at(250 * time.Millisecond) // interval 2
	f.expire(0)
	st := f.stores[0].Stats()
	require.Equal(t, int64(1), st.Keys, "a is forgotten; b was asked in the interval before")
	require.Equal(t, int64(0), st.Held)
	f.at(300 * time.Millisecond) // interval 3
	f.expire(0)
	require.Equal(t, int64(0), f.stores[0].Stats().Keys)
}
