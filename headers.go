package ratelimit

import (
	"fmt"
	"math/bits"
	"net/http"
	"strconv"
	"time"
	"unsafe"

	"github.com/rampmeter/ratelimit/internal/fieldbuf"
)

// HeaderWriter writes the rate-limit fields of a response from a Result.
// The middleware calls it before the handler runs (the handler may stream,
// and the fields must not go in trailers), on allowed and refused responses
// alike, but not when the Result has no decisions (the store failed and the
// request was let through). On a refusal, res.RetryAfter is the wait the
// client is told, jitter included (WithRetryJitter): the same wait as
// Retry-After. Implementations must be safe for concurrent use. Keep the
// serialisation behind this interface: the IETF draft is still moving.
// WithHeaders takes writers of vendor fields (such as llm.OpenAIHeaders)
// beside the built-in styles.
//
// A writer that also has a method Validate() error is validated by
// WithHeaders: a non-nil error makes New fail with it.
type HeaderWriter interface {
	WriteHeaders(h http.Header, res Result)
}

// HeaderStyle selects the built-in rate-limit fields; styles combine with |
// (HeadersIETF|HeadersXRateLimit). HeaderStyle implements HeaderWriter.
// Retry-After is not a style: it is sent on every 429 (and 503) whatever
// the style.
//
// Nested limiters (a per-IP Limiter in front of a per-key one, each a
// middleware) share the response's fields: each Limiter a request passes
// adds its own members to RateLimit-Policy and RateLimit, after those of
// the Limiters before it, and X-RateLimit-* describe the binding limit
// across all of them (the one that refused, or the one with the least
// fraction of its capacity left). Give nested Limiters distinct names
// (WithName) so that their members have distinct names; New refuses two
// unnamed Limiters on one store whose limits share a name.
type HeaderStyle uint

const (
	// HeadersNone sends no rate-limit fields (Retry-After is still sent
	// on refusals).
	HeadersNone HeaderStyle = 0

	// HeadersIETF sends RateLimit-Policy and RateLimit as defined by
	// draft-ietf-httpapi-ratelimit-headers-11 (§3, §4), both RFC 9651
	// Lists with one item per enforced limit, in the Limiter's order:
	//
	//	RateLimit-Policy: "requests";q=60;w=60, "tokens";q=100000;w=86400;rampmeter-unit="tokens"
	//	RateLimit: "requests";r=12;t=1, "tokens";r=3400;t=1
	//
	// An item's name is the limit's Name, prefixed by the Limiter's name
	// and a slash when it has one (WithName): "ip/requests".
	//
	// RateLimit-Policy (§3.1): q is the Limit's Quota and w its Period in
	// whole seconds. The draft has no sub-second windows (§3.1.3), so a
	// period that is not a whole number of seconds is scaled to a window
	// of whole seconds with the same rate: Every(2, 500*time.Millisecond)
	// is q=4;w=1, Every(10, 1500*time.Millisecond) q=20;w=3 (the smallest
	// such window of at most max(60 s, twice the period); beyond it the
	// period rounded up, with q rounded down so that the rate is never
	// overstated). The draft's only quota units are "requests" (the
	// default, omitted), "content-bytes" and "concurrent-requests" (sent as
	// qu); any other unit, such as "tokens", is sent in the vendor
	// parameter rampmeter-unit, as the draft asks of extensions (§3.1). A
	// burst other than q (Limit.WithBurst) is sent in the vendor parameter
	// rampmeter-burst: the most a client can spend at once.
	//
	// A concurrency cap (Concurrent) is its own item with q the cap, the
	// unit qu="concurrent-requests" and no w: a cap on requests in flight
	// has no time window (w is optional, §3.1). Its r is the number of
	// requests the key may start now (the cap minus the requests in
	// flight, this one included on an admission):
	//
	//	RateLimit-Policy: "requests";q=60;w=60, "concurrent-requests";q=4;qu="concurrent-requests"
	//	RateLimit: "requests";r=59;t=1, "concurrent-requests";r=3;t=1
	//
	// RateLimit (§4.1): r is the available quota, the Decision's
	// Remaining, but never more than q (a burst larger than the quota can
	// hold more; rampmeter-burst tells how much). t is the effective window
	// (§4.1.2): the whole seconds, rounded up, within which the client can
	// use no more than r. Its value by algorithm:
	//
	//   - TokenBucket, GCRA, LeakyBucket: the time until the bucket has
	//     refilled one unit more than r, that is until a client that spent
	//     r now could spend one more: at most one emission interval
	//     (Period/Quota) once r is spent, so usually 1 for a fast rate
	//     (PerMinute(60): "r=59;t=1"), longer for a slow one
	//     (PerDay(100): t=864 after the first request). It is not the time
	//     until the bucket is full, after which the client could have spent
	//     far more than r. When r is capped at q, t is w: the advice is to
	//     spend no more than q per w, the sustained rate.
	//   - FixedWindow: the time until the current window ends.
	//   - SlidingLog and SlidingWindow: the time until everything counted
	//     now has left the window (for an unused key, the window's length,
	//     plus the rest of the current window for SlidingWindow): an
	//     upper bound of the effective window, as more quota may come back
	//     earlier.
	//	//   - Concurrency (Concurrent): 1 while the key holds any slot, 0 when
	//     it holds none. Held slots return when their requests end, which
	//     nobody can foresee; 1 s is the interval at which a client that
	//     found r=0 may look again, the Retry-After of a refusal by the cap
	//     (ConcurrencyRetryAfter).
	//
	// On a refusal, the t of each refusing limit is the time until the
	// request's cost fits it, and the binding limit's t (Result.Binding)
	// is the Retry-After value itself, so that the two reference the same
	// point in time (§6). A WithMaxWait refusal shows r=0: every request
	// of the key would wait too long.
	//
	// Shadow limits (Limit.Shadow) are left out of both fields, so that a
	// dark launch does not change what a client following the draft does;
	// HeadersShadow includes them. Units are printable ASCII (New refuses
	// any other, see Limit.WithUnit), so every field is a valid RFC 9651
	// List. This is the default style.
	HeadersIETF HeaderStyle = 1 << 0

	// HeadersXRateLimit sends the de facto X-RateLimit-Limit,
	// X-RateLimit-Remaining and X-RateLimit-Reset fields (as GitHub and
	// many gateways do) for the binding enforced limit (Result.Binding):
	// its Burst, its Remaining, and its Reset in whole seconds from now,
	// rounded up (a delay, not a Unix time: the time until the limit is
	// full again).
	HeadersXRateLimit HeaderStyle = 1 << 1

	// HeadersShadow adds shadow limits (Limit.Shadow) to the HeadersIETF
	// fields, each with the boolean vendor parameter rampmeter-shadow in
	// RateLimit-Policy, so that clients can tell it does not refuse.
	// Combine it with HeadersIETF.
	HeadersShadow HeaderStyle = 1 << 2

	headersAll = HeadersIETF | HeadersXRateLimit | HeadersShadow
)

