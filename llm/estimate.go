package llm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"

	"github.com/rampmeter/ratelimit"
)

// ErrInvalidBody is wrapped by the errors of ReadOpenAIBody (and so of
// EstimateOpenAITokens) for a body that is not a JSON object of the
// expected shape, and by IncludeStreamUsage's errors.
var ErrInvalidBody = errors.New("llm: invalid request body")

// DefaultMaxBodyBytes is the largest request body, in bytes, that
// EstimateOpenAITokens reads unless WithMaxBodyBytes says otherwise: 1 MiB.
const DefaultMaxBodyBytes = 1 << 20

// DefaultOutputTokens is the output cap EstimateOpenAITokens reserves for a
// request that declares none (no max_tokens, max_completion_tokens or
// max_output_tokens), unless WithDefaultOutputTokens says otherwise. A
// model may produce more; the overage is settled after the response (as
// debt), so a low default admits more concurrent requests at the price of
// a larger possible overshoot (see the README's over-admission bound).
const DefaultOutputTokens = 1024

// maxEstimate saturates estimates: any cost above it exceeds every burst
// (at most 2^51), and it stays exact in the Redis store's Lua doubles.
const maxEstimate = int64(1) << 53

// EstimateOption configures EstimateOpenAITokens.
type EstimateOption func(*estimateConfig) error

type estimateConfig struct {
	tokenize      func(string) int64
	defaultOutput int64
	maxBody       int64
	kinds         Kinds
}

// WithTokenizer counts the prompt's tokens with fn, called once per text
// piece (each message's text, each input string, ...), instead of the
// default estimate of one token per 4 bytes, rounded up per piece. fn must
// be safe for concurrent use; a negative result counts as 0.
func WithTokenizer(fn func(text string) int64) EstimateOption {
	return func(c *estimateConfig) error {
		if fn == nil {
			return errors.New("WithTokenizer(nil)")
		}
		c.tokenize = fn
		return nil
	}
}

// WithDefaultOutputTokens sets the output cap reserved for a request that
// declares none (default DefaultOutputTokens). n must be ≥ 0.
func WithDefaultOutputTokens(n int64) EstimateOption {
	return func(c *estimateConfig) error {
		if n < 0 {
			return fmt.Errorf("WithDefaultOutputTokens(%d): must be ≥ 0", n)
		}
		c.defaultOutput = n
		return nil
	}
}

// WithMaxBodyBytes sets the largest body read, in bytes (default
// DefaultMaxBodyBytes). A larger body is refused with 413 Content Too
// Large. n must be ≥ 1.
func WithMaxBodyBytes(n int64) EstimateOption {
	return func(c *estimateConfig) error {
		if n < 1 {
			return fmt.Errorf("WithMaxBodyBytes(%d): must be ≥ 1", n)
		}
		c.maxBody = n
		return nil
	}
}

// Counting makes the estimate count only the tokens of the kinds in k
// (default All), for a limit that counts only those, such as an
// input-tokens or output-tokens limit stacked beside a total:
//
//	ratelimit.PerMinute(400_000).Named("input-tokens").
//		CostFrom(llm.EstimateOpenAITokens(llm.Counting(llm.Input | llm.CacheWrite))).
//		WithUnit(llm.InputTokens)
//
// The prompt's share of the estimate counts when k has any of Input,
// CacheRead and CacheWrite, and the output's when k has Output. Which
// prompt tokens a cache will serve is known only after the call, so the
// whole prompt is reserved for any prompt kind (an upper bound), and the
// settlement (ReportUsage with Usage.Count(k)) refunds what the cache
// took. k must be a non-empty subset of All.
func Counting(k Kinds) EstimateOption {
	return func(c *estimateConfig) error {
		if k == 0 || k&^All != 0 {
			return fmt.Errorf("Counting(%v): must be a non-empty subset of All", k)
		}
		c.kinds = k
		return nil
	}
}

