package lease_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/lease"
)

// TestHotKeyLeases follows one key from cold to hot on one instance, with
// the defaults (hot at 10 requests per lifetime, leases of at most a tenth
// of the burst) and a lifetime of 100 ms, the clock frozen at t0.
//
// PerSecond(100): burst 100, one unit refills every 10 ms.
//
// It runs on the store and through a Limiter ("limiter", fleet.viaLimiter),
// which asks TryTakeOne first: requests 1 to 10 and 21, which it cannot
// decide, must then reach the backing store through TakeOne exactly once
// each (the backing calls and units charged below), and their demand must
// be counted once (request 10, not 5, makes the key hot).
func TestHotKeyLeases(t *testing.T) {
	for _, via := range []string{"store", "limiter"} {
		t.Run(via, func(t *testing.T) {
			f := newFleet(t, 1, lease.WithLifetime(100*time.Millisecond))
			if via == "limiter" {
				f.viaLimiter()
			}
			l := ptr(ratelimit.PerSecond(100))
			// Requests 1 to 9: cold, one backing call each, the backing store's
			// own decisions (Remaining 99..91; Reset is 10 ms per unit used).
			for i := int64(1); i <= 9; i++ {
				f.check(decision(l, true, 100-i, ms(10*i), 0), f.take1(0, "k", l, 1), "request %d", i)
			}
			require.Equal(t, 9, f.backing.calls())
			// Request 10 makes the key hot (10 requests within the lifetime): one
			// Take of 1 + 10 units, the lease being the demand of the last
			// lifetime (10 units) + 1 capped by the share (0.1 × 100 = 10). The
			// backing store has 91 − 11 = 80 left; with the 10 leased here the
			// decision says 90, what one shared bucket would say after 10
			// requests, and Reset 200 ms less the 100 ms the 10 leased units
			// take to refill: also one shared bucket's.
			f.check(decision(l, true, 90, ms(100), 0), f.take1(0, "k", l, 1), "request 10")
			require.Equal(t, 10, f.backing.calls())
			require.Equal(t, int64(20), f.backing.chargedTo("k", l))
			// Requests 11 to 20 come from the lease: no backing call; Remaining
			// counts down 89..80 and Reset up 110..200 ms, exactly.
			for i := int64(11); i <= 20; i++ {
				f.check(decision(l, true, 100-i, ms(10*i), 0), f.take1(0, "k", l, 1), "request %d", i)
			}
			require.Equal(t, 10, f.backing.calls())
			// Request 21 finds the lease empty: one Take of 1 + 10 (demand 21
			// units, capped at 10): backing 80 − 11 = 69, decision 69 + 10 = 79.
			f.check(decision(l, true, 79, ms(210), 0), f.take1(0, "k", l, 1), "request 21")
			require.Equal(t, 11, f.backing.calls())
			require.Equal(t, int64(31), f.backing.chargedTo("k", l))
			st := f.stores[0].Stats()
			require.Equal(t, lease.Stats{Local: 10, Passed: 9, Refills: 2, BackingTakes: 2, Leased: 20, Held: 10, Keys: 1}, st)

			// At t0+100ms the lease (sent at t0) has ended with 10 units. In the
			// 100 ms they were held the backing bucket refilled 10 units (10 ms
			// per unit): had nothing else been charged, the 10 drained out of it,
			// and giving them back would credit capacity one shared bucket never
			// had (see TestBucketBoundWithIdleLeases). So none is sent: Drained
			// 10. The backing store: 31 charged − 10 refilled = 21 in use,
			// Remaining 79 (one shared bucket would say 89 if this instance were
			// alone; it cannot know that).
			f.at(ms(100))
			f.expire(0)
			got := f.peek("k", l)
			require.Equal(t, int64(79), got.Remaining)
			require.Equal(t, ms(210), got.Reset)
			require.Equal(t, int64(31), f.backing.chargedTo("k", l))
			st = f.stores[0].Stats()
			require.Equal(t, uint64(0), st.Returns)
			require.Equal(t, uint64(0), st.Returned)
			require.Equal(t, uint64(10), st.Drained)
			require.Equal(t, int64(0), st.Held)
		})
	}
}

