package llm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// Usage is the token usage of one model call, by kind. The four kinds are
// disjoint, so every token the call consumed is in exactly one of them
// and Total is their sum, whatever the provider's own accounting:
// OpenAI's prompt_tokens includes its cached tokens, Anthropic's
// input_tokens excludes cache reads and writes, and the parsers map both
// onto these fields.
type Usage struct {
	// Input is the prompt tokens neither read from nor written to a
	// prompt cache.
	Input int64
	// CacheRead is the prompt tokens read from a prompt cache (OpenAI's
	// cached_tokens, Anthropic's cache_read_input_tokens), which providers
	// bill at a fraction of the input price and Anthropic does not count
	// toward its input-tokens rate limit.
	CacheRead int64
	// CacheWrite is the prompt tokens written to a prompt cache
	// (Anthropic's cache_creation_input_tokens; OpenAI reports none).
	CacheWrite int64
	// Output is the tokens generated, reasoning tokens included.
	Output int64
}

// Kinds selects kinds of tokens, for a limit that counts some of them: a
// bit set of Input, CacheRead, CacheWrite and Output. The estimator reads
// it through Counting, and Usage.Count adds the selected kinds of a real
// usage, so that a limit is reserved on its own estimate and settled to
// its own count.
type Kinds uint8

const (
	// Input selects Usage.Input: prompt tokens not involving a cache.
	Input Kinds = 1 << iota
	// CacheRead selects Usage.CacheRead.
	CacheRead
	// CacheWrite selects Usage.CacheWrite.
	CacheWrite
	// Output selects Usage.Output.
	Output

	// Prompt is every prompt token, cached or not: what OpenAI's
	// prompt_tokens counts. Anthropic's input-tokens rate limit counts
	// Input | CacheWrite (cache reads are free of it).
	Prompt = Input | CacheRead | CacheWrite
	// All is every token: Usage.Total.
	All = Prompt | Output
)

// String names the kinds in k, joined by "|": "Input|Output", "All",
// "Prompt".
func (k Kinds) String() string {
	switch k {
	case All:
		return "All"
	case Prompt:
		return "Prompt"
	case 0:
		return "None"
	}
	var b []byte
	for i, name := range [...]string{"Input", "CacheRead", "CacheWrite", "Output"} {
		if k&(1<<i) != 0 {
			if len(b) > 0 {
				b = append(b, '|')
			}
			b = append(b, name...)
		}
	}
	if rest := k &^ All; rest != 0 {
		if len(b) > 0 {
			b = append(b, '|')
		}
		b = fmt.Appendf(b, "Kinds(%#x)", uint8(rest))
	}
	return string(b)
}

// Total returns every token of u: Input + CacheRead + CacheWrite + Output.
func (u Usage) Total() int64 { return u.Input + u.CacheRead + u.CacheWrite + u.Output }

// Count returns the tokens of u of the kinds in k, for ReportUsage on a
// limit that counts them:
//
//	ratelimit.ReportUsage(ctx, "input-tokens", usage.Count(llm.Input|llm.CacheWrite))
//
// The parsers clamp every count to [0, math.MaxInt64/4], so no sum
// overflows.
func (u Usage) Count(k Kinds) int64 {
	var n int64
	if k&Input != 0 {
		n += u.Input
	}
	if k&CacheRead != 0 {
		n += u.CacheRead
	}
	if k&CacheWrite != 0 {
		n += u.CacheWrite
	}
	if k&Output != 0 {
		n += u.Output
	}
	return n
}

// UsageObserver reads the usage of one response: from its whole body, or
// from the data of each server-sent event of its stream, in order.
// Observe reports whether data carried usage. *OpenAIUsage and
// *AnthropicUsage implement it, for CopyStream.
type UsageObserver interface {
	Observe(data []byte) bool
}

