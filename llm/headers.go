package llm

import (
	"net/http"
	"strconv"
	"time"
	"unsafe"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/internal/fieldbuf"
)

// OpenAIHeaders returns a [ratelimit.HeaderWriter] that sends the fields of
// the OpenAI API (platform.openai.com/docs/guides/rate-limits), for
// clients and SDKs written against it. Pass it to [ratelimit.WithHeaders],
// beside the IETF fields or instead of them:
//
//	ratelimit.WithHeaders(ratelimit.HeadersIETF, llm.OpenAIHeaders())
//
// It writes:
//
//	x-ratelimit-limit-requests: 60
//	x-ratelimit-remaining-requests: 59
//	x-ratelimit-reset-requests: 1s
//	x-ratelimit-limit-tokens: 100000
//	x-ratelimit-remaining-tokens: 99000
//	x-ratelimit-reset-tokens: 14m24s
//
// The "requests" fields describe the most restrictive enforced limit
// whose Unit is ratelimit.Requests, the "tokens" fields the most
// restrictive whose Unit is ratelimit.Tokens (Limit.CostFrom sets it): the
// one with the fewest units remaining, the first on ties. A unit without
// such a limit gets no fields; limits of other units and shadow limits are
// not reported here. limit is the limit's Burst (the most that can be
// spent at once), remaining its Decision.Remaining, and reset the time
// until it is full again (Decision.Reset) as a Go duration string rounded
// up to whole milliseconds, as OpenAI sends it: "1s", "6m0s", "1.5s",
// "12ms", "0s". Like every HeaderWriter it writes nothing for a Result
// without decisions.
//
// On a refusal it also sends the fields the OpenAI SDKs read before the
// status and Retry-After: retry-after-ms, the wait in milliseconds
// (jitter included, ratelimit.WithRetryJitter; Retry-After is its ceiling
// in seconds), and "x-should-retry: false" when the wait exceeds
// DefaultMaxRetryWait (WithMaxRetryWait sets another) or the request can
// never fit (413), so that an SDK gives up at once rather than sleeping
// past what its caller expects. WithoutRetryHeaders leaves both out.
//
// The fields go out with the response's header, before the handler's
// first byte, so on an admitted request they describe the state with the
// request's reservation. When the handler writes a failing status before
// any byte (a 502 from an unavailable upstream, a 400 for a body it
// refused), the middleware releases the reservations first and writes the
// fields again: they then describe the state after the release (tokens
// given back; the request itself still counts unless
// ratelimit.WithRefundOnServerError, for a 5xx). Once a stream's first
// byte is out, a later failure cannot change them.
func OpenAIHeaders(opts ...HeaderOption) ratelimit.HeaderWriter {
	return openAIHeaders{newRetryHints(opts)}
}

// AnthropicHeaders returns a [ratelimit.HeaderWriter] that sends the
// fields of the Anthropic API (docs.anthropic.com/en/api/rate-limits),
// chosen as for OpenAIHeaders:
//
//	anthropic-ratelimit-requests-limit: 60
//	anthropic-ratelimit-requests-remaining: 59
//	anthropic-ratelimit-requests-reset: 2026-01-02T03:04:06Z
//	anthropic-ratelimit-tokens-limit: 100000
//	anthropic-ratelimit-tokens-remaining: 99000
//	anthropic-ratelimit-tokens-reset: 2026-01-02T03:18:29Z
//
// reset is the RFC 3339 time (UTC, whole seconds, rounded up) at which
// the limit is full again, by the store's clock (Decision.At plus
// Decision.Reset). Remaining counts are exact (Anthropic rounds its
// token counts to thousands). On a refusal it sends retry-after-ms and
// x-should-retry as OpenAIHeaders does: the Anthropic SDKs read them the
// same way.
//
// Limits whose unit is InputTokens or OutputTokens get the fields
// Anthropic sends for its input-tokens and output-tokens rate limits,
// chosen the same way within each unit:
//
//	anthropic-ratelimit-input-tokens-limit: 400000
//	anthropic-ratelimit-input-tokens-remaining: 399000
//	anthropic-ratelimit-input-tokens-reset: 2026-01-02T03:04:06Z
//	anthropic-ratelimit-output-tokens-limit: 80000
//	anthropic-ratelimit-output-tokens-remaining: 79000
//	anthropic-ratelimit-output-tokens-reset: 2026-01-02T03:04:06Z
func AnthropicHeaders(opts ...HeaderOption) ratelimit.HeaderWriter {
	return anthropicHeaders{newRetryHints(opts)}
}

