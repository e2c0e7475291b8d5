package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/lease"
	"github.com/rampmeter/ratelimit/store/memory"
	"github.com/rampmeter/ratelimit/store/resilient"
)

var errDown = errors.New("dial tcp 10.0.0.7:6379: connection refused")

// TestBackingFailure: when the backing store fails, the units already
// leased keep being handed out until their lease ends; a request that
// needs the backing store gets its error, which the Limiter's failure mode
// turns into a 503 (FailClosed) or a bypass (FailOpen); a return that
// fails is not retried and its units are counted lost.
//
// PerMinute(60_000) as a fixed window (a bucket's unused unit would have
// drained in the second it is held, and not be sent: see
// TestBucketReturnLessDrained), hot at once, leases ≤ 30,000: the first
// request of 100 leases 101 more.
func TestBackingFailure(t *testing.T) {
	f := newFleet(t, 1, lease.WithHotThreshold(1), lease.WithMaxShare(0.5))
	l := ratelimit.PerMinute(60_000).WithAlgorithm(ratelimit.FixedWindow).Named("calls")
	// Two Limiters on one store, sharing its state on purpose: one name.
	closed, err := ratelimit.New(f.stores[0], ratelimit.WithName("fleet"), ratelimit.WithLimits(l), ratelimit.WithFailureMode(ratelimit.FailClosed))
	require.NoError(t, err)
	ctx := context.Background()

	res, err := closed.Take(ctx, "k", 100)
	require.NoError(t, err)
	require.True(t, res.Allowed)
	require.Equal(t, int64(101), f.stores[0].Stats().Held)

	f.backing.setFail(errDown)
	f.at(500 * time.Millisecond)
	res, err = closed.Take(ctx, "k", 100) // from the lease: 1 left
	require.NoError(t, err)
	require.True(t, res.Allowed)
	res, err = closed.Take(ctx, "k", 100) // needs the backing store
	require.ErrorIs(t, err, errDown)
	require.ErrorIs(t, err, ratelimit.ErrStoreFailed)
	require.False(t, res.Allowed)
	require.Equal(t, time.Second, res.RetryAfter)
	require.Equal(t, int64(1), f.stores[0].Stats().Held, "a failed refill keeps the lease's unit")

	open, err := ratelimit.New(f.stores[0], ratelimit.WithName("fleet"), ratelimit.WithLimits(l)) // FailOpen
	require.NoError(t, err)
	res, err = open.Take(ctx, "k", 100)
	require.ErrorIs(t, err, errDown)
	require.True(t, res.Allowed && res.Bypassed)

	// At t0+1s the lease has ended: its last unit cannot be given back.
	f.at(time.Second)
	require.ErrorIs(t, f.stores[0].Expire(ctx), errDown)
	st := f.stores[0].Stats()
	require.Equal(t, uint64(1), st.Lost)
	require.Equal(t, int64(0), st.Held)
	res, err = closed.Take(ctx, "k", 1) // no lease left: the failure mode
	require.ErrorIs(t, err, errDown)
	require.False(t, res.Allowed)

	// When the backing store is back, so is leasing.
	f.backing.setFail(nil)
	res, err = closed.Take(ctx, "k", 1)
	require.NoError(t, err)
	require.True(t, res.Allowed)
}

