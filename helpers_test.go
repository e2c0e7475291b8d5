package ratelimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/internal/clocktest"
	"github.com/rampmeter/ratelimit/store/memory"
)

// epoch is the fake clock's start: any fixed instant works, since every
// expected value below depends only on time differences.
var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// fakeClock is a manual clock shared by a test and its store.
type fakeClock = clocktest.Clock

func newClock() *fakeClock { return clocktest.New(epoch) }

// adjustCall records one Store.Adjust.
type adjustCall struct {
	Reqs   []ratelimit.Request
	CtxErr error // the context's error when Adjust was called
}

// recordingStore wraps a Store and records its Adjust calls (settlement)
// and the number of Take calls.
type recordingStore struct {
	ratelimit.Store
	mu      sync.Mutex
	takes   int
	adjusts []adjustCall
	// adjustOnes counts the Adjust calls made through AdjustOne.
	adjustOnes int
}

func (s *recordingStore) Take(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	s.mu.Lock()
	s.takes++
	s.mu.Unlock()
	return s.Store.Take(ctx, reqs, out)
}

// TakeOne counts a take like Take, and goes through the inner store's
// TakeOne when it has one (store/memory), so that the tests cover the
// Limiter's single-request path; otherwise through its Take.
func (s *recordingStore) TakeOne(ctx context.Context, r ratelimit.Request) (allowed bool, remaining int64, reset, retryAfter, delay time.Duration, at int64, err error) {
	s.mu.Lock()
	s.takes++
	s.mu.Unlock()
	if one, ok := s.Store.(ratelimit.SingleTaker); ok {
		return one.TakeOne(ctx, r)
	}
	out := make([]ratelimit.Decision, 1)
	if err := s.Store.Take(ctx, []ratelimit.Request{r}, out); err != nil {
		return false, 0, 0, 0, 0, 0, err
	}
	d := &out[0]
	return d.Allowed, d.Remaining, d.Reset, d.RetryAfter, d.Delay, d.At, nil
}

// NonBlocking forwards the inner store's answer, false if it has none.
func (s *recordingStore) NonBlocking() bool {
	nb, ok := s.Store.(ratelimit.NonBlocking)
	return ok && nb.NonBlocking()
}

func (s *recordingStore) Adjust(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	s.mu.Lock()
	s.adjusts = append(s.adjusts, adjustCall{Reqs: append([]ratelimit.Request(nil), reqs...), CtxErr: ctx.Err()})
	s.mu.Unlock()
	return s.Store.Adjust(ctx, reqs, out)
}

// AdjustOne records the call like Adjust (one request), counts it in
// adjustOnes, and goes through the inner store's AdjustOne when it has
// one (store/memory), so that the tests cover the Limiter's settlement of
// one limit; otherwise through its Adjust.
func (s *recordingStore) AdjustOne(ctx context.Context, r ratelimit.Request) (allowed bool, remaining int64, reset, retryAfter, delay time.Duration, at int64, err error) {
	s.mu.Lock()
	s.adjusts = append(s.adjusts, adjustCall{Reqs: []ratelimit.Request{r}, CtxErr: ctx.Err()})
	s.adjustOnes++
	s.mu.Unlock()
	if a, ok := s.Store.(ratelimit.SingleAdjuster); ok {
		return a.AdjustOne(ctx, r)
	}
	out := make([]ratelimit.Decision, 1)
	if err := s.Store.Adjust(ctx, []ratelimit.Request{r}, out); err != nil {
		return false, 0, 0, 0, 0, 0, err
	}
	d := &out[0]
	return d.Allowed, d.Remaining, d.Reset, d.RetryAfter, d.Delay, d.At, nil
}

func (s *recordingStore) Adjusts() []adjustCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]adjustCall(nil), s.adjusts...)
}

// errStoreDown is what failingStore returns.
var errStoreDown = errors.New("store down")

// failingStore fails every call.
type failingStore struct{}

func (failingStore) Take(context.Context, []ratelimit.Request, []ratelimit.Decision) error {
	return errStoreDown
}

func (failingStore) Adjust(context.Context, []ratelimit.Request, []ratelimit.Decision) error {
	return errStoreDown
}

// blockingStore never answers: it returns only when its context ends, and
// records that context's error.
type blockingStore struct {
	mu   sync.Mutex
	errs []error
}

func (s *blockingStore) Take(ctx context.Context, _ []ratelimit.Request, _ []ratelimit.Decision) error {
	<-ctx.Done()
	s.mu.Lock()
	s.errs = append(s.errs, ctx.Err())
	s.mu.Unlock()
	return ctx.Err()
}

func (s *blockingStore) Adjust(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	return s.Take(ctx, reqs, out)
}

// newLimiter builds a Limiter on a fresh store with a fake clock, keyed by
// API key (the Bearer token of request), and a store timeout of a minute
// (opts may set another key function and timeout). The tests check
// decisions, not timeouts, and the default 50 ms is real time: under -race
// on a loaded machine, a goroutine waiting for the recording store's mutex
// missed it, and FailOpen turned a refusal into a bypass. Tests of the
// timeout build their own Limiter on a blockingStore.
func newLimiter(t testing.TB, opts ...ratelimit.Option) (*ratelimit.Limiter, *recordingStore, *fakeClock) {
	t.Helper()
	clock := newClock()
	store := &recordingStore{Store: newStore(t, clock.Now)}
	opts = append([]ratelimit.Option{ratelimit.WithKey(ratelimit.KeyByAPIKey()), ratelimit.WithStoreTimeout(time.Minute)}, opts...)
	lim, err := ratelimit.New(store, opts...)
	require.NoError(t, err)
	return lim, store, clock
}

// tokensHeader is the request header the tests' token estimator reads.
const tokensHeader = "X-Test-Tokens"

// estimateTokens is a CostFunc reading the estimate from tokensHeader.
func estimateTokens(r *http.Request) (int64, error) {
	v := r.Header.Get(tokensHeader)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, &ratelimit.StatusError{Code: http.StatusBadRequest, Err: errors.New("bad token estimate")}
	}
	return n, nil
}

// okHandler answers 200 "ok".
var okHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	_, _ = w.Write([]byte("ok"))
})

// request builds a request with an API key and optional token estimate.
func request(method, target, apiKey string, tokens int64) *http.Request {
	r := httptest.NewRequest(method, target, nil)
	if apiKey != "" {
		r.Header.Set("Authorization", "Bearer "+apiKey)
	}
	if tokens >= 0 {
		r.Header.Set(tokensHeader, strconv.FormatInt(tokens, 10))
	}
	return r
}

// serve runs h on r and returns the recorded response.
func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// newStore returns the store the middleware tests run on: the memory
// store on the test's fake clock.
func newStore(t testing.TB, now func() time.Time) ratelimit.Store {
	t.Helper()
	s, err := memory.New(memory.WithClock(now))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}
