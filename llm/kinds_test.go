package llm_test

import (
	"fmt"
	"math"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/llm"
)

// Counting keeps the prompt's share, the output's, or both, of the
// estimate. The body: "Hello, world!" (13 bytes: ceil(13/4) = 4 tokens)
// and "abcdefgh" (8 bytes: 2), so a prompt of 6; max_tokens 100 and n 2,
// so an output of 200.
func TestEstimateCounting(t *testing.T) {
	body := `{"model":"m","messages":[{"role":"system","content":"Hello, world!"},{"role":"user","content":"abcdefgh"}],"max_tokens":100,"n":2}`
	for k, want := range map[llm.Kinds]int64{
		llm.All:                    6 + 200,
		llm.Prompt:                 6,
		llm.Input:                  6, // which prompt tokens a cache serves is known only after
		llm.Input | llm.CacheWrite: 6,
		llm.CacheRead:              6,
		llm.Output:                 200,
		llm.Input | llm.Output:     206,
	} {
		got, err := llm.EstimateOpenAITokens(llm.Counting(k))(bodyRequest(body))
		require.NoError(t, err, k.String())
		assert.Equal(t, want, got, k.String())
	}
	for _, bad := range []llm.Kinds{0, 0x10, llm.Output | 0x80} {
		_, err := llm.EstimateOpenAITokens(llm.Counting(bad))(bodyRequest(body))
		require.ErrorIs(t, err, ratelimit.ErrInvalidConfig, bad.String())
		assert.Equal(t, fmt.Sprintf("ratelimit: invalid configuration: EstimateOpenAITokens: Counting(%v): must be a non-empty subset of All", bad), err.Error())
	}
}

// IncludeUsage says whether the client asked for the usage chunk.
func TestReadOpenAIBodyIncludeUsage(t *testing.T) {
	for body, want := range map[string]bool{
		`{"stream":true}`: false,
		`{"stream":true,"stream_options":{"include_usage":true}}`:  true,
		`{"stream":true,"stream_options":{"include_usage":false}}`: false,
		`{"stream":true,"stream_options":null}`:                    false,
		`{"stream":true,"stream_options":{"x":1}}`:                 false,
	} {
		b, err := llm.ReadOpenAIBody(bodyRequest(body), 0)
		require.NoError(t, err, body)
		assert.Equal(t, want, b.IncludeUsage, body)
	}
	for body, msg := range map[string]string{
		`{"stream_options":5}`:                           `llm: invalid request body: "stream_options" must be an object`,
		`{"stream_options":{"include_usage":"yes"}}`:     `llm: invalid request body: "include_usage" must be a boolean, not a JSON string`,
		`{"stream_options":[{"include_usage":true}]}`:    `llm: invalid request body: "stream_options" must be an object`,
		`{"stream":true,"stream_options":"{\"a\":1}"}`:   `llm: invalid request body: "stream_options" must be an object`,
		`{"stream":true,"stream_options":{"a":1},"n":0}`: `llm: invalid request body: "n" must be ≥ 1, got 0`,
	} {
		_, err := llm.ReadOpenAIBody(bodyRequest(body), 0)
		require.ErrorIs(t, err, llm.ErrInvalidBody, body)
		assert.Equal(t, msg, err.Error(), body)
	}
}