// The units of limits that count only some kinds of tokens (see Counting
// and Usage.Count), set with Limit.WithUnit after CostFrom. AnthropicHeaders
// reports them in the fields of Anthropic's input-tokens and
// output-tokens rate limits, and the IETF fields name them in the
// rampmeter-unit parameter.
const (
	// InputTokens is the unit of a limit on prompt tokens: Anthropic's
	// input tokens per minute (ITPM) count Input | CacheWrite, OpenAI's
	// prompt tokens count Prompt.
	InputTokens ratelimit.Unit = "input-tokens"
	// OutputTokens is the unit of a limit on generated tokens (Output):
	// Anthropic's output tokens per minute (OTPM).
	OutputTokens ratelimit.Unit = "output-tokens"
)

type openAIHeaders struct{ retryHints }

// openAIFields holds the values of OpenAIHeaders' fields for one response:
// vs, the values, point into buf, their bytes, so that a response's fields
// cost one allocation.
type openAIFields struct {
	vs  [6]string
	buf [112]byte // 2 × (2 × 19 digits + a duration); append moves on if ever short
}

func (w openAIHeaders) WriteHeaders(h http.Header, res ratelimit.Result) {
	w.WriteHeadersBuf(h, res, nil)
}

// WriteHeadersBuf is WriteHeaders with the values in fb, the storage that
// the middleware keeps for a request's fields, where they fit (nil: none).
func (w openAIHeaders) WriteHeadersBuf(h http.Header, res ratelimit.Result, fb *fieldbuf.Buf) {
	w.write(h, res)
	var ds [2]*ratelimit.Decision // requests, tokens: mostRestrictive of each, in one pass
	for i := range res.Decisions {
		d := &res.Decisions[i]
		if d.Limit == nil || d.LimitIsShadow() {
			continue
		}
		var b **ratelimit.Decision
		switch d.LimitUnit() {
		case ratelimit.Requests:
			b = &ds[0]
		case ratelimit.Tokens:
			b = &ds[1]
		default:
			continue
		}
		if *b == nil || d.Remaining < (*b).Remaining {
			*b = d
		}
	}
	n := 0
	for _, d := range ds {
		if d != nil {
			n += 3
		}
	}
	if n == 0 {
		return
	}
	var b []byte
	vs := fb.Values(n)
	if vs != nil {
		b = fb.Bytes()
	} else {
		f := new(openAIFields)
		vs, b = f.vs[:n], f.buf[:0]
	}
	var ends [6]int
	i := 0
	for _, d := range ds {
		if d != nil {
			b = appendOpenAIDuration(appendCounts(b, d, ends[i:i+2]), d.Reset)
			ends[i+2] = len(b)
			i += 3
		}
	}
	splitFields(vs, fb.Take(b), ends[:n])
	if ds[0] != nil {
		h["X-Ratelimit-Limit-Requests"], h["X-Ratelimit-Remaining-Requests"], h["X-Ratelimit-Reset-Requests"] = vs[0:1:1], vs[1:2:2], vs[2:3:3]
		vs = vs[3:]
	}
	if ds[1] != nil {
		h["X-Ratelimit-Limit-Tokens"], h["X-Ratelimit-Remaining-Tokens"], h["X-Ratelimit-Reset-Tokens"] = vs[0:1:1], vs[1:2:2], vs[2:3:3]
	}
}

type anthropicHeaders struct{ retryHints }

// anthropicFields is openAIFields for AnthropicHeaders' four units.
type anthropicFields struct {
	vs  [12]string
	buf [240]byte // 4 × (2 × 19 digits + an RFC 3339 time); append moves on if ever short
}

// anthropicNames are the names of AnthropicHeaders' fields, by unit.
var anthropicNames = [4][3]string{
	{"Anthropic-Ratelimit-Requests-Limit", "Anthropic-Ratelimit-Requests-Remaining", "Anthropic-Ratelimit-Requests-Reset"},
	{"Anthropic-Ratelimit-Tokens-Limit", "Anthropic-Ratelimit-Tokens-Remaining", "Anthropic-Ratelimit-Tokens-Reset"},
	{"Anthropic-Ratelimit-Input-Tokens-Limit", "Anthropic-Ratelimit-Input-Tokens-Remaining", "Anthropic-Ratelimit-Input-Tokens-Reset"},
	{"Anthropic-Ratelimit-Output-Tokens-Limit", "Anthropic-Ratelimit-Output-Tokens-Remaining", "Anthropic-Ratelimit-Output-Tokens-Reset"},
}

