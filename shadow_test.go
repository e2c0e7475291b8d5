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

func TestShadowLimitNeverRefuses(t *testing.T) {
	// 60 requests per minute enforced; 100 tokens per minute in shadow
	// mode (one token refills every 600ms).
	requests := ratelimit.PerMinute(60).Named("requests")
	tokens := ratelimit.PerMinute(100).Named("tokens").CostFrom(estimateTokens)
	onEachStore(t, func(t *testing.T, f storeFactory) {
		var shadowed []bool
		hooks := ratelimit.WithHooks(ratelimit.Hooks{OnDecision: func(_ context.Context, res ratelimit.Result) {
			shadowed = append(shadowed, res.Allowed && res.ShadowLimited())
		}})
		// Named, so that the enforced twin below may share its state;
		// HeadersShadow lists the shadow limit in the IETF fields.
		lim, store, _ := newLimiterOn(t, f, ratelimit.WithName("api"), ratelimit.WithLimits(requests, tokens.Shadow()), hooks,
			ratelimit.WithHeaders(ratelimit.HeadersIETF|ratelimit.HeadersXRateLimit|ratelimit.HeadersShadow))
		var reserved []bool
		h := lim.Handler(reporting(t, 30, func(_ http.ResponseWriter, r *http.Request) {
			_, ok := ratelimit.Reserved(r.Context(), "tokens")
			reserved = append(reserved, ok)
		}))

		// 60 tokens: both limits admit and are charged (40 tokens left,
		// the 41st back in one interval, 600ms → t=1); the usage (30)
		// settles both.
		w := serve(h, request("POST", "/", "k", 60))
		require.Equal(t, http.StatusOK, w.Code)
		assert.Equal(t, `"api/requests";r=59;t=1, "api/tokens";r=40;t=1`, w.Header().Get("RateLimit"))
		assert.Equal(t, `"api/requests";q=60;w=60, "api/tokens";q=100;w=60;rampmeter-unit="tokens";rampmeter-shadow`, w.Header().Get("RateLimit-Policy"))
		assert.Equal(t, int64(-30), singleAdjust(t, store).Cost)

		// 80 tokens: only 70 left, so the shadow limit refuses. The
		// request passes anyway; requests is charged (58 left), tokens is
		// not (70 left, as if the limit had refused; its t is the wait for
		// the 10 missing, 6s), and its report is not settled against it.
		// Two Takes: the first charged nothing.
		w = serve(h, request("POST", "/", "k", 80))
		require.Equal(t, http.StatusOK, w.Code)
		assert.Equal(t, `"api/requests";r=58;t=1, "api/tokens";r=70;t=6`, w.Header().Get("RateLimit"))
		assert.Equal(t, "60", w.Header().Get("X-RateLimit-Limit"), "a shadow limit never binds")
		assert.Len(t, store.Adjusts(), 1, "nothing to settle: tokens was not charged")
		assert.Equal(t, 3, store.takes)

		// A cost above the shadow limit's burst can never fit it: still
		// admitted.
		require.Equal(t, http.StatusOK, serve(h, request("POST", "/", "k", 500)).Code)
		assert.Equal(t, []int64{57, 70}, peek(t, store.Store, "k", lim.Limits()...))
		assert.Equal(t, []bool{true, false, false}, reserved)
		assert.Equal(t, []bool{false, true, true}, shadowed)
		assert.Equal(t, ratelimit.Stats{Allowed: 3, ShadowLimited: 2, Settled: 1}, lim.Stats())

		// Flip it to enforced: same ID, same state. 80 tokens now wait
		// for 10 more: 6s.
		enforced, err := ratelimit.New(store, ratelimit.WithName("api"), ratelimit.WithKey(ratelimit.KeyByAPIKey()), ratelimit.WithLimits(requests, tokens))
		require.NoError(t, err)
		w = serve(enforced.Handler(okHandler), request("POST", "/", "k", 80))
		require.Equal(t, http.StatusTooManyRequests, w.Code)
		assert.Equal(t, "6", w.Header().Get("Retry-After"))
		assert.Equal(t, ratelimit.Stats{Limited: 1}, enforced.Stats())
	})
}

func TestShadowLimitWithEnforcedRefusal(t *testing.T) {
	// When an enforced limit refuses too, the request is refused, counted
	// as Limited (not ShadowLimited), and nothing is charged.
	lim, store, _ := newLimiter(t, ratelimit.WithLimits(
		ratelimit.PerMinute(1).Named("requests"),
		ratelimit.PerMinute(100).Named("tokens").CostFrom(estimateTokens).Shadow()))
	h := lim.Handler(okHandler)
	require.Equal(t, http.StatusOK, serve(h, request("POST", "/", "k", 90)).Code)
	w := serve(h, request("POST", "/", "k", 20))
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "60", w.Header().Get("Retry-After"), "the shadow limit does not bind")
	assert.Contains(t, w.Body.String(), `"violated-policies":["requests"]`, "the shadow limit refused too, but is not listed")
	assert.Equal(t, ratelimit.Stats{Allowed: 1, Limited: 1}, lim.Stats())
	assert.Equal(t, 2, store.takes)

	// Only shadow limits: never refused, never a second Take.
	lim, store, _ = newLimiter(t, ratelimit.WithLimits(ratelimit.PerMinute(1).Shadow()))
	for range 3 {
		require.Equal(t, http.StatusOK, serve(lim.Handler(okHandler), request("GET", "/", "k", -1)).Code)
	}
	assert.Equal(t, 3, store.takes)
	assert.Equal(t, ratelimit.Stats{Allowed: 3, ShadowLimited: 2}, lim.Stats())

	// Limiter.Take follows the same rules.
	lim, _, _ = newLimiter(t, ratelimit.WithLimits(
		ratelimit.PerMinute(10).Named("requests"),
		ratelimit.PerMinute(1).Named("new").Shadow()))
	for i := range 2 {
		res, err := lim.Take(t.Context(), "k")
		require.NoError(t, err)
		assert.True(t, res.Allowed)
		assert.Equal(t, i == 1, res.ShadowLimited())
		assert.Equal(t, int64(9-i), res.Decisions[0].Remaining)
	}
}

