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

// After a Take that only a shadow limit refused, the retake (at HEAD)
// charges the enforced limits alone: a second shadow limit that had room
// keeps its first Decision (Allowed) but was never charged for the
// request, and everything that gives back an Allowed decision's units
// (Reservation.Cancel, settlement, the WithMaxWait refund) takes away
// units that other requests spent. The tests assert only that giving back
// restores the state from before the request, so they hold whether the
// fix charges such shadow limits in the retake or stops refunding them.
func TestReviewShadowRetakeCancelRefundsUnchargedShadow(t *testing.T) {
	enforced := ratelimit.PerMinute(100).Named("enforced")
	tight := ratelimit.PerMinute(1).Named("tight").Shadow()
	roomy := ratelimit.PerMinute(10).Named("roomy").Shadow()
	lim, store, _ := newLimiter(t, ratelimit.WithLimits(enforced, tight, roomy))
	ctx := t.Context()

	// One Take charges all three: roomy has 9 left.
	res, err := lim.Take(ctx, "k")
	require.NoError(t, err)
	require.True(t, res.Allowed)
	require.Equal(t, []int64{99, 0, 9}, peek(t, store.Store, "k", enforced, tight, roomy))

	// tight (shadow) refuses: a retake charges the reservation.
	r, err := lim.Reserve(ctx, "k")
	require.NoError(t, err)
	require.True(t, r.OK())
	require.True(t, r.Result().ShadowLimited())

	// Cancel gives back what this reservation charged, and only that:
	// every limit is as before Reserve.
	require.NoError(t, r.Cancel(ctx))
	assert.Equal(t, []int64{99, 0, 9}, peek(t, store.Store, "k", enforced, tight, roomy),
		"roomy must keep the unit the first Take charged it")
}

// The same for the middleware's settlement of a shadow cost limit that
// had room in the first Take.
func TestReviewShadowRetakeSettlesUnchargedShadow(t *testing.T) {
	requests := ratelimit.PerMinute(100).Named("requests")
	tight := ratelimit.PerMinute(1).Named("tight").Shadow()
	tokens := ratelimit.PerMinute(1000).Named("tokens").CostFrom(estimateTokens).Shadow()
	lim, store, _ := newLimiter(t, ratelimit.WithLimits(requests, tight, tokens))
	h := lim.Handler(reporting(t, 0, func(http.ResponseWriter, *http.Request) {}))

	// 100 tokens, reported as 100 (no settlement): tokens has 900 left.
	require.Equal(t, http.StatusOK, serve(lim.Handler(okHandler), request("POST", "/", "k", 100)).Code)
	require.Equal(t, []int64{99, 0, 900}, peek(t, store.Store, "k", requests, tight, tokens))

	// tight refuses now, so a retake charges the request. The handler
	// reports 0 tokens: whatever the retake charged to tokens is given
	// back, and no more.
	require.Equal(t, http.StatusOK, serve(h, request("POST", "/", "k", 100)).Code)
	assert.Equal(t, []int64{98, 0, 900}, peek(t, store.Store, "k", requests, tight, tokens),
		"the settlement must give back no more than the request was charged")
}

// The same for the WithMaxWait refund, which gives back every Allowed
// decision's units.
func TestReviewShadowRetakeMaxWaitRefundsUnchargedShadow(t *testing.T) {
	queue := ratelimit.PerSecond(10).WithAlgorithm(ratelimit.LeakyBucket).Named("queue")
	tight := ratelimit.PerMinute(1).Named("tight").Shadow()
	roomy := ratelimit.PerMinute(10).Named("roomy").Shadow()
	lim, store, _ := newLimiter(t, ratelimit.WithLimits(queue, tight, roomy),
		ratelimit.WithMaxWait(250*time.Millisecond))
	var rec waitRecorder
	ratelimit.SetSleep(lim, rec.sleep)
	h := lim.Handler(okHandler)

	// Request 1 charges all three; requests 2 and 3 are refused by tight
	// only, so the retake charges the queue (slots 100 and 200ms away);
	// request 4's slot is 300ms away: refused and refunded.
	for i := range 3 {
		require.Equal(t, http.StatusOK, serve(h, request("GET", "/", "k", -1)).Code, "request %d", i+1)
	}
	before := peek(t, store.Store, "k", queue, roomy)
	require.Equal(t, http.StatusTooManyRequests, serve(h, request("GET", "/", "k", -1)).Code, "request 4")
	assert.Equal(t, before, peek(t, store.Store, "k", queue, roomy),
		"a refused request leaves every limit as it was: the refund must not give roomy a unit request 4 never charged")
}