// TestUnderResilient: lease.Store composes with store/resilient both ways.
// Behind the guard (lease over resilient, the recommended order, so that
// local decisions are not sent through the guard's goroutine), a dead
// primary fails the refills fast once the circuit opens, and with a
// fallback the refills are decided by it, bounded by its share of each
// limit. In front of it, the guard sees only successful local calls.
func TestUnderResilient(t *testing.T) {
	ctx := context.Background()
	l := ptr(ratelimit.PerSecond(100).Named("calls"))

	t.Run("lease over resilient, no fallback", func(t *testing.T) {
		f := newFleet(t, 0)
		f.backing.setFail(errDown)
		guard, err := resilient.New(f.backing, resilient.WithTimeout(time.Minute), resilient.WithFailureThreshold(2))
		require.NoError(t, err)
		s, err := lease.New(guard, lease.WithClock(f.clock.Now), lease.WithExpiryInterval(0), lease.WithHotThreshold(1))
		require.NoError(t, err)
		defer s.Close()
		out := make([]ratelimit.Decision, 1)
		for range 2 {
			require.ErrorIs(t, s.Take(ctx, []ratelimit.Request{{Key: "k", Limit: l, Cost: 1}}, out), errDown)
		}
		err = s.Take(ctx, []ratelimit.Request{{Key: "k", Limit: l, Cost: 1}}, out)
		require.ErrorIs(t, err, resilient.ErrCircuitOpen)
		require.Equal(t, 2, f.backing.calls(), "the open circuit keeps refills off the dead store")
	})

	t.Run("lease over resilient with a fallback", func(t *testing.T) {
		f := newFleet(t, 0)
		f.backing.setFail(errDown)
		local, err := memory.New(memory.WithClock(f.clock.Now))
		require.NoError(t, err)
		guard, err := resilient.New(f.backing, resilient.WithTimeout(time.Minute), resilient.WithFailureThreshold(1),
			resilient.WithFallback(local, resilient.EvenShare(5)))
		require.NoError(t, err)
		s, err := lease.New(guard, lease.WithClock(f.clock.Now), lease.WithExpiryInterval(0), lease.WithHotThreshold(1))
		require.NoError(t, err)
		defer s.Close()
		// The fallback holds this instance to 100/5 = 20 per second
		// (burst 20); leases taken from it stay within that: 20 of 50
		// requests admitted at one instant.
		admitted := 0
		out := make([]ratelimit.Decision, 1)
		for range 50 {
			require.NoError(t, s.Take(ctx, []ratelimit.Request{{Key: "k", Limit: l, Cost: 1}}, out))
			if out[0].Allowed {
				admitted++
			}
		}
		require.Equal(t, 20, admitted)
	})

	t.Run("resilient over lease", func(t *testing.T) {
		f := newFleet(t, 1, lease.WithHotThreshold(1))
		guard, err := resilient.New(f.stores[0], resilient.WithTimeout(time.Minute))
		require.NoError(t, err)
		out := make([]ratelimit.Decision, 1)
		for range 20 {
			require.NoError(t, guard.Take(ctx, []ratelimit.Request{{Key: "k", Limit: l, Cost: 1}}, out))
			require.True(t, out[0].Allowed)
		}
		require.Less(t, f.backing.calls(), 20)
		require.Equal(t, resilient.Stats{PrimaryCalls: 20}, guard.Stats())
	})
}

// TestClose: Close gives back every lease, live or not, and afterwards
// calls pass straight through; a refill in flight while Close runs gives
// its lease back when it arrives.
func TestClose(t *testing.T) {
	f := newFleet(t, 1, lease.WithHotThreshold(1), lease.WithMaxShare(0.5))
	s := f.stores[0]
	l := ptr(ratelimit.Every(1000, time.Second))
	f.take1(0, "a", l, 100) // leases 101
	var closeErr error
	f.backing.setBefore(func(reqs []ratelimit.Request) {
		if reqs[0].Key == "b" {
			closeErr = s.Close() // while b's refill is in flight
		}
	})
	got := f.take1(0, "b", l, 100)
	require.NoError(t, closeErr)
	require.True(t, got.Allowed)
	st := s.Stats()
	require.Equal(t, int64(0), st.Held)
	require.Equal(t, uint64(202), st.Returned)
	require.Equal(t, int64(100), f.backing.chargedTo("a", l))
	require.Equal(t, int64(100), f.backing.chargedTo("b", l))
	f.backing.setBefore(nil)
	calls := f.backing.calls()
	f.take1(0, "a", l, 1)
	require.Equal(t, calls+1, f.backing.calls(), "after Close, calls pass through")
	require.NoError(t, s.Close())
	require.Equal(t, uint64(2), s.Stats().Returns) // a's on Close, b's when it arrived
}
