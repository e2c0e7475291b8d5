package ratelimit_test

import (
	"context"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/llm"
)

// tpm is a tokens-per-minute limit of 1000 tokens: one token refills every
// 60ms.
func tpm() ratelimit.Limit { return ratelimit.PerMinute(1000).Named("tokens").CostFrom(estimateTokens) }

func TestReserveClamp(t *testing.T) {
	lim, store, _ := newLimiter(t, ratelimit.WithLimits(tpm()), ratelimit.WithReserveClamp(0.5))

	// Request 1 estimates 800 but reserves min(800, 0.5 × 1000) = 500.
	// While it runs, request 2 (300) still fits the 500 left: one large
	// max_tokens does not lock the key out. Without the clamp it would
	// find 200 left and wait 100 × 60ms = 6s.
	var inner *httptestResult
	var reserved int64
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reserved, _ = ratelimit.Reserved(r.Context(), "tokens")
		inner = record(lim.Handler(reporting(t, 300, nil)), request("POST", "/", "k", 300))
		require.NoError(t, ratelimit.ReportUsage(r.Context(), "tokens", 800))
	}))
	w := serve(h, request("POST", "/", "k", 800))
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, int64(500), reserved)
	// t: the token after the r left is back in one interval, 60ms → 1
	// (full in 500 × 60ms, of which 499 × 60ms refill the tokens after it).
	assert.Equal(t, `"tokens";r=500;t=1`, w.Header().Get("RateLimit"))
	assert.Equal(t, http.StatusOK, inner.code)
	assert.Equal(t, `"tokens";r=200;t=1`, inner.rateLimit) // 800 × 60ms − 799 × 60ms

	// Both settled: +300 for request 1 (800 used, 500 reserved), 0 for
	// request 2. 1,100 used of 1,000: 100 of debt, the overage of the
	// clamped request. A 1-token request waits for 101 tokens: 6.06s → 7.
	assert.Equal(t, int64(300), singleAdjust(t, store).Cost)
	w = serve(lim.Handler(okHandler), request("POST", "/", "k", 1))
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "7", w.Header().Get("Retry-After"))
	assert.Equal(t, `"tokens";r=0;t=7`, w.Header().Get("RateLimit")) // the binding limit's t is Retry-After

	// An estimate above the burst is not clamped: it can never fit.
	w = serve(lim.Handler(okHandler), request("POST", "/", "other", 1001))
	assert.Equal(t, http.StatusRequestEntityTooLarge, w.Code)

	// 1/3 of 1,000 is 333 (rounded down).
	lim, _, _ = newLimiter(t, ratelimit.WithLimits(tpm()), ratelimit.WithReserveClamp(1.0/3))
	w = serve(lim.Handler(okHandler), request("POST", "/", "k", 400))
	assert.Equal(t, `"tokens";r=667;t=1`, w.Header().Get("RateLimit")) // 333 × 60ms − 332 × 60ms

	for _, f := range []float64{0, -0.5, 1.5, math.NaN(), math.Inf(1)} {
		_, err := ratelimit.New(newStore(t, time.Now), ratelimit.WithLimits(tpm()), ratelimit.WithReserveClamp(f))
		assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig, "%v", f)
	}
}

// httptestResult is what record keeps of a response.
type httptestResult struct {
	code      int
	rateLimit string
}

func record(h http.Handler, r *http.Request) *httptestResult {
	w := serve(h, r)
	return &httptestResult{code: w.Code, rateLimit: w.Header().Get("RateLimit")}
}

