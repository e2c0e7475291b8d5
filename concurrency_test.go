package ratelimit_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/memory"
)

// inFlight is a handler that counts the requests running in it (and the
// most ever at once), and blocks each one until it is let go.
type inFlight struct {
	now, peak atomic.Int64
	entered   chan struct{} // one send per request that entered
	release   chan struct{} // one receive per request let go
}

func newInFlight() *inFlight {
	return &inFlight{entered: make(chan struct{}, 1024), release: make(chan struct{})}
}

func (h *inFlight) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := h.now.Add(1)
	for p := h.peak.Load(); n > p && !h.peak.CompareAndSwap(p, n); p = h.peak.Load() {
	}
	h.entered <- struct{}{}
	select {
	case <-h.release:
	case <-r.Context().Done():
	}
	h.now.Add(-1)
	_, _ = w.Write([]byte("ok"))
}

// TestConcurrencyMiddleware: a cap of 2 beside 60 requests per minute.
// Two requests run; the third is refused with 429, Retry-After 1 and the
// cap as its own policy item, and charged nothing on the rate limit; once
// one returns, the next is admitted; once all return, no slot is held.
func TestConcurrencyMiddleware(t *testing.T) {
	cap2 := ratelimit.Concurrent(2, 5*time.Minute)
	lim, store, _ := newLimiter(t, ratelimit.WithLimits(ratelimit.PerMinute(60), cap2),
		ratelimit.WithHeaders(ratelimit.HeadersIETF|ratelimit.HeadersXRateLimit))
	h := newInFlight()
	mw := lim.Handler(h)
	var wg sync.WaitGroup
	codes := make(chan int, 4)
	start := func() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes <- serve(mw, request("GET", "/", "k", -1)).Code
		}()
		select {
		case <-h.entered:
		case <-time.After(10 * time.Second):
			t.Fatal("the request never reached the handler: a slot was not released?")
		}
	}
	start()
	start()
	// The third: refused by the cap. The rate limit's 58 are untouched.
	w := serve(mw, request("GET", "/", "k", -1))
	assert.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "1", w.Header().Get("Retry-After"))
	assert.Equal(t, `"requests";q=60;w=60, "concurrent-requests";q=2;qu="concurrent-requests"`, w.Header().Get("RateLimit-Policy"))
	// requests: 58 left, the next unit in 1 s; the cap: 0 left, retry in 1 s.
	assert.Equal(t, `"requests";r=58;t=1, "concurrent-requests";r=0;t=1`, w.Header().Get("RateLimit"))
	assert.Equal(t, []int64{58, 0}, peek(t, store.Store, "k", lim.Limits()...))
	assert.Contains(t, w.Body.String(), `"detail":"too many requests in flight: the \"concurrent-requests\" limit allows 2 at once, and 2 are in flight; retry after 1 second"`)
	assert.Contains(t, w.Body.String(), `"violated-policies":["concurrent-requests"]`)

	h.release <- struct{}{} // one returns: its slot comes back
	assert.Equal(t, http.StatusOK, <-codes)
	assert.Equal(t, []int64{58, 1}, peek(t, store.Store, "k", lim.Limits()...))
	start() // the third, again: admitted
	h.release <- struct{}{}
	h.release <- struct{}{}
	wg.Wait()
	close(codes)
	for c := range codes {
		assert.Equal(t, http.StatusOK, c)
	}
	assert.Equal(t, int64(2), h.peak.Load())
	assert.Equal(t, []int64{57, 2}, peek(t, store.Store, "k", lim.Limits()...), "every slot returned")
	assert.Equal(t, ratelimit.Stats{Allowed: 3, Limited: 1, Settled: 3}, lim.Stats())
}

// TestConcurrencyMiddlewareAdmissionFields: an admitted request's fields
// count its own slot.
func TestConcurrencyMiddlewareAdmissionFields(t *testing.T) {
	lim, _, _ := newLimiter(t, ratelimit.WithLimits(ratelimit.Concurrent(4, time.Minute).Named("inflight")))
	var fields http.Header
	mw := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fields = w.Header().Clone() }))
	serve(mw, request("GET", "/", "k", -1))
	assert.Equal(t, `"inflight";q=4;qu="concurrent-requests"`, fields.Get("RateLimit-Policy"))
	assert.Equal(t, `"inflight";r=3;t=1`, fields.Get("RateLimit"))
}

