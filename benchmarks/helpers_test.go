package benchmarks_test

import (
	"net/http"
	"testing"

	_ "github.com/rampmeter/ratelimit/benchmarks/adapters" // registers every adapter
	"github.com/rampmeter/ratelimit/benchmarks/decider"
)

// xorshift is a tiny per-goroutine PRNG for picking keys (same cost for
// every library).
type xorshift uint64

func (x *xorshift) next() uint64 {
	v := uint64(*x)
	v ^= v << 13
	v ^= v >> 7
	v ^= v << 17
	*x = xorshift(v)
	return v
}

func mustNew(tb testing.TB, s decider.Spec, cfg decider.Config) decider.Decider {
	tb.Helper()
	d, err := s.New(cfg)
	if err != nil {
		tb.Fatalf("%s: %v", s.Name, err)
	}
	return d
}

// discardWriter: minimal ResponseWriter, header map reused and cleared per
// request so that only the middleware's own allocations show.
type discardWriter struct {
	h    http.Header
	code int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(code int)        { w.code = code }
func (w *discardWriter) reset()                      { clear(w.h); w.code = 0 }

var okBody = []byte("ok\n")

// trivial is the handler every middleware wraps.
var trivial = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(okBody)
})