// WriteHeaders writes the fields of the styles in s, after any that a
// Limiter before this one set (see HeaderStyle). It writes nothing for a
// Result without decisions.
func (s HeaderStyle) WriteHeaders(h http.Header, res Result) {
	if len(res.Decisions) == 0 {
		return
	}
	var policy string
	if s&HeadersIETF != 0 {
		limits := make([]*Limit, len(res.Decisions))
		for i := range res.Decisions {
			limits[i] = res.Decisions[i].Limit
		}
		policy = policyField(limits, s&HeadersShadow != 0)
	}
	(&styleWriter{style: s}).write(h, res, policy)
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
	if s&HeadersShadow != 0 {
		add("Shadow")
	}
	if rest := s &^ headersAll; rest != 0 {
		add(fmt.Sprintf("HeaderStyle(%#x)", uint(rest)))
	}
	return out
}

// styleWriter is the HeaderWriter New builds from WithHeaders: the fields
// of a HeaderStyle, then those of the other writers. The RateLimit-Policy
// value depends only on the limits, so the PolicySet a request is charged
// to holds it, computed once (boundSet).
type styleWriter struct {
	style  HeaderStyle
	others []HeaderWriter
}

// WriteHeaders writes the fields for a Result from elsewhere, computing
// RateLimit-Policy.
func (w *styleWriter) WriteHeaders(h http.Header, res Result) {
	w.style.WriteHeaders(h, res)
	for _, o := range w.others {
		o.WriteHeaders(h, res)
	}
}

// write writes the fields for res, whose limits' RateLimit-Policy value
// is policy ("" when every limit is left out): writeOwn, then the other
// writers.
func (w *styleWriter) write(h http.Header, res Result, policy string) {
	w.writeBuf(h, res, policy, nil)
}

// writeBuf is write with the values in fb where they fit (nil: none).
func (w *styleWriter) writeBuf(h http.Header, res Result, policy string, fb *fieldbuf.Buf) {
	w.writeOwn(h, &res, policy, fb)
	w.writeOthers(h, res, fb)
}

