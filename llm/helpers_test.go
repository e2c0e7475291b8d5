package llm_test

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
// expected value below depends only on time differences (the Anthropic
// reset fields print it: 2026-01-02T03:04:05Z).
var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// countingStore wraps a Store and counts its Take calls.
type countingStore struct {
	ratelimit.Store
	mu    sync.Mutex
	takes int
}

func (s *countingStore) Take(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	s.mu.Lock()
	s.takes++
	s.mu.Unlock()
	return s.Store.Take(ctx, reqs, out)
}

// failingStore fails every call.
type failingStore struct{}

func (failingStore) Take(context.Context, []ratelimit.Request, []ratelimit.Decision) error {
	return errors.New("store down")
}

func (failingStore) Adjust(context.Context, []ratelimit.Request, []ratelimit.Decision) error {
	return errors.New("store down")
}

// newLimiter builds a Limiter on a fresh memory store whose clock stands
// at epoch, with a store timeout of a minute (the tests check decisions,
// not timeouts; opts may set another).
func newLimiter(t testing.TB, opts ...ratelimit.Option) (*ratelimit.Limiter, *countingStore) {
	t.Helper()
	clock := clocktest.New(epoch)
	s, err := memory.New(memory.WithClock(clock.Now))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	store := &countingStore{Store: s}
	lim, err := ratelimit.New(store, append([]ratelimit.Option{ratelimit.WithKey(ratelimit.KeyByAPIKey()), ratelimit.WithStoreTimeout(time.Minute)}, opts...)...)
	require.NoError(t, err)
	return lim, store
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

// aiLimits is 60 requests per minute and 100,000 tokens per day, the
// tokens estimated by estimateTokens.
func aiLimits() ratelimit.Option {
	return ratelimit.WithLimits(
		ratelimit.PerMinute(60).Named("requests"),
		ratelimit.PerDay(100_000).Named("tokens").CostFrom(estimateTokens),
	)
}

// okHandler answers 200 "ok".
var okHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	_, _ = w.Write([]byte("ok"))
})

// request builds a request with an API key and, when tokens ≥ 0, a token
// estimate.
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
