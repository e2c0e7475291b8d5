package llm_test

import (
	"errors"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/llm"
)

// On a failed upstream call (502 before any byte) the provider fields
// describe the state after the release of the tokens reservation: 1,000
// tokens were reserved of the daily 100,000, and the 502 shows all
// 100,000 (full: reset 0s), while the request still counts (59 left).
// The same call answered 200 shows the reservation.
func TestProviderFieldsOnAFailedCall(t *testing.T) {
	lim, _ := newLimiter(t, aiLimits(), ratelimit.WithHeaders(llm.OpenAIHeaders(), llm.AnthropicHeaders()),
		ratelimit.WithErrorFormat(llm.OpenAIErrors()))
	failed := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "upstream unavailable", http.StatusBadGateway)
	}))
	w := serve(failed, request("POST", "/", "k", 1000))
	require.Equal(t, http.StatusBadGateway, w.Code)
	for k, v := range map[string]string{
		"x-ratelimit-remaining-tokens": "100000", "x-ratelimit-reset-tokens": "0s",
		"x-ratelimit-remaining-requests": "59", "x-ratelimit-reset-requests": "1s",
		"anthropic-ratelimit-tokens-remaining": "100000", "anthropic-ratelimit-tokens-reset": "2026-01-02T03:04:05Z",
	} {
		assert.Equal(t, v, w.Header().Get(k), k)
	}
	assert.Equal(t, ratelimit.Stats{Allowed: 1, Released: 1, Settled: 1}, lim.Stats())

	w = serve(lim.Handler(okHandler), request("POST", "/", "k", 1000))
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, "99000", w.Header().Get("x-ratelimit-remaining-tokens"))
	assert.Equal(t, "58", w.Header().Get("x-ratelimit-remaining-requests"))
}

// A stream that fails after its first byte cannot take its fields back:
// they went out with the 200. The reservation is kept (the handler
// answered), as without the early release.
func TestProviderFieldsOnAFailedStream(t *testing.T) {
	lim, _ := newLimiter(t, aiLimits(), ratelimit.WithHeaders(llm.OpenAIHeaders()))
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		err := llm.CopyStream(w, iotestErrReader{errors.New("upstream reset")}, llm.StreamOptions{})
		assert.Error(t, err)
	}))
	w := serve(h, request("POST", "/", "k", 1000))
	assert.Equal(t, "99000", w.Header().Get("x-ratelimit-remaining-tokens"))
}