// writeOthers writes the fields of the writers beside the style, for a
// Result with decisions, those that can (bufWriter) with their values in
// fb (nil: none). They may keep res and its decisions.
func (w *styleWriter) writeOthers(h http.Header, res Result, fb *fieldbuf.Buf) {
	if len(res.Decisions) == 0 {
		return
	}
	for _, o := range w.others {
		if bw, ok := o.(bufWriter); ok && fb != nil {
			bw.WriteHeadersBuf(h, res, fb)
		} else {
			o.WriteHeaders(h, res)
		}
	}
}

// bufWriter is a HeaderWriter of this module (llm.OpenAIHeaders) that can
// put its values in a request's field storage: WriteHeadersBuf is
// WriteHeaders with the values in fb where they fit. The fieldbuf package
// is internal, so no other writer implements it.
type bufWriter interface {
	WriteHeadersBuf(h http.Header, res Result, fb *fieldbuf.Buf)
}

// wantsBuf reports whether a writer beside the style is a bufWriter: the
// requests with a reqState then keep a fieldbuf.Buf in it (newState),
// which holds the values of the IETF fields too.
func (w *styleWriter) wantsBuf() bool {
	if w == nil {
		return false
	}
	for _, o := range w.others {
		if _, ok := o.(bufWriter); ok {
			return true
		}
	}
	return false
}

// writeOwn writes the fields of the style for *res (which it does not
// keep), whose limits' RateLimit-Policy value is policy.
//
// Allocations, for the middleware's budget: none when fb (the request's
// field storage, or nil) has room for the []string backing both IETF
// fields and the bytes of the RateLimit value; else one block holding both
// (the value built in a stack buffer; ietfValues), two for a value of more
// than 96 bytes; HeadersXRateLimit adds one string (the three values,
// sliced) and one []string. A nested Limiter (fields already present) pays
// two more strings (the joined values); the RateLimit-Policy value is
// precomputed (PolicySet.policy).
func (w *styleWriter) writeOwn(h http.Header, res *Result, policy string, fb *fieldbuf.Buf) {
	if len(res.Decisions) == 0 {
		return
	}
	if w.style&HeadersIETF != 0 && policy != "" {
		policy = calendarPolicy(policy, res, w.style&HeadersShadow != 0)
		var vs []string
		if old, oldPolicy := h["Ratelimit"], h["Ratelimit-Policy"]; len(old) > 0 || len(oldPolicy) > 0 {
			// A Limiter before this one set its members: add ours after
			// them, in one field line each (RFC 9651 §4.2 would combine
			// several lines, but many clients read only the first).
			var buf [128]byte
			b := appendRateLimit(buf[:0], res, w.style&HeadersShadow != 0)
			vs = []string{joinList(oldPolicy, policy), joinList(old, string(b))}
		} else if vs = fb.Values(2); vs != nil {
			// Built in fb's room (or, beyond it, its own array).
			vs[0], vs[1] = policy, fb.Take(appendRateLimit(fb.Bytes(), res, w.style&HeadersShadow != 0))
		} else {
			var buf [128]byte
			vs = ietfValues(policy, appendRateLimit(buf[:0], res, w.style&HeadersShadow != 0))
		}
		// One backing array for both fields; the capacity limits keep an
		// Add to one field from overwriting the other.
		h["Ratelimit-Policy"], h["Ratelimit"] = vs[0:1:1], vs[1:2:2]
	}
	if w.style&HeadersXRateLimit != 0 {
		writeXRateLimit(h, res)
	}
}

// ietfValues returns the values of RateLimit-Policy and RateLimit,
// policy and a copy of rl, in one allocation: the []string and the bytes
// of the RateLimit value share one block of 64, 96 or 128 bytes (size
// classes of the allocator); the string points into the block, which
// keeps it alive while the header holds either value. A value longer than
// the largest block takes two allocations.
func ietfValues(policy string, rl []byte) []string {
	switch n := len(rl); {
	case n == 0:
		return []string{policy, ""}
	case n <= 32:
		v := new(struct {
			vs  [2]string
			buf [32]byte
		})
		return packValues(&v.vs, v.buf[:], policy, rl)
	case n <= 64:
		v := new(struct {
			vs  [2]string
			buf [64]byte
		})
		return packValues(&v.vs, v.buf[:], policy, rl)
	case n <= 96:
		v := new(struct {
			vs  [2]string
			buf [96]byte
		})
		return packValues(&v.vs, v.buf[:], policy, rl)
	}
	return []string{policy, string(rl)}
}

