package ratelimit_test

import (
	"net/http"
	"testing"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/memory"
)

// BenchmarkNestedLimiters: a per-IP Limiter in front of a per-key one, as
// the README recommends, both named, on one memory store: what nesting
// adds over one Limiter (BenchmarkMiddleware/one-limit): the second
// Limiter's work, and the joining of the fields the first one set.
func BenchmarkNestedLimiters(b *testing.B) {
	store, err := memory.New()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = store.Close() })
	huge := ratelimit.PerDay(100_000)
	// Every request comes from httptest's one address: a quota no run
	// spends.
	perIP := ratelimit.PerDay(1_000_000_000)
	outer, err := ratelimit.New(store, ratelimit.WithName("ip"), ratelimit.WithKey(ratelimit.KeyByIP()), ratelimit.WithLimits(perIP))
	if err != nil {
		b.Fatal(err)
	}
	inner, err := ratelimit.New(store, ratelimit.WithName("key"), ratelimit.WithKey(ratelimit.KeyByAPIKey()), ratelimit.WithLimits(huge))
	if err != nil {
		b.Fatal(err)
	}
	h := outer.Handler(inner.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })))
	runBench(b, h, benchRequests(10_000, false), http.StatusOK)
}
