package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/lease"
)

// TestReview3ZeroCostLimitInDebtIsEnforced: a stack whose second limit
// is charged 0 at admission and its real usage afterwards (Limiter.Adjust,
// as a settlement does: the "pay after" pattern Request.Cost documents —
// a cost of 0 is refused while the limit is in debt). Once that limit is
// in debt, the backing store refuses the stack until the debt is waited
// out. Over the lease store the stack must be refused too.
//
// It is not: serveLocal describes a cost-0 limit from the entry's view
// whenever the view was ever set (c == 0 && e.view.recv == 0 is its only
// test), and the slow path does not ask the backing store about it
// either (a limit of need 0 is sent only when never described), so
// while the first limit's lease is refilled, the second limit's view is
// never refreshed: its debt is never seen, by TryTakeTwo as by Take
// (pre-existing in store/lease; LocalTaker only inherits it).
//
// requests: PerSecond(100); tokens: PerMinute(1000). Hot at once.
func TestReview3ZeroCostLimitInDebtIsEnforced(t *testing.T) {
	requests := ratelimit.PerSecond(100).Named("requests")
	tokens := ratelimit.PerMinute(1000).Named("tokens")
	for _, mode := range []int{0, 1} {
		f := newFleet(t, 1, lease.WithHotThreshold(1))
		over := func(s ratelimit.Store) *ratelimit.Limiter {
			lim, err := ratelimit.New(s, ratelimit.WithLimits(requests, tokens), ratelimit.WithStoreTimeout(time.Minute))
			require.NoError(t, err)
			return lim
		}
		leased, plain := over(wrapMode(f.stores[0], mode)), over(f.mem)
		ctx := context.Background()
		admitted := map[string]int{}
		var last ratelimit.Result
		for _, key := range []string{"plain", "leased"} {
			lim := map[string]*ratelimit.Limiter{"leased": leased, "plain": plain}[key]
			f.at(0)
			// t0: admitted; the real usage, 3000 tokens, settled: 2000
			// in debt (2 minutes to wait out).
			res, err := lim.Take(ctx, key, 1, 0)
			require.NoError(t, err)
			require.True(t, res.Allowed, key)
			_, err = lim.Adjust(ctx, key, "tokens", 3000)
			require.NoError(t, err)
			// t0 + 500 ms (the lease of requests is live: TryTakeTwo
			// decides) and t0 + 1 s (it has ended: Take refills it):
			// still about 1,990 tokens in debt (1000/min refill).
			for i := range 20 {
				f.at(time.Duration(1+i/10) * 500 * time.Millisecond)
				res, err = lim.Take(ctx, key, 1, 0)
				require.NoError(t, err)
				if res.Allowed {
					admitted[key]++
					last = res
				}
			}
		}
		require.Zero(t, admitted["plain"], "the memory store refuses while tokens is in debt")
		assert.Equal(t, admitted["plain"], admitted["leased"], "mode %d: requests admitted over the lease store while tokens is 2000 in debt; the last: %+v (lease %+v)",
			mode, last.Decisions, f.stores[0].Stats())
	}
}
