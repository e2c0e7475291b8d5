package ratelimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/memory"
)

// The allocation budgets of the hot paths (issue 10): allocations are
// deterministic where times are not, so tests lock them and the
// benchmarks (BenchmarkTake, BenchmarkMiddlewareIP) measure the times.

// standing is the fixed clock of these tests: no unit refills while they
// run.
func standing() time.Time { return time.Unix(1_700_000_000, 0) }

// newMemoryLimiter returns a Limiter on a store/memory on the standing
// clock, itself, not wrapped: its SingleTaker and NonBlocking are seen.
func newMemoryLimiter(t *testing.T, opts ...ratelimit.Option) *ratelimit.Limiter {
	t.Helper()
	store, err := memory.New(memory.WithClock(standing))
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	lim, err := ratelimit.New(store, opts...)
	require.NoError(t, err)
	return lim
}

// allowed is a Take whose Result does not outlive the call, as most
// callers use it: its decisions stay in the caller's frame.
func allowed(lim *ratelimit.Limiter, key string, costs ...int64) bool {
	res, err := lim.Take(context.Background(), key, costs...)
	return err == nil && res.Allowed
}

func TestTakeAllocatesNothing(t *testing.T) {
	// One limit: the store's SingleTaker, no store timeout (store/memory
	// is NonBlocking), the decision in the caller's frame. Two limits:
	// the same with the Limiter's pooled scratch for the store call,
	// which the race detector's sync.Pool drops now and then.
	one := newMemoryLimiter(t, ratelimit.WithLimits(hugeRate("requests")))
	two := newMemoryLimiter(t, ratelimit.WithLimits(hugeRate("requests"), hugeRate("tokens")))
	require.True(t, allowed(one, "k"))
	require.True(t, allowed(two, "k", 1, 5))
	assert.Zero(t, testing.AllocsPerRun(100, func() {
		if !allowed(one, "k") {
			t.Fatal("refused")
		}
	}), "one limit")
	if !raceEnabled {
		assert.Zero(t, testing.AllocsPerRun(100, func() {
			if !allowed(two, "k", 1, 5) {
				t.Fatal("refused")
			}
		}), "two stacked limits")
	}
	// A refusal allocates nothing either.
	refusing := newMemoryLimiter(t, ratelimit.WithLimits(ratelimit.PerDay(1)))
	require.True(t, allowed(refusing, "k"))
	assert.Zero(t, testing.AllocsPerRun(100, func() {
		if allowed(refusing, "k") {
			t.Fatal("admitted")
		}
	}), "refusal")
}

func TestTakeResultKeptByTheCaller(t *testing.T) {
	// A Result that outlives the call keeps its own decisions: each Take
	// gets fresh ones, which later Takes do not overwrite.
	lim := newMemoryLimiter(t, ratelimit.WithLimits(ratelimit.PerMinute(10)))
	var kept []ratelimit.Result
	for range 3 {
		res, err := lim.Take(context.Background(), "k")
		require.NoError(t, err)
		kept = append(kept, res)
	}
	// 10 per minute on the standing clock: 9, 8 and 7 units left.
	for i, res := range kept {
		require.Len(t, res.Decisions, 1)
		assert.Equal(t, int64(9-i), res.Decisions[0].Remaining, "Take %d", i)
	}
}

// lightHandler is the handler of the middleware budgets: a status and a
// body, as the benchmarks module's.
var lightHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte("ok\n"))
})

// middlewareAllocs returns the allocations of one admitted request
// through h beyond those of lightHandler alone.
func middlewareAllocs(t *testing.T, h http.Handler) float64 {
	t.Helper()
	r := httptest.NewRequest("GET", "/", nil)
	w := &discardWriter{h: make(http.Header, 8)}
	run := func(h http.Handler) func() {
		return func() {
			clear(w.h)
			w.code = 0
			h.ServeHTTP(w, r)
			if w.code != http.StatusOK {
				t.Fatalf("status %d", w.code)
			}
		}
	}
	run(h)()
	return testing.AllocsPerRun(100, run(h)) - testing.AllocsPerRun(100, run(lightHandler))
}