// EstimateOpenAITokens returns a [ratelimit.CostFunc] that estimates the AI
// tokens of an OpenAI-style JSON request (Chat Completions, Completions,
// Responses, Embeddings; Anthropic Messages bodies have the same fields)
// before the model runs, for a Tokens limit:
//
//	ratelimit.PerDay(100_000).Named("tokens").CostFrom(llm.EstimateOpenAITokens())
//
// The estimate is prompt + output × n:
//
//   - prompt: the tokens of the text the request sends (see OpenAIBody.Texts
//     for which fields count), one per 4 bytes rounded up per text piece,
//     or as WithTokenizer counts them; token IDs sent as integers (in
//     "prompt" or "input") count one each. Images, audio and files are not
//     counted: estimate them with a cost function of your own.
//   - output: the largest of "max_tokens", "max_completion_tokens" and
//     "max_output_tokens" (clients send different ones, and the model
//     honours whichever its API reads, so the largest is the only safe
//     reservation), or WithDefaultOutputTokens (default
//     DefaultOutputTokens) when none is given.
//   - n: the number of choices ("n", default 1).
//
// With Counting, only the prompt's or only the output's share counts.
//
// The body is read once, at most WithMaxBodyBytes bytes (default 1 MiB),
// parsed once, and put back in r.Body, so the handler reads it as sent;
// the handler (and a LimitsFunc) get the parsed body without parsing it
// again from ReadOpenAIBody. Errors, with nothing charged: a body larger
// than the maximum is answered with 413 Content Too Large, a body that is
// not a JSON object of the expected shape with 400 Bad Request and a
// message saying what is wrong (both as *[ratelimit.StatusError], wrapping
// ErrInvalidBody for 400). An invalid option makes every request fail with
// 500 and a *ratelimit.StatusError wrapping [ratelimit.ErrInvalidConfig] (a
// cost function cannot report configuration errors earlier).
func EstimateOpenAITokens(opts ...EstimateOption) ratelimit.CostFunc {
	c, err := newEstimateConfig("EstimateOpenAITokens", opts)
	if err != nil {
		return failingCost(err)
	}
	return func(r *http.Request) (int64, error) {
		b, err := ReadOpenAIBody(r, c.maxBody)
		if err != nil {
			return 0, err
		}
		prompt, output := b.estimate(&c)
		return satAdd(prompt, output), nil
	}
}

// newEstimateConfig applies opts to the defaults; fn names the caller in
// errors.
func newEstimateConfig(fn string, opts []EstimateOption) (estimateConfig, error) {
	c := estimateConfig{tokenize: approxTokens, defaultOutput: DefaultOutputTokens, maxBody: DefaultMaxBodyBytes, kinds: All}
	for i, o := range opts {
		var err error
		if o == nil {
			err = fmt.Errorf("option %d is nil", i)
		} else {
			err = o(&c)
		}
		if err != nil {
			return c, &ratelimit.StatusError{Code: http.StatusInternalServerError,
				Message: "The server's rate limiter is misconfigured; this is not a problem with your request.",
				Err:     fmt.Errorf("%w: %s: %w", ratelimit.ErrInvalidConfig, fn, err)}
		}
	}
	return c, nil
}

// failingCost is the cost function of an invalid configuration: every
// request fails with err (a cost function cannot fail earlier).
func failingCost(err error) ratelimit.CostFunc {
	return func(*http.Request) (int64, error) { return 0, err }
}

// approxTokens is the default tokenizer: one token per 4 bytes, rounded
// up (OpenAI's rule of thumb for English text).
func approxTokens(s string) int64 { return (int64(len(s)) + 3) / 4 }

// OpenAIBody is an OpenAI-style JSON request body as ReadOpenAIBody parsed
// it. Treat it as read-only: it is shared by every reader of the request.
type OpenAIBody struct {
	// Raw is the body as received. The handler may forward it upstream
	// (see IncludeStreamUsage); r.Body also reads it again.
	Raw []byte
	// Model is "model", or "".
	Model string
	// Stream is "stream".
	Stream bool
	// IncludeUsage is "stream_options": {"include_usage": true}: the
	// client asked for a stream that ends with a usage chunk. A proxy that
	// asks its upstream for the usage anyway (IncludeStreamUsage) drops
	// that chunk for clients that did not (StreamOptions.DropUsageChunk).
	IncludeUsage bool
	// Texts holds the prompt's text pieces, in body order:
	// "instructions", "system" (a string or text blocks), each message's
	// "content" (a string, or the "text" of each content part, including
	// text nested in parts' own "content"), "input" and "prompt" (a string,
	// an array of strings, or input items with "content", "text", "output"
	// or "arguments"), and the JSON text of "tools" and "functions" (the
	// model reads their schemas as prompt).
	Texts []string
	// TokenIDs is the number of prompt tokens sent as integer token IDs
	// in "prompt" or "input".
	TokenIDs int64
	// MaxOutputTokens is the largest of "max_tokens",
	// "max_completion_tokens" and "max_output_tokens"; HasMaxOutput says
	// whether any was given.
	MaxOutputTokens int64
	HasMaxOutput    bool
	// N is "n", the number of choices to generate (1 when absent).
	N int64
}