// TestRefusedBodyKeepsNoTokens: the body {} names no model; the token
// estimate is 0 prompt tokens + the default output cap of 256, reserved
// when the request is admitted. The handler refuses the body with 400 and
// reports no usage, so the 256 tokens are released: the tokens limit is
// whole again (100,000), while the requests limit still counts the
// request (59 of 60 left).
func TestRefusedBodyKeepsNoTokens(t *testing.T) {
	estimate := llm.EstimateOpenAITokens(llm.WithDefaultOutputTokens(256))
	lim, store, _ := newLimiter(t, ratelimit.WithLimits(
		ratelimit.PerMinute(60).Named("requests"),
		ratelimit.PerDay(100_000).Named("tokens").CostFrom(estimate)))
	var reserved int64
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reserved, _ = ratelimit.Reserved(r.Context(), "tokens")
		body, err := llm.ReadOpenAIBody(r, 0)
		if err == nil && body.Model == "" {
			http.Error(w, `"model" is required`, http.StatusBadRequest)
		}
	}))
	r := request("POST", "/v1/chat/completions", "k", -1)
	r.Body = io.NopCloser(strings.NewReader(`{}`))
	require.Equal(t, http.StatusBadRequest, serve(h, r).Code)
	assert.Equal(t, int64(256), reserved)
	assert.Equal(t, []int64{59, 100_000}, peek(t, store.Store, "k", lim.Limits()...))
	assert.Equal(t, ratelimit.Stats{Allowed: 1, Settled: 1, Released: 1}, lim.Stats())
}

func TestFailedCallReleasesTheReservation(t *testing.T) {
	type outcome struct {
		adjust   []int64 // per Adjust call, the tokens delta (none: nil)
		tokens   int64   // tokens left afterwards
		released uint64
	}
	abort := func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("data: partial\n\n")) // 200 is on the wire
		panic(http.ErrAbortHandler)
	}
	tests := []struct {
		name    string
		charge  bool // WithChargeOnFailure
		usage   int64
		handler func(w http.ResponseWriter, r *http.Request)
		want    outcome
	}{
		// 1,000 reserved; the model failed and reported nothing: the
		// estimate is refunded; the request itself still counts.
		{"502 without report", false, -1, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadGateway) },
			outcome{[]int64{-1000}, 100_000, 1}},
		{"500 with report", false, 300, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) },
			outcome{[]int64{-700}, 99_700, 0}},
		{"502 with WithChargeOnFailure", true, -1, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadGateway) },
			outcome{nil, 99_000, 0}},
		// Any status outside 2xx is a failed call: a 4xx refused by the
		// handler consumed no tokens either.
		{"400 without report", false, -1, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadRequest) },
			outcome{[]int64{-1000}, 100_000, 1}},
		{"400 with report", false, 10, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadRequest) },
			outcome{[]int64{-990}, 99_990, 0}},
		{"400 with WithChargeOnFailure", true, -1, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadRequest) },
			outcome{nil, 99_000, 0}},
		{"304", false, -1, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNotModified) },
			outcome{[]int64{-1000}, 100_000, 1}},
		{"panic before answering", false, -1, func(http.ResponseWriter, *http.Request) { panic("boom") },
			outcome{[]int64{-1000}, 100_000, 1}},
		{"abort mid-stream", false, -1, abort, outcome{nil, 99_000, 0}},
		{"404", false, -1, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNotFound) },
			outcome{[]int64{-1000}, 100_000, 1}},
		// Success keeps the reservation when nothing is reported.
		{"no status written (200)", false, -1, func(http.ResponseWriter, *http.Request) {}, outcome{nil, 99_000, 0}},
		{"201", false, -1, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) }, outcome{nil, 99_000, 0}},
		{"early hints then 503", false, -1, func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(http.StatusServiceUnavailable)
		}, outcome{[]int64{-1000}, 100_000, 1}},
	}
	onEachStore(t, func(t *testing.T, f storeFactory) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				opts := []ratelimit.Option{aiLimits()}
				if tt.charge {
					opts = append(opts, ratelimit.WithChargeOnFailure())
				}
				lim, store, _ := newLimiterOn(t, f, opts...)
				func() {
					defer func() { _ = recover() }()
					serve(lim.Handler(reporting(t, tt.usage, tt.handler)), request("POST", "/", "k", 1000))
				}()
				var got outcome
				for _, a := range store.Adjusts() {
					require.Len(t, a.Reqs, 1, "only tokens is settled")
					assert.Equal(t, "tokens", a.Reqs[0].Limit.Name())
					got.adjust = append(got.adjust, a.Reqs[0].Cost)
				}
				rem := peek(t, store.Store, "k", lim.Limits()...)
				assert.Equal(t, int64(59), rem[0], "the request counts either way")
				got.tokens = rem[1]
				got.released = lim.Stats().Released
				assert.Equal(t, tt.want, got)
			})
		}
	})
}

