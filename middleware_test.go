package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
)

// Expected values are derived from the limits' exact rates:
//
//   - PerMinute(60): one request refills every 60s/60 = 1s; a level of k
//     requests in use drains to full in k seconds.
//   - PerDay(100_000) tokens: one token refills every 86400s/100000 =
//     864ms; k tokens in use drain in k × 0.864 s.

const quotaExceededBody = `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429,` +
	`"detail":"quota exceeded: the \"requests\" limit allows 60 requests per minute; retry after 1 second",` +
	`"violated-policies":["requests"],"retry-after-seconds":1}` + "\n"

func TestRequestsPerMinuteExhaustion(t *testing.T) {
	lim, _, clock := newLimiter(t,
		ratelimit.WithLimits(ratelimit.PerMinute(60)),
		ratelimit.WithHeaders(ratelimit.HeadersIETF|ratelimit.HeadersXRateLimit))
	h := lim.Handler(okHandler)

	// 60 requests at one instant: request i leaves 60-i and needs i
	// seconds to drain back to full (X-RateLimit-Reset), but the first of
	// those, one unit more than r, is back after 1 s: the effective window
	// t (draft -11 §4.1.2), within which no more than r can be spent.
	for i := 1; i <= 60; i++ {
		w := serve(h, request("GET", "/", "k1", -1))
		require.Equal(t, http.StatusOK, w.Code, "request %d", i)
		assert.Equal(t, `"requests";q=60;w=60`, w.Header().Get("RateLimit-Policy"))
		assert.Equal(t, fmt.Sprintf(`"requests";r=%d;t=1`, 60-i), w.Header().Get("RateLimit"), "request %d", i)
		assert.Equal(t, "60", w.Header().Get("X-RateLimit-Limit"))
		assert.Equal(t, fmt.Sprint(60-i), w.Header().Get("X-RateLimit-Remaining"))
		assert.Equal(t, fmt.Sprint(i), w.Header().Get("X-RateLimit-Reset"))
		assert.Empty(t, w.Header().Get("Retry-After"))
	}

	// The 61st needs one more request of room: exactly 1s, and t is
	// Retry-After (draft -11 §6: the same point in time).
	w := serve(h, request("GET", "/", "k1", -1))
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "1", w.Header().Get("Retry-After"))
	assert.Equal(t, `"requests";r=0;t=1`, w.Header().Get("RateLimit"))
	assert.Equal(t, "0", w.Header().Get("X-RateLimit-Remaining"))
	assert.Equal(t, "application/problem+json", w.Header().Get("Content-Type"))
	assert.Equal(t, quotaExceededBody, w.Body.String())

	// Another key is unaffected.
	assert.Equal(t, http.StatusOK, serve(h, request("GET", "/", "k2", -1)).Code)

	// 300ms later the wait is 700ms, announced as 1 (rounded up) in
	// Retry-After and t alike.
	clock.Advance(300 * time.Millisecond)
	w = serve(h, request("GET", "/", "k1", -1))
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "1", w.Header().Get("Retry-After"))
	assert.Equal(t, `"requests";r=0;t=1`, w.Header().Get("RateLimit"))

	// At 1s one request fits again, and leaves the bucket empty: the next
	// unit is back 1 s later (full in 60 s, of which 59 s refill the
	// units after it).
	clock.Advance(700 * time.Millisecond)
	w = serve(h, request("GET", "/", "k1", -1))
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, `"requests";r=0;t=1`, w.Header().Get("RateLimit"))
	assert.Equal(t, "60", w.Header().Get("X-RateLimit-Reset"))

	assert.Equal(t, ratelimit.Stats{Allowed: 62, Limited: 2}, lim.Stats())
}

