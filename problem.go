package ratelimit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// The responses the Limiter writes itself: RFC 9457 problem details by
// default, or an ErrorFormat.

// RejectHandler writes the response to a refused request. Before it is
// called, the middleware has set the rate-limit fields (HeaderWriter) and,
// for 429 and 503, Retry-After in w.Header(); the handler may change them.
type RejectHandler func(w http.ResponseWriter, r *http.Request, rej Rejection)

// ErrorFormat is a format for the responses the Limiter writes itself
// instead of running the handler: refusals, and requests whose key
// function, cost function or WithLimitsFunc function failed. A nil field
// keeps the default, RFC 9457 problem details. Package llm has the OpenAI
// API's format (llm.OpenAIErrors).
type ErrorFormat struct {
	// Reject writes refusals (429, 413, another 4xx of
	// WithQuotaExhaustedStatus and, under FailClosed, 503); default
	// DefaultRejectHandler.
	Reject RejectHandler
	// KeyError writes the response to a request whose key function
	// failed; default DefaultKeyErrorHandler.
	KeyError func(w http.ResponseWriter, r *http.Request, err error)
	// RequestError writes the response to a request whose cost function
	// or WithLimitsFunc function failed (nothing was charged). limit names
	// the limit whose cost function failed, or is "" when the
	// WithLimitsFunc function failed. The default answers with the
	// error's status and client message when it chose a status (an error
	// with a StatusCode() int method, such as *StatusError, whose
	// ClientMessage is shown), else with 400 and a generic message for a
	// cost function and 500 for WithLimitsFunc, whose failure is a
	// server-side fault. A 401 also gets "WWW-Authenticate: Bearer".
	RequestError func(w http.ResponseWriter, r *http.Request, limit string, err error)
}

// Problem types (RFC 9457 §3.1.1) of the default responses.
const (
	// ProblemQuotaExceeded is the type of the 429 refusal, defined by
	// draft-ietf-httpapi-ratelimit-headers-11 §5.1 with the extension
	// member "violated-policies" (the names of the refusing limits). The
	// default body adds "retry-after-seconds", equal to Retry-After.
	ProblemQuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"

	// ProblemRequestTooLarge is the type of the 413 refusal of a request
	// whose cost exceeds a limit's burst, so that no amount of waiting
	// admits it: clients must not retry it unchanged (there is no
	// Retry-After). The draft defines no such type, so this URI, which
	// resolves to this documentation, names it. "violated-policies" lists
	// the limits the request can never fit.
	ProblemRequestTooLarge = "https://pkg.go.dev/github.com/rampmeter/ratelimit#ProblemRequestTooLarge"

	// ProblemTemporaryReducedCapacity is the type of the 503 sent under
	// FailClosed when the store fails (draft -11 §5.2): the limiter
	// cannot decide, so capacity is temporarily none.
	ProblemTemporaryReducedCapacity = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
)

// problem is an RFC 9457 problem details object.
type problem struct {
	Type              string   `json:"type"`
	Title             string   `json:"title"`
	Status            int      `json:"status"`
	Detail            string   `json:"detail,omitempty"`
	ViolatedPolicies  []string `json:"violated-policies,omitempty"`
	RetryAfterSeconds int64    `json:"retry-after-seconds,omitempty"`
}

// writeProblem answers with p as application/problem+json.
func writeProblem(w http.ResponseWriter, p *problem) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // details quote "<key>"; the media type is not HTML
	_ = enc.Encode(p)        // cannot fail: strings, string slices and integers
	body := buf.Bytes()
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}