// WithRefundOnServerError makes a failed call free on every limit: the
// request's unit of "requests" is refunded too, on 5xx and on a panic
// before any status, but not on a 4xx (the client's mistake; its tokens
// are released as without the option) nor when the handler answered.
func TestRefundOnServerError(t *testing.T) {
	type outcome struct {
		calls    int     // Adjust calls
		adjust   []int64 // their deltas, in order (none: nil)
		left     []int64 // requests and tokens left afterwards
		released uint64
		settled  uint64
	}
	tests := []struct {
		name    string
		usage   int64
		handler func(w http.ResponseWriter, r *http.Request)
		want    outcome
	}{
		// 1 request and 1,000 tokens charged, both refunded (in one
		// Adjust, when the status is written): the key is back at 60 and
		// 100,000.
		{"502 without report", -1, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadGateway) },
			outcome{1, []int64{-1, -1000}, []int64{60, 100_000}, 1, 1}},
		{"panic before answering", -1, func(http.ResponseWriter, *http.Request) { panic("boom") },
			outcome{1, []int64{-1, -1000}, []int64{60, 100_000}, 1, 1}},
		// The tokens reported (300 of the 1,000) are settled as reported
		// when the handler returns; the request's unit was released at
		// the status: two Adjusts, one settled request.
		{"500 with report", 300, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) },
			outcome{2, []int64{-1, -700}, []int64{60, 99_700}, 1, 1}},
		// A 4xx releases the tokens (see WithChargeOnFailure) but the
		// request still counts: the client's mistake is not a server error.
		{"400", -1, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadRequest) },
			outcome{1, []int64{-1000}, []int64{59, 100_000}, 1, 1}},
		{"200", 1000, nil, outcome{0, nil, []int64{59, 99_000}, 0, 0}},
	}
	onEachStore(t, func(t *testing.T, f storeFactory) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				lim, store, _ := newLimiterOn(t, f, aiLimits(), ratelimit.WithRefundOnServerError())
				func() {
					defer func() { _ = recover() }()
					serve(lim.Handler(reporting(t, tt.usage, tt.handler)), request("POST", "/", "k", 1000))
				}()
				var got outcome
				adjusts := store.Adjusts()
				got.calls = len(adjusts)
				for _, a := range adjusts {
					for _, r := range a.Reqs {
						got.adjust = append(got.adjust, r.Cost)
					}
				}
				got.left = peek(t, store.Store, "k", lim.Limits()...)
				got.released, got.settled = lim.Stats().Released, lim.Stats().Settled
				assert.Equal(t, tt.want, got)
			})
		}
	})

	// Limits without a cost function alone are refunded too.
	lim, store, _ := newLimiter(t, ratelimit.WithLimits(ratelimit.PerMinute(60).Named("requests")), ratelimit.WithRefundOnServerError())
	w := serve(lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadGateway) })),
		request("POST", "/", "k", -1))
	require.Equal(t, http.StatusBadGateway, w.Code)
	assert.Equal(t, []int64{60}, peek(t, store.Store, "k", lim.Limits()...))

	_, err := ratelimit.New(newStore(t, time.Now), aiLimits(), ratelimit.WithRefundOnServerError(), ratelimit.WithChargeOnFailure())
	assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	assert.EqualError(t, err, "ratelimit: invalid configuration: WithChargeOnFailure and WithRefundOnServerError exclude each other")
}

// failFirstAdjust fails the first Adjust call, then passes the others to
// Store.
type failFirstAdjust struct {
	ratelimit.Store
	failed atomic.Bool
}

func (s *failFirstAdjust) Adjust(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	if s.failed.CompareAndSwap(false, true) {
		return errStoreDown
	}
	return s.Store.Adjust(ctx, reqs, out)
}

