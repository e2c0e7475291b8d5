package llm_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/llm"
)

func bodyRequest(body string) *http.Request {
	r := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(body))
	r.Header.Set("Authorization", "Bearer k")
	return r
}

func TestEstimateOpenAITokens(t *testing.T) {
	words := llm.WithTokenizer(func(s string) int64 { return int64(len(strings.Fields(s))) })
	tests := []struct {
		name string
		body string
		opts []llm.EstimateOption
		want int64
	}{
		// "Hello, world!" is 13 bytes: ceil(13/4) = 4, plus max_tokens.
		{"chat string content", `{"model":"m","messages":[{"role":"user","content":"Hello, world!"}],"max_tokens":100}`, nil, 4 + 100},
		// Text parts only (8 bytes: 2); the largest cap is 50.
		{"chat content parts, largest cap", `{"messages":[{"role":"user","content":[{"type":"text","text":"abcdefgh"},` +
			`{"type":"image_url","image_url":{"url":"https://x"}}]}],"max_completion_tokens":50,"max_tokens":10}`, nil, 2 + 50},
		{"max_output_tokens largest", `{"input":"abcd","max_tokens":3,"max_output_tokens":7}`, nil, 1 + 7},
		// Responses input items and instructions: "abc" 1, "abcde" 2, no
		// cap: DefaultOutputTokens.
		{"responses items, default output", `{"instructions":"abc","input":[{"role":"user","content":[{"type":"input_text","text":"abcde"}]}]}`,
			nil, 1 + 2 + llm.DefaultOutputTokens},
		{"default output option", `{"messages":[{"content":"abcd"}]}`, []llm.EstimateOption{llm.WithDefaultOutputTokens(16)}, 1 + 16},
		{"prompt strings", `{"prompt":["ab","cdefg"],"max_tokens":1}`, nil, 1 + 2 + 1},
		{"prompt token ids", `{"prompt":[1,2,3],"max_tokens":0}`, nil, 3},
		{"embedding token id batches", `{"input":[[1,2],[3,4,5]]}`, []llm.EstimateOption{llm.WithDefaultOutputTokens(0)}, 5},
		// n choices multiply the output cap: 1 + 3×10.
		{"n choices", `{"messages":[{"content":"abcd"}],"max_tokens":10,"n":3}`, nil, 1 + 30},
		// Anthropic: system blocks (8 bytes: 2) and a string message (1).
		{"anthropic system blocks", `{"system":[{"type":"text","text":"12345678"}],"messages":[{"role":"user","content":"1234"}],"max_tokens":5}`, nil, 2 + 1 + 5},
		// Anthropic tool result nested content (4 bytes: 1) and tool
		// call arguments (8 bytes: 2).
		{"nested tool content", `{"messages":[{"role":"user","content":[{"type":"tool_result","content":[{"type":"text","text":"abcd"}]}]},` +
			`{"type":"function_call","arguments":"{\"a\":1}"}],"max_tokens":0}`, nil, 1 + 2},
		// The tools' schemas are prompt: `[{"a":1}]` is 9 bytes: 3.
		{"tools", `{"messages":[],"tools":[{"a":1}],"max_tokens":0}`, nil, 3},
		{"null content", `{"messages":[{"role":"assistant","content":null}],"max_tokens":1}`, nil, 1},
		{"tokenizer", `{"messages":[{"content":"one two three"}],"max_tokens":2}`, []llm.EstimateOption{words}, 3 + 2},
		{"huge cap saturates", `{"max_tokens":9000000000000000000,"n":9}`, nil, 1 << 53},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := llm.EstimateOpenAITokens(tt.opts...)(bodyRequest(tt.body))
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

// failingReader fails the test if the body is read.
type failingReader struct{ t *testing.T }

func (r failingReader) Read([]byte) (int, error) {
	r.t.Error("the body was read")
	return 0, io.EOF
}

func TestEstimateOpenAITokensErrors(t *testing.T) {
	small := llm.WithMaxBodyBytes(16)
	const misconfigured = "The server's rate limiter is misconfigured; this is not a problem with your request."
	tests := []struct {
		name   string
		body   string
		opts   []llm.EstimateOption
		status int
		msg    string
		client string // what the client is told (ClientMessage)
	}{
		{"empty", ``, nil, 400, "llm: invalid request body: the body is empty; expected a JSON object",
			"The request body is invalid: the body is empty; expected a JSON object."},
		{"not an object", `[1]`, nil, 400, "llm: invalid request body: the body must be a JSON object",
			"The request body is invalid: the body must be a JSON object."},
		{"malformed", `{"messages":[`, nil, 400, "llm: invalid request body: malformed JSON at byte 13: unexpected end of JSON input",
			"The request body is invalid: malformed JSON at byte 13: unexpected end of JSON input."},
		{"negative cap", `{"max_tokens":-1}`, nil, 400, `llm: invalid request body: "max_tokens" must be ≥ 0, got -1`,
			`The request body is invalid: "max_tokens" must be ≥ 0, got -1.`},
		{"string cap", `{"max_tokens":"10"}`, nil, 400, `llm: invalid request body: "max_tokens" must be an integer, not a JSON string`,
			`The request body is invalid: "max_tokens" must be an integer, not a JSON string.`},
		{"fractional cap", `{"max_completion_tokens":1.5}`, nil, 400, `llm: invalid request body: "max_completion_tokens" must be an integer, not a JSON number 1.5`,
			`The request body is invalid: "max_completion_tokens" must be an integer, not a JSON number 1.5.`},
		{"zero n", `{"n":0}`, nil, 400, `llm: invalid request body: "n" must be ≥ 1, got 0`,
			`The request body is invalid: "n" must be ≥ 1, got 0.`},
		{"number content", `{"messages":[{"content":5}]}`, nil, 400, `llm: invalid request body: "messages" must be a string, an array of content parts or null`,
			`The request body is invalid: "messages" must be a string, an array of content parts or null.`},
		{"object input", `{"input":{}}`, nil, 400, `llm: invalid request body: "input" must be a string or an array`,
			`The request body is invalid: "input" must be a string or an array.`},
		{"model not a string", `{"model":7}`, nil, 400, `llm: invalid request body: "model" must be a string, not a JSON number`,
			`The request body is invalid: "model" must be a string, not a JSON number.`},
		{"too large", `{"messages":[{"content":"0123456789"}]}`, []llm.EstimateOption{small}, 413, "llm: the request body is larger than 16 bytes",
			"The request body is larger than 16 bytes; send a smaller one."},
		{"invalid option", `{}`, []llm.EstimateOption{llm.WithMaxBodyBytes(0)}, 500,
			"ratelimit: invalid configuration: EstimateOpenAITokens: WithMaxBodyBytes(0): must be ≥ 1", misconfigured},
		{"nil tokenizer", `{}`, []llm.EstimateOption{llm.WithTokenizer(nil)}, 500,
			"ratelimit: invalid configuration: EstimateOpenAITokens: WithTokenizer(nil)", misconfigured},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := llm.EstimateOpenAITokens(tt.opts...)(bodyRequest(tt.body))
			var se *ratelimit.StatusError
			require.ErrorAs(t, err, &se)
			assert.Equal(t, tt.status, se.StatusCode())
			assert.Equal(t, tt.msg, err.Error())
			assert.Equal(t, tt.client, se.ClientMessage())
			if tt.status == 400 {
				assert.ErrorIs(t, err, llm.ErrInvalidBody)
			}
		})
	}

	// An announced oversized body is refused without reading it.
	r := httptest.NewRequest("POST", "/", failingReader{t})
	r.ContentLength = 17
	_, err := llm.EstimateOpenAITokens(small)(r)
	var se *ratelimit.StatusError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, http.StatusRequestEntityTooLarge, se.StatusCode())

	// http.MaxBytesReader set by an outer handler also means 413.
	r = bodyRequest(`{"messages":[{"content":"0123456789"}]}`)
	r.Body = http.MaxBytesReader(nil, r.Body, 8)
	r.ContentLength = -1
	_, err = llm.EstimateOpenAITokens()(r)
	require.ErrorAs(t, err, &se)
	assert.Equal(t, http.StatusRequestEntityTooLarge, se.StatusCode())
}

