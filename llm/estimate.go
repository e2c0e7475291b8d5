package llm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"unsafe"

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
// it. Treat it as read-only: it is shared by every reader of the request,
// and its strings (Model, Texts) may share memory with Raw, so modifying
// Raw would change them.
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
// twice. Close does nothing (the server closes the original body). It also
// holds the parse's storage (parsed, and texts for the first text pieces),
// so that a typical body costs one allocation besides its bytes.
type cachedBody struct {
	bytes.Reader
	body   *OpenAIBody
	err    error
	parsed OpenAIBody
	texts  [4]string
}

func (*cachedBody) Close() error { return nil }

// parse parses raw into c's storage with the scanner, or, for a body the
// scanner leaves to it, with encoding/json.
func (c *cachedBody) parse(raw []byte) (*OpenAIBody, error) {
	if scanOpenAIBody(bytes.TrimSpace(raw), &c.parsed, c.texts[:0]) {
		return &c.parsed, nil
	}
	return parseOpenAIBodyJSON(raw)
}

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
	c, buf := newCachedBody(r.ContentLength, maxBytes)
	var raw []byte
	if r.Body != nil && r.Body != http.NoBody {
		var err error
		raw, err = readBodyInto(r.Body, buf, maxBytes, r.ContentLength)
		switch {
		case int64(len(raw)) > maxBytes || err != nil && isMaxBytesError(err):
			return nil, bodyTooLarge(maxBytes)
		case err != nil:
			return nil, &ratelimit.StatusError{Code: http.StatusBadRequest,
				Message: "The request body could not be read; send it again.",
				Err:     fmt.Errorf("%w: reading the body: %w", ErrInvalidBody, err)}
		}
	}
	c.Reset(raw)
	body, err := c.parse(raw)
	if err != nil {
		body = nil
		err = invalidBody(err)
	}
	c.body, c.err = body, err
	r.Body = c
	return body, err
}

// The cachedBody of a body of known size, with room for its bytes in the
// same allocation: the struct and the room fill a size class of the
// allocator (512, 1024, 2048 or 4096 bytes), so that a typical body costs
// one allocation.
type (
	cachedBody512 struct {
		cachedBody
		buf [512 - cachedBodySize]byte
	}
	cachedBody1024 struct {
		cachedBody
		buf [1024 - cachedBodySize]byte
	}
	cachedBody2048 struct {
		cachedBody
		buf [2048 - cachedBodySize]byte
	}
	cachedBody4096 struct {
		cachedBody
		buf [4096 - cachedBodySize]byte
	}
)

// cachedBodySize is the size of a cachedBody on this architecture.
const cachedBodySize = int(unsafe.Sizeof(cachedBody{}))

// newCachedBody returns the cachedBody for a request whose body announces
// size bytes (r.ContentLength; -1: unknown), and an empty buffer to read
// the body into: when the body and the room to see io.EOF without growing
// fit, its room in the cachedBody's own allocation, else nil (readBodyInto
// allocates one).
func newCachedBody(size, maxBytes int64) (*cachedBody, []byte) {
	if size <= 0 || size > maxBytes {
		return new(cachedBody), nil
	}
	switch n := size + 1; { // + 1: room to see io.EOF without growing
	case n <= int64(len(cachedBody512{}.buf)):
		v := new(cachedBody512)
		return &v.cachedBody, v.buf[:0:n]
	case n <= int64(len(cachedBody1024{}.buf)):
		v := new(cachedBody1024)
		return &v.cachedBody, v.buf[:0:n]
	case n <= int64(len(cachedBody2048{}.buf)):
		v := new(cachedBody2048)
		return &v.cachedBody, v.buf[:0:n]
	case n <= int64(len(cachedBody4096{}.buf)):
		v := new(cachedBody4096)
		return &v.cachedBody, v.buf[:0:n]
	}
	return new(cachedBody), nil
}

// readBody reads body as io.ReadAll(io.LimitReader(body, maxBytes+1))
// does, into a buffer sized from the announced size (r.ContentLength) when
// there is one, so that a body of the announced size costs one allocation
// and no copy.
func readBody(body io.Reader, size, maxBytes int64) ([]byte, error) {
	return readBodyInto(body, nil, maxBytes, size)
}

// readBodyInto is readBody reading into buf (empty; nil: a buffer sized
// from size, the announced size, is allocated). The bytes are in buf's
// array unless the body is larger than its capacity.
func readBodyInto(body io.Reader, buf []byte, maxBytes, size int64) ([]byte, error) {
	if buf == nil {
		n := int64(512) // io.ReadAll's first buffer
		if size > 0 {
			n = min(size, 64<<10) + 1 // + 1: room to see io.EOF without growing
		}
		buf = make([]byte, 0, n)
	}
	left := maxBytes + 1 // as io.LimitReader's N (wraps like it for MaxInt64)
	for {
		if left <= 0 {
			return buf, nil // io.LimitReader's io.EOF
		}
		p := buf[len(buf):cap(buf)]
		if int64(len(p)) > left {
			p = p[:left]
		}
		m, err := body.Read(p)
		buf = buf[:len(buf)+m]
		left -= int64(m)
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			return buf, err
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)] // grow as io.ReadAll does
		}
	}
}

// isMaxBytesError says whether err is http.MaxBytesReader's (apart, so
// that its target escapes only on this rare path).
func isMaxBytesError(err error) bool {
	var mbe *http.MaxBytesError
	return errors.As(err, &mbe)
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
