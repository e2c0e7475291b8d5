package ratelimit

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"time"
)

// Options configure a Limiter; New validates them all.

// ErrInvalidConfig is wrapped by every error New returns: no limits, an
// invalid limit (the error also wraps ErrInvalidLimit), duplicate limit
// names, a nil store, key function or handler, a non-positive store
// timeout, an unknown header style or failure mode, or conflicting
// options.
var ErrInvalidConfig = errors.New("ratelimit: invalid configuration")

// DefaultStoreTimeout is the deadline of each store call unless
// WithStoreTimeout sets another: long enough for a Redis round trip within
// a data centre, short enough that a dead store adds little latency before
// the failure mode applies.
const DefaultStoreTimeout = 50 * time.Millisecond

// FailureMode says what the middleware does with a request when the store
// fails or does not answer within the store timeout.
type FailureMode int

const (
	// FailOpen lets the request through unlimited (the default): a rate
	// limiter outage should not become an API outage. The request counts
	// in Stats.Bypassed and is reported to Hooks.OnBypass; its usage is
	// not charged (there is no reservation to settle).
	FailOpen FailureMode = iota
	// FailClosed refuses the request with 503 Service Unavailable and
	// Retry-After: 1.
	FailClosed
)

// String returns "FailOpen" or "FailClosed".
func (m FailureMode) String() string {
	switch m {
	case FailOpen:
		return "FailOpen"
	case FailClosed:
		return "FailClosed"
	default:
		return fmt.Sprintf("FailureMode(%d)", int(m))
	}
}

// Option configures a Limiter. Options that get invalid arguments make New
// fail with an error wrapping ErrInvalidConfig.
type Option func(*config) error

// config is what the Options set.
type config struct {
	key          KeyFunc
	limits       []Limit
	headers      []HeaderWriter // WithHeaders' writers other than styles
	style        HeaderStyle
	failure      FailureMode
	storeTimeout time.Duration
	reject       RejectHandler
	keyErr       func(w http.ResponseWriter, r *http.Request, err error)
	skipKeyErr   bool
	hooks        Hooks
	maxWait      time.Duration // with maxWaitSet: WithMaxWait
	maxWaitSet   bool
	name         string // WithName
	jitterPPM    int64  // WithRetryJitter, parts per million

	// The store-failure alert (alert.go): off, or alertLogger (nil:
	// slog.Default()) every alertInterval (0: the default).
	alertOff      bool
	alertLogger   *slog.Logger
	alertInterval time.Duration

	// Options for costly requests and per-request limits (plans.go).
	limitsFunc          LimitsFunc
	clampPPM            int64 // WithReserveClamp, parts per million; 0: none
	chargeOnFailure     bool
	refundOnServerError bool
	quotaThreshold      time.Duration
	quotaStatus         int         // 0: none
	format              ErrorFormat // WithErrorFormat
}

// WithKey sets the key function, which names who pays for a request:
// KeyByIP, KeyByAPIKey, KeyByHeader, KeyByRoute, KeyConst, or a Compose of
// them, or your own KeyFunc.
//
// The default is KeyByIP(): per client IP address, as httprate's LimitByIP
// and ulule/limiter key by default. It is the one key every HTTP request
// has, so a limiter without WithKey limits each client and answers a
// browser's plain GET like any other request, where a default such as
// KeyByAPIKey would refuse every request without credentials with 401 (and
// KeyConst would make all clients share one budget). Behind a reverse proxy
// every request comes from the proxy's address: put chi's
// middleware.ClientIPFromXFF (or ClientIPFromHeader) with your proxies'
// prefixes before the limiter, or all clients share the proxy's budget.
// For an API whose clients authenticate, key by what they pay with
// (WithKey(KeyByAPIKey())), and stack a per-IP limiter in front (see the
// README's threat model).
func WithKey(fn KeyFunc) Option {
	return func(c *config) error {
		if fn == nil {
			return errors.New("WithKey(nil)")
		}
		c.key = fn
		return nil
	}
}