// estimate computes the token estimate of b with c's tokenizer, default
// output cap and kinds: the prompt's tokens and the output's (output cap
// × n), each 0 when c.kinds leaves it out, each saturating at
// maxEstimate.
func (b *OpenAIBody) estimate(c *estimateConfig) (prompt, output int64) {
	if c.kinds&Prompt != 0 {
		prompt = b.TokenIDs
		for _, t := range b.Texts {
			prompt = satAdd(prompt, max(0, c.tokenize(t)))
		}
	}
	if c.kinds&Output == 0 {
		return prompt, 0
	}
	output = c.defaultOutput
	if b.HasMaxOutput {
		output = b.MaxOutputTokens
	}
	if b.N > 1 && output > 0 {
		if output > maxEstimate/b.N {
			return prompt, maxEstimate
		}
		output *= b.N
	}
	return prompt, min(output, maxEstimate)
}

func satAdd(a, b int64) int64 { return min(maxEstimate, a+min(b, maxEstimate)) }

// cachedBody is the r.Body that ReadOpenAIBody leaves behind: the body
// again, and its parse, so that later readers neither read nor parse it
// twice. Close does nothing (the server closes the original body).
type cachedBody struct {
	*bytes.Reader
	body *OpenAIBody
	err  error
}

func (*cachedBody) Close() error { return nil }

// ReadOpenAIBody reads r's body once, at most maxBytes bytes, parses it as
// an OpenAI-style JSON request (see OpenAIBody) and puts it back in r.Body
// for the handler. Later calls on the same request — or on a copy made
// with r.WithContext after the first call, as middleware makes — return
// the same parse without reading or parsing again (a body larger than
// their maxBytes is still refused). The body must not be read by anyone
// else before the first call.
//
// Errors are *[ratelimit.StatusError] values fit for clients: 413 Content
// Too Large for a body over maxBytes (r.ContentLength is checked first, so
// an announced oversized body is not read at all), 400 Bad Request wrapping
// ErrInvalidBody for an empty body, malformed JSON, a body that is not an
// object, or a field of the wrong type or a negative output cap or n < 1.
// maxBytes < 1 means DefaultMaxBodyBytes.
func ReadOpenAIBody(r *http.Request, maxBytes int64) (*OpenAIBody, error) {
	if maxBytes < 1 {
		maxBytes = DefaultMaxBodyBytes
	}
	if c, ok := r.Body.(*cachedBody); ok {
		if c.body != nil && int64(len(c.body.Raw)) > maxBytes {
			return nil, bodyTooLarge(maxBytes)
		}
		return c.body, c.err
	}
	if r.ContentLength > maxBytes {
		return nil, bodyTooLarge(maxBytes)
	}
	var raw []byte
	if r.Body != nil && r.Body != http.NoBody {
		var err error
		raw, err = io.ReadAll(io.LimitReader(r.Body, maxBytes+1))
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe) || int64(len(raw)) > maxBytes:
			return nil, bodyTooLarge(maxBytes)
		case err != nil:
			return nil, &ratelimit.StatusError{Code: http.StatusBadRequest,
				Message: "The request body could not be read; send it again.",
				Err:     fmt.Errorf("%w: reading the body: %w", ErrInvalidBody, err)}
		}
	}
	body, err := parseOpenAIBody(raw)
	if err != nil {
		body = nil
		err = invalidBody(err)
	}
	r.Body = &cachedBody{Reader: bytes.NewReader(raw), body: body, err: err}
	return body, err
}

