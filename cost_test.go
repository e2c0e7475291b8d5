package ratelimit_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
)

// reporting returns a handler that reports the given usage of "tokens"
// (none when usage < 0) and then runs then, if not nil.
func reporting(t *testing.T, usage int64, then func(w http.ResponseWriter, r *http.Request)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if usage >= 0 {
			require.NoError(t, ratelimit.ReportUsage(r.Context(), "tokens", usage))
		}
		if then != nil {
			then(w, r)
		}
	})
}

// tokensDelta returns the single tokens adjustment of a settlement.
func singleAdjust(t *testing.T, store *recordingStore) ratelimit.Request {
	t.Helper()
	adj := store.Adjusts()
	require.Len(t, adj, 1, "exactly one Adjust call")
	require.Len(t, adj[0].Reqs, 1)
	assert.NoError(t, adj[0].CtxErr, "settlement runs on a live context")
	return adj[0].Reqs[0]
}

func TestSettlementRefund(t *testing.T) {
	lim, store, _ := newLimiter(t, aiLimits())
	w := serve(lim.Handler(reporting(t, 300, nil)), request("POST", "/", "k", 1000))
	require.Equal(t, http.StatusOK, w.Code)
	// The headers were written before the handler: they show the estimate.
	// t is the time until one unit more than r is back (HeadersIETF): for
	// requests, one emission interval (1 s) after the one spent; for
	// tokens, 999 × 0.864 s of the 864 s until full are the tokens above
	// the next one, so it is back in 0.864 s → t=1.
	assert.Equal(t, `"requests";r=59;t=1, "tokens";r=99000;t=1`, w.Header().Get("RateLimit"))

	adj := singleAdjust(t, store)
	assert.Equal(t, "tokens", adj.Limit.Name())
	assert.Equal(t, int64(300-1000), adj.Cost)
	assert.Equal(t, "k", adj.Key)

	// 300 tokens in use: 99,700 left, full in 300 × 0.864s = 259.2s, the
	// next token back in 259.2 − 299 × 0.864 = 0.864 s → t=1; 2 requests
	// spent, the next back in 2 − 1 s → t=1.
	w = serve(lim.Handler(okHandler), request("POST", "/", "k", 0))
	assert.Equal(t, `"requests";r=58;t=1, "tokens";r=99700;t=1`, w.Header().Get("RateLimit"))
	assert.Equal(t, ratelimit.Stats{Allowed: 2, Settled: 1}, lim.Stats())
}

func TestSettlementNothingToDo(t *testing.T) {
	for _, tt := range []struct {
		name  string
		usage int64
	}{{"no report", -1}, {"report equals reservation", 1000}} {
		t.Run(tt.name, func(t *testing.T) {
			lim, store, _ := newLimiter(t, aiLimits())
			require.Equal(t, http.StatusOK, serve(lim.Handler(reporting(t, tt.usage, nil)), request("POST", "/", "k", 1000)).Code)
			assert.Empty(t, store.Adjusts())
			// The reservation stands: 99,000 left (the next token back in
			// 864 − 999 × 0.864 s → t=1, as in TestSettlementRefund).
			w := serve(lim.Handler(okHandler), request("POST", "/", "k", 0))
			assert.Equal(t, `"requests";r=58;t=1, "tokens";r=99000;t=1`, w.Header().Get("RateLimit"))
			assert.Equal(t, ratelimit.Stats{Allowed: 2}, lim.Stats())
		})
	}
}

func TestSettlementDebt(t *testing.T) {
	lim, store, _ := newLimiter(t, aiLimits())
	// Estimated 1,000, used 100,500: 500 tokens of debt beyond capacity.
	require.Equal(t, http.StatusOK, serve(lim.Handler(reporting(t, 100_500, nil)), request("POST", "/", "k", 1000)).Code)
	assert.Equal(t, int64(99_500), singleAdjust(t, store).Cost)

	// The next request of 10 tokens needs 500 + 10 tokens to drain:
	// 510 × 0.864s = 440.64s → Retry-After 441. tokens binds, so its t is
	// Retry-After itself (draft -11 §6: the same point in time).
	w := serve(lim.Handler(okHandler), request("POST", "/", "k", 10))
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "441", w.Header().Get("Retry-After"))
	assert.Equal(t, `"requests";r=59;t=1, "tokens";r=0;t=441`, w.Header().Get("RateLimit"))
	assert.Equal(t, ratelimit.Stats{Allowed: 1, Limited: 1, Settled: 1}, lim.Stats())
}