// A failed call's release is made when the handler writes its status,
// so the rate-limit fields of the response describe the state after it.
// 60 requests per minute and 1,000 tokens per minute (tpm), 400 tokens
// reserved: a 200 shows the reservation, r=600; a 502 shows the tokens
// back, r=1000, and the requests limit still charged (r=59) unless
// WithRefundOnServerError. (t is the draft's effective window of the r
// announced, 1s for these token buckets: see HeadersIETF.)
func TestFailedCallFieldsShowTheRelease(t *testing.T) {
	limits := ratelimit.WithLimits(ratelimit.PerMinute(60).Named("requests"), tpm())
	styles := ratelimit.WithHeaders(ratelimit.HeadersIETF | ratelimit.HeadersXRateLimit)
	status := func(code int) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(code) }
	}
	for _, tt := range []struct {
		name      string
		opts      []ratelimit.Option
		handler   http.Handler
		rateLimit string
		xRemain   string
		left      []int64
	}{
		{"200", nil, okHandler, `"requests";r=59;t=1, "tokens";r=600;t=1`, "600", []int64{59, 600}},
		{"502", nil, status(http.StatusBadGateway), `"requests";r=59;t=1, "tokens";r=1000;t=1`, "59", []int64{59, 1000}},
		// A 400 for a body the handler refused releases the tokens too
		// (any status outside 2xx, see WithChargeOnFailure).
		{"400", nil, status(http.StatusBadRequest), `"requests";r=59;t=1, "tokens";r=1000;t=1`, "59", []int64{59, 1000}},
		{"400 refunding requests", []ratelimit.Option{ratelimit.WithRefundOnServerError()}, status(http.StatusBadRequest),
			`"requests";r=59;t=1, "tokens";r=1000;t=1`, "59", []int64{59, 1000}},
		{"502 refunding requests", []ratelimit.Option{ratelimit.WithRefundOnServerError()}, status(http.StatusBadGateway),
			`"requests";r=60;t=1, "tokens";r=1000;t=1`, "60", []int64{60, 1000}},
		{"502 charged", []ratelimit.Option{ratelimit.WithChargeOnFailure()}, status(http.StatusBadGateway),
			`"requests";r=59;t=1, "tokens";r=600;t=1`, "600", []int64{59, 600}},
		// Usage reported before the status is not a release: the fields
		// show the reservation, and the 100 used are settled at the end.
		{"502 with report", nil, reporting(t, 100, status(http.StatusBadGateway)),
			`"requests";r=59;t=1, "tokens";r=600;t=1`, "600", []int64{59, 900}},
		// Usage reported after the released status is charged in full
		// when the handler returns: 1,000 − 300.
		{"502 then report", nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusBadGateway)
			require.NoError(t, ratelimit.ReportUsage(r.Context(), "tokens", 300))
		}), `"requests";r=59;t=1, "tokens";r=1000;t=1`, "59", []int64{59, 700}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			lim, store, _ := newLimiter(t, append([]ratelimit.Option{limits, styles}, tt.opts...)...)
			w := serve(lim.Handler(tt.handler), request("POST", "/", "k", 400))
			assert.Equal(t, tt.rateLimit, w.Header().Get("RateLimit"))
			assert.Equal(t, tt.xRemain, w.Header().Get("X-RateLimit-Remaining"))
			assert.Equal(t, tt.left, peek(t, store.Store, "k", lim.Limits()...))
		})
	}

	// The store fails the early release: the fields stay as admitted, and
	// the settlement releases the tokens when the handler returns.
	clock := newClock()
	store := &failFirstAdjust{Store: newStore(t, clock.Now)}
	lim, err := ratelimit.New(store, limits, styles, ratelimit.WithKey(ratelimit.KeyByAPIKey()), ratelimit.WithStoreTimeout(time.Minute))
	require.NoError(t, err)
	w := serve(lim.Handler(status(http.StatusBadGateway)), request("POST", "/", "k", 400))
	assert.Equal(t, `"requests";r=59;t=1, "tokens";r=600;t=1`, w.Header().Get("RateLimit"))
	assert.Equal(t, []int64{59, 1000}, peek(t, store.Store, "k", lim.Limits()...))
	assert.Equal(t, uint64(1), lim.Stats().StoreErrors)
	assert.Equal(t, uint64(1), lim.Stats().Released)
	assert.Equal(t, uint64(1), lim.Stats().Settled)

	// Nested Limiters: the fields join the outer's members and the
	// inner's. Both release their reservations; the inner one, the last
	// to write, rewrites its members and X-RateLimit-* (now the outer's
	// tokens, 600 of 1,000 the least fraction left), and the outer's
	// members keep their admission values.
	outer, outerStore, _ := newLimiter(t, ratelimit.WithLimits(tpm().Named("outer-tokens")), styles)
	inner, _, _ := newLimiter(t, limits, styles)
	w = serve(outer.Handler(inner.Handler(status(http.StatusBadGateway))), request("POST", "/", "k", 400))
	assert.Equal(t, `"outer-tokens";r=600;t=1, "requests";r=59;t=1, "tokens";r=1000;t=1`, w.Header().Get("RateLimit"))
	assert.Equal(t, "600", w.Header().Get("X-RateLimit-Remaining"))
	assert.Equal(t, "1000", w.Header().Get("X-RateLimit-Limit"))
	assert.Equal(t, []int64{1000}, peek(t, outerStore.Store, "k", outer.Limits()...))
	assert.Equal(t, uint64(1), outer.Stats().Released)
	assert.Equal(t, uint64(1), inner.Stats().Released)
}

