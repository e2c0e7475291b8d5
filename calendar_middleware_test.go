package ratelimit_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"
	_ "time/tzdata" // America/New_York loads on machines without a zone database

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/llm"
)

// newYork is America/New_York: EST = UTC−5 in January.
func newYork(t testing.TB) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	return loc
}

// budgetLimit is a monthly budget of 1000 micro-units, costed by the
// tokens header.
func budgetLimit(t testing.TB) ratelimit.Limit {
	return ratelimit.PerCalendarMonth(1000, newYork(t)).Named("budget").CostFrom(estimateTokens).WithUnit("usd-micros")
}

// TestBudgetRefusal: a spent monthly budget is refused with 402 (by
// WithRefusalStatus) or 429 (the default), Retry-After until the next
// month, and a body that says so. The clock is Jan 31, 2026, 12:00 EST
// (17:00Z); February starts at 00:00 EST, Feb 1 05:00Z, 12 hours later:
// Retry-After 43200.
func TestBudgetRefusal(t *testing.T) {
	noon := time.Date(2026, 1, 31, 17, 0, 0, 0, time.UTC)
	const detail = `quota exceeded: the "budget" limit allows 1000 usd-micros per calendar month in America/New_York and has 400 left, but this request needs 600; it resets at 2026-02-01T00:00:00-05:00, retry after 43200 seconds`
	for _, c := range []struct {
		name   string
		limit  ratelimit.Limit
		status int
		title  string
	}{
		{"402", budgetLimit(t).WithRefusalStatus(http.StatusPaymentRequired), http.StatusPaymentRequired, "Payment Required"},
		{"default 429", budgetLimit(t), http.StatusTooManyRequests, "Too Many Requests"},
	} {
		t.Run(c.name, func(t *testing.T) {
			opts := []ratelimit.Option{ratelimit.WithLimits(c.limit)}
			if c.limit.RefusalStatus() != 0 {
				// A long quota's status does not override the limit's own.
				opts = append(opts, ratelimit.WithQuotaExhaustedStatus(time.Hour, http.StatusForbidden))
			}
			lim, _, clock := newLimiter(t, opts...)
			clock.Set(noon)
			h := lim.Handler(okHandler)
			w := serve(h, request("POST", "/", "k", 600))
			require.Equal(t, http.StatusOK, w.Code)
			// February's 28 days begin in 12 hours.
			assert.Equal(t, `"budget";q=1000;w=2678400;rampmeter-unit="usd-micros"`, w.Header().Get("RateLimit-Policy"), "January: 31 days")
			assert.Equal(t, `"budget";r=400;t=43200`, w.Header().Get("RateLimit"))

			w = serve(h, request("POST", "/", "k", 600))
			require.Equal(t, c.status, w.Code)
			assert.Equal(t, "43200", w.Header().Get("Retry-After"))
			assert.Equal(t, `"budget";r=400;t=43200`, w.Header().Get("RateLimit"))
			var p map[string]any
			require.NoError(t, json.Unmarshal(w.Body.Bytes(), &p))
			assert.Equal(t, map[string]any{
				"type": ratelimit.ProblemQuotaExceeded, "title": c.title, "status": float64(c.status),
				"detail": detail, "violated-policies": []any{"budget"}, "retry-after-seconds": float64(43200),
			}, p)

			// February 1, 00:00 EST: the budget is back.
			clock.Set(time.Date(2026, 2, 1, 5, 0, 0, 0, time.UTC))
			w = serve(h, request("POST", "/", "k", 600))
			require.Equal(t, http.StatusOK, w.Code)
			assert.Equal(t, `"budget";q=1000;w=2419200;rampmeter-unit="usd-micros"`, w.Header().Get("RateLimit-Policy"), "February: 28 days")
			assert.Equal(t, `"budget";r=400;t=2419200`, w.Header().Get("RateLimit"))
		})
	}
}

// TestBudgetRefusalOpenAI: the OpenAI error format says the quota is spent
// and when it resets.
func TestBudgetRefusalOpenAI(t *testing.T) {
	lim, _, clock := newLimiter(t, ratelimit.WithLimits(budgetLimit(t).WithRefusalStatus(http.StatusPaymentRequired)),
		ratelimit.WithErrorFormat(llm.OpenAIErrors()))
	clock.Set(time.Date(2026, 1, 31, 17, 0, 0, 0, time.UTC))
	h := lim.Handler(okHandler)
	require.Equal(t, http.StatusOK, serve(h, request("POST", "/", "k", 600)).Code)
	w := serve(h, request("POST", "/", "k", 600))
	require.Equal(t, http.StatusPaymentRequired, w.Code)
	assert.Equal(t, "43200", w.Header().Get("Retry-After"))
	assert.JSONEq(t, `{"error":{"message":"You exceeded your quota for \"budget\" on usd-micros per calendar month in America/New_York: Limit 1000, Used 600, Requested 600. The quota resets at 2026-02-01T00:00:00-05:00. Please try again in 12h0m0s.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`,
		w.Body.String())
}