func TestSettlementLastReportWinsAndCoversAllLimits(t *testing.T) {
	lim, store, _ := newLimiter(t, aiLimits())
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.NoError(t, ratelimit.ReportUsage(r.Context(), "tokens", 2000))
		require.NoError(t, ratelimit.ReportUsage(r.Context(), "tokens", 700))
		require.NoError(t, ratelimit.ReportUsage(r.Context(), "requests", 3))
	}))
	require.Equal(t, http.StatusOK, serve(h, request("POST", "/", "k", 1000)).Code)
	adj := store.Adjusts()
	require.Len(t, adj, 1, "one Adjust call for all limits")
	require.Len(t, adj[0].Reqs, 2)
	assert.Equal(t, "requests", adj[0].Reqs[0].Limit.Name())
	assert.Equal(t, int64(3-1), adj[0].Reqs[0].Cost)
	assert.Equal(t, "tokens", adj[0].Reqs[1].Limit.Name())
	assert.Equal(t, int64(700-1000), adj[0].Reqs[1].Cost)
}

func TestSettlementOnPanic(t *testing.T) {
	for _, value := range []any{"boom", http.ErrAbortHandler} {
		t.Run(fmtAny(value), func(t *testing.T) {
			lim, store, _ := newLimiter(t, aiLimits())
			h := lim.Handler(reporting(t, 5000, func(http.ResponseWriter, *http.Request) { panic(value) }))
			recovered := func() (p any) {
				defer func() { p = recover() }()
				serve(h, request("POST", "/", "k", 1000))
				return nil
			}()
			assert.Equal(t, value, recovered, "the panic continues with its own value")
			assert.Equal(t, int64(4000), singleAdjust(t, store).Cost)
			assert.Equal(t, ratelimit.Stats{Allowed: 1, Settled: 1}, lim.Stats())
		})
	}
}

func fmtAny(v any) string {
	if err, ok := v.(error); ok {
		return err.Error()
	}
	return v.(string)
}

func TestSettlementAfterClientDisconnect(t *testing.T) {
	lim, store, _ := newLimiter(t, aiLimits())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := lim.Handler(reporting(t, 2500, func(http.ResponseWriter, *http.Request) {
		cancel() // the client goes away while the model still answers
	}))
	require.Equal(t, http.StatusOK, serve(h, request("POST", "/", "k", 1000).WithContext(ctx)).Code)
	require.Error(t, ctx.Err())
	assert.Equal(t, int64(1500), singleAdjust(t, store).Cost) // with a live context: checked in singleAdjust

	// 2,500 tokens in use: 97,500 left, full in 2,500 × 0.864s = 2,160s,
	// the next token back in 2,160 − 2,499 × 0.864 = 0.864 s → t=1.
	w := serve(lim.Handler(okHandler), request("POST", "/", "k", 0))
	assert.Equal(t, `"requests";r=58;t=1, "tokens";r=97500;t=1`, w.Header().Get("RateLimit"))
	assert.Equal(t, ratelimit.Stats{Allowed: 2, Settled: 1}, lim.Stats())
}

func TestSettlementStoreError(t *testing.T) {
	var storeErrs []error
	clock := newClock()
	store := &adjustFailingStore{Store: newStore(t, clock.Now)}
	lim, err := ratelimit.New(store, aiLimits(), ratelimit.WithHooks(ratelimit.Hooks{
		OnStoreError: func(_ context.Context, err error) { storeErrs = append(storeErrs, err) },
	}))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, serve(lim.Handler(reporting(t, 10, nil)), request("POST", "/", "k", 1000)).Code)
	require.Len(t, storeErrs, 1)
	assert.ErrorIs(t, storeErrs[0], errStoreDown)
	assert.Equal(t, ratelimit.Stats{Allowed: 1, StoreErrors: 1}, lim.Stats())
}

// adjustFailingStore decides Take normally but fails every Adjust.
type adjustFailingStore struct{ ratelimit.Store }

func (adjustFailingStore) Adjust(context.Context, []ratelimit.Request, []ratelimit.Decision) error {
	return errStoreDown
}