func TestRetryAfterLongerWait(t *testing.T) {
	// Every(10, 25s): one request refills every 2.5s. After 10 requests
	// the 11th waits 2.5s → Retry-After 3; 1.3s later it waits 1.2s → 2;
	// 0.2s later exactly 1s → 1.
	lim, _, clock := newLimiter(t, ratelimit.WithLimits(ratelimit.Every(10, 25*time.Second)))
	h := lim.Handler(okHandler)
	for range 10 {
		require.Equal(t, http.StatusOK, serve(h, request("GET", "/", "k", -1)).Code)
	}
	for _, step := range []struct {
		advance time.Duration
		want    string
	}{{0, "3"}, {1300 * time.Millisecond, "2"}, {200 * time.Millisecond, "1"}} {
		clock.Advance(step.advance)
		w := serve(h, request("GET", "/", "k", -1))
		require.Equal(t, http.StatusTooManyRequests, w.Code)
		assert.Equal(t, step.want, w.Header().Get("Retry-After"), "after %v", step.advance)
	}
	// The detail names a period that is not a single unit.
	w := serve(h, request("GET", "/", "k", -1))
	assert.Contains(t, w.Body.String(), `allows 10 requests per 25 seconds; retry after 1 second"`)
}

// aiLimits are the demo's free-plan limits: 60 requests per minute and
// 100,000 tokens per day, the token cost estimated by estimateTokens.
func aiLimits() ratelimit.Option {
	return ratelimit.WithLimits(
		ratelimit.PerMinute(60).Named("requests"),
		ratelimit.PerDay(100_000).Named("tokens").CostFrom(estimateTokens),
	)
}

func TestStackedLimitsAreAtomic(t *testing.T) {
	lim, _, _ := newLimiter(t, aiLimits())
	h := lim.Handler(okHandler)

	// 99,990 tokens: 10 left; full in 99,990 × 0.864s = 86,391.36s, of
	// which the 99,989 tokens after the next one take 86,390.496s: the
	// 11th is back in 0.864s → t=1.
	w := serve(h, request("POST", "/v1/chat", "k", 99_990))
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, `"requests";q=60;w=60, "tokens";q=100000;w=86400;rampmeter-unit="tokens"`, w.Header().Get("RateLimit-Policy"))
	assert.Equal(t, `"requests";r=59;t=1, "tokens";r=10;t=1`, w.Header().Get("RateLimit"))

	// 20 tokens do not fit: 10 missing × 0.864s = 8.64s → 9, which is
	// also the binding tokens limit's t. Nothing is charged: requests
	// still has 59.
	w = serve(h, request("POST", "/v1/chat", "k", 20))
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "9", w.Header().Get("Retry-After"))
	assert.Equal(t, `"requests";r=59;t=1, "tokens";r=10;t=9`, w.Header().Get("RateLimit"))
	assert.Equal(t, `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429,`+
		`"detail":"quota exceeded: the \"tokens\" limit allows 100000 tokens per day and this request needs 20 (10 left); retry after 9 seconds",`+
		`"violated-policies":["tokens"],"retry-after-seconds":9}`+"\n", w.Body.String())

	// 5 tokens fit; requests goes from 59 to 58, proving the refused
	// request did not charge it. The next unit of either is one emission
	// interval away (1 s, 0.864 s) → t=1.
	w = serve(h, request("POST", "/v1/chat", "k", 5))
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, `"requests";r=58;t=1, "tokens";r=5;t=1`, w.Header().Get("RateLimit"))

	assert.Equal(t, ratelimit.Stats{Allowed: 2, Limited: 1}, lim.Stats())
}

const tooLargeBody = `{"type":"https://pkg.go.dev/github.com/rampmeter/ratelimit#ProblemRequestTooLarge","title":"Request Too Large","status":413,` +
	`"detail":"request too large: estimated 150000 tokens exceeds the \"tokens\" limit's capacity of 100000; do not retry it unchanged",` +
	`"violated-policies":["tokens"]}` + "\n"

func TestCostAboveBurstIsNeverAdmitted(t *testing.T) {
	lim, _, _ := newLimiter(t, aiLimits())
	h := lim.Handler(okHandler)

	w := serve(h, request("POST", "/v1/chat", "k", 150_000))
	require.Equal(t, http.StatusRequestEntityTooLarge, w.Code)
	assert.Empty(t, w.Header().Values("Retry-After"), "413 must not invite a retry")
	// Full buckets: once r is spent, the next unit is one emission
	// interval (1 s, 0.864 s) away → t=1.
	assert.Equal(t, `"requests";r=60;t=1, "tokens";r=100000;t=1`, w.Header().Get("RateLimit"))
	assert.Equal(t, tooLargeBody, w.Body.String())
	assert.Equal(t, ratelimit.Stats{TooLarge: 1}, lim.Stats())
}

