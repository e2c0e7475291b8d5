package ratelimit_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
)

// TestSettleOneLimitThroughAdjustOne: a settlement that adjusts one limit
// goes through the store's SingleAdjuster, with the request Adjust would
// get (the difference, at the admission's At), and leaves exactly the
// state of the slice Adjust; one that adjusts two goes through Adjust,
// in one call; a store that is no SingleAdjuster settles one limit
// through Adjust as before.
func TestSettleOneLimitThroughAdjustOne(t *testing.T) {
	lim, store, clock := newLimiter(t, aiLimits())
	// 1000 tokens reserved, 700 reported: a refund of 300 to tokens only
	// (requests keeps its 1).
	var at int64
	h := lim.Handler(reporting(t, 700, func(_ http.ResponseWriter, r *http.Request) {
		res, ok := ratelimit.Reserved(r.Context(), "tokens")
		require.True(t, ok)
		require.Equal(t, int64(1000), res)
	}))
	require.Equal(t, http.StatusOK, serve(h, request("POST", "/", "k", 1000)).Code)
	adj := store.Adjusts()
	require.Len(t, adj, 1)
	require.Equal(t, 1, store.adjustOnes, "one limit settled through AdjustOne")
	r := adj[0].Reqs[0]
	assert.Equal(t, "tokens", r.Limit.Name())
	assert.Equal(t, int64(-300), r.Cost)
	at = clock.Now().UnixMicro()
	assert.Equal(t, at, r.At, "At: the admission's decision time")
	assert.NoError(t, adj[0].CtxErr)
	assert.Equal(t, ratelimit.Stats{Allowed: 1, Settled: 1}, lim.Stats())
	// The state: 100,000 − 700 tokens, 60 − 1 requests (a peek: cost 0).
	res, err := lim.Take(context.Background(), "k", 0, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(59), res.Decisions[0].Remaining)
	assert.Equal(t, int64(99_300), res.Decisions[1].Remaining)

	// Both limits settled (two limits with cost functions, both
	// reported): one Adjust of two requests, no AdjustOne.
	lim2, store2, clock2 := newLimiter(t, ratelimit.WithLimits(
		ratelimit.PerDay(100_000).Named("tokens").CostFrom(estimateTokens),
		ratelimit.PerDay(5_000).Named("cents").CostFrom(estimateTokens)))
	h2 := lim2.Handler(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		require.NoError(t, ratelimit.ReportUsage(r.Context(), "tokens", 40))
		require.NoError(t, ratelimit.ReportUsage(r.Context(), "cents", 130))
	}))
	require.Equal(t, http.StatusOK, serve(h2, request("POST", "/", "k", 100)).Code)
	adj = store2.Adjusts()
	require.Len(t, adj, 1)
	assert.Equal(t, 0, store2.adjustOnes, "two limits settled through Adjust")
	require.Len(t, adj[0].Reqs, 2)
	at2 := clock2.Now().UnixMicro()
	assert.Equal(t, "tokens", adj[0].Reqs[0].Limit.Name())
	assert.Equal(t, int64(-60), adj[0].Reqs[0].Cost)
	assert.Equal(t, at2, adj[0].Reqs[0].At)
	assert.Equal(t, "cents", adj[0].Reqs[1].Limit.Name())
	assert.Equal(t, int64(30), adj[0].Reqs[1].Cost)
	assert.Equal(t, at2, adj[0].Reqs[1].At)
	res, err = lim2.Take(context.Background(), "k", 0, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(99_960), res.Decisions[0].Remaining)
	assert.Equal(t, int64(4_870), res.Decisions[1].Remaining)

	// A store that is no SingleAdjuster (the Store interface alone).
	clock3 := newClock()
	plain := &recordingStore{Store: struct{ ratelimit.Store }{newStore(t, clock3.Now)}}
	lim3, err := ratelimit.New(struct{ ratelimit.Store }{plain}, aiLimits(), ratelimit.WithKey(ratelimit.KeyByAPIKey()), ratelimit.WithStoreTimeout(time.Minute))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, serve(lim3.Handler(reporting(t, 1200, nil)), request("POST", "/", "k", 1000)).Code)
	adj = plain.Adjusts()
	require.Len(t, adj, 1)
	assert.Equal(t, 0, plain.adjustOnes)
	assert.Equal(t, []ratelimit.Request{{Key: adj[0].Reqs[0].Key, Limit: adj[0].Reqs[0].Limit, Cost: 200, At: clock3.Now().UnixMicro()}}, adj[0].Reqs)
	res, err = lim3.Take(context.Background(), "k", 0, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(98_800), res.Decisions[1].Remaining)
	assert.Equal(t, ratelimit.Stats{Allowed: 2, Settled: 1}, lim3.Stats(), "the request and the peek")
}

// adjustOneFailingStore decides Take normally, has a SingleAdjuster whose
// every call fails, and fails Adjust too.
type adjustOneFailingStore struct{ ratelimit.Store }

func (adjustOneFailingStore) Adjust(context.Context, []ratelimit.Request, []ratelimit.Decision) error {
	return errStoreDown
}

func (adjustOneFailingStore) AdjustOne(context.Context, ratelimit.Request) (bool, int64, time.Duration, time.Duration, time.Duration, int64, error) {
	return true, 5, 1, 2, 3, 4, errStoreDown // values that must not count
}

// TestSettleOneLimitAdjustOneError: a failed AdjustOne is a failed
// settlement, as a failed Adjust is: counted in StoreErrors, reported to
// OnStoreError and OnStoreCall (one request, OpAdjust), not Settled.
func TestSettleOneLimitAdjustOneError(t *testing.T) {
	var storeErrs []error
	var calls []ratelimit.StoreCall
	clock := newClock()
	store := adjustOneFailingStore{Store: newStore(t, clock.Now)}
	lim, err := ratelimit.New(store, aiLimits(), ratelimit.WithHooks(ratelimit.Hooks{
		OnStoreError: func(_ context.Context, err error) { storeErrs = append(storeErrs, err) },
		OnStoreCall:  func(_ context.Context, c ratelimit.StoreCall) { calls = append(calls, c) },
	}))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, serve(lim.Handler(reporting(t, 10, nil)), request("POST", "/", "k", 1000)).Code)
	require.Len(t, storeErrs, 1)
	assert.ErrorIs(t, storeErrs[0], errStoreDown)
	assert.ErrorIs(t, storeErrs[0], ratelimit.ErrStoreFailed)
	require.Len(t, calls, 2)
	assert.Equal(t, ratelimit.OpTake, calls[0].Op)
	assert.Equal(t, ratelimit.OpAdjust, calls[1].Op)
	assert.Equal(t, 1, calls[1].Requests)
	assert.ErrorIs(t, calls[1].Err, errStoreDown)
	assert.Equal(t, ratelimit.Stats{Allowed: 1, StoreErrors: 1}, lim.Stats())
}