// barrier holds admitted handlers until n requests have been decided, so
// that every decision of a wave is made while all its admitted requests
// are in flight: the worst case for over-admission.
type barrier struct {
	n       int64
	decided atomic.Int64
	all     chan struct{}
}

func newBarrier(n int64) *barrier { return &barrier{n: n, all: make(chan struct{})} }

func (b *barrier) hooks() ratelimit.Hooks {
	count := func() {
		if b.decided.Add(1) == b.n {
			close(b.all)
		}
	}
	// A request let through without a decision (the store failed) counts
	// too, so that a failure fails the test instead of hanging it.
	return ratelimit.Hooks{
		OnDecision: func(context.Context, ratelimit.Result) { count() },
		OnBypass:   func(context.Context, error) { count() },
	}
}

// wave sends n concurrent requests of estimate est for key; each admitted
// one waits for the barrier, then reports usage (none when usage < 0). It
// returns the status counts.
func wave(t *testing.T, lim *ratelimit.Limiter, b *barrier, n int, key string, est, usage int64) map[int]int {
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-b.all
		if usage >= 0 {
			assert.NoError(t, ratelimit.ReportUsage(r.Context(), "tokens", usage))
		}
	}))
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			w := serve(h, request("POST", "/", key, est))
			mu.Lock()
			codes[w.Code]++
			mu.Unlock()
		})
	}
	wg.Wait()
	return codes
}