func TestNeverBindsOverRetryableRefusal(t *testing.T) {
	lim, _, _ := newLimiter(t, ratelimit.WithLimits(
		ratelimit.PerMinute(1).Named("requests"),
		ratelimit.PerDay(100_000).Named("tokens").CostFrom(estimateTokens)))
	h := lim.Handler(okHandler)
	require.Equal(t, http.StatusOK, serve(h, request("POST", "/", "k", 1)).Code)

	// Both refuse: requests for 60s, tokens forever. Waiting cannot help,
	// so the answer is 413 naming only the limit that can never fit.
	w := serve(h, request("POST", "/", "k", 150_000))
	require.Equal(t, http.StatusRequestEntityTooLarge, w.Code)
	assert.Empty(t, w.Header().Values("Retry-After"))
	assert.Equal(t, tooLargeBody, w.Body.String())
}

func TestMissingKey(t *testing.T) {
	lim, store, _ := newLimiter(t, aiLimits())
	w := serve(lim.Handler(okHandler), request("GET", "/", "", -1))
	require.Equal(t, http.StatusUnauthorized, w.Code)
	assert.Equal(t, "Bearer", w.Header().Get("WWW-Authenticate"))
	assert.Equal(t, "application/problem+json", w.Header().Get("Content-Type"))
	assert.Equal(t, `{"type":"about:blank","title":"Unauthorized","status":401,`+
		`"detail":"This request has no API key: send your API key as \"Authorization: Bearer <key>\" or \"X-API-Key: <key>\"."}`+"\n",
		w.Body.String())
	assert.Equal(t, ratelimit.Stats{KeyErrors: 1}, lim.Stats())
	assert.Zero(t, store.takes, "no store call without a key")
}

func TestKeyErrorHandlers(t *testing.T) {
	t.Run("plain error is 400 without its message", func(t *testing.T) {
		lim, _, _ := newLimiter(t, aiLimits(), ratelimit.WithKey(func(*http.Request) (string, error) {
			return "", errors.New("secret internal detail")
		}))
		w := serve(lim.Handler(okHandler), request("GET", "/", "", -1))
		require.Equal(t, http.StatusBadRequest, w.Code)
		assert.NotContains(t, w.Body.String(), "secret")
		assert.Contains(t, w.Body.String(), `"detail":"This request carries no usable rate-limit key."`)
	})
	t.Run("empty key is an error", func(t *testing.T) {
		lim, _, _ := newLimiter(t, aiLimits(), ratelimit.WithKey(func(*http.Request) (string, error) { return "", nil }))
		require.Equal(t, http.StatusBadRequest, serve(lim.Handler(okHandler), request("GET", "/", "", -1)).Code)
		assert.Equal(t, ratelimit.Stats{KeyErrors: 1}, lim.Stats())
	})
	t.Run("custom handler", func(t *testing.T) {
		var got error
		lim, _, _ := newLimiter(t, aiLimits(), ratelimit.WithKeyErrorHandler(func(w http.ResponseWriter, _ *http.Request, err error) {
			got = err
			w.WriteHeader(http.StatusTeapot)
		}))
		assert.Equal(t, http.StatusTeapot, serve(lim.Handler(okHandler), request("GET", "/", "", -1)).Code)
		assert.ErrorIs(t, got, ratelimit.ErrMissingKey)
	})
	t.Run("skip", func(t *testing.T) {
		var bypassed error
		var reportErr error
		lim, store, _ := newLimiter(t, aiLimits(), ratelimit.WithSkipOnKeyError(),
			ratelimit.WithHooks(ratelimit.Hooks{OnBypass: func(_ context.Context, err error) { bypassed = err }}))
		h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			reportErr = ratelimit.ReportUsage(r.Context(), "tokens", 10)
		}))
		w := serve(h, request("GET", "/", "", -1))
		require.Equal(t, http.StatusOK, w.Code)
		assert.Empty(t, w.Header().Get("RateLimit"))
		assert.ErrorIs(t, bypassed, ratelimit.ErrMissingKey)
		assert.NoError(t, reportErr, "a report on a bypassed request is accepted and ignored")
		assert.Equal(t, ratelimit.Stats{KeyErrors: 1, Bypassed: 1}, lim.Stats())
		assert.Zero(t, store.takes)
		assert.Empty(t, store.Adjusts())
	})
}