// AnthropicUsage accumulates the token usage of one Anthropic Messages API
// response, for [ratelimit.ReportUsage]: feed it the whole body of a
// response, or the data of each server-sent event of a stream, and read
// the embedded Usage (Total, Count) at the end.
//
// Anthropic's counts are disjoint, as Usage's are: Input is input_tokens
// (prompt tokens read neither from nor into the cache), CacheWrite is
// cache_creation_input_tokens, CacheRead is cache_read_input_tokens and
// Output is output_tokens.
//
// A stream reports usage in two places (Anthropic's "Streaming Messages"
// documentation): the message_start event carries the message's usage so
// far (the input counts and a first output count), and each message_delta
// event carries counts that are cumulative, not increments. Observe
// therefore keeps, for each of the four counts, the last value seen, which
// after the last message_delta is the response's usage. A non-streaming
// response carries the same usage object at its top level.
//
// The zero value is ready to use; Seen reports whether any usage was
// observed. An AnthropicUsage is not safe for concurrent use; one response
// is read by one goroutine.
type AnthropicUsage struct {
	Usage
	// Seen reports whether Observe has read any usage.
	Seen bool
}

// Observe reads the usage in data, one response body or one event's data,
// and reports whether data carried any (most events of a stream, such as
// content_block_delta or ping, do not; data that is not JSON does not).
// Negative counts are read as 0, fractions rounded down, and counts above
// math.MaxInt64/4 (even beyond int64's range) as math.MaxInt64/4, so
// Total never overflows.
func (u *AnthropicUsage) Observe(data []byte) bool {
	if !mayHaveUsage(data) {
		return false
	}
	// json.Number, not int64: a count beyond int64's range must clamp,
	// not make the whole event unreadable.
	type counts struct {
		Input         *json.Number `json:"input_tokens"`
		CacheCreation *json.Number `json:"cache_creation_input_tokens"`
		CacheRead     *json.Number `json:"cache_read_input_tokens"`
		Output        *json.Number `json:"output_tokens"`
	}
	var v struct {
		Usage   *counts `json:"usage"` // a response body; message_delta
		Message *struct {
			Usage *counts `json:"usage"`
		} `json:"message"` // message_start
	}
	if json.Unmarshal(data, &v) != nil {
		return false
	}
	c := v.Usage
	if c == nil && v.Message != nil {
		c = v.Message.Usage
	}
	if c == nil {
		return false
	}
	for _, f := range [...]struct {
		src *json.Number
		dst *int64
	}{{c.Input, &u.Input}, {c.CacheCreation, &u.CacheWrite}, {c.CacheRead, &u.CacheRead}, {c.Output, &u.Output}} {
		if f.src != nil {
			*f.dst = clampCount(*f.src)
		}
	}
	u.Seen = true
	return true
}

// maxCount bounds every count the parsers return, so that the sum of the
// four kinds never overflows an int64.
const maxCount = math.MaxInt64 / 4

// clampCount reads a JSON number as a count in [0, maxCount]: negative
// numbers as 0, larger ones (even beyond int64's range) as the bound, and
// fractions rounded down.
func clampCount(n json.Number) int64 {
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return min(max(0, i), maxCount)
	}
	// Out of int64's range, or not an integer: ParseFloat gives ±Inf on
	// overflow, and the JSON decoder has already checked the syntax.
	f, _ := strconv.ParseFloat(string(n), 64)
	switch {
	case f >= maxCount:
		return maxCount
	case f > 0:
		return int64(f)
	default:
		return 0
	}
}

// mayHaveUsage is a fast filter for the data of stream events, most of
// which carry no usage: false only when data cannot hold a "usage" member
// whose value is not null. (Inside a JSON string the word is escaped as
// \"usage\", which does not match; a Chat Completions stream with
// include_usage sends "usage":null in every chunk but the last, which
// this skips without parsing.)
func mayHaveUsage(data []byte) bool {
	key := []byte(`"usage"`)
	for {
		i := bytes.Index(data, key)
		if i < 0 {
			return false
		}
		data = bytes.TrimLeft(data[i+len(key):], " \t\r\n")
		if len(data) == 0 || data[0] != ':' {
			continue // "usage" as a value, not a member name
		}
		data = bytes.TrimLeft(data[1:], " \t\r\n")
		if !bytes.HasPrefix(data, []byte("null")) {
			return true
		}
	}
}