func TestEstimatorRestoresTheBodyAndSharesTheParse(t *testing.T) {
	const body = `{"model":"big","messages":[{"role":"user","content":"Hello, world!"}],"max_tokens":100}`
	var fromLimits *llm.OpenAIBody
	set, err := ratelimit.NewPolicySet(ratelimit.PerDay(100_000).Named("tokens").CostFrom(llm.EstimateOpenAITokens()))
	require.NoError(t, err)
	lim, store := newLimiter(t, ratelimit.WithLimitsFunc(func(r *http.Request, _ string) (*ratelimit.PolicySet, error) {
		// The LimitsFunc runs first and parses; the estimator and the
		// handler reuse that parse.
		b, err := llm.ReadOpenAIBody(r, 0)
		fromLimits = b
		return set, err
	}))
	var seen string
	var fromHandler *llm.OpenAIBody
	var reserved int64
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		require.NoError(t, err)
		seen = string(b)
		fromHandler, err = llm.ReadOpenAIBody(r, 0) // after the handler read r.Body: still cached
		require.NoError(t, err)
		reserved, _ = ratelimit.Reserved(r.Context(), "tokens")
	}))
	w := serve(h, bodyRequest(body))
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, body, seen, "the handler reads the body as sent")
	assert.Same(t, fromLimits, fromHandler, "parsed once")
	assert.Equal(t, "big", fromHandler.Model)
	assert.Equal(t, []string{"Hello, world!"}, fromHandler.Texts)
	assert.Equal(t, int64(104), reserved)
	// Full in 104 × 0.864s; the token after the 99,896 left is back in one
	// interval, 0.864s → t=1.
	assert.Equal(t, `"tokens";r=99896;t=1`, w.Header().Get("RateLimit"))
	assert.Equal(t, 1, store.takes)
}

