package llm

import (
	"net/http"
	"strconv"
	"time"

	"github.com/rampmeter/ratelimit"
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

func (w openAIHeaders) WriteHeaders(h http.Header, res ratelimit.Result) {
	w.write(h, res)
	if d := mostRestrictive(res.Decisions, ratelimit.Requests); d != nil {
		vs := fields(d, openAIDuration(d.Reset))
		h["X-Ratelimit-Limit-Requests"], h["X-Ratelimit-Remaining-Requests"], h["X-Ratelimit-Reset-Requests"] = vs[0:1:1], vs[1:2:2], vs[2:3:3]
	}
	if d := mostRestrictive(res.Decisions, ratelimit.Tokens); d != nil {
		vs := fields(d, openAIDuration(d.Reset))
		h["X-Ratelimit-Limit-Tokens"], h["X-Ratelimit-Remaining-Tokens"], h["X-Ratelimit-Reset-Tokens"] = vs[0:1:1], vs[1:2:2], vs[2:3:3]
	}
}

type anthropicHeaders struct{ retryHints }

func (w anthropicHeaders) WriteHeaders(h http.Header, res ratelimit.Result) {
	w.write(h, res)
	if d := mostRestrictive(res.Decisions, ratelimit.Requests); d != nil {
		vs := fields(d, anthropicReset(d))
		h["Anthropic-Ratelimit-Requests-Limit"], h["Anthropic-Ratelimit-Requests-Remaining"], h["Anthropic-Ratelimit-Requests-Reset"] = vs[0:1:1], vs[1:2:2], vs[2:3:3]
	}
	if d := mostRestrictive(res.Decisions, ratelimit.Tokens); d != nil {
		vs := fields(d, anthropicReset(d))
		h["Anthropic-Ratelimit-Tokens-Limit"], h["Anthropic-Ratelimit-Tokens-Remaining"], h["Anthropic-Ratelimit-Tokens-Reset"] = vs[0:1:1], vs[1:2:2], vs[2:3:3]
	}
	if d := mostRestrictive(res.Decisions, InputTokens); d != nil {
		vs := fields(d, anthropicReset(d))
		h["Anthropic-Ratelimit-Input-Tokens-Limit"], h["Anthropic-Ratelimit-Input-Tokens-Remaining"], h["Anthropic-Ratelimit-Input-Tokens-Reset"] = vs[0:1:1], vs[1:2:2], vs[2:3:3]
	}
	if d := mostRestrictive(res.Decisions, OutputTokens); d != nil {
		vs := fields(d, anthropicReset(d))
		h["Anthropic-Ratelimit-Output-Tokens-Limit"], h["Anthropic-Ratelimit-Output-Tokens-Remaining"], h["Anthropic-Ratelimit-Output-Tokens-Reset"] = vs[0:1:1], vs[1:2:2], vs[2:3:3]
	}
}

// fields returns the limit, remaining and reset values of d in one backing
// array; the callers slice it with capacity limits, so that an Add to one
// field cannot overwrite the next.
func fields(d *ratelimit.Decision, reset string) []string {
	return []string{strconv.FormatInt(d.Limit.Burst(), 10), strconv.FormatInt(max(0, d.Remaining), 10), reset}
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
		if d.Limit == nil || d.Limit.IsShadow() || d.Limit.Unit() != u {
			continue
		}
		if b == nil || d.Remaining < b.Remaining {
			b = d
		}
	}
	return b
}

// openAIDuration formats d as OpenAI's reset fields do: a Go duration
// string, rounded up to whole milliseconds ("864ms", "1m26.4s", "6m0s").
func openAIDuration(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	return ((d + time.Millisecond - 1) / time.Millisecond * time.Millisecond).String()
}

// anthropicReset formats the time at which d's limit is full again as
// RFC 3339 in UTC, rounded up to whole seconds.
func anthropicReset(d *ratelimit.Decision) string {
	at := time.UnixMicro(d.At).Add(d.Reset)
	if r := at.Truncate(time.Second); !r.Equal(at) {
		at = r.Add(time.Second)
	}
	return at.UTC().Format(time.RFC3339)
}