// Limit.Shadow documents that the Limiter "charges it when it admits", so
// that its state is what it would be if enforced on the admitted traffic.
// A shadow limit with room is not charged when another shadow limit
// refuses (the retake charges the enforced limits alone).
func TestReviewShadowRetakeChargesAdmittingShadow(t *testing.T) {
	enforced := ratelimit.PerMinute(100).Named("enforced")
	tight := ratelimit.PerMinute(1).Named("tight").Shadow()
	roomy := ratelimit.PerMinute(10).Named("roomy").Shadow()
	lim, store, _ := newLimiter(t, ratelimit.WithLimits(enforced, tight, roomy))
	for range 3 {
		res, err := lim.Take(t.Context(), "k")
		require.NoError(t, err)
		require.True(t, res.Allowed)
	}
	// Three admitted requests; tight admitted the first only.
	assert.Equal(t, []int64{97, 0, 7}, peek(t, store.Store, "k", enforced, tight, roomy),
		"roomy admitted all three requests, so it is charged for all three")
}

// interloperStore runs before its nth Take a Take by another caller.
type interloperStore struct {
	ratelimit.Store
	n     int
	takes int
	other []ratelimit.Request
}

func (s *interloperStore) Take(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	if s.takes++; s.takes == s.n {
		if err := s.Store.Take(ctx, s.other, make([]ratelimit.Decision, len(s.other))); err != nil {
			return err
		}
	}
	return s.Store.Take(ctx, reqs, out)
}

// When another request spends a shadow limit between the first Take and
// the retake, the retake refuses on that shadow limit alone and charges
// nothing: the Limiter takes once more without it. The request is
// admitted, charged once to the enforced limit, and not to the shadow
// limit that refused it.
func TestReviewShadowRetakeRacesAnotherRequest(t *testing.T) {
	enforced := ratelimit.PerMinute(100).Named("enforced")
	tight := ratelimit.PerMinute(1).Named("tight").Shadow()
	roomy := ratelimit.PerMinute(10).Named("roomy").Shadow()
	clock := newClock()
	store := &interloperStore{Store: newStore(t, clock.Now), n: 3,
		other: []ratelimit.Request{{Key: "k", Limit: &roomy, Cost: 9}}}
	var calls int
	lim, err := ratelimit.New(store, ratelimit.WithLimits(enforced, tight, roomy),
		ratelimit.WithHooks(ratelimit.Hooks{OnStoreCall: func(context.Context, ratelimit.StoreCall) { calls++ }}))
	require.NoError(t, err)

	res, err := lim.Take(t.Context(), "k") // Take 1: all three charged
	require.NoError(t, err)
	require.True(t, res.Allowed)
	// Take 2: tight refuses. Take 3 (the retake): another caller has spent
	// roomy's 9 units first, so roomy refuses. Take 4: enforced alone.
	res, err = lim.Take(t.Context(), "k")
	require.NoError(t, err)
	assert.True(t, res.Allowed)
	assert.True(t, res.ShadowLimited())
	assert.Equal(t, 4, store.takes)
	assert.Equal(t, 4, calls, "OnStoreCall once per store call")
	assert.Equal(t, []int64{98, 0, 0}, peek(t, store.Store, "k", enforced, tight, roomy))
	assert.False(t, res.Decisions[1].Allowed)
	assert.False(t, res.Decisions[2].Allowed, "roomy refused the request in the retake")
}
