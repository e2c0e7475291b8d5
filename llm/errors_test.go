package llm_test

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/llm"
)

func TestOpenAIErrors(t *testing.T) {
	lim, _ := newLimiter(t, aiLimits(), ratelimit.WithErrorFormat(llm.OpenAIErrors()))
	h := lim.Handler(okHandler)

	w := serve(h, request("POST", "/", "k", 150_000))
	require.Equal(t, http.StatusRequestEntityTooLarge, w.Code)
	assert.Empty(t, w.Header().Values("Retry-After"))
	assert.Equal(t, "application/json", w.Header().Get("Content-Type"))
	assert.Equal(t, `{"error":{"message":"Request too large for \"tokens\" on tokens per day (TPD): Limit 100000, Requested 150000. `+
		`The input or output tokens must be reduced in order to run successfully.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`+"\n", w.Body.String())

	// 99,990 then 20: 10 missing × 0.864s = 8.64s → 9s.
	require.Equal(t, http.StatusOK, serve(h, request("POST", "/", "k", 99_990)).Code)
	w = serve(h, request("POST", "/", "k", 20))
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "9", w.Header().Get("Retry-After"))
	assert.Equal(t, `{"error":{"message":"Rate limit reached for \"tokens\" on tokens per day (TPD): Limit 100000, Used 99990, Requested 20. `+
		`Please try again in 9s.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`+"\n", w.Body.String())

	w = serve(h, request("POST", "/", "", 1))
	require.Equal(t, http.StatusUnauthorized, w.Code)
	assert.Equal(t, "Bearer", w.Header().Get("WWW-Authenticate"))
	assert.Equal(t, `{"error":{"message":"This request has no API key: send your API key as \"Authorization: Bearer <key>\" or \"X-API-Key: <key>\".",`+
		`"type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`+"\n", w.Body.String())

	r := request("POST", "/", "k", -1)
	r.Header.Set(tokensHeader, "x")
	w = serve(h, r)
	require.Equal(t, http.StatusBadRequest, w.Code)
	assert.Equal(t, `{"error":{"message":"bad token estimate","type":"invalid_request_error","param":null,"code":null}}`+"\n", w.Body.String())

	closed, err := ratelimit.New(failingStore{}, aiLimits(), ratelimit.WithErrorFormat(llm.OpenAIErrors()), ratelimit.WithFailureMode(ratelimit.FailClosed))
	require.NoError(t, err)
	w = serve(closed.Handler(okHandler), request("POST", "/", "k", 1))
	require.Equal(t, http.StatusServiceUnavailable, w.Code)
	assert.Equal(t, `{"error":{"message":"The rate limiter cannot decide right now; please try again in 1s.","type":"server_error","param":null,"code":null}}`+"\n",
		w.Body.String())
}

func TestRateNames(t *testing.T) {
	// The OpenAI-shaped messages name rates as OpenAI does.
	lim, _ := newLimiter(t, ratelimit.WithLimits(ratelimit.Every(5, 10*time.Second).Named("burst")), ratelimit.WithErrorFormat(llm.OpenAIErrors()))
	h := lim.Handler(okHandler)
	for range 5 {
		require.Equal(t, http.StatusOK, serve(h, request("GET", "/", "k", -1)).Code)
	}
	w := serve(h, request("GET", "/", "k", -1))
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, `{"error":{"message":"Rate limit reached for \"burst\" on requests per 10 seconds: Limit 5, Used 5, Requested 1. `+
		`Please try again in 2s.","type":"requests","param":null,"code":"rate_limit_exceeded"}}`+"\n", w.Body.String())
	assert.Equal(t, strconv.Itoa(2), w.Header().Get("Retry-After"))
}

