package ratelimit

import (
	"fmt"
	"math/bits"
	"net/http"
	"strconv"
	"time"
)

// HeaderWriter writes the rate-limit fields of a response from a Result.
// The middleware calls it before the handler runs (the handler may stream,
// and the fields must not go in trailers), on allowed and refused responses
// alike, but not when the Result has no decisions (the store failed and the
// request was let through). Implementations must be safe for concurrent
// use. Keep the serialisation behind this interface: the IETF draft is
// still moving. WithHeaders takes writers of vendor fields (such as
// llm.OpenAIHeaders) beside the built-in styles.
type HeaderWriter interface {
	WriteHeaders(h http.Header, res Result)
}

// HeaderStyle selects the built-in rate-limit fields; styles combine with |
// (HeadersIETF|HeadersXRateLimit). HeaderStyle implements HeaderWriter.
// Retry-After is not a style: it is sent on every 429 (and 503) whatever
// the style.
type HeaderStyle uint

const (
	// HeadersNone sends no rate-limit fields (Retry-After is still sent
	// on refusals).
	HeadersNone HeaderStyle = 0

	// HeadersIETF sends RateLimit-Policy and RateLimit as defined by
	// draft-ietf-httpapi-ratelimit-headers-11 (§3, §4), both RFC 9651
	// Lists with one item per limit, in the Limiter's order:
	//
	//	RateLimit-Policy: "requests";q=60;w=60, "tokens";q=100000;w=86400;rampmeter-unit="tokens"
	//	RateLimit: "requests";r=12;t=41, "tokens";r=3400;t=30211
	//
	// q is the Limit's Quota and w its Period in whole seconds, rounded up
	// and at least 1 (the draft has no sub-second windows, so a 500ms
	// period is announced as w=1). r is the Decision's Remaining and t its
	// Reset in whole seconds, rounded up: the time until the limit is full
	// again. The draft's only quota units are "requests" (the default,
	// omitted), "content-bytes" and "concurrent-requests" (sent as qu);
	// any other unit, such as "tokens", is sent in the vendor parameter
	// rampmeter-unit, as the draft asks of extensions (a unit that is not
	// printable ASCII is left out). A shadow limit (Limit.Shadow) is
	// listed with the boolean vendor parameter rampmeter-shadow, so that
	// clients can tell it does not refuse. This is the default style.
	HeadersIETF HeaderStyle = 1 << 0

	// HeadersXRateLimit sends the de facto X-RateLimit-Limit,
	// X-RateLimit-Remaining and X-RateLimit-Reset fields (as GitHub and
	// many gateways do) for the binding enforced limit (Result.Binding): its Burst,
	// its Remaining, and its Reset in whole seconds from now, rounded up
	// (a delay, not a Unix time).
	HeadersXRateLimit HeaderStyle = 1 << 1

	headersAll = HeadersIETF | HeadersXRateLimit
)

// WriteHeaders writes the fields of the styles in s. It writes nothing for
// a Result without decisions.
func (s HeaderStyle) WriteHeaders(h http.Header, res Result) {
	if len(res.Decisions) == 0 {
		return
	}
	if s&HeadersIETF != 0 {
		limits := make([]*Limit, len(res.Decisions))
		for i := range res.Decisions {
			limits[i] = res.Decisions[i].Limit
		}
		h.Set("RateLimit-Policy", policyField(limits))
		h.Set("RateLimit", rateLimitField(res.Decisions))
	}
	if s&HeadersXRateLimit != 0 {
		writeXRateLimit(h, res)
	}
}

// String returns the styles' names joined by "|", e.g. "IETF|XRateLimit".
func (s HeaderStyle) String() string {
	if s == HeadersNone {
		return "None"
	}
	var out string
	add := func(name string) {
		if out != "" {
			out += "|"
		}
		out += name
	}
	if s&HeadersIETF != 0 {
		add("IETF")
	}
	if s&HeadersXRateLimit != 0 {
		add("XRateLimit")
	}
	if rest := s &^ headersAll; rest != 0 {
		add(fmt.Sprintf("HeaderStyle(%#x)", uint(rest)))
	}
	return out
}

// styleWriter is the HeaderWriter New builds from WithHeaders: the fields
// of a HeaderStyle, with RateLimit-Policy (which depends only on the
// limits) computed once, then those of the other writers.
type styleWriter struct {
	style  HeaderStyle
	policy string
	others []HeaderWriter
}

func newStyleWriter(style HeaderStyle, others []HeaderWriter, limits []Limit) *styleWriter {
	w := &styleWriter{style: style, others: others}
	if style&HeadersIETF != 0 {
		ptrs := make([]*Limit, len(limits))
		for i := range limits {
			ptrs[i] = &limits[i]
		}
		w.policy = policyField(ptrs)
	}
	return w
}