// TestConcurrencyReleasedOnEveryExit: a panic, a failing status written
// early (the handler still runs: the slot is kept until it returns), a
// client that disconnects, and a request that waited for its leaky-bucket
// slot and left: each gives its slot back exactly once.
func TestConcurrencyReleasedOnEveryExit(t *testing.T) {
	cap1 := ratelimit.Concurrent(1, time.Hour)
	t.Run("panic", func(t *testing.T) {
		lim, store, _ := newLimiter(t, ratelimit.WithLimits(cap1))
		mw := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))
		assert.PanicsWithValue(t, "boom", func() { serve(mw, request("GET", "/", "k", -1)) })
		assert.Equal(t, []int64{1}, peek(t, store.Store, "k", cap1))
		require.Len(t, store.Adjusts(), 1)
		assert.Equal(t, int64(-1), store.Adjusts()[0].Reqs[0].Cost)
	})
	t.Run("failing status written early", func(t *testing.T) {
		lim, store, _ := newLimiter(t, ratelimit.WithLimits(ratelimit.PerMinute(10).CostFrom(estimateTokens).Named("tokens"), cap1),
			ratelimit.WithRefundOnServerError())
		var during []int64
		mw := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusBadGateway) // the tokens are released now...
			during = peek(t, store.Store, "k", lim.Limits()...)
		}))
		serve(mw, request("GET", "/", "k", 4))
		assert.Equal(t, []int64{10, 0}, during, "...the slot is held until the handler returns")
		assert.Equal(t, []int64{10, 1}, peek(t, store.Store, "k", lim.Limits()...))
	})
	t.Run("client disconnects mid-stream", func(t *testing.T) {
		lim, store, _ := newLimiter(t, ratelimit.WithLimits(cap1))
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			sse(w, `{"choices":[{"delta":{"content":"Hel"}}]}`)
			<-r.Context().Done()
		})
		url, client, done := streamServer(t, lim, h)
		ctx, cancel := context.WithCancel(t.Context())
		resp, err := client.Do(streamRequest(t, ctx, url, 1))
		require.NoError(t, err)
		buf := make([]byte, 1)
		_, err = resp.Body.Read(buf)
		require.NoError(t, err)
		assert.Equal(t, []int64{0}, peek(t, store.Store, "k", cap1), "held while streaming")
		cancel()
		_ = resp.Body.Close()
		<-done
		assert.Equal(t, []int64{1}, peek(t, store.Store, "k", cap1))
	})
	t.Run("left while queued", func(t *testing.T) {
		lb := ratelimit.Every(1, time.Hour).WithBurst(2).WithAlgorithm(ratelimit.LeakyBucket).Named("queue")
		lim, store, _ := newLimiter(t, ratelimit.WithLimits(lb, cap1))
		serve(lim.Handler(okHandler), request("GET", "/", "k", -1)) // the queue now ends in 1 h
		// The second is admitted 1 h into the queue; its client leaves
		// after 10 ms of waiting (real time: the wait is a real timer).
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
		defer cancel()
		w := serve(lim.Handler(okHandler), request("GET", "/", "k", -1).WithContext(ctx))
		assert.Equal(t, http.StatusServiceUnavailable, w.Code)
		assert.Equal(t, "3600", w.Header().Get("Retry-After"), "it was admitted, 1 h away")
		assert.Equal(t, int64(1), peek(t, store.Store, "k", lim.Limits()...)[1])
		adj := store.Adjusts()
		require.Len(t, adj, 2, "the first request's release, and the queued one's refund")
		assert.Equal(t, []int64{-1, -1}, []int64{adj[1].Reqs[0].Cost, adj[1].Reqs[1].Cost})
	})
}

// TestConcurrencyKilledHolder: a holder that never releases (its process
// died) holds its slots until their maximum hold, then they return.
func TestConcurrencyKilledHolder(t *testing.T) {
	cap2 := ratelimit.Concurrent(2, 30*time.Second)
	lim, store, clock := newLimiter(t, ratelimit.WithLimits(cap2))
	for range 2 { // taken and never released: Limiter.Take has no release
		res, err := lim.Take(t.Context(), "k")
		require.NoError(t, err)
		require.True(t, res.Allowed)
	}
	clock.Advance(30*time.Second - time.Microsecond)
	w := serve(lim.Handler(okHandler), request("GET", "/", "k", -1))
	assert.Equal(t, http.StatusTooManyRequests, w.Code, "1µs before the hold ends")
	assert.Equal(t, "1", w.Header().Get("Retry-After"))
	clock.Advance(time.Microsecond)
	assert.Equal(t, []int64{2}, peek(t, store.Store, "k", cap2), "both returned")
	assert.Equal(t, http.StatusOK, serve(lim.Handler(okHandler), request("GET", "/", "k", -1)).Code)
}