// The cost arithmetic, exact: Σ tokens × price per million, rounded up to
// a whole micro-unit.
func TestPricesCost(t *testing.T) {
	prices, err := llm.NewPrices(map[string]llm.Price{
		// $2.50, $1.25 cached, $3.125 cache write, $10 output per million.
		"gpt-4o": {Input: 2_500_000, CacheRead: 1_250_000, CacheWrite: 3_125_000, Output: 10_000_000},
		"free":   {},
		"*":      {Input: 1, Output: 1},
	})
	require.NoError(t, err)
	for _, tt := range []struct {
		model string
		u     llm.Usage
		want  int64
	}{
		// 1,000 × 2.5 + 2,000 × 1.25 + 400 × 3.125 + 500 × 10
		// = 2,500 + 2,500 + 1,250 + 5,000 = 11,250 micro-dollars.
		{"gpt-4o", llm.Usage{Input: 1000, CacheRead: 2000, CacheWrite: 400, Output: 500}, 11_250},
		// One input token costs 2.5: rounded up to 3.
		{"gpt-4o", llm.Usage{Input: 1}, 3},
		{"gpt-4o", llm.Usage{}, 0},
		{"free", llm.Usage{Input: 1_000_000, Output: 1_000_000}, 0},
		// The default: 1 micro-unit per million tokens, so 1,000,001
		// tokens cost 1.000001: rounded up to 2.
		{"unlisted-model", llm.Usage{Input: 1_000_000, Output: 1}, 2},
		// Negative counts count as 0.
		{"gpt-4o", llm.Usage{Input: -1_000_000, Output: 1}, 10},
		// Beyond 64 bits in the product: saturates at 2^53.
		{"gpt-4o", llm.Usage{Output: math.MaxInt64}, 1 << 53},
	} {
		got, err := prices.Cost(tt.model, tt.u)
		require.NoError(t, err)
		assert.Equal(t, tt.want, got, "%s %+v", tt.model, tt.u)
	}

	noDefault, err := llm.NewPrices(map[string]llm.Price{"gpt-4o": {Input: 1}})
	require.NoError(t, err)
	_, err = noDefault.Cost("gpt-5", llm.Usage{Input: 1})
	assert.ErrorIs(t, err, llm.ErrUnknownModel)
	assert.EqualError(t, err, `llm: unknown model: the model "gpt-5" has no price`)
	p, ok := noDefault.Price("gpt-4o")
	assert.True(t, ok)
	assert.Equal(t, llm.Price{Input: 1}, p)

	for table, msg := range map[string]map[string]llm.Price{
		"ratelimit: invalid configuration: NewPrices: the price table is empty":                                                        {},
		`ratelimit: invalid configuration: NewPrices: model "m": prices must be ≥ 0, got {Input:0 CacheRead:-1 CacheWrite:0 Output:0}`: {"m": {CacheRead: -1}},
	} {
		_, err := llm.NewPrices(msg)
		require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
		assert.EqualError(t, err, table)
	}
}

func TestEstimateOpenAICost(t *testing.T) {
	prices, err := llm.NewPrices(map[string]llm.Price{"m": {Input: 2_500_000, CacheRead: 1, Output: 10_000_000}})
	require.NoError(t, err)
	// Prompt "abcdefgh": 2 tokens at 2.5 = 5; output 100 × 2 choices at
	// 10 = 2,000: 2,005 micro-units. With Counting(Output), 2,000.
	body := `{"model":"m","messages":[{"content":"abcdefgh"}],"max_tokens":100,"n":2}`
	got, err := llm.EstimateOpenAICost(prices)(bodyRequest(body))
	require.NoError(t, err)
	assert.Equal(t, int64(2005), got)
	got, err = llm.EstimateOpenAICost(prices, llm.Counting(llm.Output))(bodyRequest(body))
	require.NoError(t, err)
	assert.Equal(t, int64(2000), got)

	// An unknown model is the client's 400; a nil table or a bad option
	// the operator's 500.
	_, err = llm.EstimateOpenAICost(prices)(bodyRequest(`{"model":"x","max_tokens":1}`))
	var se *ratelimit.StatusError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, http.StatusBadRequest, se.StatusCode())
	assert.ErrorIs(t, err, llm.ErrUnknownModel)
	for _, fn := range []ratelimit.CostFunc{llm.EstimateOpenAICost(nil), llm.EstimateOpenAICost(prices, llm.WithMaxBodyBytes(0))} {
		_, err = fn(bodyRequest(body))
		require.ErrorAs(t, err, &se)
		assert.Equal(t, http.StatusInternalServerError, se.StatusCode())
		assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	}
}