// TestBucketReturnLessDrained: a bucket lease's unused units go back less
// those the backing bucket refilled while they were held, Rate × the time
// since the lease's Take was sent (rounded up to whole units); a window's
// go back whole (its refund is dated, and exact).
//
// PerSecond(100): 10 ms per unit; hot at once, leases ≤ 50 units.
func TestBucketReturnLessDrained(t *testing.T) {
	f := newFleet(t, 1, lease.WithHotThreshold(1), lease.WithMaxShare(0.5))
	l := ptr(ratelimit.PerSecond(100))
	w := ptr(ratelimit.PerSecond(100).WithAlgorithm(ratelimit.SlidingWindow).Named("w"))
	// At t0 a request of 40 leases 41 more (its demand + 1), of each.
	require.True(t, f.take1(0, "b", l, 40).Allowed)
	require.True(t, f.take1(0, "w", w, 40).Allowed)
	require.Equal(t, int64(82), f.stores[0].Stats().Held)
	// At t0+95ms Close gives them back: 95 ms is 9.5 units' refill, so
	// 10 of the bucket's 41 count as drained and 31 go back; the sliding
	// window's 41 go back whole, dated t0.
	f.at(ms(95))
	require.NoError(t, f.stores[0].Close())
	st := f.stores[0].Stats()
	require.Equal(t, uint64(10), st.Drained)
	require.Equal(t, uint64(31+41), st.Returned)
	require.Equal(t, int64(40+10), f.backing.chargedTo("b", l))
	require.Equal(t, int64(40), f.backing.chargedTo("w", w))
	require.Equal(t, st.Leased, st.Returned+st.Drained)
}