func TestMiddlewareAllocationBudget(t *testing.T) {
	// KeyByIP, one limit, the default IETF fields: two allocations
	// beyond the handler's — the key string, and one block holding the
	// []string backing both fields and the RateLimit value's bytes
	// (RateLimit-Policy is computed at New). No state, no request copy,
	// no store timeout, no status watch.
	lim := newMemoryLimiter(t, ratelimit.WithKey(ratelimit.KeyByIP()), ratelimit.WithLimits(hugeRate("requests")))
	assert.Equal(t, 2.0, middlewareAllocs(t, lim.Handler(lightHandler)), "IETF fields")

	// Without fields: the key string alone.
	none := newMemoryLimiter(t, ratelimit.WithKey(ratelimit.KeyByIP()), ratelimit.WithLimits(hugeRate("requests")),
		ratelimit.WithHeaders(ratelimit.HeadersNone))
	assert.Equal(t, 1.0, middlewareAllocs(t, none.Handler(lightHandler)), "no fields")

	// Two stacked limits: the same two (pooled scratch, the decisions
	// in the middleware's frame).
	if !raceEnabled {
		two := newMemoryLimiter(t, ratelimit.WithKey(ratelimit.KeyByIP()),
			ratelimit.WithLimits(hugeRate("requests"), hugeRate("burst")))
		assert.Equal(t, 2.0, middlewareAllocs(t, two.Handler(lightHandler)), "two limits")
	}

	// The AI shape: a requests limit and a tokens limit with a cost
	// function, the handler reporting its usage, settled with one Adjust
	// after it returns. Three: the key, the IETF block, and the request's
	// state, which holds the handler's copy of the request, the context
	// of the settlement and the per-limit slices (the Adjust's requests
	// and decisions are the Limiter's pooled scratch).
	if !raceEnabled {
		ai := newMemoryLimiter(t, ratelimit.WithKey(ratelimit.KeyByIP()), ratelimit.WithLimits(hugeRate("requests"),
			hugeRate("tokens").CostFrom(func(*http.Request) (int64, error) { return 300, nil })))
		reporting := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if err := ratelimit.ReportUsage(r.Context(), "tokens", 100); err != nil {
				t.Error(err)
			}
			lightHandler(w, r)
		})
		assert.Equal(t, 3.0, middlewareAllocs(t, ai.Handler(reporting)), "stacked, with settlement")
	}
}

func TestLightRequestsKeepNoReservation(t *testing.T) {
	// A Limiter without cost functions keeps no per-request state: the
	// handler gets the request itself, and ReportUsage and Reserved find
	// no reservation.
	lim := newMemoryLimiter(t, ratelimit.WithKey(ratelimit.KeyByAPIKey()), ratelimit.WithLimits(ratelimit.PerMinute(10)))
	in := request("GET", "/", "sk-1", -1)
	var got *http.Request
	var reportErr error
	var reserved bool
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r
		reportErr = ratelimit.ReportUsage(r.Context(), "requests", 3)
		_, reserved = ratelimit.Reserved(r.Context(), "requests")
	}))
	rec := serve(h, in)
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Same(t, in, got, "the request is not copied")
	assert.ErrorIs(t, reportErr, ratelimit.ErrNoReservation)
	assert.False(t, reserved)
	// 10 per minute, one request charged, the report ignored: 9 left.
	assert.Equal(t, `"requests";r=9;t=6`, rec.Header().Get("RateLimit"))
}

func TestLightLimiterInsideAStatefulOne(t *testing.T) {
	// An outer Limiter with a cost function keeps a reservation; an inner
	// one without keeps none. The handler's reports reach the outer one,
	// and the outer one knows that fields follow its own, so that it does
	// not rewrite them when a failed call releases its reservation (see
	// releaseEarly).
	store, err := memory.New(memory.WithClock(standing))
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	both := ratelimit.WithHeaders(ratelimit.HeadersIETF | ratelimit.HeadersXRateLimit)
	outer, err := ratelimit.New(store, ratelimit.WithName("outer"), ratelimit.WithKey(ratelimit.KeyByAPIKey()), both,
		ratelimit.WithLimits(ratelimit.PerMinute(1000).Named("tokens").CostFrom(estimateTokens)))
	require.NoError(t, err)
	inner, err := ratelimit.New(store, ratelimit.WithName("inner"), ratelimit.WithKey(ratelimit.KeyByAPIKey()), both,
		ratelimit.WithLimits(ratelimit.PerMinute(10)))
	require.NoError(t, err)
	report := true
	var reportErr error
	h := outer.Handler(inner.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if report {
			reportErr = ratelimit.ReportUsage(r.Context(), "tokens", 40)
		}
		w.WriteHeader(http.StatusBadGateway)
	})))
	tokensLeft := func() int64 {
		res, err := outer.Take(context.Background(), "sk-1", 0)
		require.NoError(t, err)
		return res.Decisions[0].Remaining
	}

	// Reported: 40 tokens charged in all (100 reserved, 60 refunded when
	// the handler returns), whatever the status.
	rec := serve(h, request("POST", "/", "sk-1", 100))
	assert.Equal(t, http.StatusBadGateway, rec.Code)
	require.NoError(t, reportErr)
	// As written at admission: outer 1000 − 100 reserved, inner 10 − 1.
	assert.Equal(t, `"outer/tokens";r=900;t=1, "inner/requests";r=9;t=6`, rec.Header().Get("RateLimit"))
	assert.Equal(t, int64(960), tokensLeft())

	// Not reported: the 502 releases the 100 reserved tokens when it is
	// written, but the outer Limiter leaves the list alone (the inner's
	// members end it), as when both keep a reservation.
	report = false
	rec = serve(h, request("POST", "/", "sk-1", 100))
	assert.Equal(t, http.StatusBadGateway, rec.Code)
	assert.Equal(t, `"outer/tokens";r=860;t=1, "inner/requests";r=8;t=6`, rec.Header().Get("RateLimit"))
	// X-RateLimit-* name the binding limit across both, the inner one
	// (8/10 left against 860/1000), not the outer one after its release.
	assert.Equal(t, "10", rec.Header().Get("X-RateLimit-Limit"))
	assert.Equal(t, "8", rec.Header().Get("X-RateLimit-Remaining"))
	assert.Equal(t, int64(960), tokensLeft())
}
