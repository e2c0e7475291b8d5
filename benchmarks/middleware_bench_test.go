package benchmarks_test

import (
	"bytes"
	"fmt"
	"net/http"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/rampmeter/ratelimit/benchmarks/decider"
)

// BenchmarkMiddleware: a trivial handler wrapped by each library's
// middleware (keyed by client IP), driven in-process. Requests are built
// once; the ResponseWriter is a reusable discard writer, so numbers are the
// middleware's own cost plus the trivial handler's (compare with mw=bare).
// A middleware that reads the body (MiddlewareSpec.Body) gets POST requests
// whose body is rewound before each call, and each worker its own copies
// of the requests, since such a middleware replaces r.Body.
//
//	case=serial-1ip        one goroutine, one client IP
//	case=parallel-10kip    b.RunParallel, 10,000 client IPs at random
func BenchmarkMiddleware(b *testing.B) {
	for _, m := range decider.Middlewares() {
		reqs := make([]*http.Request, distinctKeys)
		for i := range reqs {
			// RFC 2544 benchmarking addresses, never dialled.
			reqs[i] = newRequest(m, fmt.Sprintf("198.18.%d.%d:40000", i/250, i%250+1))
		}
		b.Run("mw="+m.Name, func(b *testing.B) {
			b.Run("case=serial-1ip", func(b *testing.B) { benchMWSerial(b, m, reqs[0]) })
			b.Run("case=parallel-10kip", func(b *testing.B) { benchMWParallel(b, m, reqs) })
		})
	}
}

// rewindBody is a request body that can be read again from the start
// without allocating (http.NoBody and io.NopCloser would allocate per call).
type rewindBody struct {
	bytes.Reader
	body []byte
}

func (b *rewindBody) Close() error { return nil }

// serveFresh serves r through h, first giving it its body again when the
// middleware reads one (rb non-nil).
func serveFresh(h http.Handler, w *discardWriter, r *http.Request, rb *rewindBody) {
	if rb != nil {
		rb.Reset(rb.body)
		r.Body = rb
	}
	w.reset()
	h.ServeHTTP(w, r)
}

func newRewind(m decider.MiddlewareSpec) *rewindBody {
	if m.Body == nil {
		return nil
	}
	return &rewindBody{body: m.Body}
}

func newMW(b *testing.B, m decider.MiddlewareSpec) (http.Handler, func()) {
	mw, closeFn, err := m.New(decider.HighLimit())
	if err != nil {
		b.Fatalf("%s: %v", m.Name, err)
	}
	if closeFn == nil {
		closeFn = func() {}
	}
	return mw(trivial), closeFn
}

func benchMWSerial(b *testing.B, m decider.MiddlewareSpec, r *http.Request) {
	h, closeFn := newMW(b, m)
	defer closeFn()
	w := &discardWriter{h: make(http.Header, 8)}
	rb := newRewind(m)
	serveFresh(h, w, r, rb)
	bad := 0
	b.ReportAllocs()
	for b.Loop() {
		serveFresh(h, w, r, rb)
		if w.code != http.StatusOK {
			bad++
		}
	}
	if bad > 0 {
		b.Errorf("%s: %d non-200 responses", m.Name, bad)
	}
}

func benchMWParallel(b *testing.B, m decider.MiddlewareSpec, reqs []*http.Request) {
	h, closeFn := newMW(b, m)
	defer closeFn()
	w0 := &discardWriter{h: make(http.Header, 8)}
	rb0 := newRewind(m)
	for _, r := range reqs { // steady state: every key exists already
		serveFresh(h, w0, r, rb0)
	}
	// Per-worker copies of the requests for a middleware that replaces
	// r.Body, made before the timer starts (RunParallel starts GOMAXPROCS
	// workers).
	var sets [][]*http.Request
	if m.Body != nil {
		for range runtime.GOMAXPROCS(0) {
			sets = append(sets, copyRequests(reqs))
		}
	}
	var worker atomic.Int64
	var seed atomic.Uint64
	var bad atomic.Int64
	n := uint64(len(reqs))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		w := &discardWriter{h: make(http.Header, 8)}
		rb := newRewind(m)
		mine := reqs
		if m.Body != nil {
			if i := int(worker.Add(1) - 1); i < len(sets) {
				mine = sets[i]
			} else {
				mine = copyRequests(reqs)
			}
		}
		rng := xorshift(seed.Add(0x9E3779B97F4A7C15) | 1)
		var nb int64
		for pb.Next() {
			serveFresh(h, w, mine[rng.next()%n], rb)
			if w.code != http.StatusOK {
				nb++
			}
		}
		bad.Add(nb)
	})
	if bad.Load() > 0 {
		b.Errorf("%s: %d non-200 responses", m.Name, bad.Load())
	}
}

func copyRequests(reqs []*http.Request) []*http.Request {
	out := make([]*http.Request, len(reqs))
	for i, r := range reqs {
		c := *r
		out[i] = &c
	}
	return out
}