func (w anthropicHeaders) WriteHeaders(h http.Header, res ratelimit.Result) {
	w.write(h, res)
	var ds [4]*ratelimit.Decision
	found := false
	for i, u := range [4]ratelimit.Unit{ratelimit.Requests, ratelimit.Tokens, InputTokens, OutputTokens} {
		ds[i] = mostRestrictive(res.Decisions, u)
		found = found || ds[i] != nil
	}
	if !found {
		return
	}
	f := new(anthropicFields)
	var ends [12]int
	b, n := f.buf[:0], 0
	for _, d := range ds {
		if d != nil {
			b = appendAnthropicReset(appendCounts(b, d, ends[n:n+2]), d)
			ends[n+2] = len(b)
			n += 3
		}
	}
	splitFields(f.vs[:n], unsafe.String(unsafe.SliceData(b), len(b)), ends[:n])
	vs := f.vs[:]
	for i, d := range ds {
		if d != nil {
			names := &anthropicNames[i]
			h[names[0]], h[names[1]], h[names[2]] = vs[0:1:1], vs[1:2:2], vs[2:3:3]
			vs = vs[3:]
		}
	}
}

// appendCounts appends d's limit (its Burst) and remaining count
// (max(0, Remaining)) to b, and their ends in b to ends.
func appendCounts(b []byte, d *ratelimit.Decision, ends []int) []byte {
	b = strconv.AppendInt(b, d.LimitBurst(), 10)
	ends[0] = len(b)
	b = strconv.AppendInt(b, max(0, d.Remaining), 10)
	ends[1] = len(b)
	return b
}

// splitFields sets vs to the pieces of s that end at ends.
func splitFields(vs []string, s string, ends []int) {
	start := 0
	for i, end := range ends {
		vs[i] = s[start:end]
		start = end
	}
}

// mostRestrictive returns the enforced decision of unit u with the fewest
// units remaining (the first on ties), or nil. Within one unit, that is the
// limit that decides whether the next request fits; in a refusal it is a
// refusing one, since a refusing limit has fewer units left than the cost
// and the others at least as many.
func mostRestrictive(ds []ratelimit.Decision, u ratelimit.Unit) *ratelimit.Decision {
	var b *ratelimit.Decision
	for i := range ds {
		d := &ds[i]
		if d.Limit == nil || d.LimitIsShadow() || d.LimitUnit() != u {
			continue
		}
		if b == nil || d.Remaining < b.Remaining {
			b = d
		}
	}
	return b
}

// appendOpenAIDuration appends d as OpenAI's reset fields give it: a Go
// duration string, rounded up to whole milliseconds ("864ms", "1m26.4s",
// "6m0s"): the bytes of Duration.String, written straight into b (the
// string and the formatting of every unit below milliseconds, which are
// zero here, cost a third of OpenAIHeaders).
func appendOpenAIDuration(b []byte, d time.Duration) []byte {
	if d <= 0 {
		return append(b, "0s"...)
	}
	r := (d + time.Millisecond - 1) / time.Millisecond * time.Millisecond
	if r <= 0 { // overflowed near MaxInt64: as Duration.String writes it
		return append(b, r.String()...)
	}
	ms := uint64(r / time.Millisecond)
	if ms < 1000 { // Duration.String: "12ms"
		return append(strconv.AppendUint(b, ms, 10), "ms"...)
	}
	secs, frac := ms/1000, ms%1000
	if h := secs / 3600; h > 0 {
		b = append(strconv.AppendUint(b, h, 10), 'h')
	}
	if secs >= 60 { // minutes are written once there are any, "0m" after hours
		b = append(strconv.AppendUint(b, secs/60%60, 10), 'm')
	}
	b = strconv.AppendUint(b, secs%60, 10)
	if frac != 0 { // the fraction without its trailing zeros: "1.5s", "1.05s"
		digits := [3]byte{byte('0' + frac/100), byte('0' + frac/10%10), byte('0' + frac%10)}
		n := 3
		for digits[n-1] == '0' {
			n--
		}
		b = append(append(b, '.'), digits[:n]...)
	}
	return append(b, 's')
}

// appendAnthropicReset appends the time at which d's limit is full again as
// RFC 3339 in UTC, rounded up to whole seconds.
func appendAnthropicReset(b []byte, d *ratelimit.Decision) []byte {
	at := time.UnixMicro(d.At).Add(d.Reset)
	if r := at.Truncate(time.Second); !r.Equal(at) {
		at = r.Add(time.Second)
	}
	return at.UTC().AppendFormat(b, time.RFC3339)
}
