package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/lease"
)

// TestZeroCostDebtSeenWithinLifetime: a stack that charges its second
// limit 0 at admission and the real usage later (the "reserve 0, settle
// later" pattern of Request.Cost: a cost of 0 is refused while the limit
// is in debt). Another instance's settlement puts that limit in debt; this
// instance, whose lease of the first limit keeps the stack local, must see
// the debt within one lifetime of the answer it last described the limit
// with, and then refuse the stack as the backing store does.
//
// requests: PerSecond(100), burst 100; tokens: PerMinute(1000), burst 1000;
// L = 1 s, hot at once. t0 is a whole second, so a demand of 1 at t0 is 1
// per lifetime.
func TestZeroCostDebtSeenWithinLifetime(t *testing.T) {
	requests := ptr(ratelimit.PerSecond(100).Named("requests"))
	tokens := ptr(ratelimit.PerMinute(1000).Named("tokens"))
	for _, via := range []bool{false, true} {
		f := newFleet(t, 2, lease.WithHotThreshold(1), lease.WithLifetime(time.Second))
		if via {
			f.viaLimiter()
		}
		stack := func() []ratelimit.Decision {
			return f.take(0, ratelimit.Request{Key: "k", Limit: requests, Cost: 1}, ratelimit.Request{Key: "k", Limit: tokens, Cost: 0})
		}
		// t0: one backing Take, [requests 1 + a lease of 2 (the demand,
		// 1, plus one), tokens 0]; admitted. The lease of requests lasts
		// until t0 + 1 s; tokens is described by that answer (Remaining
		// 1000), whose call was sent at t0.
		f.at(0)
		out := stack()
		require.True(t, out[0].Allowed && out[1].Allowed, "via %v", via)
		require.Equal(t, 1, f.backing.takes)
		// t0: instance 1 settles 3000 tokens: 2000 in debt (Adjust
		// leaves no unit). Instance 0 is not told.
		adj := make([]ratelimit.Decision, 1)
		require.NoError(t, f.stores[1].Adjust(context.Background(), []ratelimit.Request{{Key: "k", Limit: tokens, Cost: 3000}}, adj))
		require.Zero(t, adj[0].Remaining)

		// t0 + 1 s − 1 µs: the lease covers requests and tokens' answer
		// is less than a lifetime old: decided from them, no backing
		// call (the staleness the package documents: the memory store
		// would refuse).
		f.at(time.Second - time.Microsecond)
		out = stack()
		require.True(t, out[0].Allowed, "via %v", via)
		f.check(ratelimit.Decision{Limit: tokens, Allowed: true, Remaining: 1000}, out[1], "via %v", via)
		require.Equal(t, 1, f.backing.takes)

		// t0 + 1 s: tokens' answer is a lifetime old (and the lease has
		// ended): one backing Take, [requests 1 + a lease, tokens 0],
		// refused: tokens' level is 3000 − 1000/60 = 2983⅓, its
		// capacity 1000: 1983⅓ × 60 ms = 119 s to pay the debt off
		// (RetryAfter, capped at L for a hot limit: 1 s), 2983⅓ × 60 ms
		// = 179 s to full (Reset).
		f.at(time.Second)
		out = stack()
		require.False(t, out[0].Allowed && out[1].Allowed, "via %v", via)
		f.check(ratelimit.Decision{Limit: tokens, Allowed: false, Remaining: 0, Reset: 179 * time.Second, RetryAfter: time.Second}, out[1], "via %v", via)
		require.Equal(t, 2, f.backing.takes)

		// t0 + 1.5 s: the refusal of cost 0 is remembered for its
		// RetryAfter: refused locally, 500 ms left, no backing call.
		f.at(1500 * time.Millisecond)
		out = stack()
		require.False(t, out[0].Allowed && out[1].Allowed, "via %v", via)
		f.check(ratelimit.Decision{Limit: tokens, Allowed: false, Remaining: 0, Reset: 179*time.Second - 500*time.Millisecond, RetryAfter: 500 * time.Millisecond}, out[1], "via %v", via)
		require.Equal(t, 2, f.backing.takes)

		// t0 + 2 s: the remembered refusal has ended, and the latest
		// answer refused tokens: the backing store is asked again, and
		// refuses (1 s of refill later: 118 s of debt left).
		f.at(2 * time.Second)
		out = stack()
		require.False(t, out[0].Allowed && out[1].Allowed, "via %v", via)
		f.check(ratelimit.Decision{Limit: tokens, Allowed: false, Remaining: 0, Reset: 178 * time.Second, RetryAfter: time.Second}, out[1], "via %v", via)
		require.Equal(t, 3, f.backing.takes)
		require.Zero(t, f.backing.chargedTo("k", tokens)-3000, "nothing charged to tokens but the settlement")
	}
}

