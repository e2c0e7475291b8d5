package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/rampmeter/ratelimit"
)

// The fake model is deterministic so the demo can check every figure:
//
//	prompt tokens     = ceil(total bytes of all message contents / 4)
//	completion tokens = min(max_tokens, 50), max_tokens defaulting to 256
//
// and the limiter's estimate before the call is prompt tokens + max_tokens,
// settled to the real usage (prompt + completion) after it.
const (
	defaultMaxTokens = 256
	maxCompletion    = 50
	maxBodyBytes     = 1 << 20 // 1 MiB
)

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type chatRequest struct {
	Model     string        `json:"model"`
	Messages  []chatMessage `json:"messages"`
	MaxTokens *int64        `json:"max_tokens,omitempty"`
	Stream    bool          `json:"stream,omitempty"`
}

type usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

// readChatRequest reads and validates the body once, bounded, and puts it
// back so the handler can read it again.
func readChatRequest(r *http.Request) (chatRequest, error) {
	var req chatRequest
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return req, &ratelimit.StatusError{Code: http.StatusRequestEntityTooLarge,
				Err: fmt.Errorf("request body larger than %d bytes", maxBodyBytes)}
		}
		return req, &ratelimit.StatusError{Code: http.StatusBadRequest, Err: fmt.Errorf("reading body: %w", err)}
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&req); err != nil {
		return req, &ratelimit.StatusError{Code: http.StatusBadRequest, Err: fmt.Errorf("malformed JSON body: %w", err)}
	}
	switch {
	case req.Model == "":
		return req, &ratelimit.StatusError{Code: http.StatusBadRequest, Err: errors.New(`"model" is required`)}
	case len(req.Messages) == 0:
		return req, &ratelimit.StatusError{Code: http.StatusBadRequest, Err: errors.New(`"messages" must not be empty`)}
	case req.MaxTokens != nil && *req.MaxTokens < 1:
		return req, &ratelimit.StatusError{Code: http.StatusBadRequest, Err: errors.New(`"max_tokens" must be at least 1`)}
	}
	return req, nil
}

func (c chatRequest) promptTokens() int64 {
	var n int64
	for _, m := range c.Messages {
		n += int64(len(m.Content))
	}
	return (n + 3) / 4
}

func (c chatRequest) maxTokens() int64 {
	if c.MaxTokens == nil {
		return defaultMaxTokens
	}
	return *c.MaxTokens
}

func (c chatRequest) usage() usage {
	u := usage{PromptTokens: c.promptTokens(), CompletionTokens: min(c.maxTokens(), maxCompletion)}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

// estimateTokens is the tokens limit's cost function: prompt + max_tokens.
func estimateTokens(r *http.Request) (int64, error) {
	req, err := readChatRequest(r)
	if err != nil {
		return 0, err
	}
	return req.promptTokens() + req.maxTokens(), nil
}

// completions serves POST /v1/chat/completions with the fake model.
func completions(w http.ResponseWriter, r *http.Request) {
	req, err := readChatRequest(r)
	if err != nil {
		writeError(w, err)
		return
	}
	u := req.usage()
	// The real usage settles the reservation made from the estimate.
	if err := ratelimit.ReportUsage(r.Context(), "tokens", u.TotalTokens); err != nil {
		writeError(w, err)
		return
	}
	words := make([]string, u.CompletionTokens)
	for i := range words {
		words[i] = "tok" + strconv.Itoa(i)
	}
	id := "chatcmpl-demo"
	created := time.Now().Unix()
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"id": id, "object": "chat.completion", "created": created, "model": req.Model,
			"choices": []any{map[string]any{
				"index":         0,
				"message":       chatMessage{Role: "assistant", Content: strings.Join(words, " ")},
				"finish_reason": finishReason(req),
			}},
			"usage": u,
		})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	flusher, _ := w.(http.Flusher)
	send := func(v any) {
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "data: %s\n\n", b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	for i, word := range words {
		if i > 0 {
			word = " " + word
		}
		send(map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "delta": map[string]string{"content": word}}}})
	}
	send(map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": req.Model,
		"choices": []any{map[string]any{"index": 0, "delta": map[string]string{}, "finish_reason": finishReason(req)}}})
	// The final chunk carries usage, as OpenAI does with stream_options.include_usage.
	send(map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": req.Model,
		"choices": []any{}, "usage": u})
	fmt.Fprint(w, "data: [DONE]\n\n")
	if flusher != nil {
		flusher.Flush()
	}
}

func finishReason(req chatRequest) string {
	if req.maxTokens() <= maxCompletion {
		return "length"
	}
	return "stop"
}

// writeError answers in the OpenAI error shape.
func writeError(w http.ResponseWriter, err error) {
	code := http.StatusBadRequest
	var se interface{ StatusCode() int }
	if errors.As(err, &se) {
		code = se.StatusCode()
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
		"message": err.Error(), "type": "invalid_request_error", "code": nil,
	}})
}
