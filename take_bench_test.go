package ratelimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/rampmeter/ratelimit"
)

// hugeRate is a limit no benchmark run spends: every decision is an
// admission, as in the benchmarks module's harness.
func hugeRate(name string) ratelimit.Limit {
	return ratelimit.PerMinute(1_000_000_000).Named(name)
}

// BenchmarkTake measures Limiter.Take on store/memory (the store's own
// cost is in store/memory's BenchmarkStore*): one limit and two stacked
// limits, one goroutine on one key, and every goroutine on 10,000 keys
// or on one hot key. The goal (issue 10) is 0 allocs/op.
func BenchmarkTake(b *testing.B) {
	for _, c := range []struct {
		name   string
		limits []ratelimit.Limit
	}{
		{"one", []ratelimit.Limit{hugeRate("requests")}},
		{"stack2", []ratelimit.Limit{hugeRate("requests"), hugeRate("tokens")}},
	} {
		b.Run(c.name+"/serial", func(b *testing.B) {
			lim := benchLimiter(b, ratelimit.WithLimits(c.limits...))
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if res, err := lim.Take(ctx, "hot"); err != nil || !res.Allowed {
					b.Fatal(res.Allowed, err)
				}
			}
		})
		for _, n := range []int{10_000, 1} {
			name := "parallel-10k"
			if n == 1 {
				name = "parallel-hot"
			}
			b.Run(c.name+"/"+name, func(b *testing.B) {
				lim := benchLimiter(b, ratelimit.WithLimits(c.limits...))
				keys := benchKeys(n)
				ctx := context.Background()
				for _, k := range keys {
					_, _ = lim.Take(ctx, k)
				}
				var seed atomic.Uint64
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					x := seed.Add(0x9E3779B97F4A7C15) | 1
					for pb.Next() {
						x ^= x << 13
						x ^= x >> 7
						x ^= x << 17
						if res, err := lim.Take(ctx, keys[x%uint64(len(keys))]); err != nil || !res.Allowed {
							b.Error(res.Allowed, err)
							return
						}
					}
				})
			})
		}
	}
}

// ipRequests returns n GET requests from n client addresses (RFC 2544
// benchmarking addresses, never dialled).
func ipRequests(n int) []*http.Request {
	reqs := make([]*http.Request, n)
	for i := range reqs {
		reqs[i] = httptest.NewRequest("GET", "/", nil)
		reqs[i].RemoteAddr = fmt.Sprintf("198.18.%d.%d:40000", i/250, i%250+1)
	}
	return reqs
}

// BenchmarkMiddlewareIP is the benchmarks module's middleware case in
// this module: Limiter.Handler keyed by KeyByIP, one limit, the default
// IETF fields, around a handler that writes a status and a body, with no
// router, over one client IP (serial) and 10,000 (parallel); bare is the
// handler alone. The goal (issue 10) is at most 3 allocations and 300 B
// beyond bare.
func BenchmarkMiddlewareIP(b *testing.B) {
	body := []byte("ok\n")
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body)
	})
	reqs := ipRequests(10_000)
	for _, c := range []struct {
		name string
		h    func(b *testing.B) http.Handler
	}{
		{"bare", func(*testing.B) http.Handler { return handler }},
		{"one-limit", func(b *testing.B) http.Handler {
			lim := benchLimiter(b, ratelimit.WithKey(ratelimit.KeyByIP()), ratelimit.WithLimits(hugeRate("requests")))
			return lim.Handler(handler)
		}},
	} {
		b.Run(c.name+"/serial", func(b *testing.B) {
			h := c.h(b)
			w := &discardWriter{h: make(http.Header, 8)}
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				w.code = 0
				h.ServeHTTP(w, reqs[0])
				if w.code != http.StatusOK {
					b.Fatal(w.code)
				}
			}
		})
		b.Run(c.name+"/parallel-10k", func(b *testing.B) {
			h := c.h(b)
			runBench(b, h, reqs, http.StatusOK)
		})
	}
}
