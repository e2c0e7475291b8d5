package ratelimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/memory"
)

// discardWriter is a ResponseWriter that keeps nothing but its header map,
// cleared between requests, so the benchmarks measure the middleware and
// not a recorder.
type discardWriter struct {
	h    http.Header
	code int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(code int)        { w.code = code }

// benchRequests returns n requests with distinct API keys.
func benchRequests(n int, tokens bool) []*http.Request {
	reqs := make([]*http.Request, n)
	for i := range reqs {
		r := httptest.NewRequest("POST", "/v1/completions", nil)
		r.Header.Set("Authorization", fmt.Sprintf("Bearer sk-%08d", i))
		if tokens {
			r.Header.Set(tokensHeader, "1000")
		}
		reqs[i] = r
	}
	return reqs
}

func benchLimiter(b *testing.B, opts ...ratelimit.Option) *ratelimit.Limiter {
	store, err := memory.New()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = store.Close() })
	// Keyed by API key (benchRequests gives each its own), and before
	// opts, which may set another key function.
	lim, err := ratelimit.New(store, append([]ratelimit.Option{ratelimit.WithKey(ratelimit.KeyByAPIKey())}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	return lim
}

func runBench(b *testing.B, h http.Handler, reqs []*http.Request, wantCode int) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		w := &discardWriter{h: http.Header{}}
		i := 0
		for pb.Next() {
			clear(w.h)
			w.code = http.StatusOK
			h.ServeHTTP(w, reqs[i%len(reqs)])
			if w.code != wantCode {
				b.Errorf("status %d, want %d", w.code, wantCode)
				return
			}
			i++
		}
	})
}

// BenchmarkMiddleware runs requests end to end in process (chi router,
// memory store, real clock) over 10,000 API keys.
func BenchmarkMiddleware(b *testing.B) {
	const keys = 10_000
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	// The demo's daily quotas: a unit refills in 864ms (requests)
	// and 86.4µs (tokens), so each key's state outlives the rounds between
	// its requests (the store finds it rather than inserting it), and
	// quotas are far above what a benchmark spends: every request is
	// admitted (the refused path is measured separately).
	huge := ratelimit.PerDay(100_000)

	router := func(mw ...func(http.Handler) http.Handler) http.Handler {
		r := chi.NewRouter()
		r.Use(mw...)
		r.Post("/v1/completions", handler)
		return r
	}

	b.Run("bare", func(b *testing.B) {
		runBench(b, router(), benchRequests(keys, false), http.StatusOK)
	})
	b.Run("one-limit", func(b *testing.B) {
		lim := benchLimiter(b, ratelimit.WithLimits(huge))
		runBench(b, router(lim.Handler), benchRequests(keys, false), http.StatusOK)
	})
	b.Run("one-limit-hooked", func(b *testing.B) {
		// Every hook set, as metrics would: the clock is read around the
		// store call and the hooks get values, not pointers.
		var calls, decisions atomic.Int64
		lim := benchLimiter(b, ratelimit.WithLimits(huge), ratelimit.WithHooks(ratelimit.Hooks{
			OnDecision:  func(context.Context, ratelimit.Result) { decisions.Add(1) },
			OnStoreCall: func(context.Context, ratelimit.StoreCall) { calls.Add(1) },
		}))
		runBench(b, router(lim.Handler), benchRequests(keys, false), http.StatusOK)
	})
	b.Run("one-limit-no-headers", func(b *testing.B) {
		lim := benchLimiter(b, ratelimit.WithLimits(huge), ratelimit.WithHeaders(ratelimit.HeadersNone))
		runBench(b, router(lim.Handler), benchRequests(keys, false), http.StatusOK)
	})
	b.Run("stacked-with-settlement", func(b *testing.B) {
		lim := benchLimiter(b, ratelimit.WithLimits(
			huge.Named("requests"),
			ratelimit.PerDay(1_000_000_000).Named("tokens").CostFrom(estimateTokens)))
		settle := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_ = ratelimit.ReportUsage(r.Context(), "tokens", 800)
			w.WriteHeader(http.StatusOK)
		})
		r := chi.NewRouter()
		r.Use(lim.Handler)
		r.Post("/v1/completions", settle)
		runBench(b, r, benchRequests(keys, true), http.StatusOK)
	})
	b.Run("refused", func(b *testing.B) {
		lim := benchLimiter(b, ratelimit.WithLimits(ratelimit.PerDay(1)))
		reqs := benchRequests(keys, false)
		h := router(lim.Handler)
		for _, r := range reqs { // spend every key's budget first
			h.ServeHTTP(&discardWriter{h: http.Header{}}, r)
		}
		runBench(b, h, reqs, http.StatusTooManyRequests)
	})
}

// benchKeys returns n distinct keys.
func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("vendor-%05d", i)
	}
	return keys
}

func BenchmarkWait(b *testing.B) {
	// Wait on 10,000 keys whose limit always has room: the cost of Wait
	// over Take when nobody waits.
	// A long store timeout: a loaded machine must not turn a slow
	// critical section into a failure.
	lim := benchLimiter(b, ratelimit.WithLimits(ratelimit.PerSecond(1_000_000_000)), ratelimit.WithStoreTimeout(time.Minute))
	keys := benchKeys(10_000)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		i := 0
		for pb.Next() {
			if err := lim.Wait(ctx, keys[i%len(keys)]); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
}

func BenchmarkReserveCancel(b *testing.B) {
	// Reserve a LeakyBucket slot and cancel it at once (the last in its
	// queue, so it is refunded): three store calls per cancel.
	lim := benchLimiter(b, ratelimit.WithLimits(ratelimit.PerSecond(1000).WithAlgorithm(ratelimit.LeakyBucket)), ratelimit.WithStoreTimeout(time.Minute))
	keys := benchKeys(10_000)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		i := 0
		for pb.Next() {
			r, err := lim.Reserve(ctx, keys[i%len(keys)])
			if err != nil {
				b.Error(err)
				return
			}
			if err := r.Cancel(ctx); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
}
