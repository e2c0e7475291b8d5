package llm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/rampmeter/ratelimit"
)

// OpenAIErrors returns the [ratelimit.ErrorFormat] of the OpenAI API, for
// [ratelimit.WithErrorFormat]: refusals and errors are answered with
// OpenAI's error body, {"error":{"message","type","param","code"}}, as
// application/json, instead of RFC 9457 problem details, for clients
// written against OpenAI. Statuses, Retry-After and the rate-limit fields
// are unchanged.
//
// Refusals (Reject), with the Rejection's status:
//
//   - 429: type is the binding limit's unit ("requests", "tokens"), code
//     "rate_limit_exceeded", and the message follows OpenAI's: `Rate limit
//     reached for "tokens" on tokens per min (TPM): Limit 10000, Used 9500,
//     Requested 1000. Please try again in 30s.` (Limit is the Burst, Used
//     what is not Remaining, the wait is Retry-After as a Go duration).
//   - 413 (the cost exceeds a limit's Burst): type the unit, code
//     "rate_limit_exceeded", message `Request too large for "tokens" on
//     tokens per min (TPM): Limit 10000, Requested 15000. The input or
//     output tokens must be reduced in order to run successfully.` OpenAI
//     itself sends this with 429, which SDKs retry in vain; 413 is not
//     retried.
//   - another 4xx (ratelimit.WithQuotaExhaustedStatus, or
//     Limit.WithRefusalStatus such as 402 for a spent budget): type and code
//     "insufficient_quota", message `You exceeded your quota for "tokens"
//     on tokens per day (TPD): ... Please try again in 5h3m0s.` A calendar
//     limit (ratelimit.PerCalendarMonth) is named by its period and zone,
//     and the message says when it resets: `You exceeded your quota for
//     "budget" on usd-micros per calendar month in America/New_York: Limit
//     1000000, Used 999000, Requested 2500. The quota resets at
//     2026-02-01T00:00:00-05:00. Please try again in 12h0m0s.`
//   - 503 (ratelimit.FailClosed): type "server_error", no code.
//
// A failed key function (KeyError) or cost or WithLimitsFunc function
// (RequestError) gets the status and message the default problem details
// would carry: for an error that chose its status (a
// *ratelimit.StatusError) its ClientMessage, which says in plain words
// what to do, else a generic sentence, never a Go error chain. The type is
// "invalid_request_error" for a 4xx and "server_error" for a 5xx; a 401
// also gets code "invalid_api_key" and "WWW-Authenticate: Bearer".
func OpenAIErrors() ratelimit.ErrorFormat {
	return ratelimit.ErrorFormat{Reject: openAIReject, KeyError: openAIKeyError, RequestError: openAIRequestError}
}

// openAIError is the OpenAI API's error body.
type openAIError struct {
	Error openAIErrorBody `json:"error"`
}

type openAIErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// writeOpenAIError answers with status and an OpenAI error body.
func writeOpenAIError(w http.ResponseWriter, status int, message, typ, code string) {
	e := openAIError{Error: openAIErrorBody{Message: message, Type: typ}}
	if code != "" {
		e.Error.Code = &code
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(&e) // cannot fail: strings only
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(buf.Len()))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// openAIReject is OpenAIErrors' RejectHandler.
func openAIReject(w http.ResponseWriter, r *http.Request, rej ratelimit.Rejection) {
	d := rej.Binding()
	if rej.Status == http.StatusServiceUnavailable || d == nil {
		writeOpenAIError(w, rej.Status, "The rate limiter cannot decide right now; please try again in "+
			(time.Duration(retryAfterSeconds(rej.RetryAfter))*time.Second).String()+".", "server_error", "")
		return
	}
	l := d.Limit
	cost := costAt(rej.Costs, rej.Decisions, d)
	on := fmt.Sprintf("for %q on %s", l.Name(), rateName(l))
	if rej.Status == http.StatusRequestEntityTooLarge {
		what := "The request's cost"
		if l.Unit() == ratelimit.Tokens {
			what = "The input or output tokens"
		}
		writeOpenAIError(w, rej.Status, fmt.Sprintf("Request too large %s: Limit %d, Requested %d. %s must be reduced in order to run successfully.",
			on, l.Burst(), cost, what), string(l.Unit()), "rate_limit_exceeded")
		return
	}
	wait := (time.Duration(retryAfterSeconds(rej.RetryAfter)) * time.Second).String()
	counts := fmt.Sprintf("Limit %d, Used %d, Requested %d. ", l.Burst(), max(0, l.Burst()-d.Remaining), cost)
	if reset := ratelimit.CalendarReset(d); !reset.IsZero() {
		counts += "The quota resets at " + reset.Format(time.RFC3339) + ". "
	}
	counts += "Please try again in " + wait + "."
	if rej.Status == http.StatusTooManyRequests {
		writeOpenAIError(w, rej.Status, "Rate limit reached "+on+": "+counts, string(l.Unit()), "rate_limit_exceeded")
		return
	}
	writeOpenAIError(w, rej.Status, "You exceeded your quota "+on+": "+counts, "insufficient_quota", "insufficient_quota")
}

// openAIKeyError is OpenAIErrors' KeyError.
func openAIKeyError(w http.ResponseWriter, r *http.Request, err error) {
	status, msg := statusOf(err, http.StatusBadRequest)
	if msg == "" {
		msg = "This request carries no usable API key."
	}
	writeClientError(w, status, msg)
}

// openAIRequestError is OpenAIErrors' RequestError: limit names the limit
// whose cost function failed, or is "" when the WithLimitsFunc function
// failed.
func openAIRequestError(w http.ResponseWriter, r *http.Request, limit string, err error) {
	var status int
	var msg string
	if limit != "" {
		if status, msg = statusOf(err, http.StatusBadRequest); msg == "" {
			msg = fmt.Sprintf("The cost of this request for the %q limit could not be estimated.", limit)
		}
	} else if status, msg = statusOf(err, http.StatusInternalServerError); msg == "" {
		msg = "The server could not determine the rate limits of this request."
	}
	writeClientError(w, status, msg)
}

// writeClientError answers a request the limiter could not decide with
// status and msg in OpenAI's shape; a 401 gets code "invalid_api_key" and
// "WWW-Authenticate: Bearer" (RFC 9110 §15.5.2) unless it has one.
func writeClientError(w http.ResponseWriter, status int, msg string) {
	code := ""
	if status == http.StatusUnauthorized {
		code = "invalid_api_key"
		if w.Header().Get("WWW-Authenticate") == "" {
			w.Header().Set("WWW-Authenticate", "Bearer")
		}
	}
	writeOpenAIError(w, status, msg, errorType(status), code)
}

// errorType is the OpenAI error type of a status.
func errorType(status int) string {
	if status >= 500 {
		return "server_error"
	}
	return "invalid_request_error"
}

// statusOf returns the status an error of a key, cost or limits function
// is answered with, and the message for the client, by the rule of package
// ratelimit, so that both error formats answer alike: an error that chose
// its status (a StatusCode method; a status outside 400 to 599 becomes
// 500) was written for clients, and its message is its ClientMessage if it
// has one (*ratelimit.StatusError), else its message; for any other error
// statusOf returns fallback and "", and the caller says something generic.
func statusOf(err error, fallback int) (int, string) {
	var sc interface{ StatusCode() int }
	if !errors.As(err, &sc) {
		return fallback, ""
	}
	code := sc.StatusCode()
	if code < 400 || code > 599 {
		code = http.StatusInternalServerError
	}
	if cm, ok := sc.(interface{ ClientMessage() string }); ok {
		return code, cm.ClientMessage()
	}
	return code, err.Error()
}

// rateName names a limit's rate as OpenAI's messages do: "tokens per min
// (TPM)", "requests per day (RPD)", "tokens per 10 seconds"; a concurrency
// cap's is "requests in flight at once".
func rateName(l *ratelimit.Limit) string {
	if l.Algorithm() == ratelimit.Concurrency {
		return "requests in flight at once"
	}
	if c := l.CalendarPeriod(); c != 0 {
		return string(l.Unit()) + " per calendar " + c.String() + " in " + l.Location().String()
	}
	var per, abbr string
	switch l.Period() {
	case time.Minute:
		per, abbr = "min", "M"
	case time.Hour:
		per, abbr = "hour", "H"
	case 24 * time.Hour:
		per, abbr = "day", "D"
	default:
		return string(l.Unit()) + " per " + periodPhrase(l.Period())
	}
	switch l.Unit() {
	case ratelimit.Requests:
		return "requests per " + per + " (RP" + abbr + ")"
	case ratelimit.Tokens:
		return "tokens per " + per + " (TP" + abbr + ")"
	default:
		return string(l.Unit()) + " per " + per
	}
}

// periodPhrase names a period for "per ...": "minute", "10 seconds",
// "day", "1.5s" (as package ratelimit's problem details do).
func periodPhrase(d time.Duration) string {
	for _, u := range []struct {
		d    time.Duration
		noun string
	}{{24 * time.Hour, "day"}, {time.Hour, "hour"}, {time.Minute, "minute"}, {time.Second, "second"}} {
		if d%u.d == 0 {
			if d == u.d {
				return u.noun
			}
			n := int64(d / u.d)
			return strconv.FormatInt(n, 10) + " " + u.noun + "s"
		}
	}
	return d.String()
}

// costAt returns the cost charged for decision d, or 1 when costs is not
// aligned with ds (a hand-made Rejection).
func costAt(costs []int64, ds []ratelimit.Decision, d *ratelimit.Decision) int64 {
	for i := range ds {
		if &ds[i] == d && i < len(costs) {
			return costs[i]
		}
	}
	return 1
}

// retryAfterSeconds is the Retry-After value the middleware sends for a
// wait of d (RFC 9110 §10.2.3): rounded up to whole seconds, at least 1.
func retryAfterSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 1
	}
	return max(1, int64((d-1)/time.Second)+1)
}