// TestStackedAllOrNothing: a stack of two hot limits on one key (hot from
// the first request, WithHotThreshold(1)) is decided locally while both
// leases cover it, refills only the limit that ran short, and when the
// backing store refuses, charges nothing anywhere: the units reserved from
// the other lease go back into it.
//
// rpm: PerSecond(100), burst 100, 10 ms per unit, leases ≤ 10 units.
// tokens: PerSecond(1000), burst 1000, 1 ms per token, leases ≤ 100.
//
// It runs on the store and through a Limiter (as TestHotKeyLeases), which
// asks TryTakeTwo first: the local admissions and remembered refusals are
// decided there, every other request by one Take, with the same
// decisions and backing calls.
func TestStackedAllOrNothing(t *testing.T) {
	for _, via := range []string{"store", "limiter"} {
		t.Run(via, func(t *testing.T) {
			f := newFleet(t, 1, lease.WithHotThreshold(1))
			if via == "limiter" {
				f.viaLimiter()
			}
			rpm := ptr(ratelimit.PerSecond(100).Named("requests"))
			tokens := ptr(ratelimit.PerSecond(1000).Named("tokens"))
			stack := func(n int64) []ratelimit.Request {
				return []ratelimit.Request{{Key: "k", Limit: rpm, Cost: 1}, {Key: "k", Limit: tokens, Cost: n}}
			}
			// Request 1 (1, 10): one Take of rpm 1 + 2 (demand 1 unit, + 1) and
			// tokens 10 + 11 (demand 10, + 1). Backing: 97 and 979 left. The
			// decisions add the leases back: what one shared bucket would say.
			got := f.take(0, stack(10)...)
			f.check(decision(rpm, true, 99, ms(10), 0), got[0])
			f.check(decision(tokens, true, 990, ms(10), 0), got[1])
			require.Equal(t, 1, f.backing.calls())
			// Request 2 (1, 10): both leases cover it (2 ≥ 1, 11 ≥ 10): local.
			got = f.take(0, stack(10)...)
			f.check(decision(rpm, true, 98, ms(20), 0), got[0])
			f.check(decision(tokens, true, 980, ms(20), 0), got[1])
			require.Equal(t, 1, f.backing.calls())
			// Request 3 (1, 10): rpm's lease covers it (1 left), tokens' does not
			// (1 left): the 1 token is reserved and 9 + 31 (demand 30, + 1) are
			// taken, tokens alone. Backing tokens: 979 − 40 = 939, + 31 leased.
			got = f.take(0, stack(10)...)
			f.check(decision(rpm, true, 97, ms(30), 0), got[0])
			f.check(decision(tokens, true, 970, ms(30), 0), got[1])
			require.Equal(t, 2, f.backing.calls())

			// Another process spends all 939 tokens left in the backing store.
			drain := make([]ratelimit.Decision, 1)
			require.NoError(t, f.backing.Take(t.Context(), []ratelimit.Request{{Key: "k", Limit: tokens, Cost: 939}}, drain))
			require.True(t, drain[0].Allowed)
			calls := f.backing.calls() // 3, with this one

			// Request 4 (1, 40): rpm's lease is empty (need 1, lease 4 + 1 = 5),
			// tokens' has 31 (reserved; need 9, lease 70 + 1 = 71). One Take of
			// (6, 80), refused: 0 tokens left. rpm had room for its 1 (97 left);
			// tokens' 9 do not fit, so the request is refused, one call. Nothing
			// is charged: the 31 tokens are back in the lease, and the decisions
			// are the backing store's uncharged state plus the leases: rpm 97,
			// tokens 0 + 31 (Reset 1000 − 31 ms). RetryAfter: the 9 ms until the
			// 9 tokens the request needs from the backing store (not the 80
			// asked) have refilled, raised to a tenth of the lifetime, 100 ms: a
			// hot limit's refusal is remembered that long at least, so that a
			// saturated limit is asked again by each instance ten times per
			// lifetime rather than at every request.
			got = f.take(0, stack(40)...)
			f.check(decision(rpm, true, 97, ms(30), 0), got[0])
			f.check(decision(tokens, false, 31, ms(969), ms(100)), got[1])
			require.Equal(t, calls+1, f.backing.calls())
			require.Equal(t, int64(3), f.backing.chargedTo("k", rpm))
			require.Equal(t, int64(21+40+939), f.backing.chargedTo("k", tokens))

			// The refusal is remembered: at t0+1ms the same request is refused
			// locally, RetryAfter 99 ms, and the states age by the 1 ms (Reset
			// 29 ms and 968 ms).
			f.at(ms(1))
			got = f.take(0, stack(40)...)
			f.check(decision(rpm, true, 97, ms(29), 0), got[0])
			f.check(decision(tokens, false, 31, ms(968), ms(99)), got[1])
			require.Equal(t, calls+1, f.backing.calls())
			// A request that fits the tokens' lease (10 ≤ 31) is not blocked: it
			// refills rpm only (need 1; lease 5 + 1 = 6, the demand being 6 units
			// in the 1.001 s since the interval before began, 5.99 per lifetime
			// rounded down; backing 97 − 7 = 90; Reset 99 ms less the 6 units'
			// 60 ms: 4 units used, 1 ms drained).
			got = f.take(0, stack(10)...)
			f.check(decision(rpm, true, 90+6, ms(39), 0), got[0])
			f.check(decision(tokens, true, 21, ms(978), 0), got[1])
			require.Equal(t, calls+2, f.backing.calls())
			// At t0+9ms a request for 40 needs 19 from the backing store (the
			// lease holds 21): at least the 9 refused, so it is refused locally
			// too, RetryAfter 91 ms. (rpm's lease covers it: 6, uncharged.)
			f.at(ms(9))
			got = f.take(0, stack(40)...)
			f.check(decision(rpm, true, 90+6, ms(31), 0), got[0])
			f.check(decision(tokens, false, 0+21, ms(1000-21-9), ms(91)), got[1])
			require.Equal(t, calls+2, f.backing.calls())

			// At t0+100ms the refusal is forgotten, and the backing store has
			// refilled 100 tokens. The request for 40 reserves the lease's 21 and
			// needs 19: the Take of 19 + a lease of 100 (the cap; the demand is
			// 200 tokens in 1.1 s) is refused with Remaining 100, and the second,
			// of 19 + 81, admitted. rpm is served from its lease (6 − 1 = 5 left;
			// the backing store's 90 at t0+1ms; Reset: 39 ms then, drained by
			// now, + 10 ms for the unit just used: one shared bucket's).
			f.at(ms(100))
			got = f.take(0, stack(40)...)
			f.check(decision(rpm, true, 90+5, ms(10), 0), got[0])
			f.check(decision(tokens, true, 81, ms(1000-81), 0), got[1])
			require.Equal(t, calls+4, f.backing.calls())
			require.Equal(t, int64(3+7), f.backing.chargedTo("k", rpm))
			require.Equal(t, int64(21+40+939+100), f.backing.chargedTo("k", tokens))
		})
	}
}