// TestConcurrentRequestsNeverOvershoot checks the over-admission bound of
// reserve-then-settle: the reservations of in-flight requests are charged
// atomically at admission, so with usage ≤ estimate the limit is never
// exceeded, and beyond it only by the overage (usage − reservation) of the
// requests in flight. Charging only after the response, as several
// gateways do, admits every concurrent request.
func TestConcurrentRequestsNeverOvershoot(t *testing.T) {
	onEachStore(t, func(t *testing.T, f storeFactory) {
		t.Run("usage below estimate", func(t *testing.T) {
			// 50 concurrent requests estimating 100 tokens each on 1,000
			// tokens per minute, the clock frozen: exactly 10 reservations
			// fit, whatever the interleaving. Each uses 40: 400 charged.
			b := newBarrier(50)
			lim, store, _ := newLimiterOn(t, f, ratelimit.WithLimits(tpm()), ratelimit.WithHooks(b.hooks()))
			assert.Equal(t, map[int]int{200: 10, 429: 40}, wave(t, lim, b, 50, "k", 100, 40))
			assert.Equal(t, []int64{600}, peek(t, store.Store, "k", tpm()))
			assert.Equal(t, ratelimit.Stats{Allowed: 10, Limited: 40, Settled: 10}, lim.Stats())
		})
		t.Run("usage above estimate", func(t *testing.T) {
			// The same, each using 150: 10 × 150 = 1,500 = the limit
			// plus the in-flight overage 10 × (150 − 100) = 500. The key
			// is 500 tokens in debt: a 1-token request waits for 501
			// tokens, 30.06s → 31, the binding limit's t too (the bucket
			// is full again only after 1,500 × 60ms = 90s).
			b := newBarrier(50)
			lim, _, _ := newLimiterOn(t, f, ratelimit.WithLimits(tpm()), ratelimit.WithHooks(b.hooks()))
			assert.Equal(t, map[int]int{200: 10, 429: 40}, wave(t, lim, b, 50, "k", 100, 150))
			w := serve(lim.Handler(okHandler), request("POST", "/", "k", 1))
			require.Equal(t, http.StatusTooManyRequests, w.Code)
			assert.Equal(t, "31", w.Header().Get("Retry-After"))
			assert.Equal(t, `"tokens";r=0;t=31`, w.Header().Get("RateLimit"))
		})
		t.Run("charging after the response overshoots", func(t *testing.T) {
			// Estimate 0, usage 100: every request is admitted, 5,000
			// tokens against a limit of 1,000 (the LiteLLM #18730 bug).
			b := newBarrier(50)
			lim, _, _ := newLimiterOn(t, f, ratelimit.WithLimits(tpm()), ratelimit.WithHooks(b.hooks()))
			assert.Equal(t, map[int]int{200: 50}, wave(t, lim, b, 50, "k", 0, 100))
			// A peek (cost 0) is refused while the key is in debt, until
			// the 4,000 tokens beyond capacity have drained: 4,000 × 60ms
			// = 240s, in Retry-After and the binding t alike.
			w := serve(lim.Handler(okHandler), request("POST", "/", "k", 0))
			assert.Equal(t, http.StatusTooManyRequests, w.Code)
			assert.Equal(t, "240", w.Header().Get("Retry-After"))
			assert.Equal(t, `"tokens";r=0;t=240`, w.Header().Get("RateLimit"))
		})
	})
}

func TestQuotaExhaustedStatus(t *testing.T) {
	limits := ratelimit.WithLimits(
		ratelimit.PerMinute(2).Named("requests"),
		ratelimit.PerDay(1000).Named("tokens").CostFrom(estimateTokens))
	quota := ratelimit.WithQuotaExhaustedStatus(24*time.Hour, http.StatusForbidden)

	lim, _, _ := newLimiter(t, limits, quota)
	h := lim.Handler(okHandler)
	require.Equal(t, http.StatusOK, serve(h, request("POST", "/", "k", 1000)).Code)

	// The daily quota is spent: 403, not 429, with the exact wait: 10
	// tokens × 86.4s = 864s.
	w := serve(h, request("POST", "/", "k", 10))
	require.Equal(t, http.StatusForbidden, w.Code)
	assert.Equal(t, "864", w.Header().Get("Retry-After"))
	assert.Equal(t, `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Forbidden","status":403,`+
		`"detail":"quota exceeded: the \"tokens\" limit allows 1000 tokens per day and this request needs 10 (0 left); retry after 864 seconds",`+
		`"violated-policies":["tokens"],"retry-after-seconds":864}`+"\n", w.Body.String())

	// The per-minute rate is a 429 as usual: 1 request left, then none;
	// one refills every 30s.
	require.Equal(t, http.StatusOK, serve(h, request("POST", "/", "k", 0)).Code)
	w = serve(h, request("POST", "/", "k", 0))
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "30", w.Header().Get("Retry-After"))
	assert.Equal(t, ratelimit.Stats{Allowed: 2, Limited: 2}, lim.Stats())

	for _, bad := range []ratelimit.Option{
		ratelimit.WithQuotaExhaustedStatus(0, http.StatusForbidden),
		ratelimit.WithQuotaExhaustedStatus(time.Hour, http.StatusInternalServerError),
		// 413 means "never fits, do not retry"; an exhausted quota is retryable.
		ratelimit.WithQuotaExhaustedStatus(time.Hour, http.StatusRequestEntityTooLarge),
	} {
		_, err := ratelimit.New(newStore(t, time.Now), limits, bad)
		assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	}
}