// packValues sets vs to policy and a copy of rl in buf (0 < len(rl) ≤
// len(buf)) and returns it as a slice. buf is never written again: the
// string over it is immutable, as strings must be.
func packValues(vs *[2]string, buf []byte, policy string, rl []byte) []string {
	n := copy(buf, rl)
	vs[0], vs[1] = policy, unsafe.String(&buf[0], n)
	return vs[:]
}

// overWaitFields returns the Result the fields of a WithMaxWait refusal
// res describe: a copy whose refusing decisions show no available quota.
// Their Remaining is the room left in the queue, but a slot depends on
// the queue ahead, not on the cost, so any request of the key would wait
// too long as well (unless the refund of this one freed enough).
func overWaitFields(res *Result) Result {
	f := res.detached()
	for i := range f.Decisions {
		if d := &f.Decisions[i]; !d.Allowed && !d.Never() {
			d.Remaining = 0
		}
	}
	return f
}

// joinList appends item to the List field lines old, as one line.
func joinList(old []string, item string) string {
	if len(old) == 1 && old[0] != "" {
		return old[0] + ", " + item // one allocation
	}
	out := ""
	for _, v := range old {
		if v != "" {
			out += v + ", "
		}
	}
	return out + item
}

// policyField serialises the RateLimit-Policy List (draft -11 §3.1) of
// limits, shadow limits only when shadow is set: "" when none is listed.
func policyField(limits []*Limit, shadow bool) string {
	return policyFieldAt(limits, shadow, 0)
}

// policyFieldAt is policyField for decisions made at at (µs; 0: unknown),
// whose CalendarWindow limits announce the length of the period holding at
// as their window (a nominal one when at is unknown).
func policyFieldAt(limits []*Limit, shadow bool, at int64) string {
	b := make([]byte, 0, 48*len(limits))
	n := 0
	for _, l := range limits {
		if l == nil || l.shadow && !shadow {
			continue
		}
		if n > 0 {
			b = append(b, ", "...)
		}
		n++
		b = appendPolicyName(b, l)
		b = append(b, ";q="...)
		b = strconv.AppendInt(b, l.wireQ, 10)
		switch {
		case l.algorithm == CalendarWindow && at > 0:
			b = append(b, ";w="...)
			b = strconv.AppendInt(b, l.calendarWireWindow(at), 10)
		case l.wireW > 0: // 0: a concurrency cap, which has no window
			b = append(b, ";w="...)
			b = strconv.AppendInt(b, l.wireW, 10)
		}
		switch u := string(l.Unit()); u {
		case string(Requests):
			// The draft's default unit: omitted.
		case "content-bytes", "concurrent-requests":
			b = append(b, ";qu="...)
			b = appendSFString(b, u)
		default:
			b = append(b, ";rampmeter-unit="...)
			b = appendSFString(b, u)
		}
		if burst := l.Burst(); burst != l.wireQ {
			b = append(b, ";rampmeter-burst="...)
			b = strconv.AppendInt(b, min(burst, maxSFInteger), 10)
		}
		if l.shadow {
			// A boolean parameter (RFC 9651 §3.3.6): true when bare.
			b = append(b, ";rampmeter-shadow"...)
		}
	}
	return string(b)
}

// appendRateLimit appends the RateLimit List (draft -11 §4) of res to b,
// shadow limits only when shadow is set.
func appendRateLimit(b []byte, res *Result, shadow bool) []byte {
	var binding *Decision
	if !res.Allowed {
		binding = res.Binding()
	}
	n := 0
	for i := range res.Decisions {
		d := &res.Decisions[i]
		l := d.Limit
		if l == nil || l.shadow && !shadow {
			continue
		}
		if n > 0 {
			b = append(b, ", "...)
		}
		n++
		r := min(max(0, d.Remaining), l.wireQ)
		var t int64
		switch {
		case d == binding && !d.Never():
			// The Retry-After value itself (§6): the wait the client is
			// told, jitter included.
			t = retryAfterSeconds(max(res.RetryAfter, d.RetryAfter))
		case !d.Allowed && !d.Never():
			t = ceilSeconds(d.RetryAfter)
		default:
			t = ceilSeconds(l.effectiveWindow(d, r))
		}
		b = appendPolicyName(b, l)
		b = append(b, ";r="...)
		b = strconv.AppendInt(b, r, 10)
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, t, 10)
	}
	return b
}

