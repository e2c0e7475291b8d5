package lease_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/lease"
)

// TestReview3SettleAfterLocalTake: requests admitted by the middleware
// over a lease store, the second and later ones served from the leases
// (TryTakeTwo), settle their reported usage with one Adjust that goes
// straight to the backing store. Nothing is counted twice: after Close
// (the clock frozen, so nothing drained) the backing store holds charged
// exactly the usage reported, and 1 per request, whatever the estimate;
// with the LocalTaker hidden, the same.
//
// requests: PerSecond(100); tokens: Every(1000, time.Second), burst 1000,
// estimate 10 per request. Hot at once, leases ≤ 10 % of the burst.
func TestReview3SettleAfterLocalTake(t *testing.T) {
	for _, c := range []struct {
		usage      int64 // reported per request; -1: none (the estimate stays charged)
		status     int
		wantTokens int64 // charged per request after settlement
	}{
		{3, 200, 3},
		{25, 200, 25},
		{0, 200, 0},
		{-1, 200, 10},
		{-1, 500, 0}, // a failed call releases the cost-function limit's reservation
		{7, 429, 7},
	} {
		for mode := 0; mode < 2; mode++ {
			t.Run(fmt.Sprint(c.usage, " ", c.status, " mode ", mode), func(t *testing.T) {
				f := newFleet(t, 1, lease.WithHotThreshold(1))
				requests := ratelimit.PerSecond(100).Named("requests")
				tokens := ratelimit.Every(1000, time.Second).Named("tokens").CostFrom(func(*http.Request) (int64, error) { return 10, nil })
				lim, err := ratelimit.New(wrapMode(f.stores[0], mode), ratelimit.WithLimits(requests, tokens),
					ratelimit.WithKey(func(*http.Request) (string, error) { return "k", nil }), ratelimit.WithStoreTimeout(time.Minute))
				require.NoError(t, err)
				h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if c.usage >= 0 {
						require.NoError(t, ratelimit.ReportUsage(r.Context(), "tokens", c.usage))
					}
					w.WriteHeader(c.status)
				}))
				const n = 6
				for i := range n {
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
					require.Equal(t, c.status, rec.Code, "request %d", i)
				}
				st := f.stores[0].Stats()
				require.Greater(t, st.Local, uint64(0), "some requests were served from the leases")
				require.NoError(t, f.stores[0].Close())
				st = f.stores[0].Stats()
				require.Zero(t, st.Drained)
				require.Zero(t, st.Held)
				rl, tl := &lim.Limits()[0], &lim.Limits()[1]
				require.Equal(t, int64(n), f.backing.chargedTo("k", rl), "requests: 1 each")
				require.Equal(t, n*c.wantTokens, f.backing.chargedTo("k", tl), "tokens: the usage settled, nothing twice")
				require.Equal(t, uint64(n), lim.Stats().Allowed)
				t.Logf("%+v", st)
			})
		}
	}
}

// TestReview3AdjustAfterLocalTake: Limiter.Adjust after Takes served from
// the lease goes to the backing store once; Remaining afterwards is the
// backing store's (Adjust does not see the units held in the lease: they
// are charged there).
func TestReview3AdjustAfterLocalTake(t *testing.T) {
	f := newFleet(t, 1, lease.WithHotThreshold(1))
	lim, err := ratelimit.New(f.stores[0], ratelimit.WithLimits(ratelimit.PerSecond(100).Named("rps")), ratelimit.WithStoreTimeout(time.Minute))
	require.NoError(t, err)
	ctx := context.Background()
	// t0: a Take of 1 leases 2 (97 left in the backing store); a Take of
	// 2 is served from the lease: Remaining 97.
	res, err := lim.Take(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, int64(99), res.Decisions[0].Remaining)
	res, err = lim.Take(ctx, "k", 2)
	require.NoError(t, err)
	require.Equal(t, int64(97), res.Decisions[0].Remaining)
	require.Equal(t, uint64(1), f.stores[0].Stats().Local)
	// Refund 3 (the 3 admitted): the backing store's 97 + 3 = 100.
	res, err = lim.Adjust(ctx, "k", "rps", -3)
	require.NoError(t, err)
	require.Equal(t, int64(100), res.Decisions[0].Remaining)
	require.Equal(t, int64(0), f.backing.chargedTo("k", &lim.Limits()[0]))
	require.Equal(t, uint64(1), f.stores[0].Stats().Adjusts)
}