// OpenAIErrors shapes the errors of a WithLimitsFunc function too.
func TestOpenAIErrorsOfLimitsFunc(t *testing.T) {
	plans, err := ratelimit.NewPlans(map[string][]ratelimit.Limit{"free": {ratelimit.PerMinute(60).Named("requests")}})
	require.NoError(t, err)
	lim, _ := newLimiter(t, ratelimit.WithErrorFormat(llm.OpenAIErrors()),
		ratelimit.WithLimitsFunc(func(r *http.Request, key string) (*ratelimit.PolicySet, error) {
			return plans.Lookup(strings.TrimSuffix(key, "-x"), "")
		}))
	w := serve(lim.Handler(okHandler), request("GET", "/", "gold-x", -1))
	assert.Equal(t, http.StatusForbidden, w.Code)
	assert.Equal(t, `{"error":{"message":"Your API key's plan does not include this API.","type":"invalid_request_error","param":null,"code":null}}`+"\n", w.Body.String())

	// An error without a status is a server-side fault: 500, a generic
	// message.
	lim, _ = newLimiter(t, ratelimit.WithErrorFormat(llm.OpenAIErrors()),
		ratelimit.WithLimitsFunc(func(*http.Request, string) (*ratelimit.PolicySet, error) {
			return nil, errors.New("accounts database down")
		}))
	w = serve(lim.Handler(okHandler), request("GET", "/", "k", -1))
	assert.Equal(t, http.StatusInternalServerError, w.Code)
	assert.Equal(t, `{"error":{"message":"The server could not determine the rate limits of this request.","type":"server_error","param":null,"code":null}}`+"\n", w.Body.String())
}

// A RejectHandler or key-error handler given beside the format wins over
// the format's, whatever the order of the options.
func TestOpenAIErrorsYieldToExplicitHandlers(t *testing.T) {
	teapot := func(w http.ResponseWriter, _ *http.Request, _ ratelimit.Rejection) { w.WriteHeader(http.StatusTeapot) }
	lim, _ := newLimiter(t, ratelimit.WithRejectHandler(teapot), ratelimit.WithErrorFormat(llm.OpenAIErrors()),
		ratelimit.WithLimits(ratelimit.PerMinute(1)))
	h := lim.Handler(okHandler)
	require.Equal(t, http.StatusOK, serve(h, request("GET", "/", "k", -1)).Code)
	assert.Equal(t, http.StatusTeapot, serve(h, request("GET", "/", "k", -1)).Code)
	w := serve(h, request("GET", "/", "", -1))
	assert.Equal(t, http.StatusUnauthorized, w.Code)
	assert.Equal(t, "application/json", w.Header().Get("Content-Type"), "the format's key-error writer")

	// WithSkipOnKeyError lets the keyless request through.
	lim, _ = newLimiter(t, ratelimit.WithErrorFormat(llm.OpenAIErrors()), ratelimit.WithSkipOnKeyError(),
		ratelimit.WithLimits(ratelimit.PerMinute(1)))
	assert.Equal(t, http.StatusOK, serve(lim.Handler(okHandler), request("GET", "/", "", -1)).Code)
}

// A spent daily quota under WithQuotaExhaustedStatus is OpenAI's
// insufficient_quota: 1,000 tokens spent, 10 more wait 10 × 86.4s = 14m24s.
func TestOpenAIErrorsQuotaExhausted(t *testing.T) {
	lim, _ := newLimiter(t, ratelimit.WithLimits(
		ratelimit.PerMinute(2).Named("requests"),
		ratelimit.PerDay(1000).Named("tokens").CostFrom(estimateTokens)),
		ratelimit.WithQuotaExhaustedStatus(24*time.Hour, http.StatusForbidden),
		ratelimit.WithErrorFormat(llm.OpenAIErrors()))
	h := lim.Handler(okHandler)
	require.Equal(t, http.StatusOK, serve(h, request("POST", "/", "k", 1000)).Code)
	w := serve(h, request("POST", "/", "k", 10))
	require.Equal(t, http.StatusForbidden, w.Code)
	assert.Equal(t, `{"error":{"message":"You exceeded your quota for \"tokens\" on tokens per day (TPD): Limit 1000, Used 1000, Requested 10. `+
		`Please try again in 14m24s.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`+"\n", w.Body.String())
}

// A refusal by a concurrency cap names it as what it is: requests in flight.
func TestOpenAIErrorsConcurrencyCap(t *testing.T) {
	lim, _ := newLimiter(t, ratelimit.WithLimits(ratelimit.Concurrent(2, time.Minute).Named("inflight")), ratelimit.WithErrorFormat(llm.OpenAIErrors()))
	for range 2 { // two calls in flight (never released here)
		res, err := lim.Take(t.Context(), "k")
		require.NoError(t, err)
		require.True(t, res.Allowed)
	}
	w := serve(lim.Handler(okHandler), request("GET", "/", "k", -1))
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "1", w.Header().Get("Retry-After"))
	assert.Equal(t, `{"error":{"message":"Rate limit reached for \"inflight\" on requests in flight at once: Limit 2, Used 2, Requested 1. `+
		`Please try again in 1s.","type":"concurrent-requests","param":null,"code":"rate_limit_exceeded"}}`+"\n", w.Body.String())
}
