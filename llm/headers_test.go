package llm_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/llm"
)

func TestProviderHeaders(t *testing.T) {
	lim, _ := newLimiter(t, ratelimit.WithLimits(
		ratelimit.PerMinute(60).Named("requests"),
		ratelimit.PerMinute(10_000).Named("tpm").CostFrom(estimateTokens),
		ratelimit.PerDay(100_000).Named("tpd").CostFrom(estimateTokens),
		ratelimit.PerMinute(1).Named("shadow-rpm").Shadow(),
	), ratelimit.WithHeaders(ratelimit.HeadersIETF|ratelimit.HeadersXRateLimit, llm.OpenAIHeaders(), llm.AnthropicHeaders()))
	h := lim.Handler(okHandler)

	// 1,000 tokens at epoch (03:04:05Z). Requests: 59 left, full again
	// in 1s. Tokens: tpm has the fewest left (9,000; full in 1,000 × 6ms
	// = 6s), tpd 99,000 (864s). The shadow limit is left out of every
	// field; X-RateLimit-* show the least fraction left (tpm, 90%). In
	// RateLimit, t is the time until the unit after r is back: one
	// interval (1 s, 6 ms, 0.864 s) → 1.
	w := serve(h, request("POST", "/", "k", 1000))
	require.Equal(t, http.StatusOK, w.Code)
	want := map[string]string{
		"RateLimit-Policy": `"requests";q=60;w=60, "tpm";q=10000;w=60;rampmeter-unit="tokens", "tpd";q=100000;w=86400;rampmeter-unit="tokens"`,
		"RateLimit":        `"requests";r=59;t=1, "tpm";r=9000;t=1, "tpd";r=99000;t=1`,

		"X-RateLimit-Limit": "10000", "X-RateLimit-Remaining": "9000", "X-RateLimit-Reset": "6",

		"x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": "59", "x-ratelimit-reset-requests": "1s",
		"x-ratelimit-limit-tokens": "10000", "x-ratelimit-remaining-tokens": "9000", "x-ratelimit-reset-tokens": "6s",

		"anthropic-ratelimit-requests-limit": "60", "anthropic-ratelimit-requests-remaining": "59",
		"anthropic-ratelimit-requests-reset": "2026-01-02T03:04:06Z",
		"anthropic-ratelimit-tokens-limit":   "10000", "anthropic-ratelimit-tokens-remaining": "9000",
		"anthropic-ratelimit-tokens-reset": "2026-01-02T03:04:11Z",
	}
	for k, v := range want {
		assert.Equal(t, v, w.Header().Get(k), k)
		assert.Len(t, w.Header().Values(k), 1, k)
	}

	// Reset durations as OpenAI writes them, rounded up to milliseconds;
	// Anthropic's timestamps rounded up to seconds.
	l := ratelimit.PerMinute(40)
	for _, tt := range []struct {
		reset             time.Duration
		openAI, anthropic string
	}{
		{0, "0s", "2026-01-02T03:04:05Z"},
		{12 * time.Millisecond, "12ms", "2026-01-02T03:04:06Z"},
		{863_999_999 * time.Nanosecond, "864ms", "2026-01-02T03:04:06Z"},
		{1500 * time.Millisecond, "1.5s", "2026-01-02T03:04:07Z"},
		{6 * time.Minute, "6m0s", "2026-01-02T03:10:05Z"},
		{86_400 * time.Second, "24h0m0s", "2026-01-03T03:04:05Z"},
	} {
		h := http.Header{}
		llm.OpenAIHeaders().WriteHeaders(h, ratelimit.Result{Allowed: true, Decisions: []ratelimit.Decision{
			{Limit: &l, Allowed: true, Remaining: 3, Reset: tt.reset, At: epoch.UnixMicro()}}})
		llm.AnthropicHeaders().WriteHeaders(h, ratelimit.Result{Allowed: true, Decisions: []ratelimit.Decision{
			{Limit: &l, Allowed: true, Remaining: 3, Reset: tt.reset, At: epoch.UnixMicro()}}})
		assert.Equal(t, tt.openAI, h.Get("x-ratelimit-reset-requests"), tt.reset.String())
		assert.Equal(t, tt.anthropic, h.Get("anthropic-ratelimit-requests-reset"), tt.reset.String())
		assert.Empty(t, h.Get("x-ratelimit-limit-tokens"), "no tokens limit, no tokens fields")
	}
}