func bodyTooLarge(maxBytes int64) error {
	return &ratelimit.StatusError{Code: http.StatusRequestEntityTooLarge,
		Message: fmt.Sprintf("The request body is larger than %d bytes; send a smaller one.", maxBytes),
		Err:     fmt.Errorf("llm: the request body is larger than %d bytes", maxBytes)}
}

// invalidBody is the 400 of err, an error wrapping ErrInvalidBody: the
// client is told what is wrong with the body in plain words (err's message
// after ErrInvalidBody's: "The request body is invalid: \"max_tokens\" must
// be ≥ 0, got -1."), developers get err.
func invalidBody(err error) error {
	why := strings.TrimPrefix(err.Error(), ErrInvalidBody.Error()+": ")
	return &ratelimit.StatusError{Code: http.StatusBadRequest, Message: "The request body is invalid: " + why + ".", Err: err}
}

// wireBody is the JSON shape read. Polymorphic fields stay raw.
type wireBody struct {
	Model               string          `json:"model"`
	Stream              bool            `json:"stream"`
	StreamOptions       json.RawMessage `json:"stream_options"`
	Instructions        string          `json:"instructions"`
	System              json.RawMessage `json:"system"`
	Messages            []wireItem      `json:"messages"`
	Input               json.RawMessage `json:"input"`
	Prompt              json.RawMessage `json:"prompt"`
	Tools               json.RawMessage `json:"tools"`
	Functions           json.RawMessage `json:"functions"`
	MaxTokens           *int64          `json:"max_tokens"`
	MaxCompletionTokens *int64          `json:"max_completion_tokens"`
	MaxOutputTokens     *int64          `json:"max_output_tokens"`
	N                   *int64          `json:"n"`
}

// wireItem is a message, a content part or an input item: every field that
// carries text the model reads as prompt.
type wireItem struct {
	Content   json.RawMessage `json:"content"`
	Text      *string         `json:"text"`
	Output    json.RawMessage `json:"output"`
	Arguments *string         `json:"arguments"`
}

// maxNesting bounds how deep content parts may nest (a tool result's
// content holding parts holding content ...).
const maxNesting = 8

func parseOpenAIBody(raw []byte) (*OpenAIBody, error) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0:
		return nil, fmt.Errorf("%w: the body is empty; expected a JSON object", ErrInvalidBody)
	case raw[0] != '{':
		return nil, fmt.Errorf("%w: the body must be a JSON object", ErrInvalidBody)
	}
	var w wireBody
	if err := json.Unmarshal(raw, &w); err != nil {
		return nil, jsonError(err)
	}
	b := &OpenAIBody{Raw: raw, Model: w.Model, Stream: w.Stream, N: 1}
	switch firstByte(w.StreamOptions) {
	case 0, 'n':
	case '{':
		var so struct {
			IncludeUsage bool `json:"include_usage"`
		}
		if err := json.Unmarshal(w.StreamOptions, &so); err != nil {
			return nil, jsonError(err)
		}
		b.IncludeUsage = so.IncludeUsage
	default:
		return nil, fmt.Errorf("%w: \"stream_options\" must be an object", ErrInvalidBody)
	}
	for _, c := range []struct {
		name string
		v    *int64
	}{{"max_tokens", w.MaxTokens}, {"max_completion_tokens", w.MaxCompletionTokens}, {"max_output_tokens", w.MaxOutputTokens}} {
		if c.v == nil {
			continue
		}
		if *c.v < 0 {
			return nil, fmt.Errorf("%w: %q must be ≥ 0, got %d", ErrInvalidBody, c.name, *c.v)
		}
		b.MaxOutputTokens = max(b.MaxOutputTokens, *c.v)
		b.HasMaxOutput = true
	}
	if w.N != nil {
		if *w.N < 1 {
			return nil, fmt.Errorf("%w: \"n\" must be ≥ 1, got %d", ErrInvalidBody, *w.N)
		}
		b.N = *w.N
	}
	if w.Instructions != "" {
		b.Texts = append(b.Texts, w.Instructions)
	}
	if err := b.addContent("system", w.System, 0); err != nil {
		return nil, err
	}
	for i := range w.Messages {
		if err := b.addItem("messages", &w.Messages[i], 0); err != nil {
			return nil, err
		}
	}
	if err := b.addInput("input", w.Input); err != nil {
		return nil, err
	}
	if err := b.addInput("prompt", w.Prompt); err != nil {
		return nil, err
	}
	for _, t := range []json.RawMessage{w.Tools, w.Functions} {
		if len(t) > 0 && string(t) != "null" {
			b.Texts = append(b.Texts, string(t))
		}
	}
	return b, nil
}

