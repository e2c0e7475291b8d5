package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/llm"
)

// The fake model is deterministic so the demo can check every figure:
//
//	prompt tokens     = Σ ceil(bytes of each message's content / 4)
//	completion tokens = min(max_tokens, 50), max_tokens defaulting to 256
//
// The limiter's estimate before the call (llm.EstimateOpenAITokens)
// is prompt tokens + max_tokens, reserved (at most half the daily quota,
// WithReserveClamp) and settled to the real usage, prompt + completion,
// after it. The model named failModel always fails with 502, as an
// unavailable upstream would: its reservations are released. The model
// named slowModel answers like "demo" after holding the call for
// slowHold.max (2 s) or until slowHold.gate is closed, whichever comes
// first, so that calls pile up against the concurrency cap.
const (
	defaultMaxTokens = 256
	maxCompletion    = 50
	maxBodyBytes     = 1 << 20 // 1 MiB
	failModel        = "demo-fail"
	slowModel        = "demo-slow"
)

// slowHold holds the calls of slowModel: the -demo run closes gate once it
// has seen every call it expects held (held counts them), with a max long
// enough never to end a hold first.
var slowHold = struct {
	max  time.Duration
	gate chan struct{}
	held atomic.Int64 // calls being held now
}{max: 2 * time.Second, gate: make(chan struct{})}