// effectiveWindow returns the draft's effective window (§4.1.2) of d, a
// decision that admitted or can never admit its cost, for an announced
// available quota of r ≤ d.Remaining: the time within which the client
// can use no more than r, or an upper bound of it (see HeadersIETF). An
// upper bound errs on the safe side: a client that spreads r over a longer
// window is only slower than it could be.
func (l *Limit) effectiveWindow(d *Decision, r int64) time.Duration {
	switch l.algorithm {
	case FixedWindow:
		switch {
		case d.Reset > 0: // the end of the window holding the count
			return d.Reset
		case l.firstHit || d.At <= 0: // the next hit opens a window
			return l.period
		default:
			return micros(l.periodUS - d.At%l.periodUS)
		}
	case SlidingWindow:
		switch {
		case d.Reset > 0: // until the counts leave the sliding window
			return d.Reset
		case d.At <= 0:
			return 2 * l.period
		default: // spent now, the count weighs until the next window ends
			return micros(2*l.periodUS - d.At%l.periodUS)
		}
	case SlidingLog:
		if d.Reset > 0 { // until the newest entry expires
			return d.Reset
		}
		return l.period // entries made now expire after a period
	case Concurrency: // held slots may return any moment: see HeadersIETF
		return min(d.Reset, ConcurrencyRetryAfter)
	case CalendarWindow: // the end of the current period
		if d.Reset > 0 {
			return d.Reset
		}
		return l.calendarWindowLeft(d)
	}
	// TokenBucket, GCRA, LeakyBucket. Reset is the time until the level
	// has drained: the room above the Remaining units refills first, then
	// the Burst − Remaining − 1 units beyond the next one, each in scale/
	// drain µs. So the next unit beyond r = Remaining comes Reset minus
	// those units' refill after now (rounded so as never to be early).
	switch {
	case r < max(0, d.Remaining): // capped at q: the sustained rate, q per w
		return time.Duration(l.wireW) * time.Second
	case r >= l.burstOf(): // full: once r is spent, one interval
		return d.Reset + micros(ceilDiv(l.scale, l.drain))
	}
	return max(0, d.Reset-micros((l.burstOf()-r-1)*l.scale/l.drain))
}

// appendPolicyName appends l's policyName as an RFC 9651 String. Names
// are validated to [A-Za-z0-9_.-], which need no escaping.
func appendPolicyName(b []byte, l *Limit) []byte {
	b = append(b, '"')
	if l.ns != "" {
		b = append(b, l.ns...)
		b = append(b, '/')
	}
	b = append(b, l.nameOf()...)
	return append(b, '"')
}

// writeXRateLimit writes X-RateLimit-* for the binding decision of res,
// or keeps those a Limiter before this one wrote when they bind across
// both: the earlier Limiter admitted the request, so a refusal here binds;
// otherwise the tighter of the two does (tighter).
func writeXRateLimit(h http.Header, res *Result) {
	d := res.Binding()
	if d == nil {
		return
	}
	if res.Allowed && len(h["X-Ratelimit-Limit"]) > 0 {
		limit, err1 := strconv.ParseInt(h.Get("X-Ratelimit-Limit"), 10, 64)
		remaining, err2 := strconv.ParseInt(h.Get("X-Ratelimit-Remaining"), 10, 64)
		if err1 == nil && err2 == nil && limit > 0 &&
			!fractionBelow(d.Remaining, d.Limit.burstOf(), remaining, limit) {
			return
		}
	}
	vs := []string{
		strconv.FormatInt(d.Limit.burstOf(), 10),
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
// validated to [A-Za-z0-9_.-], units by validUnit).
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
	return fractionBelow(a.Remaining, a.Limit.burstOf(), b.Remaining, b.Limit.burstOf())
}

// fractionBelow reports whether ra/ba < rb/bb for capacities ba, bb > 0
// (negative remainders count as 0), compared exactly in 128 bits.
func fractionBelow(ra, ba, rb, bb int64) bool {
	ah, al := bits.Mul64(uint64(max(0, ra)), uint64(bb))
	bh, bl := bits.Mul64(uint64(max(0, rb)), uint64(ba))
	return ah < bh || ah == bh && al < bl
}

// calendarPolicy returns the RateLimit-Policy value for res: policy, the
// value precomputed for its limits, unless one of them is a CalendarWindow
// limit, whose window is the length of the current period (a month of 28
// to 31 days, a day of 23 to 25 hours), computed at the decisions' time.
func calendarPolicy(policy string, res *Result, shadow bool) string {
	cal := false
	for i := range res.Decisions {
		if l := res.Decisions[i].Limit; l != nil && l.algorithm == CalendarWindow {
			cal = true
			break
		}
	}
	if !cal {
		return policy
	}
	limits := make([]*Limit, len(res.Decisions))
	for i := range res.Decisions {
		limits[i] = res.Decisions[i].Limit
	}
	return policyFieldAt(limits, shadow, res.Decisions[0].At)
}