func TestCostErrors(t *testing.T) {
	tests := []struct {
		name       string
		cost       ratelimit.CostFunc
		wantStatus int
		wantDetail string
	}{
		{"status error", func(*http.Request) (int64, error) {
			return 0, &ratelimit.StatusError{Code: http.StatusRequestEntityTooLarge, Err: errors.New("body over 1 MiB")}
		}, 413, `"detail":"body over 1 MiB"`},
		{"plain error", func(*http.Request) (int64, error) { return 0, errors.New("json: oops") },
			400, `"detail":"The cost of this request for the \"tokens\" limit could not be estimated."`},
		{"status error with a client message", func(*http.Request) (int64, error) {
			return 0, &ratelimit.StatusError{Code: http.StatusUnprocessableEntity, Message: "Send a prompt.", Err: errors.New("costfn: empty prompt")}
		}, 422, `"detail":"Send a prompt."`},
		// A bug in the cost function: the client is not shown the Go error.
		{"negative cost", func(*http.Request) (int64, error) { return -1, nil },
			500, `"detail":"The server could not compute the cost of this request."`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim, store, _ := newLimiter(t, ratelimit.WithLimits(
				ratelimit.PerMinute(60).Named("requests"),
				ratelimit.PerDay(100_000).Named("tokens").CostFrom(tt.cost)))
			w := serve(lim.Handler(okHandler), request("POST", "/", "k", -1))
			require.Equal(t, tt.wantStatus, w.Code)
			assert.Contains(t, w.Body.String(), tt.wantDetail)
			assert.Equal(t, ratelimit.Stats{CostErrors: 1}, lim.Stats())
			assert.Zero(t, store.takes, "nothing is charged when a cost function fails")
		})
	}
}