// TestPartialGrant: when the backing store cannot grant a whole lease, its
// refusal says how many units are left (Remaining, exact for a bucket),
// and the second Take asks for the request plus what is left; when another
// instance takes those units in between, the third asks for the request
// alone; when even the request no longer fits, it is refused.
//
// Every(1000, time.Second): 1 ms per unit. Hot at once, leases ≤ 500.
func TestPartialGrant(t *testing.T) {
	f := newFleet(t, 1, lease.WithHotThreshold(1), lease.WithMaxShare(0.5))
	l := ptr(ratelimit.Every(1000, time.Second))
	var takes []int64 // the costs of the Takes reaching the backing store
	var race int64    // units another instance takes before the second Take
	f.backing.setBefore(func(reqs []ratelimit.Request) {
		takes = append(takes, reqs[0].Cost)
		if len(takes) == 2 && race > 0 {
			out := make([]ratelimit.Decision, 1)
			require.NoError(t, f.mem.Take(t.Context(), []ratelimit.Request{{Key: reqs[0].Key, Limit: l, Cost: race}}, out))
		}
	})
	for _, tc := range []struct {
		name  string
		race  int64
		takes []int64
		want  ratelimit.Decision
	}{
		// 150 left: Take(100 + 101) is refused with Remaining 150, so
		// Take(100 + 50) follows and is admitted: a lease of 50.
		{"partial", 0, []int64{201, 150}, decision(l, true, 0+50, ms(1000-50), 0)},
		// Another instance takes 30 first: Take(150) is refused with
		// Remaining 120; Take(100) is admitted, no lease.
		{"race", 30, []int64{201, 150, 100}, decision(l, true, 20, ms(1000)-ms(20), 0)},
		// It takes 100: 50 left, the request does not fit: refused after
		// two calls. RetryAfter is the 50 ms until 100 units fit (not
		// the 100 ms until the 150 asked for would), raised to a tenth of
		// the lifetime, 100 ms, as for any refusal of a hot limit.
		{"refused", 100, []int64{201, 150}, decision(l, false, 50, ms(1000)-ms(50), ms(100))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "k-" + tc.name
			out := make([]ratelimit.Decision, 1)
			require.NoError(t, f.mem.Take(t.Context(), []ratelimit.Request{{Key: key, Limit: l, Cost: 850}}, out))
			takes, race = nil, tc.race
			f.check(tc.want, f.take1(0, key, l, 100))
			require.Equal(t, tc.takes, takes)
		})
	}
}

// TestWindowLeaseEndsWithItsWindow: a window algorithm's lease ends when
// the window it was charged in ends, whatever its lifetime, so no unit is
// handed out in a later window than the one that counted it. Its unused
// units go back dated at the charge: a sliding window credits them to the
// previous window, which still weighs; a fixed window would drop the
// refund of a window that has passed, so none is sent.
//
// PerMinute(600): 600 units per minute-long window; hot at once, leases
// ≤ 60 units, lifetime 1 s.
func TestWindowLeaseEndsWithItsWindow(t *testing.T) {
	for _, a := range []ratelimit.Algorithm{ratelimit.FixedWindow, ratelimit.SlidingWindow} {
		t.Run(a.String(), func(t *testing.T) {
			f := newFleet(t, 1, lease.WithHotThreshold(1))
			l := ptr(ratelimit.PerMinute(600).WithAlgorithm(a))
			// At 59.5 s a request of 3 takes 3 + 3 (its demand: 3 units in
			// the 1.5 s since 58 s, 2 per lifetime, + 1), charged to the
			// window [0, 60 s); the lease ends with the window, at 60 s,
			// after half its lifetime.
			f.at(59500 * time.Millisecond)
			got := f.take1(0, "k", l, 3)
			require.True(t, got.Allowed)
			require.Equal(t, int64(600-6+3), got.Remaining)
			// At 59.999 s it still serves, locally.
			f.at(59999 * time.Millisecond)
			got = f.take1(0, "k", l, 1)
			require.Equal(t, int64(600-6+2), got.Remaining)
			require.Equal(t, 1, f.backing.calls())
			// At 60 s it has ended with 2 units, and the request takes a
			// new lease in the new window: 1 + 6 (4 units asked in the
			// interval before, 1 in this one, at its start: 5 per
			// lifetime, + 1; the clocks' offset is known by now, and the
			// whole window is ahead).
			f.at(60 * time.Second)
			got = f.take1(0, "k", l, 1)
			require.True(t, got.Allowed)
			st := f.stores[0].Stats()
			switch a {
			case ratelimit.FixedWindow:
				// The 2 units are dropped: no call. The new window
				// counts the new lease only: 600 − 7, and the decision
				// adds the 6 leased.
				require.Equal(t, 2, f.backing.calls())
				require.Equal(t, uint64(2), st.Dropped)
				require.Equal(t, int64(6+7), f.backing.chargedTo("k", l))
				require.Equal(t, int64(600-7), f.peek("k", l).Remaining)
				require.Equal(t, int64(600-7+6), got.Remaining)
			case ratelimit.SlidingWindow:
				// The 2 units go back, dated 59.5 s, before the refill:
				// the previous window counts 6 − 2, weighing fully at
				// its end: 600 − 4 − 7.
				require.Equal(t, 3, f.backing.calls())
				require.Equal(t, uint64(2), st.Returned)
				require.Equal(t, int64(6-2+7), f.backing.chargedTo("k", l))
				require.Equal(t, int64(600-4-7), f.peek("k", l).Remaining)
				require.Equal(t, int64(600-4-7+6), got.Remaining)
			}
		})
	}
}

