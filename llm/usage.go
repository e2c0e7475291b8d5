package llm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
)

// AnthropicUsage accumulates the token usage of one Anthropic Messages API
// response, for [ratelimit.ReportUsage]: feed it the whole body of a response, or the
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

// IncludeStreamUsage returns body, an OpenAI request body for an upstream
// API, changed so that a streamed response ends with a usage chunk: when
// "stream" is true it sets "stream_options": {"include_usage": true}
// (OpenAI sends usage in streams only when asked). Other members of
// "stream_options" are kept. The body is edited in place — member order,
// spacing and every other byte stay as sent — and returned unchanged when
// "stream" is not true or include_usage is already true. Errors (wrapping
// ErrInvalidBody): body is not a JSON object, or "stream_options" is
// neither an object nor null.
func IncludeStreamUsage(body []byte) ([]byte, error) {
	members, closeAt, err := scanObject(body)
	if err != nil {
		return nil, err
	}
	stream, opts := members["stream"], members["stream_options"]
	if string(stream.value(body)) != "true" {
		return body, nil
	}
	if !opts.found() {
		return insertMember(body, closeAt, len(members) > 0, `"stream_options":{"include_usage":true}`), nil
	}
	v := opts.value(body)
	switch firstByte(v) {
	case 'n':
		return splice(body, opts.start, opts.end, `{"include_usage":true}`), nil
	case '{':
	default:
		return nil, fmt.Errorf("%w: \"stream_options\" must be an object", ErrInvalidBody)
	}
	inner, innerClose, err := scanObject(v)
	if err != nil {
		return nil, err
	}
	if iu := inner["include_usage"]; iu.found() {
		if string(iu.value(v)) == "true" {
			return body, nil
		}
		return splice(body, opts.start+iu.start, opts.start+iu.end, "true"), nil
	}
	newOpts := insertMember(v, innerClose, len(inner) > 0, `"include_usage":true`)
	return splice(body, opts.start, opts.end, string(newOpts)), nil
}

// span locates a member's value in a JSON text; the zero span is absent.
type span struct{ start, end int }

func (s span) found() bool           { return s.end > 0 }
func (s span) value(b []byte) []byte { return b[s.start:s.end] }

// scanObject returns the value spans of the members of the JSON object
// obj (the last one of a repeated name, as encoding/json decodes it) and
// the offset of its closing brace.
func scanObject(obj []byte) (map[string]span, int, error) {
	bad := func(why string) (map[string]span, int, error) {
		return nil, 0, fmt.Errorf("%w: %s", ErrInvalidBody, why)
	}
	dec := json.NewDecoder(bytes.NewReader(obj))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return bad("expected a JSON object")
	}
	members := map[string]span{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return bad("malformed JSON object")
		}
		name, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return bad("malformed JSON object")
		}
		end := int(dec.InputOffset())
		start := end - len(v)
		if start < 0 || !bytes.Equal(obj[start:end], v) {
			return bad("unexpected JSON layout")
		}
		members[name] = span{start, end}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return bad("malformed JSON object")
	}
	closeAt := int(dec.InputOffset()) - 1
	if _, err := dec.Token(); err != io.EOF {
		return bad("data after the JSON object")
	}
	if closeAt < 0 || obj[closeAt] != '}' {
		return bad("unexpected JSON layout")
	}
	return members, closeAt, nil
}

// insertMember inserts member before the closing brace at closeAt.
func insertMember(obj []byte, closeAt int, comma bool, member string) []byte {
	if comma {
		member = "," + member
	}
	return splice(obj, closeAt, closeAt, member)
}

// splice returns a new slice: b with b[start:end] replaced by s.
func splice(b []byte, start, end int, s string) []byte {
	out := make([]byte, 0, len(b)-(end-start)+len(s))
	out = append(out, b[:start]...)
	out = append(out, s...)
	return append(out, b[end:]...)
}

// ParseOpenAIUsage returns the total tokens of the usage object in data: a
// response body or one server-sent event's data of the OpenAI APIs. It
// reads "usage" at the top level (Chat Completions, Completions,
// Embeddings, and the final chunk of a stream with include_usage) or in
// "response" (the Responses API's response.completed event), and takes
// "total_tokens", else "prompt_tokens" + "completion_tokens", else
// "input_tokens" + "output_tokens". ok is false when data is not JSON or
// has no usage (most chunks of a stream); "[DONE]" is not JSON.
func ParseOpenAIUsage(data []byte) (total int64, ok bool) {
	type usage struct {
		Total      *int64 `json:"total_tokens"`
		Prompt     int64  `json:"prompt_tokens"`
		Completion int64  `json:"completion_tokens"`
		Input      int64  `json:"input_tokens"`
		Output     int64  `json:"output_tokens"`
	}
	var v struct {
		Usage    *usage `json:"usage"`
		Response *struct {
			Usage *usage `json:"usage"`
		} `json:"response"`
	}
	if json.Unmarshal(data, &v) != nil {
		return 0, false
	}
	u := v.Usage
	if u == nil && v.Response != nil {
		u = v.Response.Usage
	}
	switch {
	case u == nil:
		return 0, false
	case u.Total != nil:
		return max(0, *u.Total), true
	case u.Prompt != 0 || u.Completion != 0:
		return addCounts(u.Prompt, u.Completion), true
	default:
		return addCounts(u.Input, u.Output), true
	}
}

// addCounts returns max(0, a+b), saturating at math.MaxInt64 instead of
// wrapping around to a negative sum (read as 0: no usage at all).
func addCounts(a, b int64) int64 {
	if a > 0 && b > math.MaxInt64-a {
		return math.MaxInt64
	}
	return max(0, a+b)
}
