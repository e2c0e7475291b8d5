package ratelimit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/bits"
	"net/http"
	"strconv"
	"time"
)

// Options and responses for AI APIs: reservation clamps, settlement of
// failed calls, quota statuses and OpenAI-shaped errors.

// WithReserveClamp caps the reservation of every limit that has a cost
// function at fraction of the limit's Burst (rounded down, at least 1), so
// that one request declaring a huge output cap (max_tokens) cannot lock a
// small key out until it settles. fraction must be in (0, 1]; 0.5 is a
// good start. The real usage is still settled afterwards: a request that
// uses more than its clamped reservation leaves the key in debt, which its
// next requests wait out (see the README's over-admission bound). A
// request whose estimate exceeds the Burst itself is not clamped: it can
// never fit and is refused with 413 as without the clamp.
func WithReserveClamp(fraction float64) Option {
	return func(c *config) error {
		if !(fraction > 0 && fraction <= 1) {
			return fmt.Errorf("WithReserveClamp(%v): the fraction must be in (0, 1]", fraction)
		}
		c.clampPPM = max(1, int64(math.Round(fraction*1e6)))
		return nil
	}
}

// reserve returns the cost to reserve on l for an estimate of cost, after
// WithReserveClamp.
func (l *Limiter) reserve(lim *Limit, cost int64) int64 {
	if l.clampPPM == 0 || lim.cost == nil || cost > lim.Burst() {
		return cost
	}
	// Burst × ppm / 10^6 in 128 bits: Burst < 2^51 and ppm ≤ 10^6 < 2^20.
	hi, lo := bits.Mul64(uint64(lim.Burst()), uint64(l.clampPPM))
	q, _ := bits.Div64(hi, lo, 1_000_000)
	return min(cost, max(1, int64(q)))
}

// WithChargeOnServerError keeps the reservation of a request whose handler
// failed — answered with a 5xx status, or panicked before writing a status
// — without reporting usage. By default such a reservation is released
// (the estimate refunded) for every limit with a cost function, because a
// failed upstream call usually consumed no tokens; limits without a cost
// function (requests) are charged either way, as the OpenAI API counts
// failed requests. Usage reported with ReportUsage is settled as reported
// in both cases. Releases count in Stats.Released.
func WithChargeOnServerError() Option {
	return func(c *config) error {
		c.chargeOnServerError = true
		return nil
	}
}

// WithQuotaExhaustedStatus answers a refusal whose binding limit (see
// Result.Binding) has a Period of at least threshold with status instead of
// 429, typically 403 Forbidden for a daily or monthly quota: most clients
// and SDKs retry 429 automatically, often well before a long Retry-After
// (openai-python honours it only up to 2 minutes; older versions and other
// SDKs fall back to their own backoff of a few seconds), while a 403 says
// "stop" to all of them. Retry-After is still sent, and still exact: the
// time until the request's cost fits again. Such refusals count in
// Stats.Limited. threshold must be positive and status a 4xx code other than
// 413, which is reserved for requests that can never fit (no Retry-After).
//
//	ratelimit.WithQuotaExhaustedStatus(24*time.Hour, http.StatusForbidden)
func WithQuotaExhaustedStatus(threshold time.Duration, status int) Option {
	return func(c *config) error {
		switch {
		case threshold <= 0:
			return fmt.Errorf("WithQuotaExhaustedStatus(%v, %d): the threshold must be positive", threshold, status)
		case status < 400 || status > 499:
			return fmt.Errorf("WithQuotaExhaustedStatus(%v, %d): the status must be 4xx", threshold, status)
		case status == http.StatusRequestEntityTooLarge:
			return fmt.Errorf("WithQuotaExhaustedStatus(%v, %d): 413 means a request can never fit; an exhausted quota is retryable", threshold, status)
		}
		c.quotaThreshold, c.quotaStatus = threshold, status
		return nil
	}
}

// refusalStatus returns the status of a refusal res: 413 when it can never
// fit, the WithQuotaExhaustedStatus status when its binding limit is long,
// else 429.
func (l *Limiter) refusalStatus(res Result) int {
	if res.tooLarge() {
		return http.StatusRequestEntityTooLarge
	}
	if l.quotaStatus != 0 {
		if d := res.Binding(); d != nil && d.Limit.Period() >= l.quotaThreshold {
			return l.quotaStatus
		}
	}
	return http.StatusTooManyRequests
}