// WithLimits sets the limits every request is charged against, atomically:
// a request is admitted only if all of them have room, and then charged
// on all of them. At least one is required (unless WithLimitsFunc chooses
// the limits per request); each must be valid and their names unique. A
// later WithLimits replaces an earlier one.
func WithLimits(limits ...Limit) Option {
	return func(c *config) error {
		c.limits = append([]Limit(nil), limits...)
		return nil
	}
}

// WithHeaders sets the rate-limit fields of responses (default
// HeadersIETF) to those the writers write, in order: built-in styles
// (HeadersIETF, HeadersXRateLimit, HeadersShadow, combined with |),
// HeadersNone for none, and any other HeaderWriter, such as
// llm.OpenAIHeaders(), beside them:
//
//	ratelimit.WithHeaders(ratelimit.HeadersIETF, llm.OpenAIHeaders())
//
// At least one writer is required, none may be nil, a style must be known
// (and HeadersShadow combined with HeadersIETF), and a writer with a
// Validate() error method must return nil from it. A later WithHeaders
// replaces an earlier one.
func WithHeaders(writers ...HeaderWriter) Option {
	return func(c *config) error {
		if len(writers) == 0 {
			return errors.New("WithHeaders(): no header writers (HeadersNone sends none)")
		}
		var style HeaderStyle
		var others []HeaderWriter
		for i, w := range writers {
			switch w := w.(type) {
			case nil:
				return fmt.Errorf("WithHeaders: writer %d is nil", i)
			case HeaderStyle:
				if w&^headersAll != 0 {
					return fmt.Errorf("WithHeaders(%v): unknown header style", w)
				}
				style |= w
			default:
				if v, ok := w.(interface{ Validate() error }); ok {
					if err := v.Validate(); err != nil {
						return fmt.Errorf("WithHeaders: writer %d: %w", i, err)
					}
				}
				others = append(others, w)
			}
		}
		if style&HeadersShadow != 0 && style&HeadersIETF == 0 {
			return fmt.Errorf("WithHeaders(%v): HeadersShadow adds shadow limits to the HeadersIETF fields; combine it with HeadersIETF", style)
		}
		c.style, c.headers = style, others
		return nil
	}
}

// WithFailureMode says what to do when the store fails (default FailOpen).
func WithFailureMode(m FailureMode) Option {
	return func(c *config) error {
		if m != FailOpen && m != FailClosed {
			return fmt.Errorf("WithFailureMode(%v): unknown failure mode", m)
		}
		c.failure = m
		return nil
	}
}

// WithStoreTimeout sets the deadline of each store call (default
// DefaultStoreTimeout, 50ms). It must be positive. A call that misses it
// counts as a store failure and the failure mode applies, so no request
// waits on a dead store for longer than d. A store that cannot block
// (NonBlocking, such as store/memory) is called without it.
func WithStoreTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("WithStoreTimeout(%v): must be positive", d)
		}
		c.storeTimeout = d
		return nil
	}
}

// WithRejectHandler replaces the writer of refusals (429, 413 and, under
// FailClosed, 503), whose default is DefaultRejectHandler.
func WithRejectHandler(h RejectHandler) Option {
	return func(c *config) error {
		if h == nil {
			return errors.New("WithRejectHandler(nil)")
		}
		c.reject = h
		return nil
	}
}

// WithKeyErrorHandler replaces the writer of the response to a request
// whose key function failed (default DefaultKeyErrorHandler). It cannot be
// combined with WithSkipOnKeyError.
func WithKeyErrorHandler(h func(w http.ResponseWriter, r *http.Request, err error)) Option {
	return func(c *config) error {
		if h == nil {
			return errors.New("WithKeyErrorHandler(nil)")
		}
		c.keyErr = h
		return nil
	}
}

// WithErrorFormat writes refusals and errors in format f instead of RFC
// 9457 problem details, for example llm.OpenAIErrors() for clients written
// against the OpenAI API. WithRejectHandler takes precedence over f.Reject,
// and WithKeyErrorHandler and WithSkipOnKeyError over f.KeyError, whatever
// the order of the options. Statuses, Retry-After and the rate-limit
// fields do not depend on the format. A later WithErrorFormat replaces an
// earlier one.
func WithErrorFormat(f ErrorFormat) Option {
	return func(c *config) error {
		c.format = f
		return nil
	}
}