// Stacked limits on separate kinds — input tokens without cache reads
// (Anthropic's rule), output tokens, every token, and a spend budget —
// each reserved on its own estimate and settled to its own real count,
// with the Anthropic fields for each.
func TestStackedTokenKinds(t *testing.T) {
	prices, err := llm.NewPrices(map[string]llm.Price{"m": {Input: 3_000_000, CacheRead: 300_000, CacheWrite: 3_750_000, Output: 15_000_000}})
	require.NoError(t, err)
	lim, _ := newLimiter(t, ratelimit.WithLimits(
		ratelimit.PerMinute(60).Named("requests"),
		ratelimit.PerMinute(10_000).Named("input-tokens").
			CostFrom(llm.EstimateOpenAITokens(llm.Counting(llm.Input|llm.CacheWrite))).WithUnit(llm.InputTokens),
		ratelimit.PerMinute(2_000).Named("output-tokens").
			CostFrom(llm.EstimateOpenAITokens(llm.Counting(llm.Output))).WithUnit(llm.OutputTokens),
		ratelimit.PerDay(100_000).Named("tokens").CostFrom(llm.EstimateOpenAITokens()),
		ratelimit.PerDay(5_000_000).Named("spend").CostFrom(llm.EstimateOpenAICost(prices)).WithUnit("micro-usd"),
	), ratelimit.WithHeaders(ratelimit.HeadersIETF, llm.AnthropicHeaders()))

	// The model's answer: 40 uncached input tokens, 1,000 read from the
	// cache, 100 written to it, 50 output.
	used := llm.Usage{Input: 40, CacheRead: 1000, CacheWrite: 100, Output: 50}
	var reserved map[string]int64
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reserved = map[string]int64{}
		for _, name := range []string{"requests", "input-tokens", "output-tokens", "tokens", "spend"} {
			reserved[name], _ = ratelimit.Reserved(r.Context(), name)
		}
		body, err := llm.ReadOpenAIBody(r, 0)
		require.NoError(t, err)
		cost, err := prices.Cost(body.Model, used)
		require.NoError(t, err)
		for name, n := range map[string]int64{
			"input-tokens": used.Count(llm.Input | llm.CacheWrite), "output-tokens": used.Count(llm.Output),
			"tokens": used.Total(), "spend": cost,
		} {
			require.NoError(t, ratelimit.ReportUsage(r.Context(), name, n))
		}
	}))
	// The prompt: 4,800 bytes = 1,200 tokens; max_tokens 300.
	body := fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"%0*d"}],"max_tokens":300}`, 4800, 0)
	w := serve(h, bodyRequest(body))
	require.Equal(t, http.StatusOK, w.Code)

	// Reserved: input 1,200 (the whole prompt), output 300, tokens 1,500,
	// spend 1,200 × 3 + 300 × 15 = 3,600 + 4,500 = 8,100 micro-dollars.
	assert.Equal(t, map[string]int64{"requests": 1, "input-tokens": 1200, "output-tokens": 300, "tokens": 1500, "spend": 8100}, reserved)
	// The fields describe the reservation (the response's header left
	// before the settlement): 10,000 − 1,200 and 2,000 − 300, full again
	// in 1,200 × 6ms = 7.2s and 300 × 30ms = 9s, rounded up.
	for k, v := range map[string]string{
		"anthropic-ratelimit-input-tokens-limit": "10000", "anthropic-ratelimit-input-tokens-remaining": "8800",
		"anthropic-ratelimit-input-tokens-reset":  "2026-01-02T03:04:13Z",
		"anthropic-ratelimit-output-tokens-limit": "2000", "anthropic-ratelimit-output-tokens-remaining": "1700",
		"anthropic-ratelimit-output-tokens-reset": "2026-01-02T03:04:14Z",
		"anthropic-ratelimit-tokens-limit":        "100000", "anthropic-ratelimit-tokens-remaining": "98500",
		"anthropic-ratelimit-requests-remaining": "59",
	} {
		assert.Equal(t, v, w.Header().Get(k), k)
	}
	assert.Contains(t, w.Header().Get("RateLimit-Policy"), `"input-tokens";q=10000;w=60;rampmeter-unit="input-tokens"`)
	assert.Contains(t, w.Header().Get("RateLimit-Policy"), `"spend";q=5000000;w=86400;rampmeter-unit="micro-usd"`)

	// Settled: input 40 + 100 = 140 (cache reads free), output 50, tokens
	// 1,190, spend 40 × 3 + 1,000 × 0.3 + 100 × 3.75 + 50 × 15 = 120 +
	// 300 + 375 + 750 = 1,545.
	res, err := lim.Take(t.Context(), "k", 0, 0, 0, 0, 0)
	require.NoError(t, err)
	left := map[string]int64{}
	for _, d := range res.Decisions {
		left[d.Limit.Name()] = d.Remaining
	}
	assert.Equal(t, map[string]int64{"requests": 59, "input-tokens": 10_000 - 140, "output-tokens": 2_000 - 50,
		"tokens": 100_000 - 1190, "spend": 5_000_000 - 1545}, left)
}