// holdSlow holds a call of slowModel (see slowHold).
func holdSlow(ctx context.Context) {
	slowHold.held.Add(1)
	defer slowHold.held.Add(-1)
	t := time.NewTimer(slowHold.max)
	defer t.Stop()
	select {
	case <-slowHold.gate:
	case <-t.C:
	case <-ctx.Done():
	}
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type chatRequest struct {
	Model         string         `json:"model"`
	Messages      []chatMessage  `json:"messages"`
	MaxTokens     *int64         `json:"max_tokens,omitempty"`
	Stream        bool           `json:"stream,omitempty"`
	StreamOptions *streamOptions `json:"stream_options,omitempty"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

// estimateTokens is the tokens limit's cost function: it reads the body
// once (at most 1 MiB: 413 beyond), parses it once, and puts it back.
var estimateTokens = llm.EstimateOpenAITokens(
	llm.WithDefaultOutputTokens(defaultMaxTokens),
	llm.WithMaxBodyBytes(maxBodyBytes),
)

// prices is the demo's price table, in micro-dollars per million tokens:
// "demo" at GPT-4o's list prices ($2.50 in, $10 out), "demo-large" at
// o1-pro's ($150 in, $600 out), any other model (demo-fail, or none) at
// demo's. So a demo call of 10 prompt tokens that writes 50 costs
// 10 × 2.5 + 50 × 10 = 525 micro-dollars, and one of 1000 prompt tokens
// on demo-large 1000 × 150 + 50 × 600 = 180,000.
var prices = mustPrices(map[string]llm.Price{
	"demo":       {Input: 2_500_000, Output: 10_000_000},
	"demo-large": {Input: 150_000_000, Output: 600_000_000},
	"*":          {Input: 2_500_000, Output: 10_000_000},
})

func mustPrices(table map[string]llm.Price) *llm.Prices {
	p, err := llm.NewPrices(table)
	if err != nil {
		panic(err) // the table above is valid
	}
	return p
}

// estimateCost is the budget's cost function: the price of the token
// estimate (prompt at the input price, max_tokens at the output price),
// from the same parse of the body as estimateTokens.
var estimateCost = llm.EstimateOpenAICost(prices,
	llm.WithDefaultOutputTokens(defaultMaxTokens),
	llm.WithMaxBodyBytes(maxBodyBytes),
)

// reportUsage settles the call's reservations to what the model used: its
// tokens, and their price on the budget.
func reportUsage(r *http.Request, model string, u llm.Usage) error {
	if err := ratelimit.ReportUsage(r.Context(), "tokens", u.Total()); err != nil {
		return err
	}
	cost, err := prices.Cost(model, u)
	if err != nil {
		return err
	}
	return ratelimit.ReportUsage(r.Context(), "budget", cost)
}

// usageOf is what the fake model spends on body, and whether it stopped
// at the output cap.
func usageOf(body *llm.OpenAIBody) (usage, bool) {
	var u usage
	for _, t := range body.Texts {
		u.PromptTokens += (int64(len(t)) + 3) / 4
	}
	maxTokens := int64(defaultMaxTokens)
	if body.HasMaxOutput {
		maxTokens = body.MaxOutputTokens
	}
	u.CompletionTokens = min(maxTokens, maxCompletion)
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u, maxTokens <= maxCompletion
}

// completions serves POST /v1/chat/completions with the fake model.
func completions(w http.ResponseWriter, r *http.Request) {
	// The estimator parsed the body already: this reads neither again.
	body, err := llm.ReadOpenAIBody(r, maxBodyBytes)
	if err != nil {
		writeError(w, err)
		return
	}
	switch {
	case body.Model == "":
		writeError(w, &ratelimit.StatusError{Code: http.StatusBadRequest, Message: `The request body needs a "model".`})
		return
	case len(body.Texts) == 0:
		writeError(w, &ratelimit.StatusError{Code: http.StatusBadRequest, Message: `The request body needs at least one message in "messages".`})
		return
	}
	// Show the client what the limiter reserved (the demo's table adds
	// it up); the rate-limit fields show the state after the reservation.
	if n, ok := ratelimit.Reserved(r.Context(), "tokens"); ok {
		w.Header().Set("X-Demo-Reserved-Tokens", strconv.FormatInt(n, 10))
	}
	if n, ok := ratelimit.Reserved(r.Context(), "budget"); ok {
		w.Header().Set("X-Demo-Reserved-Budget", strconv.FormatInt(n, 10))
	}
	if body.Model == failModel {
		// A failed upstream call, no usage reported: the middleware
		// releases the token reservation (the request still counts).
		writeError(w, &ratelimit.StatusError{Code: http.StatusBadGateway, Message: "The model is unavailable; try again later."})
		return
	}
	if body.Model == slowModel {
		holdSlow(r.Context())
	}
	// A proxy forwards the body upstream with include_usage set, so that
	// a stream ends with a usage chunk (the fake model honours it), and
	// settles the reservation to the usage the upstream reports.
	upstreamBody, err := llm.IncludeStreamUsage(body.Raw)
	if err != nil {
		writeError(w, &ratelimit.StatusError{Code: http.StatusBadRequest, Message: `The request body is invalid: "stream_options" must be an object.`, Err: err})
		return
	}
	upstream := fakeModel(upstreamBody, body)
	defer upstream.Close()
	if !body.Stream {
		resp, err := io.ReadAll(upstream)
		if err != nil {
			writeError(w, &ratelimit.StatusError{Code: http.StatusBadGateway, Err: err})
			return
		}
		if u, ok := llm.ParseOpenAIUsage(resp); ok {
			if err := reportUsage(r, body.Model, u); err != nil {
				writeError(w, err)
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(resp)
		return
	}
	// Server-sent events: the rate-limit fields went out with the header,
	// before the first event. CopyStream passes the upstream's events
	// through, reads the usage from its last chunk and, when the client
	// did not ask for that chunk, leaves it out of what the client gets.
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	var u llm.OpenAIUsage
	err = llm.CopyStream(w, upstream, llm.StreamOptions{Usage: &u, DropUsageChunk: !body.IncludeUsage})
	if u.Seen {
		// Reported even when the client left mid-stream: it pays for
		// what the upstream generated.
		if rerr := reportUsage(r, body.Model, u.Usage); rerr != nil {
			log.Printf("reporting the usage of a stream: %v", rerr)
		}
	}
	if err != nil {
		log.Printf("streaming: %v", err)
	}
}

// fakeModel is the demo's upstream: it answers upstreamBody, the request
// as forwarded, with a JSON completion or, for a stream, server-sent
// events in OpenAI's order: a first chunk with the assistant's role, one
// chunk per word, a chunk with the finish reason, the usage chunk
// (choices: []) when the request set stream_options.include_usage, and
// [DONE]. The usage follows the rule above, from body (the same request,
// parsed).
func fakeModel(upstreamBody []byte, body *llm.OpenAIBody) io.ReadCloser {
	var opts struct {
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	_ = json.Unmarshal(upstreamBody, &opts)
	u, capped := usageOf(body)
	words := make([]string, u.CompletionTokens)
	for i := range words {
		words[i] = "tok" + strconv.Itoa(i)
	}
	id := "chatcmpl-demo"
	created := time.Now().Unix()
	finish := "stop"
	if capped {
		finish = "length"
	}
	if !body.Stream {
		b, _ := json.Marshal(map[string]any{
			"id": id, "object": "chat.completion", "created": created, "model": body.Model,
			"choices": []any{map[string]any{
				"index":         0,
				"message":       chatMessage{Role: "assistant", Content: strings.Join(words, " ")},
				"finish_reason": finish,
			}},
			"usage": u,
		})
		return io.NopCloser(bytes.NewReader(b))
	}
	// The events are written one by one through a pipe, as they would
	// arrive from a real upstream; closing the reader (the client left)
	// ends the writer.
	pr, pw := io.Pipe()
	go func() {
		send := func(v any) error {
			b, _ := json.Marshal(v)
			_, err := fmt.Fprintf(pw, "data: %s\n\n", b)
			return err
		}
		chunk := func(delta map[string]string, finish any) map[string]any {
			return map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": body.Model,
				"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
		}
		err := send(chunk(map[string]string{"role": "assistant", "content": ""}, nil))
		for i, word := range words {
			if err != nil {
				break
			}
			if i > 0 {
				word = " " + word
			}
			err = send(chunk(map[string]string{"content": word}, nil))
		}
		if err == nil {
			err = send(chunk(map[string]string{}, finish))
		}
		if err == nil && opts.StreamOptions.IncludeUsage {
			err = send(map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": body.Model,
				"choices": []any{}, "usage": u})
		}
		if err == nil {
			_, err = io.WriteString(pw, "data: [DONE]\n\n")
		}
		pw.CloseWithError(err)
	}()
	return pr
}

// writeError answers in the OpenAI error shape: a *ratelimit.StatusError
// with its status and client message, any other error (a bug here) with
// 500 and a generic message, so no Go error text reaches the client.
func writeError(w http.ResponseWriter, err error) {
	code, msg := http.StatusInternalServerError, "The server failed to answer this request."
	var se *ratelimit.StatusError
	if errors.As(err, &se) {
		code, msg = se.StatusCode(), se.ClientMessage()
	}
	typ := "invalid_request_error"
	if code >= 500 {
		typ = "server_error"
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
		"message": msg, "type": typ, "param": nil, "code": nil,
	}})
}