// WithSkipOnKeyError lets a request whose key function failed through
// unlimited instead of refusing it. It counts in Stats.KeyErrors and
// Stats.Bypassed and is reported to Hooks.OnBypass. Use it only when
// another layer guarantees that such requests are harmless (for example,
// authentication rejects requests without an API key later on); otherwise
// a client escapes the limit by omitting its key.
func WithSkipOnKeyError() Option {
	return func(c *config) error {
		c.skipKeyErr = true
		return nil
	}
}

// WithHooks sets callbacks for logging and metrics.
func WithHooks(h Hooks) Option {
	return func(c *config) error {
		c.hooks = h
		return nil
	}
}

// WithMaxWait bounds how long the middleware holds an admitted request
// until its slot in a LeakyBucket queue (Result.Delay): a request whose
// slot is more than d away is refused with 429 and Retry-After =
// ceil(Delay − d) seconds (at least 1), and its reservation is refunded at
// once, so the queue never holds more than d of waiting requests (plus the
// slots of other callers of the key, such as Wait, which have no such
// bound). d must be ≥ 0; 0 refuses every request that would wait. The
// default is no bound: every admitted request waits for its slot. Such a
// refusal counts once, in Stats.Limited, and is reported once to
// Hooks.OnDecision as the refusal the client gets (the store's admission
// is not reported); the refund is a store call like any other
// (Hooks.OnStoreCall; a failure counts in Stats.StoreErrors and the
// request is refused all the same).
//
// The refund is a plain Adjust of the reserved units, not
// Reservation.Cancel's last-slot-only release: every reservation made
// after a refused one on the same key is also more than d away, and so
// refused and refunded too, unless the queue drained by Delay − d plus one
// emission interval within the refund's store round trip; only then can a
// later request share a slot, by at most the refunded units.
func WithMaxWait(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("WithMaxWait(%v): must be ≥ 0", d)
		}
		c.maxWait, c.maxWaitSet = d, true
		return nil
	}
}

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

// WithChargeOnFailure keeps the reservation of a request whose handler
// failed without reporting usage: it answered with a status outside 2xx
// (a 4xx such as 400 for a body the handler refused, a 3xx, a 5xx), or it
// panicked before writing a status. By default such a reservation is
// released (the estimate refunded in full) for every limit with a cost
// function, because a request the handler refused, or whose upstream call
// failed, usually consumed no tokens; limits without a cost function
// (requests) are charged either way, as the OpenAI API counts failed
// requests (unless WithRefundOnServerError, for a 5xx). A handler that returns without writing anything answers 200,
// and a hijacked connection (101 Switching Protocols) counts as served:
// both keep their reservation. Usage reported with ReportUsage is settled
// as reported in every case. Releases count in Stats.Released.
func WithChargeOnFailure() Option {
	return func(c *config) error {
		c.chargeOnFailure = true
		return nil
	}
}

// WithRefundOnServerError makes a failed call free: a request whose
// handler answered with a 5xx status, or panicked before writing one, is
// refunded on every limit without a usage report — the unit each limit
// without a cost function (requests) charged, as well as the reservations
// of the limits with one — as if it had not been admitted. Usage reported
// with ReportUsage is still settled as reported. Refunds count in
// Stats.Released.
//
// By default a failed call still costs one unit of each requests limit:
// the OpenAI API counts failed requests too, and a client retrying a
// failing upstream spends its requests budget as it goes, which bounds
// the retries a broken upstream receives (the OpenAI SDKs retry a 5xx
// twice, so one call that keeps failing spends 3 requests). Choose this
// option when the failure is yours and clients should not pay for it; the
// retries of a failing upstream are then limited only by the limits a
// failure still charges (usage reported, or WithChargeOnFailure). It
// cannot be combined with WithChargeOnFailure, which keeps the
// reservations this option refunds.
func WithRefundOnServerError() Option {
	return func(c *config) error {
		c.refundOnServerError = true
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
// A concurrency cap (Concurrent) is no quota, whatever its maximum hold: its
// refusals stay 429.
// A limit's own Limit.WithRefusalStatus takes precedence over it.
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
