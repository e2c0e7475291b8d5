package ratelimit

import (
	"encoding/json"
	"math"
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
// Negative counts are read as 0, and counts above math.MaxInt64/4 as
// math.MaxInt64/4, so Total never overflows.
func (u *AnthropicUsage) Observe(data []byte) bool {
	type counts struct {
		Input         *int64 `json:"input_tokens"`
		CacheCreation *int64 `json:"cache_creation_input_tokens"`
		CacheRead     *int64 `json:"cache_read_input_tokens"`
		Output        *int64 `json:"output_tokens"`
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
		src *int64
		dst *int64
	}{{c.Input, &u.Input}, {c.CacheCreation, &u.CacheCreation}, {c.CacheRead, &u.CacheRead}, {c.Output, &u.Output}} {
		if f.src != nil {
			*f.dst = min(max(0, *f.src), math.MaxInt64/4)
		}
	}
	return true
}

// Total returns every token the response consumed: Input + CacheCreation
// + CacheRead + Output. A limit that should not count cache reads (which
// Anthropic bills at a tenth of the input price) can sum the fields it
// wants instead.
func (u *AnthropicUsage) Total() int64 {
	return u.Input + u.CacheCreation + u.CacheRead + u.Output
}