// openAIUsage is the usage object of the OpenAI APIs: Chat Completions
// and Completions (prompt_tokens, completion_tokens,
// prompt_tokens_details), Responses (input_tokens, output_tokens,
// input_tokens_details) and Embeddings (prompt_tokens, total_tokens).
type openAIUsage struct {
	Total         *json.Number  `json:"total_tokens"`
	Prompt        *json.Number  `json:"prompt_tokens"`
	Completion    *json.Number  `json:"completion_tokens"`
	PromptDetails *cacheDetails `json:"prompt_tokens_details"`
	Input         *json.Number  `json:"input_tokens"`
	Output        *json.Number  `json:"output_tokens"`
	InputDetails  *cacheDetails `json:"input_tokens_details"`
}

type cacheDetails struct {
	Cached *json.Number `json:"cached_tokens"`
}

// ParseOpenAIUsage returns the usage in data, a response body or one
// server-sent event's data of the OpenAI APIs, by kind. It reads "usage"
// at the top level (Chat Completions, Completions, Embeddings, and the
// final chunk of a stream with include_usage) or in "response" (the
// Responses API's response.completed event). ok is false when data is not
// JSON or has no usage (most chunks of a stream; "[DONE]" is not JSON).
//
// The prompt is "prompt_tokens" (else "input_tokens"), of which
// "cached_tokens" (in "prompt_tokens_details" or "input_tokens_details")
// are CacheRead and the rest Input; Output is "completion_tokens" (else
// "output_tokens"). OpenAI reports no cache writes. When "total_tokens"
// exceeds prompt + output (an Embeddings response that sends only the
// total, or a provider that counts tokens it does not break down), the
// surplus counts as Input, so that Total is never less than total_tokens.
// Counts are clamped as AnthropicUsage.Observe clamps them.
func ParseOpenAIUsage(data []byte) (u Usage, ok bool) {
	if !mayHaveUsage(data) {
		return Usage{}, false
	}
	var v struct {
		Usage    *openAIUsage `json:"usage"`
		Response *struct {
			Usage *openAIUsage `json:"usage"`
		} `json:"response"`
	}
	if json.Unmarshal(data, &v) != nil {
		return Usage{}, false
	}
	w := v.Usage
	if w == nil && v.Response != nil {
		w = v.Response.Usage
	}
	if w == nil {
		return Usage{}, false
	}
	return w.usage(), true
}

func (w *openAIUsage) usage() Usage {
	count := func(ns ...*json.Number) int64 {
		for _, n := range ns {
			if n != nil {
				return clampCount(*n)
			}
		}
		return 0
	}
	prompt := count(w.Prompt, w.Input)
	var cached int64
	for _, d := range []*cacheDetails{w.PromptDetails, w.InputDetails} {
		if d != nil && d.Cached != nil {
			cached = min(clampCount(*d.Cached), prompt)
			break
		}
	}
	u := Usage{Input: prompt - cached, CacheRead: cached, Output: count(w.Completion, w.Output)}
	if total := count(w.Total); total > prompt+u.Output {
		u.Input += total - prompt - u.Output
	}
	return u
}

// OpenAIUsage accumulates the usage of one OpenAI response for
// [ratelimit.ReportUsage]: feed it the whole body, or the data of each
// server-sent event of a stream (CopyStream does), and read the embedded
// Usage at the end. Observe keeps the last usage seen, as
// ParseOpenAIUsage reads it: a Chat Completions stream with
// include_usage carries it in its final chunk, a Responses stream in its
// response.completed event.
//
// The zero value is ready to use; Seen reports whether any usage was
// observed (a stream cut short before its usage chunk has none). An
// OpenAIUsage is not safe for concurrent use.
type OpenAIUsage struct {
	Usage
	// Seen reports whether Observe has read any usage.
	Seen bool
}

// Observe reads the usage in data and reports whether data carried any.
func (u *OpenAIUsage) Observe(data []byte) bool {
	got, ok := ParseOpenAIUsage(data)
	if ok {
		u.Usage, u.Seen = got, true
	}
	return ok
}