// TestZeroCostDebtSeenAfterOwnAdjust: a settlement through this instance
// that leaves the limit no unit (it may be in debt) makes the next stack
// with that limit at cost 0 ask the backing store at once; one that leaves
// units does not cost a backing call.
func TestZeroCostDebtSeenAfterOwnAdjust(t *testing.T) {
	requests := ptr(ratelimit.PerSecond(100).Named("requests"))
	tokens := ptr(ratelimit.PerMinute(1000).Named("tokens"))
	for _, via := range []bool{false, true} {
		f := newFleet(t, 1, lease.WithHotThreshold(1), lease.WithLifetime(time.Second))
		if via {
			f.viaLimiter()
		}
		stack := func() []ratelimit.Decision {
			return f.take(0, ratelimit.Request{Key: "k", Limit: requests, Cost: 1}, ratelimit.Request{Key: "k", Limit: tokens, Cost: 0})
		}
		adjust := func(cost int64) ratelimit.Decision {
			adj := make([]ratelimit.Decision, 1)
			require.NoError(t, f.stores[0].Adjust(context.Background(), []ratelimit.Request{{Key: "k", Limit: tokens, Cost: cost}}, adj))
			return adj[0]
		}
		f.at(0)
		out := stack() // one backing Take: a lease of 2 units of requests
		require.True(t, out[0].Allowed && out[1].Allowed, "via %v", via)
		require.Equal(t, 1, f.backing.takes)

		// t0: 10 tokens settled, 990 left: the next stack stays local
		// (described from t0's answer: Remaining 1000).
		require.Equal(t, int64(990), adjust(10).Remaining)
		f.at(time.Millisecond)
		out = stack()
		require.True(t, out[0].Allowed, "via %v", via)
		f.check(ratelimit.Decision{Limit: tokens, Allowed: true, Remaining: 1000}, out[1], "via %v", via)
		require.Equal(t, 1, f.backing.takes)

		// t0 + 1 ms: 3000 more settled (level 3010 less 1 ms of refill at
		// 1000/min), no unit left. t0 + 2 ms: the next stack asks the
		// backing store (its answer about tokens is older than the
		// settlement), which refuses it: the level is 3010 − 2/60 =
		// 3009.96⅔, (3009.96⅔ − 1000) × 60 ms = 120.598 s of debt,
		// capped at L; 3009.96⅔ × 60 ms = 180.598 s to full.
		require.Zero(t, adjust(3000).Remaining)
		f.at(2 * time.Millisecond)
		out = stack()
		require.False(t, out[0].Allowed && out[1].Allowed, "via %v", via)
		f.check(ratelimit.Decision{Limit: tokens, Allowed: false, Remaining: 0, Reset: 180598 * time.Millisecond, RetryAfter: time.Second}, out[1], "via %v", via)
		require.Equal(t, 2, f.backing.takes)

		// t0 + 3 ms: the lease of requests still holds a unit (the
		// refused stack put back the one it reserved), and the answer
		// about tokens is fresh, but it refused tokens: not admitted
		// from the lease; refused locally by the remembered refusal,
		// 999 ms left.
		f.at(3 * time.Millisecond)
		out = stack()
		require.False(t, out[0].Allowed && out[1].Allowed, "via %v", via)
		f.check(ratelimit.Decision{Limit: tokens, Allowed: false, Remaining: 0, Reset: 180597 * time.Millisecond, RetryAfter: 999 * time.Millisecond}, out[1], "via %v", via)
		require.Equal(t, 2, f.backing.takes)
		require.Equal(t, int64(1), f.stores[0].Stats().Held)
	}
}
