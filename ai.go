package ratelimit

import (
	"fmt"
	"math"
	"math/bits"
	"net/http"
	"time"
)

// Options for costly requests (AI tokens): reservation clamps, settlement
// of failed calls and quota statuses.

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

// costError answers a request r whose cost function for lim failed.
func (l *Limiter) costError(w http.ResponseWriter, r *http.Request, lim *Limit, err error) {
	if l.requestError != nil {
		l.requestError(w, r, lim.Name(), err)
		return
	}
	writeCostError(w, lim, err)
}

// limitsError answers a request whose LimitsFunc failed: with the error's
// status and message when it chose one (StatusError), else 500 with a
// generic message (the cause is a server-side fault, not for clients).
func (l *Limiter) limitsError(w http.ResponseWriter, r *http.Request, err error) {
	if l.requestError != nil {
		l.requestError(w, r, "", err)
		return
	}
	status, show := statusOf(err, http.StatusInternalServerError)
	msg := "the rate limits of this request could not be determined"
	if show {
		msg = err.Error()
	}
	writeProblem(w, &problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: msg})
}
