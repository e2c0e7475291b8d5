package llm_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/llm"
	"github.com/rampmeter/ratelimit/store/memory"
)

const benchChatBody = `{"model":"gpt-4o-mini","messages":[{"role":"system","content":"You are a helpful assistant."},` +
	`{"role":"user","content":[{"type":"text","text":"Summarise the following paragraph in one sentence, please."}]}],` +
	`"max_completion_tokens":256,"stream":true}`

// BenchmarkEstimateOpenAITokens reads, parses and estimates a typical chat
// request (281 bytes) per op.
func BenchmarkEstimateOpenAITokens(b *testing.B) {
	est := llm.EstimateOpenAITokens()
	r := httptest.NewRequest("POST", "/v1/chat/completions", nil)
	rd := bytes.NewReader(nil)
	b.ReportAllocs()
	b.SetBytes(int64(len(benchChatBody)))
	for b.Loop() {
		rd.Reset([]byte(benchChatBody))
		r.Body = io.NopCloser(rd)
		if _, err := est(r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMiddlewareAI runs the AI configuration end to end in process
// (memory store, real clock) over 10,000 API keys on two plans: a
// LimitsFunc, the OpenAI estimator reading each body, the reservation
// clamp, IETF and OpenAI headers, the status watch, and settlement of a
// reported usage (one Adjust per request).
func BenchmarkMiddlewareAI(b *testing.B) {
	const keys = 10_000
	est := llm.EstimateOpenAITokens()
	plans, err := ratelimit.NewPlans(map[string][]ratelimit.Limit{
		"free": {ratelimit.PerDay(1_000_000_000).Named("requests"), ratelimit.PerDay(1_000_000_000_000).Named("tokens").CostFrom(est)},
		"pro":  {ratelimit.PerDay(2_000_000_000).Named("requests"), ratelimit.PerDay(2_000_000_000_000).Named("tokens").CostFrom(est)},
	})
	if err != nil {
		b.Fatal(err)
	}
	store, err := memory.New()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = store.Close() })
	lim, err := ratelimit.New(store,
		ratelimit.WithKey(ratelimit.KeyByAPIKey()),
		ratelimit.WithLimitsFunc(func(_ *http.Request, key string) (*ratelimit.PolicySet, error) {
			if strings.HasPrefix(key, "sk-pro-") {
				return plans.Lookup("pro", "")
			}
			return plans.Lookup("free", "")
		}),
		ratelimit.WithReserveClamp(0.5),
		ratelimit.WithHeaders(ratelimit.HeadersIETF, llm.OpenAIHeaders()))
	if err != nil {
		b.Fatal(err)
	}
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = ratelimit.ReportUsage(r.Context(), "tokens", 100)
		w.WriteHeader(http.StatusOK)
	}))
	reqs := make([]*http.Request, keys)
	for i := range reqs {
		plan := "free"
		if i%2 == 1 {
			plan = "pro"
		}
		reqs[i] = httptest.NewRequest("POST", "/v1/chat/completions", nil)
		reqs[i].Header.Set("Authorization", fmt.Sprintf("Bearer sk-%s-%08d", plan, i))
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		w := &discardWriter{h: http.Header{}}
		rd := bytes.NewReader(nil)
		i := 0
		for pb.Next() {
			clear(w.h)
			w.code = http.StatusOK
			// A copy per request: the estimator replaces its Body.
			r := *reqs[i%keys]
			rd.Reset([]byte(benchChatBody))
			r.Body = io.NopCloser(rd)
			h.ServeHTTP(w, &r)
			if w.code != http.StatusOK {
				b.Errorf("status %d", w.code)
				return
			}
			i++
		}
	})
}

// discardWriter is a ResponseWriter that keeps only the header and status.
type discardWriter struct {
	h    http.Header
	code int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(code int)        { w.code = code }

// BenchmarkCopyStream passes a Chat Completions stream of 256 content
// chunks, the finish chunk, the usage chunk and [DONE] (about 30 KB)
// through CopyStream per op, observing the usage and dropping its chunk.
func BenchmarkCopyStream(b *testing.B) {
	var sb strings.Builder
	for i := range 256 {
		fmt.Fprintf(&sb, `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" tok%d"},"finish_reason":null}],"usage":null}`+"\n\n", i)
	}
	sb.WriteString(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}` + "\n\n")
	sb.WriteString(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":256,"total_tokens":268}}` + "\n\n")
	sb.WriteString("data: [DONE]\n\n")
	stream := []byte(sb.String())
	rd := bytes.NewReader(nil)
	b.ReportAllocs()
	b.SetBytes(int64(len(stream)))
	for b.Loop() {
		rd.Reset(stream)
		var u llm.OpenAIUsage
		if err := llm.CopyStream(io.Discard, rd, llm.StreamOptions{Usage: &u, DropUsageChunk: true}); err != nil || u.Total() != 268 {
			b.Fatal(err, u)
		}
	}
}