// DefaultRejectHandler is the RejectHandler New installs. It answers with
// rej.Status and an RFC 9457 problem (application/problem+json):
//
//   - 429: type ProblemQuotaExceeded, title "Too Many Requests", a detail
//     naming the binding limit, its quota and period and the wait, the
//     refusing limits in "violated-policies" (their names in the
//     RateLimit fields: "ip/requests" for a Limiter named "ip") and the wait in
//     "retry-after-seconds" (the Retry-After value):
//     {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429,"detail":"quota exceeded: the \"requests\" limit allows 60 requests per minute; retry after 1 second","violated-policies":["requests"],"retry-after-seconds":1}
//   - a refusal by a CalendarWindow limit (PerCalendarMonth), with 429 or
//     its WithRefusalStatus status such as 402 Payment Required (title
//     "Payment Required"): type ProblemQuotaExceeded, and a detail that
//     says what the limit allows per which period, what is left, what the
//     request needs and when the period starts afresh: "quota exceeded:
//     the \"budget\" limit allows 1000 usd-micros per calendar month in
//     America/New_York and has 400 left, but this request needs 600; it
//     resets at 2026-02-01T00:00:00-05:00, retry after 43200 seconds".
//   - 413: type ProblemRequestTooLarge, title "Request Too Large", a detail
//     such as "request too large: estimated 150000 tokens exceeds the
//     \"tokens\" limit's capacity of 100000; do not retry it unchanged".
//   - 503: type ProblemTemporaryReducedCapacity. The store error is not
//     shown to the client.
//
// Custom handlers may call it after logging or adding fields.
func DefaultRejectHandler(w http.ResponseWriter, r *http.Request, rej Rejection) {
	p := &problem{Status: rej.Status}
	switch rej.Status {
	case http.StatusServiceUnavailable:
		p.Type, p.Title = ProblemTemporaryReducedCapacity, http.StatusText(http.StatusServiceUnavailable)
		secs := retryAfterSeconds(rej.RetryAfter)
		p.Detail = "the rate limiter cannot decide right now; retry after " + plural(secs, "second")
		p.RetryAfterSeconds = secs
	case http.StatusRequestEntityTooLarge:
		p.Type, p.Title = ProblemRequestTooLarge, "Request Too Large"
		for i := range rej.Decisions {
			if d := &rej.Decisions[i]; d.Never() && !d.Limit.shadow {
				p.ViolatedPolicies = append(p.ViolatedPolicies, d.Limit.policyName())
			}
		}
		if d := rej.Binding(); d != nil {
			p.Detail = fmt.Sprintf("request too large: estimated %s exceeds the %q limit's capacity of %d; do not retry it unchanged",
				units(costAt(rej.Costs, rej.Decisions, d), d.Limit.Unit()), d.Limit.Name(), d.Limit.Burst())
		}
	default:
		p.Type, p.Title = ProblemQuotaExceeded, http.StatusText(rej.Status)
		for i := range rej.Decisions {
			if d := &rej.Decisions[i]; !d.Allowed && !d.Limit.shadow {
				p.ViolatedPolicies = append(p.ViolatedPolicies, d.Limit.policyName())
			}
		}
		secs := retryAfterSeconds(rej.RetryAfter)
		p.RetryAfterSeconds = secs
		if d := rej.Binding(); d != nil && d.Limit.algorithm == CalendarWindow {
			p.Detail = calendarDetail(d, costAt(rej.Costs, rej.Decisions, d), secs)
		} else if d != nil {
			l := d.Limit
			p.Detail = fmt.Sprintf("quota exceeded: the %q limit allows %s per %s", l.Name(), units(l.Quota(), l.Unit()), periodPhrase(l.Period()))
			if holdsSlot(l) {
				p.Detail = fmt.Sprintf("too many requests in flight: the %q limit allows %d at once, and %d are in flight",
					l.Name(), l.Quota(), l.Quota()-d.Remaining)
			}
			if cost := costAt(rej.Costs, rej.Decisions, d); cost != 1 {
				p.Detail += fmt.Sprintf(" and this request needs %d (%d left)", cost, d.Remaining)
			}
			p.Detail += "; retry after " + plural(secs, "second")
		}
	}
	writeProblem(w, p)
}