func (w *styleWriter) WriteHeaders(h http.Header, res Result) {
	if w.policy == "" {
		// No static limits (WithLimitsFunc only): a Result from elsewhere.
		w.style.WriteHeaders(h, res)
		for _, o := range w.others {
			o.WriteHeaders(h, res)
		}
		return
	}
	w.write(h, res, w.policy)
}

// write writes the fields for res, whose limits' RateLimit-Policy field
// is policy (precomputed by the PolicySet the request was charged to).
func (w *styleWriter) write(h http.Header, res Result, policy string) {
	if len(res.Decisions) == 0 {
		return
	}
	if w.style&HeadersIETF != 0 {
		// One backing array for both fields; the capacity limits keep an
		// Add to one field from overwriting the other.
		vs := []string{policy, rateLimitField(res.Decisions)}
		h["Ratelimit-Policy"], h["Ratelimit"] = vs[0:1:1], vs[1:2:2]
	}
	if w.style&HeadersXRateLimit != 0 {
		writeXRateLimit(h, res)
	}
	for _, o := range w.others {
		o.WriteHeaders(h, res)
	}
}

// policyField serialises the RateLimit-Policy List (draft -11 §3.1).
func policyField(limits []*Limit) string {
	b := make([]byte, 0, 48*len(limits))
	for i, l := range limits {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendSFString(b, l.Name())
		b = append(b, ";q="...)
		b = strconv.AppendInt(b, min(l.Quota(), maxSFInteger), 10)
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, max(1, ceilSeconds(l.Period())), 10)
		switch u := string(l.Unit()); {
		case u == string(Requests):
			// The draft's default unit: omitted.
		case u == "content-bytes" || u == "concurrent-requests":
			b = append(b, ";qu="...)
			b = appendSFString(b, u)
		case sfStringOK(u):
			b = append(b, ";rampmeter-unit="...)
			b = appendSFString(b, u)
		}
		if l.shadow {
			// A boolean parameter (RFC 9651 §3.3.6): true when bare.
			b = append(b, ";rampmeter-shadow"...)
		}
	}
	return string(b)
}

// rateLimitField serialises the RateLimit List (draft -11 §4).
func rateLimitField(ds []Decision) string {
	var buf [128]byte
	b := buf[:0]
	for i := range ds {
		d := &ds[i]
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendSFString(b, d.Limit.Name())
		b = append(b, ";r="...)
		b = strconv.AppendInt(b, min(max(0, d.Remaining), maxSFInteger), 10)
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, ceilSeconds(d.Reset), 10)
	}
	return string(b)
}

func writeXRateLimit(h http.Header, res Result) {
	d := res.Binding()
	if d == nil {
		return
	}
	vs := []string{
		strconv.FormatInt(d.Limit.Burst(), 10),
		strconv.FormatInt(max(0, d.Remaining), 10),
		strconv.FormatInt(ceilSeconds(d.Reset), 10),
	}
	h["X-Ratelimit-Limit"], h["X-Ratelimit-Remaining"], h["X-Ratelimit-Reset"] = vs[0:1:1], vs[1:2:2], vs[2:3:3]
}

// maxSFInteger is the largest RFC 9651 Integer (§3.3.1: at most 15
// digits). Quotas and remaining units can reach 2^51 (16 digits), so the
// IETF fields cap them here: a receiver must refuse a longer integer, and
// with it the whole field.
const maxSFInteger = 999_999_999_999_999

// appendSFString appends s as an RFC 9651 §4.1.6 String: quoted, with "
// and \ escaped. Callers pass only printable ASCII (limit names are
// validated to [A-Za-z0-9_.-]; units are checked with sfStringOK).
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' {
			b = append(b, '\\', c)
		} else {
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// sfStringOK reports whether s can be an RFC 9651 String: printable ASCII
// only (%x20-7E).
func sfStringOK(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// ceilSeconds returns d in whole seconds, rounded up; 0 for d ≤ 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d-1)/time.Second) + 1
}

// retryAfterSeconds is the Retry-After value (RFC 9110 §10.2.3:
// delay-seconds, a non-negative integer) for a wait of d: rounded up so a
// client that obeys it is not refused again for arriving early, and at
// least 1 so no client is told to retry at once.
func retryAfterSeconds(d time.Duration) int64 { return max(1, ceilSeconds(d)) }

// tighter reports whether allowed decision a has less of its capacity left
// than b: a.Remaining/a.Burst < b.Remaining/b.Burst, compared exactly in
// 128 bits.
func tighter(a, b *Decision) bool {
	ah, al := bits.Mul64(uint64(max(0, a.Remaining)), uint64(b.Limit.Burst()))
	bh, bl := bits.Mul64(uint64(max(0, b.Remaining)), uint64(a.Limit.Burst()))
	return ah < bh || ah == bh && al < bl
}
