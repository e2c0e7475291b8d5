package ratelimit_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
)

// After a Take that only a shadow limit refused, the retake charges the
// enforced limits alone: a second shadow limit that had room keeps its
// first Decision (Allowed) but was never charged for the request.
// Reservation.Cancel must not refund it: the refund takes away units that
// other requests spent.
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

	// tight (shadow) refuses: the retake charges enforced only.
	r, err := lim.Reserve(ctx, "k")
	require.NoError(t, err)
	require.True(t, r.OK())
	require.True(t, r.Result().ShadowLimited())
	require.Equal(t, []int64{98, 0, 9}, peek(t, store.Store, "k", enforced, tight, roomy),
		"roomy was not charged by the retake")

	// Cancel gives back what this reservation charged: enforced's unit.
	require.NoError(t, r.Cancel(ctx))
	assert.Equal(t, []int64{99, 0, 9}, peek(t, store.Store, "k", enforced, tight, roomy),
		"roomy must keep the unit the first Take charged it")
}

// The same for the middleware's settlement: a shadow cost limit that had
// room in the first Take but was not charged by the retake must not be
// settled (its estimate was never charged, so refunding the difference
// takes units other requests spent).
func TestReviewShadowRetakeSettlesUnchargedShadow(t *testing.T) {
	requests := ratelimit.PerMinute(100).Named("requests")
	tight := ratelimit.PerMinute(1).Named("tight").Shadow()
	tokens := ratelimit.PerMinute(1000).Named("tokens").CostFrom(estimateTokens).Shadow()
	lim, store, _ := newLimiter(t, ratelimit.WithLimits(requests, tight, tokens))
	h := lim.Handler(reporting(t, 0, func(http.ResponseWriter, *http.Request) {}))

	// 100 tokens, reported as 100 (no settlement): tokens has 900 left.
	require.Equal(t, http.StatusOK, serve(lim.Handler(okHandler), request("POST", "/", "k", 100)).Code)
	require.Equal(t, []int64{99, 0, 900}, peek(t, store.Store, "k", requests, tight, tokens))

	// tight refuses now: the retake charges requests alone. The handler
	// reports 0 tokens: nothing was charged to tokens, so nothing is due.
	require.Equal(t, http.StatusOK, serve(h, request("POST", "/", "k", 100)).Code)
	assert.Equal(t, []int64{98, 0, 900}, peek(t, store.Store, "k", requests, tight, tokens),
		"tokens was never charged for the second request: a settlement must not refund it")
}

// The same for the WithMaxWait refund: it gives back every Allowed
// decision's units, including those of a shadow limit the retake never
// charged.
func TestReviewShadowRetakeMaxWaitRefundsUnchargedShadow(t *testing.T) {
	queue := ratelimit.PerSecond(10).WithAlgorithm(ratelimit.LeakyBucket).Named("queue")
	tight := ratelimit.PerMinute(1).Named("tight").Shadow()
	roomy := ratelimit.PerMinute(10).Named("roomy").Shadow()
	lim, store, _ := newLimiter(t, ratelimit.WithLimits(queue, tight, roomy),
		ratelimit.WithMaxWait(250*time.Millisecond))
	var rec waitRecorder
	ratelimit.SetSleep(lim, rec.sleep)
	h := lim.Handler(okHandler)

	// Request 1 charges all three (roomy 9 left); requests 2 and 3 are
	// refused by tight only, so the retake charges the queue alone (slots
	// 100 and 200ms away); request 4's slot is 300ms away: refused and
	// refunded.
	for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusOK, http.StatusTooManyRequests} {
		require.Equal(t, want, serve(h, request("GET", "/", "k", -1)).Code, "request %d", i+1)
	}
	assert.Equal(t, int64(9), peek(t, store.Store, "k", roomy)[0],
		"roomy was charged once, by request 1; the refund of request 4 must not take that unit back")
}