// DefaultKeyErrorHandler answers a request whose key function failed with
// an RFC 9457 problem of type about:blank. The status is the error's
// (StatusError), else 400 Bad Request. The detail is the error's
// ClientMessage when the error chose its status (so it was written for
// clients: the built-in key functions' errors say what to send, such as
// "This request has no API key: send your API key as \"Authorization:
// Bearer <key>\" or \"X-API-Key: <key>\".") and a generic sentence otherwise;
// never a Go error chain. A 401 gets "WWW-Authenticate: Bearer" unless the
// response already has a WWW-Authenticate field, as RFC 9110 §15.5.2
// requires of 401 responses.
func DefaultKeyErrorHandler(w http.ResponseWriter, r *http.Request, err error) {
	status, detail := statusOf(err, http.StatusBadRequest)
	if detail == "" {
		detail = "This request carries no usable rate-limit key."
	}
	writeErrorProblem(w, status, detail)
}

// writeErrorProblem answers with status and an about:blank problem whose
// detail is the client's message; a 401 also gets "WWW-Authenticate:
// Bearer" (RFC 9110 §15.5.2) unless the response has one.
func writeErrorProblem(w http.ResponseWriter, status int, detail string) {
	if status == http.StatusUnauthorized && w.Header().Get("WWW-Authenticate") == "" {
		w.Header().Set("WWW-Authenticate", "Bearer")
	}
	writeProblem(w, &problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail})
}

// writeCostError answers a request whose cost function for l failed.
func writeCostError(w http.ResponseWriter, l *Limit, err error) {
	status, detail := statusOf(err, http.StatusBadRequest)
	if detail == "" {
		detail = fmt.Sprintf("The cost of this request for the %q limit could not be estimated.", l.Name())
	}
	writeErrorProblem(w, status, detail)
}

// costError answers a request r whose cost function for lim failed.
func (l *Limiter) costError(w http.ResponseWriter, r *http.Request, lim *Limit, err error) {
	if l.requestError != nil {
		l.requestError(w, r, lim.Name(), err)
		return
	}
	writeCostError(w, lim, err)
}

// limitsError answers a request whose LimitsFunc failed: with the error's
// status and ClientMessage when it chose one (StatusError), else 500 with
// a generic message (the cause is a server-side fault, not for clients).
func (l *Limiter) limitsError(w http.ResponseWriter, r *http.Request, err error) {
	if l.requestError != nil {
		l.requestError(w, r, "", err)
		return
	}
	status, detail := statusOf(err, http.StatusInternalServerError)
	if detail == "" {
		detail = "The server could not determine the rate limits of this request."
	}
	writeErrorProblem(w, status, detail)
}

// costAt returns the cost charged for decision d, or 1 when costs is not
// aligned with ds (a hand-made Rejection).
func costAt(costs []int64, ds []Decision, d *Decision) int64 {
	for i := range ds {
		if &ds[i] == d && i < len(costs) {
			return costs[i]
		}
	}
	return 1
}

// units formats n of unit u: "1 request", "60 requests", "150000 tokens".
func units(n int64, u Unit) string {
	s := strconv.FormatInt(n, 10) + " " + string(u)
	if n == 1 && len(u) > 1 && u[len(u)-1] == 's' {
		s = s[:len(s)-1]
	}
	return s
}

// plural formats n of a regular noun: "1 second", "2 seconds".
func plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.FormatInt(n, 10) + " " + noun + "s"
}

// periodPhrase names a period for "per ...": "minute", "10 seconds",
// "day", "1.5s".
func periodPhrase(d time.Duration) string {
	for _, u := range []struct {
		d    time.Duration
		noun string
	}{{24 * time.Hour, "day"}, {time.Hour, "hour"}, {time.Minute, "minute"}, {time.Second, "second"}} {
		if d%u.d == 0 {
			if d == u.d {
				return u.noun
			}
			return plural(int64(d/u.d), u.noun)
		}
	}
	return d.String()
}
