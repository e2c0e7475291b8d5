package ratelimit

import (
	"encoding/json"
	"math"
	"strconv"
)

// AnthropicUsage accumulates the token usage of one Anthropic Messages API
// response, for ReportUsage: feed it the whole body of a response, or the
// data of each server-sent event of a stream, and read Total at the end.
//
// A stream reports usage in two places (Anthropic's "Streaming Messages"
// documentation): the message_start event carries the message's usage so
// far (the input counts and a first output count), and each message_delta
// event carries counts that are cumulative, not increments. Observe
// therefore keeps, for each of the four counts, the last value seen, which
// after the last message_delta is the response's usage. A non-streaming
// response carries the same usage object at its top level.
//
// The zero value is ready to use. An AnthropicUsage is not safe for
// concurrent use; one response is read by one goroutine.
type AnthropicUsage struct {
	// Input is input_tokens: prompt tokens read neither from nor into
	// the prompt cache.
	Input int64
	// CacheCreation is cache_creation_input_tokens: prompt tokens
	// written to the prompt cache.
	CacheCreation int64
	// CacheRead is cache_read_input_tokens: prompt tokens read from the
	// prompt cache.
	CacheRead int64
	// Output is output_tokens: tokens generated.
	Output int64
}

// Observe reads the usage in data, one response body or one event's data,
// and reports whether data carried any (most events of a stream, such as
// content_block_delta or ping, do not; data that is not JSON does not).
// Negative counts are read as 0, fractions rounded down, and counts above
// math.MaxInt64/4 (even beyond int64's range) as math.MaxInt64/4, so
// Total never overflows.
func (u *AnthropicUsage) Observe(data []byte) bool {
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
	}{{c.Input, &u.Input}, {c.CacheCreation, &u.CacheCreation}, {c.CacheRead, &u.CacheRead}, {c.Output, &u.Output}} {
		if f.src != nil {
			*f.dst = clampCount(*f.src)
		}
	}
	return true
}

// clampCount reads a JSON number as a count in [0, math.MaxInt64/4]:
// negative numbers as 0, larger ones (even beyond int64's range) as the
// bound, and fractions rounded down.
func clampCount(n json.Number) int64 {
	const hi = math.MaxInt64 / 4
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return min(max(0, i), hi)
	}
	// Out of int64's range, or not an integer: ParseFloat gives ±Inf on
	// overflow, and the JSON decoder has already checked the syntax.
	f, _ := strconv.ParseFloat(string(n), 64)
	switch {
	case f >= hi:
		return hi
	case f > 0:
		return int64(f)
	default:
		return 0
	}
}

// Total returns every token the response consumed: Input + CacheCreation
// + CacheRead + Output. A limit that should not count cache reads (which
// Anthropic bills at a tenth of the input price) can sum the fields it
// wants instead.
func (u *AnthropicUsage) Total() int64 {
	return u.Input + u.CacheCreation + u.CacheRead + u.Output
}