func TestRetryHeaders(t *testing.T) {
	for _, tt := range []struct {
		name        string
		limit       ratelimit.Limit
		opts        []llm.HeaderOption
		tokens      int64
		status      int
		retryAfter  string
		ms, should  string
		anyRetryFld bool
	}{
		// One per minute: the second waits 60 s, within the 2 minutes.
		{"short wait", ratelimit.PerMinute(1), nil, -1, 429, "60", "60000", "", true},
		// 2.5 s per unit: Retry-After is the ceiling of retry-after-ms.
		{"fractional wait", ratelimit.Every(1, 2500*time.Millisecond), nil, -1, 429, "3", "2500", "", true},
		// One per hour: 3,600 s, beyond 2 minutes: the SDKs must not wait.
		{"long wait", ratelimit.PerHour(1), nil, -1, 429, "3600", "3600000", "false", true},
		{"long wait, allowed", ratelimit.PerHour(1), []llm.HeaderOption{llm.WithMaxRetryWait(time.Hour)}, -1, 429, "3600", "3600000", "", true},
		{"switched off", ratelimit.PerHour(1), []llm.HeaderOption{llm.WithoutRetryHeaders()}, -1, 429, "3600", "", "", false},
		// A cost above the burst never fits: no wait, and no retry.
		{"never fits", ratelimit.PerMinute(10).Named("tokens").CostFrom(estimateTokens), nil, 20, 413, "", "", "false", true},
	} {
		for _, writer := range []func(...llm.HeaderOption) ratelimit.HeaderWriter{llm.OpenAIHeaders, llm.AnthropicHeaders} {
			t.Run(tt.name, func(t *testing.T) {
				lim, _ := newLimiter(t, ratelimit.WithLimits(tt.limit), ratelimit.WithHeaders(ratelimit.HeadersIETF, writer(tt.opts...)))
				h := lim.Handler(okHandler)
				if tt.status == http.StatusTooManyRequests {
					require.Equal(t, http.StatusOK, serve(h, request("POST", "/", "k", tt.tokens)).Code)
					assert.Empty(t, serve(h, request("POST", "/", "other", tt.tokens)).Header().Values("Retry-After-Ms"), "admitted: no retry fields")
				}
				w := serve(h, request("POST", "/", "k", tt.tokens))
				require.Equal(t, tt.status, w.Code)
				assert.Equal(t, tt.retryAfter, w.Header().Get("Retry-After"))
				assert.Equal(t, tt.ms, w.Header().Get("Retry-After-Ms"))
				assert.Equal(t, tt.should, w.Header().Get("X-Should-Retry"))
				if !tt.anyRetryFld {
					assert.Empty(t, w.Header().Values("Retry-After-Ms"))
					assert.Empty(t, w.Header().Values("X-Should-Retry"))
				}
			})
		}
	}

	for _, bad := range []llm.HeaderOption{llm.WithMaxRetryWait(0), llm.WithMaxRetryWait(-time.Second), nil} {
		_, err := ratelimit.New(failingStore{}, ratelimit.WithLimits(ratelimit.PerMinute(1)), ratelimit.WithHeaders(llm.OpenAIHeaders(bad)))
		assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	}
	// A later valid option repairs an earlier invalid one.
	_, err := ratelimit.New(failingStore{}, ratelimit.WithLimits(ratelimit.PerMinute(1)),
		ratelimit.WithHeaders(llm.AnthropicHeaders(llm.WithMaxRetryWait(0), llm.WithMaxRetryWait(time.Minute))))
	assert.NoError(t, err)
}