// jsonError turns an encoding/json error into a message for clients.
func jsonError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Errorf("%w: malformed JSON at byte %d: %s", ErrInvalidBody, syn.Offset, syn.Error())
	case errors.As(err, &typ):
		return fmt.Errorf("%w: %q must be %s, not a JSON %s", ErrInvalidBody, typ.Field, jsonKind(typ.Type), typ.Value)
	default:
		return fmt.Errorf("%w: %s", ErrInvalidBody, err.Error())
	}
}

// jsonKind names the JSON kind that decodes into t.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	default:
		return "an object"
	}
}

func firstByte(raw json.RawMessage) byte {
	for _, c := range raw {
		if c != ' ' && c != '\t' && c != '\r' && c != '\n' {
			return c
		}
	}
	return 0
}

// addContent adds a "content" (or "system"): a string, an array of parts
// or strings, or null.
func (b *OpenAIBody) addContent(field string, raw json.RawMessage, depth int) error {
	switch firstByte(raw) {
	case 0, 'n':
		return nil
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return jsonError(err)
		}
		b.Texts = append(b.Texts, s)
		return nil
	case '[':
		if depth >= maxNesting {
			return fmt.Errorf("%w: %q nests content more than %d levels deep", ErrInvalidBody, field, maxNesting)
		}
		var parts []json.RawMessage
		if err := json.Unmarshal(raw, &parts); err != nil {
			return jsonError(err)
		}
		for _, p := range parts {
			switch firstByte(p) {
			case '"':
				if err := b.addContent(field, p, depth+1); err != nil {
					return err
				}
			case '{':
				var it wireItem
				if err := json.Unmarshal(p, &it); err != nil {
					return fmt.Errorf("%w: a part of %q: %w", ErrInvalidBody, field, jsonError(err))
				}
				if err := b.addItem(field, &it, depth+1); err != nil {
					return err
				}
			default:
				return fmt.Errorf("%w: the parts of %q must be objects or strings", ErrInvalidBody, field)
			}
		}
		return nil
	default:
		return fmt.Errorf("%w: %q must be a string, an array of content parts or null", ErrInvalidBody, field)
	}
}

// addItem adds the text of a message, content part or input item.
func (b *OpenAIBody) addItem(field string, it *wireItem, depth int) error {
	if it.Text != nil {
		b.Texts = append(b.Texts, *it.Text)
	}
	if it.Arguments != nil {
		b.Texts = append(b.Texts, *it.Arguments)
	}
	if err := b.addContent(field, it.Content, depth); err != nil {
		return err
	}
	return b.addContent(field, it.Output, depth)
}

// addInput adds "input" or "prompt": a string, an array of strings, token
// IDs, arrays of token IDs or input items, or null.
func (b *OpenAIBody) addInput(field string, raw json.RawMessage) error {
	switch firstByte(raw) {
	case 0, 'n':
		return nil
	case '"':
		return b.addContent(field, raw, 0)
	case '[':
	default:
		return fmt.Errorf("%w: %q must be a string or an array", ErrInvalidBody, field)
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return jsonError(err)
	}
	for _, it := range items {
		switch c := firstByte(it); {
		case c == '"':
			if err := b.addContent(field, it, 0); err != nil {
				return err
			}
		case c == '-' || c >= '0' && c <= '9':
			b.TokenIDs++ // one token ID
		case c == '[':
			var ids []json.Number
			if err := json.Unmarshal(it, &ids); err != nil {
				return fmt.Errorf("%w: %q: an array inside it must hold token IDs (integers)", ErrInvalidBody, field)
			}
			b.TokenIDs += int64(len(ids))
		case c == '{':
			var item wireItem
			if err := json.Unmarshal(it, &item); err != nil {
				return fmt.Errorf("%w: an item of %q: %w", ErrInvalidBody, field, jsonError(err))
			}
			if err := b.addItem(field, &item, 0); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%w: the items of %q must be strings, token IDs or objects", ErrInvalidBody, field)
		}
	}
	return nil
}