func TestReportUsageErrors(t *testing.T) {
	err := ratelimit.ReportUsage(context.Background(), "tokens", 1)
	assert.ErrorIs(t, err, ratelimit.ErrNoReservation)

	lim, _, _ := newLimiter(t, aiLimits())
	var unknown, negative error
	var kept context.Context
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		unknown = ratelimit.ReportUsage(r.Context(), "dollars", 1)
		negative = ratelimit.ReportUsage(r.Context(), "tokens", -1)
		kept = r.Context()
	}))
	require.Equal(t, http.StatusOK, serve(h, request("POST", "/", "k", 10)).Code)
	assert.ErrorIs(t, unknown, ratelimit.ErrUnknownLimit)
	assert.ErrorIs(t, negative, ratelimit.ErrInvalidRequest)

	// After the handler returned, the request is settled.
	assert.ErrorIs(t, ratelimit.ReportUsage(kept, "tokens", 5), ratelimit.ErrNoReservation)
	assert.Equal(t, ratelimit.Stats{Allowed: 1}, lim.Stats())
}

func TestReportUsageNestedLimiters(t *testing.T) {
	// An outer per-IP limiter and an inner per-key one both count tokens:
	// one report settles both.
	clock := newClock()
	outerStore := &recordingStore{Store: newStore(t, clock.Now)}
	innerStore := &recordingStore{Store: newStore(t, clock.Now)}
	outer, err := ratelimit.New(outerStore, ratelimit.WithKey(ratelimit.KeyByIP()),
		ratelimit.WithLimits(ratelimit.PerDay(1_000_000).Named("tokens").CostFrom(estimateTokens)))
	require.NoError(t, err)
	inner, err := ratelimit.New(innerStore, aiLimits())
	require.NoError(t, err)

	h := outer.Handler(inner.Handler(reporting(t, 40, nil)))
	require.Equal(t, http.StatusOK, serve(h, request("POST", "/", "k", 100)).Code)
	assert.Equal(t, int64(-60), singleAdjust(t, outerStore).Cost)
	assert.Equal(t, int64(-60), singleAdjust(t, innerStore).Cost)
	assert.Equal(t, "ip 192.0.2.1", outerStore.Adjusts()[0].Reqs[0].Key) // httptest's RemoteAddr

	// A name only the inner limiter has still reports fine.
	h = outer.Handler(inner.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		assert.NoError(t, ratelimit.ReportUsage(r.Context(), "requests", 1))
		assert.True(t, errors.Is(ratelimit.ReportUsage(r.Context(), "nope", 1), ratelimit.ErrUnknownLimit))
	})))
	serve(h, request("POST", "/", "k", 1))
}

func TestSettlementPassesChargeTime(t *testing.T) {
	lim, store, clock := newLimiter(t, aiLimits())
	h := lim.Handler(reporting(t, 10, func(http.ResponseWriter, *http.Request) {
		clock.Advance(time.Minute) // the model takes a minute
	}))
	require.Equal(t, http.StatusOK, serve(h, request("POST", "/", "k", 1000)).Code)
	// The Adjust says when the reservation was charged: the Take's time.
	assert.Equal(t, epoch.UnixMicro(), singleAdjust(t, store).At)
}

func TestLeakyBucketWaitsForItsSlot(t *testing.T) {
	// 10 per second as a queue: each request's slot is 100ms after the
	// previous one's.
	lim, store, _ := newLimiter(t, ratelimit.WithLimits(ratelimit.PerSecond(10).WithAlgorithm(ratelimit.LeakyBucket)))
	var waits []time.Duration
	cancelled := false
	ratelimit.SetSleep(lim, func(ctx context.Context, d time.Duration) error {
		waits = append(waits, d)
		if cancelled {
			return context.Canceled
		}
		return nil
	})
	ran := 0
	h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran++ }))
	for range 3 {
		require.Equal(t, http.StatusOK, serve(h, request("GET", "/", "k", -1)).Code)
	}
	assert.Equal(t, []time.Duration{100 * time.Millisecond, 200 * time.Millisecond}, waits, "the first request goes at once")
	assert.Equal(t, 3, ran)
	assert.Empty(t, store.Adjusts())

	// The fourth request's client leaves while it waits 300ms: the
	// handler never runs and the reservation is refunded.
	cancelled = true
	w := serve(h, request("GET", "/", "k", -1))
	assert.Equal(t, http.StatusServiceUnavailable, w.Code)
	assert.Equal(t, 3, ran)
	assert.Equal(t, 300*time.Millisecond, waits[2])
	assert.Equal(t, int64(-1), singleAdjust(t, store).Cost)

	// So the next one queues behind three requests, not four.
	cancelled = false
	serve(h, request("GET", "/", "k", -1))
	assert.Equal(t, 300*time.Millisecond, waits[3])
	assert.Equal(t, ratelimit.Stats{Allowed: 5, Settled: 1}, lim.Stats())
}