// WithOpenAIErrors answers refusals and errors in the OpenAI API's error
// shape instead of RFC 9457 problem details, for clients written against
// OpenAI: it installs OpenAIRejectHandler (unless WithRejectHandler is
// given), OpenAIKeyErrorHandler (unless WithKeyErrorHandler or
// WithSkipOnKeyError is given), and the same shape for cost-function and
// WithLimitsFunc errors. Statuses, Retry-After and the rate-limit fields
// are unchanged.
func WithOpenAIErrors() Option {
	return func(c *config) error {
		c.openAIErrors = true
		return nil
	}
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

// OpenAIRejectHandler is a RejectHandler that answers in the OpenAI API's
// error shape, {"error":{"message","type","param","code"}}, with
// rej.Status:
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
//   - another 4xx (WithQuotaExhaustedStatus): type and code
//     "insufficient_quota", message `You exceeded your quota for "tokens"
//     on tokens per day (TPD): ... Please try again in 5h3m0s.`
//   - 503 (FailClosed): type "server_error", no code.
func OpenAIRejectHandler(w http.ResponseWriter, r *http.Request, rej Rejection) {
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
		if l.Unit() == Tokens {
			what = "The input or output tokens"
		}
		writeOpenAIError(w, rej.Status, fmt.Sprintf("Request too large %s: Limit %d, Requested %d. %s must be reduced in order to run successfully.",
			on, l.Burst(), cost, what), string(l.Unit()), "rate_limit_exceeded")
		return
	}
	wait := (time.Duration(retryAfterSeconds(rej.RetryAfter)) * time.Second).String()
	counts := fmt.Sprintf("Limit %d, Used %d, Requested %d. Please try again in %s.", l.Burst(), max(0, l.Burst()-d.Remaining), cost, wait)
	if rej.Status == http.StatusTooManyRequests {
		writeOpenAIError(w, rej.Status, "Rate limit reached "+on+": "+counts, string(l.Unit()), "rate_limit_exceeded")
		return
	}
	writeOpenAIError(w, rej.Status, "You exceeded your quota "+on+": "+counts, "insufficient_quota", "insufficient_quota")
}

// rateName names a limit's rate as OpenAI's messages do: "tokens per min
// (TPM)", "requests per day (RPD)", "tokens per 10 seconds".
func rateName(l *Limit) string {
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
	case Requests:
		return "requests per " + per + " (RP" + abbr + ")"
	case Tokens:
		return "tokens per " + per + " (TP" + abbr + ")"
	default:
		return string(l.Unit()) + " per " + per
	}
}

// OpenAIKeyErrorHandler answers a request whose key function failed in the
// OpenAI API's error shape with type "invalid_request_error": the status
// and message as DefaultKeyErrorHandler chooses them (401 gets
// "WWW-Authenticate: Bearer" and code "invalid_api_key").
func OpenAIKeyErrorHandler(w http.ResponseWriter, r *http.Request, err error) {
	status, show := statusOf(err, http.StatusBadRequest)
	msg := "The request carries no usable API key."
	if show {
		msg = err.Error()
	}
	code := ""
	if status == http.StatusUnauthorized {
		code = "invalid_api_key"
		if w.Header().Get("WWW-Authenticate") == "" {
			w.Header().Set("WWW-Authenticate", "Bearer")
		}
	}
	writeOpenAIError(w, status, msg, "invalid_request_error", code)
}

// costError answers a request whose cost function for lim failed.
func (l *Limiter) costError(w http.ResponseWriter, lim *Limit, err error) {
	if !l.openAIErrors {
		writeCostError(w, lim, err)
		return
	}
	status, show := statusOf(err, http.StatusBadRequest)
	msg := fmt.Sprintf("The request's cost for the %q limit could not be estimated.", lim.Name())
	if show {
		msg = err.Error()
	}
	writeOpenAIError(w, status, msg, errorType(status), "")
}

// limitsError answers a request whose LimitsFunc failed: with the error's
// status and message when it chose one (StatusError), else 500 with a
// generic message (the cause is a server-side fault, not for clients).
func (l *Limiter) limitsError(w http.ResponseWriter, err error) {
	status, show := statusOf(err, http.StatusInternalServerError)
	msg := "the rate limits of this request could not be determined"
	if show {
		msg = err.Error()
	}
	if l.openAIErrors {
		writeOpenAIError(w, status, msg, errorType(status), "")
		return
	}
	writeProblem(w, &problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: msg})
}

// errorType is the OpenAI error type of a status.
func errorType(status int) string {
	if status >= 500 {
		return "server_error"
	}
	return "invalid_request_error"
}
