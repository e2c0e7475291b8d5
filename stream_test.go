package ratelimit_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
)

// streamServer serves h behind lim over real HTTP, for client; done
// receives once per request after lim's handler — and so its settlement —
// has returned.
func streamServer(t *testing.T, lim *ratelimit.Limiter, h http.Handler) (url string, client *http.Client, done chan struct{}) {
	done = make(chan struct{}, 1)
	mw := lim.Handler(h)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { done <- struct{}{} }()
		mw.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close) // also closes the client's idle connections
	return srv.URL, srv.Client(), done
}

func streamRequest(t *testing.T, ctx context.Context, url string, tokens int64) *http.Request {
	r, err := http.NewRequestWithContext(ctx, "POST", url, nil)
	require.NoError(t, err)
	r.Header.Set("Authorization", "Bearer k")
	r.Header.Set(tokensHeader, strconv.FormatInt(tokens, 10))
	return r
}

// sse writes one server-sent event and flushes it, as a streaming
// handler does (through the middleware's ResponseWriter).
func sse(w http.ResponseWriter, data string) {
	fmt.Fprintf(w, "data: %s\n\n", data)
	w.(http.Flusher).Flush()
}

func TestStreamingIsChargedItsRealUsage(t *testing.T) {
	onEachStore(t, func(t *testing.T, f storeFactory) {
		lim, store, _ := newLimiterOn(t, f, aiLimits())
		proceed := make(chan struct{})
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			sse(w, `{"choices":[{"delta":{"content":"Hel"}}]}`)
			<-proceed // the client has read the first event: it was flushed
			sse(w, `{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":30,"total_tokens":42}}`)
			// The usage of the final chunk (package llm parses it).
			assert.NoError(t, ratelimit.ReportUsage(r.Context(), "tokens", 42))
			sse(w, "[DONE]")
		})
		url, client, done := streamServer(t, lim, h)

		resp, err := client.Do(streamRequest(t, t.Context(), url, 1000))
		require.NoError(t, err)
		defer resp.Body.Close()
		// The fields came with the header, before any event: they show
		// the reservation (1,000 tokens; the next token back in 0.864s).
		require.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
		assert.Equal(t, `"requests";r=59;t=1, "tokens";r=99000;t=1`, resp.Header.Get("RateLimit"))
		assert.Empty(t, resp.Trailer)

		rd := bufio.NewReader(resp.Body)
		line, err := rd.ReadString('\n')
		require.NoError(t, err)
		assert.Equal(t, "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n", line)
		close(proceed)
		rest, err := io.ReadAll(rd)
		require.NoError(t, err)
		assert.Contains(t, string(rest), "data: [DONE]")
		<-done

		// Settled once: 42 used of 1,000 reserved.
		assert.Equal(t, int64(42-1000), singleAdjust(t, store).Cost)
		assert.Equal(t, []int64{59, 100_000 - 42}, peek(t, store.Store, "k", lim.Limits()...))
		assert.Equal(t, ratelimit.Stats{Allowed: 1, Settled: 1}, lim.Stats())
	})
}

func TestStreamingClientDisconnects(t *testing.T) {
	tests := []struct {
		name       string
		partial    int64 // usage the handler reports after the disconnect; < 0: none
		wantAdjust []int64
		wantTokens int64
	}{
		// The handler counts the tokens it streamed before the client
		// left (7) and reports them: 993 of the 1,000 are refunded.
		{"partial usage reported", 7, []int64{7 - 1000}, 100_000 - 7},
		// No report: the status (200) went out, so the call did not
		// fail; the reservation stands as the charge.
		{"no report", -1, nil, 99_000},
	}
	onEachStore(t, func(t *testing.T, f storeFactory) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				lim, store, _ := newLimiterOn(t, f, aiLimits())
				var ctxErr error
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Type", "text/event-stream")
					sse(w, `{"choices":[{"delta":{"content":"Hel"}}]}`)
					<-r.Context().Done() // the client went away mid-stream
					ctxErr = r.Context().Err()
					if tt.partial >= 0 {
						assert.NoError(t, ratelimit.ReportUsage(r.Context(), "tokens", tt.partial))
					}
				})
				url, client, done := streamServer(t, lim, h)

				ctx, cancel := context.WithCancel(t.Context())
				resp, err := client.Do(streamRequest(t, ctx, url, 1000))
				require.NoError(t, err)
				_, err = bufio.NewReader(resp.Body).ReadString('\n')
				require.NoError(t, err)
				cancel() // disconnect
				resp.Body.Close()
				<-done

				assert.ErrorIs(t, ctxErr, context.Canceled)
				var got []int64
				for _, a := range store.Adjusts() {
					require.Len(t, a.Reqs, 1)
					assert.NoError(t, a.CtxErr, "settled on a live context")
					got = append(got, a.Reqs[0].Cost)
				}
				assert.Equal(t, tt.wantAdjust, got, "settled exactly once")
				assert.Equal(t, []int64{59, tt.wantTokens}, peek(t, store.Store, "k", lim.Limits()...))
			})
		}
	})
}

func TestStatusWriterKeepsInterfaces(t *testing.T) {
	lim, _, _ := newLimiter(t, aiLimits())
	var flusher, hijacker, readerFrom bool
	var flushErr error
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, flusher = w.(http.Flusher)
		_, hijacker = w.(http.Hijacker)
		_, readerFrom = w.(io.ReaderFrom)
		flushErr = http.NewResponseController(w).Flush()
		w.WriteHeader(http.StatusBadGateway)
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, request("POST", "/", "k", 10))
	assert.True(t, flusher && hijacker && readerFrom)
	assert.NoError(t, flushErr)
	assert.True(t, rec.Flushed)
	// The flush sent the header with 200: the call did not fail, and its
	// later WriteHeader(502) is superfluous (the recorder keeps 200).
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, ratelimit.Stats{Allowed: 1}, lim.Stats())
}
