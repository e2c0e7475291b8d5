package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/lease"
)

// The tests in this file force, with the backing store's before hook, the
// interleavings of concurrent calls on one instance that the random and
// concurrent tests reach only by chance.

// drainWindow takes units of l one at a time on instance i until one is
// refused, and returns how many it admitted.
func (f *fleet) drainWindow(i int, key string, l *ratelimit.Limit) int64 {
	f.t.Helper()
	var n int64
	for f.take1(i, key, l, 1).Allowed {
		n++
		require.LessOrEqual(f.t, n, 2*l.Quota(), "runaway")
	}
	return n
}

// TestReservedUnitsOfAReplacedLease: units a call reserved from a lease
// that a concurrent refill then replaced go back to the backing store when
// the call is refused, never into the new lease: they were charged in the
// old lease's window, and handed out from the new one they would be
// admitted in a later window than the one that counted them.
//
// x: PerMinute(600) as a fixed window; gate: PerDay(1), spent. Hot at once.
func TestReservedUnitsOfAReplacedLease(t *testing.T) {
	f := newFleet(t, 1, lease.WithHotThreshold(1), lease.WithMaxShare(0.5))
	x := ptr(ratelimit.PerMinute(600).WithAlgorithm(ratelimit.FixedWindow).Named("x"))
	gate := ptr(ratelimit.PerDay(1).Named("gate"))
	out := make([]ratelimit.Decision, 1)
	require.NoError(t, f.backing.Take(context.Background(), []ratelimit.Request{{Key: "k", Limit: gate, Cost: 1}}, out))
	// At 59.5 s a request of 10 leases 7 (its demand: 10 units in the
	// 1.5 s since 58 s, 6 per lifetime, + 1) in the window [0, 60 s); the
	// lease ends with it.
	f.at(59500 * time.Millisecond)
	require.True(t, f.take1(0, "k", x, 10).Allowed)
	require.Equal(t, int64(7), f.stores[0].Stats().Held)
	// At 59.9 s the stack (x 5, gate 1) reserves 5 of x's lease and asks
	// the backing store for the gate. While that call is in flight the
	// clock reaches 60 s and a request of 1 for x alone finds the lease
	// ended (its 2 dropped: the window has passed) and leases anew in the
	// window [60 s, 120 s).
	f.at(59900 * time.Millisecond)
	raced := false
	f.backing.setBefore(func(reqs []ratelimit.Request) {
		if raced || len(reqs) != 1 || reqs[0].Limit != gate {
			return
		}
		raced = true
		f.at(60 * time.Second)
		require.True(t, f.take1(0, "k", x, 1).Allowed)
	})
	got := f.take(0, ratelimit.Request{Key: "k", Limit: x, Cost: 5}, ratelimit.Request{Key: "k", Limit: gate, Cost: 1})
	require.True(t, raced)
	require.True(t, got[0].Allowed)
	require.False(t, got[1].Allowed, "the gate is spent")
	f.backing.setBefore(nil)
	// The 5 reserved units are not in the new lease, which holds only
	// what its Take leased...
	st := f.stores[0].Stats()
	require.Equal(t, uint64(2), st.Dropped)
	require.Equal(t, st.Leased-7, uint64(st.Held))
	// ... so the window [60 s, 120 s) admits its quota exactly: the 1
	// above and 599 more.
	require.Equal(t, int64(599), f.drainWindow(0, "k", x))
}

// TestRestoredUnitsOfAReplacedLease: units a refused call put back into
// its lease while another call was refilling that lease go back to the
// backing store when the refill replaces the lease, not lost with it.
//
// x: Every(1000, time.Second), 1 ms per unit; gate: PerDay(1), spent.
func TestRestoredUnitsOfAReplacedLease(t *testing.T) {
	f := newFleet(t, 1, lease.WithHotThreshold(1), lease.WithMaxShare(0.5))
	x := ptr(ratelimit.Every(1000, time.Second).Named("x"))
	gate := ptr(ratelimit.PerDay(1).Named("gate"))
	out := make([]ratelimit.Decision, 1)
	require.NoError(t, f.backing.Take(context.Background(), []ratelimit.Request{{Key: "k", Limit: gate, Cost: 1}}, out))
	require.True(t, f.take1(0, "k", x, 10).Allowed) // leases 11
	// The stack (x 11, gate 1) reserves the whole lease and asks for the
	// gate. While that call is in flight, a request of 1 for x finds the
	// lease empty and refills it; its call is held until the stack has
	// been refused and has put its 11 back into the old lease.
	inFlight, refused := make(chan struct{}), make(chan struct{})
	done := make(chan ratelimit.Decision)
	f.backing.setBefore(func(reqs []ratelimit.Request) {
		switch {
		case len(reqs) == 1 && reqs[0].Limit == gate:
			go func() { done <- f.take1(0, "k", x, 1) }()
			<-inFlight
		case len(reqs) == 1 && reqs[0].Limit == x:
			close(inFlight)
			<-refused
		}
	})
	got := f.take(0, ratelimit.Request{Key: "k", Limit: x, Cost: 11}, ratelimit.Request{Key: "k", Limit: gate, Cost: 1})
	require.False(t, got[1].Allowed)
	close(refused)
	require.True(t, (<-done).Allowed)
	f.backing.setBefore(nil)
	// The refill replaced the lease: the 11 went back (at the same
	// instant: none drained). After Close the backing store holds
	// charged exactly the 10 + 1 admitted.
	require.NoError(t, f.stores[0].Close())
	st := f.stores[0].Stats()
	require.Zero(t, st.Drained)
	require.Equal(t, int64(11), f.backing.chargedTo("k", x))
}

