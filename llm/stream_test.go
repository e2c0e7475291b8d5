package llm_test

import (
	"bufio"
	"fmt"
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

// A streamed OpenAI-style response end to end: the body's estimate is
// reserved, the OpenAI fields go out with the header (before any event),
// the handler reads the usage from the final chunk with ParseOpenAIUsage,
// and the reservation is settled to it.
func TestStreamedUsageIsSettled(t *testing.T) {
	lim, _ := newLimiter(t,
		ratelimit.WithLimits(ratelimit.PerDay(100_000).Named("tokens").CostFrom(llm.EstimateOpenAITokens())),
		ratelimit.WithHeaders(ratelimit.HeadersIETF, llm.OpenAIHeaders()))
	done := make(chan struct{}, 1)
	mw := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := llm.ReadOpenAIBody(r, 0)
		require.NoError(t, err)
		upstream, err := llm.IncludeStreamUsage(body.Raw)
		require.NoError(t, err)
		assert.Contains(t, string(upstream), `"stream_options":{"include_usage":true}`)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, data := range []string{
			`{"choices":[{"delta":{"content":"Hel"}}]}`,
			`{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":30,"total_tokens":42}}`,
			"[DONE]",
		} {
			fmt.Fprintf(w, "data: %s\n\n", data)
			w.(http.Flusher).Flush()
			if u, ok := llm.ParseOpenAIUsage([]byte(data)); ok {
				assert.NoError(t, ratelimit.ReportUsage(r.Context(), "tokens", u.Total()))
			}
		}
	}))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { done <- struct{}{} }()
		mw.ServeHTTP(w, r)
	}))
	defer srv.Close()

	// "Hi" is 1 token (2 bytes / 4, rounded up) and max_tokens 999: 1,000
	// reserved.
	req, err := http.NewRequestWithContext(t.Context(), "POST", srv.URL,
		strings.NewReader(`{"model":"m","stream":true,"max_tokens":999,"messages":[{"role":"user","content":"Hi"}]}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer k")
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "99000", resp.Header.Get("x-ratelimit-remaining-tokens"))
	assert.Equal(t, "14m24s", resp.Header.Get("x-ratelimit-reset-tokens")) // 1,000 × 0.864s
	first, err := bufio.NewReader(resp.Body).ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n", first)
	_, _ = io.Copy(io.Discard, resp.Body)
	<-done

	// Settled to the 42 used: a 0-cost Take shows 99,958 left.
	res, err := lim.Take(t.Context(), "k", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(100_000-42), res.Decisions[0].Remaining)
	assert.Equal(t, ratelimit.Stats{Allowed: 2, Settled: 1}, lim.Stats())
}