func TestMalformedBodyChargesNothing(t *testing.T) {
	lim, store := newLimiter(t, ratelimit.WithLimits(
		ratelimit.PerMinute(60).Named("requests"),
		ratelimit.PerDay(100_000).Named("tokens").CostFrom(llm.EstimateOpenAITokens())))
	w := serve(lim.Handler(okHandler), bodyRequest(`{"messages":[{"content":"hi"}],"max_tokens":"lots"}`))
	require.Equal(t, http.StatusBadRequest, w.Code)
	assert.Equal(t, `{"type":"about:blank","title":"Bad Request","status":400,`+
		`"detail":"The request body is invalid: \"max_tokens\" must be an integer, not a JSON string."}`+"\n", w.Body.String())
	assert.Equal(t, 0, store.takes, "the store was never asked")
	assert.Equal(t, ratelimit.Stats{CostErrors: 1}, lim.Stats())

	// Too large: 413 from the estimator, nothing charged.
	lim, store = newLimiter(t, ratelimit.WithLimits(
		ratelimit.PerDay(100_000).Named("tokens").CostFrom(llm.EstimateOpenAITokens(llm.WithMaxBodyBytes(10)))))
	w = serve(lim.Handler(okHandler), bodyRequest(`{"messages":[]}`))
	require.Equal(t, http.StatusRequestEntityTooLarge, w.Code)
	assert.Equal(t, 0, store.takes)
}

func TestReadOpenAIBodyCachedLimit(t *testing.T) {
	r := bodyRequest(`{"messages":[{"content":"0123456789"}]}`)
	_, err := llm.ReadOpenAIBody(r, 0)
	require.NoError(t, err)
	// A later reader with a smaller maximum still refuses the body.
	_, err = llm.ReadOpenAIBody(r, 10)
	var se *ratelimit.StatusError
	require.True(t, errors.As(err, &se))
	assert.Equal(t, http.StatusRequestEntityTooLarge, se.StatusCode())
}