func TestFailureModes(t *testing.T) {
	type hooked struct {
		mu                  sync.Mutex
		storeErrs, bypasses []error
	}
	hooksFor := func(h *hooked) ratelimit.Option {
		return ratelimit.WithHooks(ratelimit.Hooks{
			OnStoreError: func(_ context.Context, err error) { h.mu.Lock(); h.storeErrs = append(h.storeErrs, err); h.mu.Unlock() },
			OnBypass:     func(_ context.Context, err error) { h.mu.Lock(); h.bypasses = append(h.bypasses, err); h.mu.Unlock() },
		})
	}

	t.Run("fail open", func(t *testing.T) {
		var hk hooked
		var reportErr error
		lim, err := ratelimit.New(failingStore{}, aiLimits(), hooksFor(&hk))
		require.NoError(t, err)
		h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			reportErr = ratelimit.ReportUsage(r.Context(), "tokens", 500)
			_, _ = w.Write([]byte("ok"))
		}))
		w := serve(h, request("POST", "/", "k", 100))
		require.Equal(t, http.StatusOK, w.Code)
		assert.Empty(t, w.Header().Get("RateLimit"), "no decision, no fields")
		assert.NoError(t, reportErr)
		require.Len(t, hk.storeErrs, 1)
		assert.ErrorIs(t, hk.storeErrs[0], errStoreDown)
		require.Len(t, hk.bypasses, 1)
		assert.ErrorIs(t, hk.bypasses[0], errStoreDown)
		// Settlement is skipped: no Adjust, so no second store error.
		assert.Equal(t, ratelimit.Stats{Bypassed: 1, StoreErrors: 1}, lim.Stats())
	})

	t.Run("fail closed", func(t *testing.T) {
		var hk hooked
		lim, err := ratelimit.New(failingStore{}, aiLimits(), hooksFor(&hk), ratelimit.WithFailureMode(ratelimit.FailClosed))
		require.NoError(t, err)
		w := serve(lim.Handler(okHandler), request("POST", "/", "k", 100))
		require.Equal(t, http.StatusServiceUnavailable, w.Code)
		assert.Equal(t, "1", w.Header().Get("Retry-After"))
		assert.Equal(t, `{"type":"https://iana.org/assignments/http-problem-types#temporary-reduced-capacity","title":"Service Unavailable","status":503,`+
			`"detail":"the rate limiter cannot decide right now; retry after 1 second","retry-after-seconds":1}`+"\n", w.Body.String())
		assert.NotContains(t, w.Body.String(), errStoreDown.Error())
		assert.Len(t, hk.storeErrs, 1)
		assert.Empty(t, hk.bypasses)
		assert.Equal(t, ratelimit.Stats{StoreErrors: 1}, lim.Stats())
	})

	t.Run("timeout is a store error", func(t *testing.T) {
		// The store never answers; the call must end at the store
		// timeout, which the store sees as its context's deadline.
		var hk hooked
		store := &blockingStore{}
		lim, err := ratelimit.New(store, aiLimits(), hooksFor(&hk), ratelimit.WithStoreTimeout(time.Millisecond))
		require.NoError(t, err)
		w := serve(lim.Handler(okHandler), request("POST", "/", "k", 100))
		require.Equal(t, http.StatusOK, w.Code)
		assert.Equal(t, []error{context.DeadlineExceeded}, store.errs)
		require.Len(t, hk.storeErrs, 1)
		assert.ErrorIs(t, hk.storeErrs[0], ratelimit.ErrStoreTimeout)
		assert.ErrorIs(t, hk.storeErrs[0], context.DeadlineExceeded)
		assert.Equal(t, ratelimit.Stats{Bypassed: 1, StoreErrors: 1}, lim.Stats())
	})

	t.Run("timeout fail closed", func(t *testing.T) {
		store := &blockingStore{}
		lim, err := ratelimit.New(store, aiLimits(), ratelimit.WithStoreTimeout(time.Millisecond), ratelimit.WithFailureMode(ratelimit.FailClosed))
		require.NoError(t, err)
		w := serve(lim.Handler(okHandler), request("POST", "/", "k", 100))
		require.Equal(t, http.StatusServiceUnavailable, w.Code)
		assert.Equal(t, []error{context.DeadlineExceeded}, store.errs)
	})

	t.Run("client gone before the decision", func(t *testing.T) {
		store := &blockingStore{}
		lim, err := ratelimit.New(store, aiLimits())
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		ran := false
		w := serve(lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true })),
			request("POST", "/", "k", 100).WithContext(ctx))
		assert.Equal(t, http.StatusServiceUnavailable, w.Code)
		assert.False(t, ran)
		assert.Equal(t, []error{context.Canceled}, store.errs)
		assert.Equal(t, ratelimit.Stats{}, lim.Stats(), "the store did not fail: nothing counted")
	})
}

func TestRejectHandler(t *testing.T) {
	var got []ratelimit.Rejection
	lim, _, _ := newLimiter(t, aiLimits(), ratelimit.WithRejectHandler(func(w http.ResponseWriter, r *http.Request, rej ratelimit.Rejection) {
		got = append(got, rej)
		// Retry-After is already set when the handler runs.
		w.Header().Set("X-Seen-Retry-After", w.Header().Get("Retry-After"))
		w.WriteHeader(http.StatusTeapot)
	}))
	h := lim.Handler(okHandler)
	require.Equal(t, http.StatusOK, serve(h, request("POST", "/", "k", 100_000)).Code)

	w := serve(h, request("POST", "/", "k", 864)) // 864 tokens × 0.864s = 746.496s → 747
	require.Equal(t, http.StatusTeapot, w.Code)
	assert.Equal(t, "747", w.Header().Get("X-Seen-Retry-After"))
	w = serve(h, request("POST", "/", "k", 100_001))
	require.Equal(t, http.StatusTeapot, w.Code)
	assert.Empty(t, w.Header().Get("X-Seen-Retry-After"))

	require.Len(t, got, 2)
	assert.Equal(t, http.StatusTooManyRequests, got[0].Status)
	assert.Equal(t, []int64{1, 864}, got[0].Costs)
	assert.Equal(t, 746496*time.Millisecond, got[0].RetryAfter)
	assert.Equal(t, "tokens", got[0].Binding().Limit.Name())
	assert.Equal(t, http.StatusRequestEntityTooLarge, got[1].Status)
	assert.Equal(t, ratelimit.RetryNever, got[1].RetryAfter)
}