// TestWindowLeaseSizedToTheWindowLeft: a lease charged 100 ms before its
// window ends lasts 100 ms, and is sized for them: a tenth of a lifetime's
// demand.
func TestWindowLeaseSizedToTheWindowLeft(t *testing.T) {
	f := newFleet(t, 1, lease.WithHotThreshold(1), lease.WithMaxShare(1))
	l := ptr(ratelimit.PerMinute(6000).WithAlgorithm(ratelimit.FixedWindow))
	var costs []int64
	f.backing.setBefore(func(reqs []ratelimit.Request) { costs = append(costs, reqs[0].Cost) })
	// At 58.95 s the first request knows nothing of the clocks' offset and
	// leases for a whole lifetime: 1 + 1 (demand: 1 unit in the 1.95 s
	// since 57 s, 0 per lifetime rounded down, + 1). The lease ends at
	// 59.95 s.
	f.at(58950 * time.Millisecond)
	f.take1(0, "k", l, 1)
	// At 59.9 s a request of 50 reserves the lease's 1 and needs 49. The
	// demand is 51 units in the 1.9 s since 58 s: 26 per lifetime,
	// rounded down; the window ends in 100 ms, so the lease is 26 ×
	// 100 ms / 1 s + 1 = 3. Take(49 + 3).
	f.at(59900 * time.Millisecond)
	f.take1(0, "k", l, 50)
	require.Equal(t, []int64{2, 52}, costs)
	// It serves until the window ends, at 60 s...
	f.at(59999 * time.Millisecond)
	got := f.take1(0, "k", l, 1)
	require.Equal(t, int64(6000-2-52+2), got.Remaining)
	require.Equal(t, int64(2), f.stores[0].Stats().Held)
	// ... and not at 60 s: Expire drops its 2 (the backing store would
	// drop their refund, that window having passed).
	f.at(60 * time.Second)
	f.expire(0)
	st := f.stores[0].Stats()
	require.Equal(t, int64(0), st.Held)
	require.Equal(t, uint64(2), st.Dropped)
	require.Equal(t, []int64{2, 52}, costs, "no call")
	require.Equal(t, int64(6000), f.peek("k", l).Remaining)
}

// TestResetAgesLocalUse: a local decision's Reset is one shared bucket's
// on one instance, also when time passes between the uses: the units
// handed out from a lease refill from when they were handed out, as they
// would in the bucket.
//
// PerSecond(100): 10 ms per unit; hot at once, leases ≤ 50.
func TestResetAgesLocalUse(t *testing.T) {
	f := newFleet(t, 1, lease.WithHotThreshold(1), lease.WithMaxShare(0.5))
	l := ptr(ratelimit.PerSecond(100))
	// At t0 a request of 10 leases 11: one shared bucket has 10 units in
	// use, full again in 100 ms.
	f.check(decision(l, true, 90, ms(100), 0), f.take1(0, "k", l, 10))
	// At t0+50ms, 5 from the lease: the bucket had 5 units left in use
	// (50 ms), now 10: 100 ms.
	f.at(ms(50))
	f.check(decision(l, true, 85, ms(100), 0), f.take1(0, "k", l, 5))
	// At t0+900ms, 1 more: the bucket drained those 10 by t0+150ms, so it
	// holds this unit alone: 10 ms. (Remaining does not count the refill
	// since the backing store's answer, as documented: 100 − 16.)
	f.at(ms(900))
	f.check(decision(l, true, 84, ms(10), 0), f.take1(0, "k", l, 1))
	require.Equal(t, 1, f.backing.calls(), "all but the first from the lease")
}