// TestConcurrencyReservation: Release gives the slot back (and only the
// slot: the rate limit stays charged), once; Cancel after it does not
// release a second slot; Cancel alone gives back both.
func TestConcurrencyReservation(t *testing.T) {
	cap1 := ratelimit.Concurrent(1, time.Hour)
	lim, store, _ := newLimiter(t, ratelimit.WithLimits(ratelimit.PerMinute(10), cap1))
	r, err := lim.Reserve(t.Context(), "k")
	require.NoError(t, err)
	require.True(t, r.OK())
	r2, err := lim.Reserve(t.Context(), "k")
	require.NoError(t, err)
	assert.False(t, r2.OK(), "the slot is held")
	assert.Equal(t, time.Second, r2.Delay())
	require.NoError(t, r2.Release(t.Context()), "a refused reservation releases nothing")

	ctx, cancel := context.WithCancel(t.Context())
	cancel() // the work ended because its context did: the slot still returns
	require.NoError(t, r.Release(ctx))
	assert.Equal(t, []int64{9, 1}, peek(t, store.Store, "k", lim.Limits()...))
	// Another holder takes the slot; a second Release or a Cancel of r
	// must not release it.
	r3, err := lim.Reserve(t.Context(), "k")
	require.NoError(t, err)
	require.True(t, r3.OK())
	require.NoError(t, r.Release(t.Context()))
	require.NoError(t, r.Cancel(t.Context()))
	assert.Equal(t, []int64{9, 0}, peek(t, store.Store, "k", lim.Limits()...), "r's rate unit back, r3's slot held")
	require.NoError(t, r3.Cancel(t.Context()))
	assert.Equal(t, []int64{10, 1}, peek(t, store.Store, "k", lim.Limits()...))
	require.NoError(t, r3.Release(t.Context()), "after Cancel: nothing")
	assert.Equal(t, []int64{10, 1}, peek(t, store.Store, "k", lim.Limits()...))
}

// roundTripFunc is an http.RoundTripper from a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestConcurrencyTransport: the Transport holds a slot from the call until
// the response body is closed, and releases it when the call fails.
func TestConcurrencyTransport(t *testing.T) {
	cap1 := ratelimit.Concurrent(1, time.Hour)
	lim, store, _ := newLimiter(t, ratelimit.WithLimits(cap1))
	fail := false
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if fail {
			return nil, errors.New("connection refused")
		}
		return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("streamed")), Request: r}, nil
	})
	tr := &ratelimit.Transport{Base: base, Limiter: lim, Key: func(*http.Request) string { return "k" }}
	req := httptest.NewRequest("GET", "http://vendor.example/v1", nil)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	assert.Equal(t, []int64{0}, peek(t, store.Store, "k", cap1), "held while the body is open")
	body, _ := io.ReadAll(resp.Body)
	assert.Equal(t, "streamed", string(body))
	require.NoError(t, resp.Body.Close())
	require.NoError(t, resp.Body.Close()) // twice: released once
	assert.Equal(t, []int64{1}, peek(t, store.Store, "k", cap1))
	assert.Len(t, store.Adjusts(), 1)

	fail = true
	_, err = tr.RoundTrip(req)
	require.Error(t, err)
	assert.Equal(t, []int64{1}, peek(t, store.Store, "k", cap1), "released after the failed call")
}

// TestConcurrencyNoLeak: 100,000 requests, 64 at a time, under a cap of
// 8: the handler never sees more than 8 at once, and afterwards the key
// holds no slot and the store keeps no entry for it.
func TestConcurrencyNoLeak(t *testing.T) {
	if testing.Short() {
		t.Skip("100,000 requests")
	}
	clock := newClock()
	store, err := memory.New(memory.WithClock(clock.Now))
	require.NoError(t, err)
	cap8 := ratelimit.Concurrent(8, time.Minute)
	lim, err := ratelimit.New(store, ratelimit.WithKey(ratelimit.KeyByAPIKey()), ratelimit.WithLimits(cap8),
		ratelimit.WithStoreTimeout(time.Minute))
	require.NoError(t, err)
	var now, peak atomic.Int64
	mw := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n := now.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		for range 20 { // stay a while, so that requests overlap
			runtime.Gosched()
		}
		now.Add(-1)
	}))
	const total, workers = 100_000, 64
	var next, ok, refused atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for next.Add(1) <= total {
				switch serve(mw, request("GET", "/", "k", -1)).Code {
				case http.StatusOK:
					ok.Add(1)
				case http.StatusTooManyRequests:
					refused.Add(1)
				}
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int64(total), ok.Load()+refused.Load())
	assert.LessOrEqual(t, peak.Load(), int64(8))
	assert.Equal(t, []int64{8}, peek(t, store, "k", cap8), "no slot leaked")
	assert.Equal(t, 0, store.Len(), "no entry kept")
	t.Logf("%d admitted, %d refused, at most %d in flight", ok.Load(), refused.Load(), peak.Load())
}