func TestHeaderStyles(t *testing.T) {
	for _, tt := range []struct {
		name  string
		opt   ratelimit.Option
		ietf  bool
		xrate bool
	}{
		{"default", nil, true, false},
		{"none", ratelimit.WithHeaders(ratelimit.HeadersNone), false, false},
		{"x only", ratelimit.WithHeaders(ratelimit.HeadersXRateLimit), false, true},
		{"both", ratelimit.WithHeaders(ratelimit.HeadersIETF | ratelimit.HeadersXRateLimit), true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			opts := []ratelimit.Option{ratelimit.WithLimits(ratelimit.PerMinute(1))}
			if tt.opt != nil {
				opts = append(opts, tt.opt)
			}
			lim, _, _ := newLimiter(t, opts...)
			h := lim.Handler(okHandler)
			w := serve(h, request("GET", "/", "k", -1))
			assert.Equal(t, tt.ietf, w.Header().Get("RateLimit") != "")
			assert.Equal(t, tt.ietf, w.Header().Get("RateLimit-Policy") != "")
			assert.Equal(t, tt.xrate, w.Header().Get("X-RateLimit-Remaining") != "")
			w = serve(h, request("GET", "/", "k", -1))
			require.Equal(t, http.StatusTooManyRequests, w.Code)
			assert.Equal(t, "60", w.Header().Get("Retry-After"), "Retry-After does not depend on the style")
		})
	}

	t.Run("custom writer", func(t *testing.T) {
		lim, _, _ := newLimiter(t, ratelimit.WithLimits(ratelimit.PerMinute(5)),
			ratelimit.WithHeaders(headerFunc(func(h http.Header, res ratelimit.Result) {
				ratelimit.HeadersIETF.WriteHeaders(h, res)
				h.Set("X-Binding", res.Binding().Limit.Name())
			})))
		w := serve(lim.Handler(okHandler), request("GET", "/", "k", -1))
		assert.Equal(t, `"requests";r=4;t=12`, w.Header().Get("RateLimit"))
		assert.Equal(t, "requests", w.Header().Get("X-Binding"))
	})

	t.Run("styles beside other writers", func(t *testing.T) {
		// The styles' fields, then each writer's, in order: the second
		// writer sees (and here overwrites) the first one's field.
		binding := headerFunc(func(h http.Header, res ratelimit.Result) { h.Set("X-Binding", res.Binding().Limit.Name()) })
		later := headerFunc(func(h http.Header, _ ratelimit.Result) { h.Set("X-Binding", h.Get("X-Binding")+"+later") })
		lim, _, _ := newLimiter(t, ratelimit.WithLimits(ratelimit.PerMinute(5)),
			ratelimit.WithHeaders(ratelimit.HeadersIETF, binding, ratelimit.HeadersXRateLimit, later))
		w := serve(lim.Handler(okHandler), request("GET", "/", "k", -1))
		assert.Equal(t, `"requests";r=4;t=12`, w.Header().Get("RateLimit"))
		assert.Equal(t, "4", w.Header().Get("X-RateLimit-Remaining"))
		assert.Equal(t, "requests+later", w.Header().Get("X-Binding"))
	})
}

type headerFunc func(http.Header, ratelimit.Result)

func (f headerFunc) WriteHeaders(h http.Header, res ratelimit.Result) { f(h, res) }