func TestShadowDoesNotChangeID(t *testing.T) {
	l := ratelimit.PerDay(1000).Named("tokens")
	assert.Equal(t, l.ID(), l.Shadow().ID())
	assert.True(t, l.Shadow().IsShadow())
	assert.False(t, l.IsShadow())
	assert.Equal(t, `"tokens" 1000/24h0m0s burst 1000 token-bucket shadow`, l.Shadow().String())
}

// takeInterleavingStore runs between before a store's n-th Take (1-based), as
// another request would between the Limiter's first Take and its retake.
type takeInterleavingStore struct {
	ratelimit.Store
	n, takes int
	between  func()
}

func (s *takeInterleavingStore) Take(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	if s.takes++; s.takes == s.n {
		s.between()
	}
	return s.Store.Take(ctx, reqs, out)
}

// TestShadowRetakeWithoutAShadowSpentInBetween: the first Take is refused
// by shadow limit a only, so the Limiter takes again the enforced limit and
// shadow limit b, which had room. Another request spends b in between, so
// the retake is refused by b alone: the Limiter takes the enforced limit
// once more, alone. The request is admitted, charged to the enforced limit
// once, and to neither shadow limit.
func TestShadowRetakeWithoutAShadowSpentInBetween(t *testing.T) {
	enforced := ratelimit.PerHour(10).Named("enforced")
	a := ratelimit.PerHour(1).Named("a").Shadow()
	b := ratelimit.PerHour(1).Named("b").Shadow()
	clock := newClock()
	mem := newStore(t, clock.Now)
	ctx := context.Background()
	// Spend a: the request will find it empty.
	spend := func(l *ratelimit.Limit) {
		out := make([]ratelimit.Decision, 1)
		require.NoError(t, mem.Take(ctx, []ratelimit.Request{{Key: "k", Limit: l, Cost: 1}}, out))
		require.True(t, out[0].Allowed)
	}
	spend(&a)
	store := &takeInterleavingStore{Store: mem, n: 2, between: func() { spend(&b) }}
	var calls []int
	lim, err := ratelimit.New(store, ratelimit.WithLimits(enforced, a, b),
		ratelimit.WithHooks(ratelimit.Hooks{OnStoreCall: func(_ context.Context, c ratelimit.StoreCall) {
			calls = append(calls, c.Requests)
		}}))
	require.NoError(t, err)
	res, err := lim.Take(ctx, "k")
	require.NoError(t, err)
	assert.True(t, res.Allowed)
	assert.Equal(t, []int{3, 2, 1}, calls, "first Take, retake of enforced+b, retake of enforced alone")
	assert.Equal(t, []bool{true, false, false}, []bool{res.Decisions[0].Allowed, res.Decisions[1].Allowed, res.Decisions[2].Allowed})
	assert.Equal(t, int64(9), res.Decisions[0].Remaining, "enforced charged once")
	// Peek every limit: enforced 9 left, a and b each spent once by
	// the other requests only.
	out := make([]ratelimit.Decision, 3)
	require.NoError(t, mem.Take(ctx, []ratelimit.Request{{Key: "k", Limit: &enforced}, {Key: "k", Limit: &a}, {Key: "k", Limit: &b}}, out))
	assert.Equal(t, []int64{9, 0, 0}, []int64{out[0].Remaining, out[1].Remaining, out[2].Remaining})
	st := lim.Stats()
	assert.Equal(t, uint64(1), st.Allowed)
	assert.Equal(t, uint64(1), st.ShadowLimited)
}

// After a Take that only a shadow limit refused, the retake charges the
// enforced limits and every shadow limit that had room. Everything that
// gives back an admitted request's units (Reservation.Cancel, settlement,
// the WithMaxWait refund) must give back exactly what the request was
// charged, never units that other requests spent: these tests check that
// giving back restores the state from before the request. First
// Reservation.Cancel.
func TestShadowRetakeCancelGivesBackOnlyWhatWasCharged(t *testing.T) {
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
func TestShadowRetakeSettlementGivesBackOnlyWhatWasCharged(t *testing.T) {
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
func TestShadowRetakeMaxWaitRefundGivesBackOnlyWhatWasCharged(t *testing.T) {
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
// that its state is what it would be if enforced on the admitted traffic:
// a shadow limit with room is charged even when another shadow limit
// refuses the request.
func TestShadowRetakeChargesAShadowWithRoom(t *testing.T) {
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
func TestShadowRetakeRacesAnotherRequest(t *testing.T) {
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