// TestReservedUnitsOutliveTheirLease: when the lease that a call reserved
// units from ends while its backing call is in flight, the call may not
// hand them out: it gives back what it charged and decides afresh.
//
// x: PerMinute(600) as a fixed window; y: PerSecond(100), cold at first.
func TestReservedUnitsOutliveTheirLease(t *testing.T) {
	f := newFleet(t, 1, lease.WithHotThreshold(1), lease.WithMaxShare(0.5))
	x := ptr(ratelimit.PerMinute(600).WithAlgorithm(ratelimit.FixedWindow).Named("x"))
	y := ptr(ratelimit.PerSecond(100).Named("y"))
	f.at(59500 * time.Millisecond)
	require.True(t, f.take1(0, "k", x, 10).Allowed) // leases 7, until 60 s
	// At 59.9 s the stack (x 5, y 1) reserves 5 of x's lease and asks for
	// y; the backing store answers at 60 s, when x's lease and window have
	// ended.
	f.at(59900 * time.Millisecond)
	var costs [][]int64
	f.backing.setBefore(func(reqs []ratelimit.Request) {
		var c []int64
		for _, r := range reqs {
			c = append(c, r.Cost)
		}
		costs = append(costs, c)
		f.at(60 * time.Second)
	})
	got := f.take(0, ratelimit.Request{Key: "k", Limit: x, Cost: 5}, ratelimit.Request{Key: "k", Limit: y, Cost: 1})
	require.True(t, got[0].Allowed && got[1].Allowed)
	f.backing.setBefore(nil)
	// Two Takes: y's 1 + 1 (hot at once; its demand, 1 unit in the 1.9 s
	// since 58 s, 0 per lifetime, + 1), given back less what may have
	// drained since it was sent, plus the call's round trip: 200 ms at
	// 10 ms per unit, so both; then, at 60 s, x's 5 + 16 (demand 15 units
	// in the interval just ended, + 1) and y's 1 + 2 (demand 1, + 1).
	require.Equal(t, [][]int64{{2}, {21, 3}}, costs)
	require.Equal(t, uint64(2), f.stores[0].Stats().Drained)
	// The window [60 s, 120 s) admits its quota exactly: 5, then 595.
	require.Equal(t, int64(595), f.drainWindow(0, "k", x))
}

// TestRefusalRetryAfterAtMostTheLifetime: a hot limit's refusal says
// RetryAfter at most the lifetime, whatever the backing store's wait (the
// units other instances hold come back by then), and is remembered that
// long: calls in that time are refused locally, with the rest of it.
func TestRefusalRetryAfterAtMostTheLifetime(t *testing.T) {
	f := newFleet(t, 1, lease.WithHotThreshold(1), lease.WithLifetime(2*time.Second))
	x := ptr(ratelimit.PerMinute(600).WithAlgorithm(ratelimit.FixedWindow).Named("x"))
	// Another instance spends the window [0, 60 s) at 1 s: the backing
	// store's RetryAfter is then 59 s.
	f.at(time.Second)
	out := make([]ratelimit.Decision, 1)
	require.NoError(t, f.backing.Take(context.Background(), []ratelimit.Request{{Key: "k", Limit: x, Cost: 600}}, out))
	got := f.take1(0, "k", x, 1)
	require.False(t, got.Allowed)
	require.Equal(t, 2*time.Second, got.RetryAfter)
	calls := f.backing.calls()
	f.at(2500 * time.Millisecond)
	got = f.take1(0, "k", x, 1)
	require.False(t, got.Allowed)
	require.Equal(t, 500*time.Millisecond, got.RetryAfter)
	require.Equal(t, calls, f.backing.calls(), "refused locally")
	// At 3 s the refusal is forgotten: the backing store is asked again.
	f.at(3 * time.Second)
	require.False(t, f.take1(0, "k", x, 1).Allowed)
	require.Equal(t, calls+1, f.backing.calls())
}