func TestHeadersAreSetBeforeTheHandlerRuns(t *testing.T) {
	lim, _, _ := newLimiter(t, ratelimit.WithLimits(ratelimit.PerMinute(60)))
	var seen string
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = w.Header().Get("RateLimit")
		w.WriteHeader(http.StatusOK) // a streaming handler flushes here
	}))
	serve(h, request("GET", "/", "k", -1))
	assert.Equal(t, `"requests";r=59;t=1`, seen)
}

func TestChiIntegration(t *testing.T) {
	newLim := func(t *testing.T) *ratelimit.Limiter {
		lim, _, _ := newLimiter(t, ratelimit.WithLimits(ratelimit.PerMinute(1)))
		return lim
	}
	t.Run("r.Use", func(t *testing.T) {
		r := chi.NewRouter()
		r.Use(newLim(t).Handler)
		r.Get("/a", okHandler)
		assert.Equal(t, http.StatusOK, serve(r, request("GET", "/a", "k", -1)).Code)
		assert.Equal(t, http.StatusTooManyRequests, serve(r, request("GET", "/a", "k", -1)).Code)
	})
	t.Run("r.With", func(t *testing.T) {
		r := chi.NewRouter()
		r.With(newLim(t).Handler).Get("/limited", okHandler)
		r.Get("/free", okHandler)
		assert.Equal(t, http.StatusOK, serve(r, request("GET", "/limited", "k", -1)).Code)
		assert.Equal(t, http.StatusTooManyRequests, serve(r, request("GET", "/limited", "k", -1)).Code)
		assert.Equal(t, http.StatusOK, serve(r, request("GET", "/free", "k", -1)).Code)
	})
	t.Run("group and sub-router", func(t *testing.T) {
		r := chi.NewRouter()
		lim := newLim(t)
		r.Group(func(g chi.Router) {
			g.Use(lim.Handler)
			g.Get("/g", okHandler)
		})
		r.Route("/api", func(sr chi.Router) {
			sr.Use(lim.Handler)
			sr.Get("/x", okHandler)
		})
		r.Get("/free", okHandler)
		assert.Equal(t, http.StatusOK, serve(r, request("GET", "/g", "k", -1)).Code)
		// One Limiter, one budget per key across the routes it wraps.
		assert.Equal(t, http.StatusTooManyRequests, serve(r, request("GET", "/api/x", "k", -1)).Code)
		assert.Equal(t, http.StatusOK, serve(r, request("GET", "/api/x", "other", -1)).Code)
		assert.Equal(t, http.StatusOK, serve(r, request("GET", "/free", "k", -1)).Code)
	})
	t.Run("std mux", func(t *testing.T) {
		mux := http.NewServeMux()
		mux.Handle("GET /a", okHandler)
		h := newLim(t).Handler(mux)
		assert.Equal(t, http.StatusOK, serve(h, request("GET", "/a", "k", -1)).Code)
		assert.Equal(t, http.StatusTooManyRequests, serve(h, request("GET", "/a", "k", -1)).Code)
	})
	t.Run("per-route budgets under top-level r.Use", func(t *testing.T) {
		lim, _, _ := newLimiter(t, ratelimit.WithLimits(ratelimit.PerMinute(1)),
			ratelimit.WithKey(ratelimit.Compose(ratelimit.KeyByAPIKey(), ratelimit.KeyByRoute())))
		r := chi.NewRouter()
		r.Use(lim.Handler)
		r.Get("/users/{id}", okHandler)
		r.Get("/items/{id}", okHandler)
		assert.Equal(t, http.StatusOK, serve(r, request("GET", "/users/1", "k", -1)).Code)
		// /users/2 is the same route: same budget, not one per id.
		assert.Equal(t, http.StatusTooManyRequests, serve(r, request("GET", "/users/2", "k", -1)).Code)
		assert.Equal(t, http.StatusOK, serve(r, request("GET", "/items/1", "k", -1)).Code)
		assert.Equal(t, http.StatusNotFound, serve(r, request("GET", "/nowhere", "k", -1)).Code)
	})
}

func TestConcurrentRequests(t *testing.T) {
	// 8 goroutines × 50 requests on 5 keys at one instant, 20 per key
	// allowed: exactly 100 admitted and 300 refused, whatever the
	// interleaving. Each admitted request reports 2 tokens for an
	// estimate of 1, settled once each.
	lim, store, _ := newLimiter(t, ratelimit.WithLimits(
		ratelimit.PerMinute(20).Named("requests"),
		ratelimit.PerDay(1_000_000).Named("tokens").CostFrom(estimateTokens)))
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := ratelimit.ReportUsage(r.Context(), "tokens", 2); err != nil {
			t.Error(err)
		}
	}))
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				w := serve(h, request("GET", "/", fmt.Sprint("key", (g+i)%5), 1))
				mu.Lock()
				codes[w.Code]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	assert.Equal(t, map[int]int{200: 100, 429: 300}, codes)
	assert.Equal(t, ratelimit.Stats{Allowed: 100, Limited: 300, Settled: 100}, lim.Stats())
	assert.Len(t, store.Adjusts(), 100)
}

func TestHooksOnDecision(t *testing.T) {
	var mu sync.Mutex
	var results []ratelimit.Result
	lim, _, _ := newLimiter(t, ratelimit.WithLimits(ratelimit.PerMinute(1)), ratelimit.WithHooks(ratelimit.Hooks{
		OnDecision: func(_ context.Context, res ratelimit.Result) { mu.Lock(); results = append(results, res); mu.Unlock() },
	}))
	h := lim.Handler(okHandler)
	serve(h, request("GET", "/", "k", -1))
	serve(h, request("GET", "/", "k", -1))
	_, err := lim.Take(context.Background(), "k")
	require.NoError(t, err)
	require.Len(t, results, 3)
	assert.True(t, results[0].Allowed)
	assert.False(t, results[1].Allowed)
	assert.Equal(t, time.Minute, results[1].RetryAfter)
	assert.False(t, results[2].Allowed)
	assert.Equal(t, ratelimit.Stats{Allowed: 1, Limited: 2}, lim.Stats())
}

func TestManyLimits(t *testing.T) {
	// More limits than fit the request state's inline arrays.
	limits := []ratelimit.Limit{
		ratelimit.PerSecond(10).Named("a"), ratelimit.PerMinute(60).Named("b"),
		ratelimit.PerHour(600).Named("c"), ratelimit.PerDay(6000).Named("d"),
		ratelimit.PerDay(100_000).Named("tokens").CostFrom(estimateTokens),
	}
	lim, store, _ := newLimiter(t, ratelimit.WithLimits(limits...))
	w := serve(lim.Handler(reporting(t, 30, nil)), request("POST", "/", "k", 10))
	require.Equal(t, http.StatusOK, w.Code)
	// The spent unit comes back after one emission interval: a 100ms → 1,
	// b 1s, c 6s, d 14.4s → 15; tokens: full in 10 × 0.864s, the 99,991st
	// back after 0.864s → 1.
	assert.Equal(t, `"a";r=9;t=1, "b";r=59;t=1, "c";r=599;t=6, "d";r=5999;t=15, "tokens";r=99990;t=1`, w.Header().Get("RateLimit"))
	assert.Equal(t, int64(20), singleAdjust(t, store).Cost)
}

// lateErrorStore answers with its own error once its deadline passed, as
// a network client whose socket deadline fired does.
type lateErrorStore struct{ failingStore }

func (lateErrorStore) Take(ctx context.Context, _ []ratelimit.Request, _ []ratelimit.Decision) error {
	<-ctx.Done()
	return errors.New("read tcp: i/o timeout")
}

func TestStoreErrorAfterDeadlineIsATimeout(t *testing.T) {
	var got error
	lim, err := ratelimit.New(lateErrorStore{}, aiLimits(), ratelimit.WithStoreTimeout(time.Millisecond),
		ratelimit.WithHooks(ratelimit.Hooks{OnStoreError: func(_ context.Context, err error) { got = err }}))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, serve(lim.Handler(okHandler), request("POST", "/", "k", 1)).Code)
	assert.ErrorIs(t, got, ratelimit.ErrStoreTimeout)
	assert.ErrorIs(t, got, context.DeadlineExceeded)
	assert.Contains(t, got.Error(), "i/o timeout")
}
