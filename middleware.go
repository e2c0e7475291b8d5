package ratelimit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"sync/atomic"
	"time"
)

// ErrInvalidConfig is wrapped by every error New returns: no limits, an
// invalid limit (the error also wraps ErrInvalidLimit), duplicate limit
// names, a nil store, key function or handler, a non-positive store
// timeout, an unknown header style or failure mode, or conflicting
// options.
var ErrInvalidConfig = errors.New("ratelimit: invalid configuration")

// ErrStoreFailed is wrapped by every store-failure error the Limiter
// returns or reports: the error of a store call (Take, Adjust, settlement,
// Reservation.Cancel, the WithMaxWait refund, a Transport's pause) that
// failed or missed the store timeout, as returned by Limiter.Take,
// Limiter.Adjust, Reserve, Wait and Reservation.Cancel, and as given to
// Hooks.OnStoreError, Hooks.OnStoreCall, Hooks.OnBypass and
// Rejection.Err. It lets an OnBypass consumer tell a store bypass
// (errors.Is(reason, ErrStoreFailed), under FailOpen) from a key-function
// bypass (under WithSkipOnKeyError, whose reason is the key function's
// error, such as ErrMissingKey). It is not wrapped by the error of a call
// abandoned because the caller's own context ended first: that is no store
// failure (and is not counted in Stats.StoreErrors); it wraps the
// context's error.
var ErrStoreFailed = errors.New("ratelimit: store call failed")

// ErrStoreTimeout is wrapped (together with ErrStoreFailed and
// context.DeadlineExceeded) by the store errors of calls that did not
// finish within the store timeout (WithStoreTimeout).
var ErrStoreTimeout = errors.New("ratelimit: store call timed out")

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

// Hooks are optional callbacks for logging and metrics. Each may be nil.
// They run synchronously on the request's goroutine, so they must be fast
// and safe for concurrent use; they may keep the Result and StoreCall they
// are given.
type Hooks struct {
	// OnDecision is called exactly once for every decided request, with
	// the final Result as the client sees it: each request the middleware
	// decides (allowed or refused) and each Limiter.Take (so Reserve and
	// each attempt of Wait) that reaches the store. A request the store
	// admitted but WithMaxWait refused is reported once, as the refusal
	// (its reservation refunded). res.ShadowLimited() tells whether a
	// shadow limit would have refused the request. Requests without a
	// decision (store failures, key errors) go to OnBypass or nowhere.
	OnDecision func(ctx context.Context, res Result)
	// OnStoreError is called for every failed store call (Take, Adjust,
	// settlement, Reservation.Cancel, the WithMaxWait refund), timeouts
	// included, before OnStoreCall. err wraps ErrStoreFailed, and also
	// ErrStoreTimeout and context.DeadlineExceeded for a timeout. Calls
	// abandoned because the caller's context ended are not reported here
	// (see Stats.StoreErrors).
	OnStoreError func(ctx context.Context, err error)
	// OnBypass is called for every request let through without a
	// decision: the store failed under FailOpen (reason is the store
	// error, which wraps ErrStoreFailed) or the key function failed
	// under WithSkipOnKeyError (reason is its error, never wrapping
	// ErrStoreFailed unless the key function's own error does).
	OnBypass func(ctx context.Context, reason error)
	// OnStoreCall is called after every store call the Limiter makes,
	// successful or not: the Take of each decision, the second Take of a
	// request only shadow limits refused (a third and more only when
	// another request spends a shadow limit in between), Limiter.Adjust,
	// the settlement of reported usage, Reservation.Cancel's read and
	// refunds, the WithMaxWait refund and a Transport's pauses. For a
	// failed call it runs after OnStoreError. It is the place to measure
	// store latency (package metrics/prometheus does). When it is nil the
	// Limiter does not read the clock.
	OnStoreCall func(ctx context.Context, call StoreCall)
}

// StoreOp names the Store method of a StoreCall.
type StoreOp string

// The Store methods a StoreCall reports.
const (
	// OpTake is Store.Take (including the zero-cost reads of
	// Reservation.Cancel and Transport).
	OpTake StoreOp = "take"
	// OpAdjust is Store.Adjust.
	OpAdjust StoreOp = "adjust"
)

// StoreCall describes one store call, for Hooks.OnStoreCall. It carries no
// key.
type StoreCall struct {
	// Op is the Store method called.
	Op StoreOp
	// Requests is the number of Requests in the call: the number of
	// limits decided or adjusted at once (≥ 1).
	Requests int
	// Duration is the time the call took, measured by the Limiter around
	// the Store method (so it includes a call that ran into the store
	// timeout). It is ≥ 0.
	Duration time.Duration
	// Err is nil when the call succeeded, else the Limiter's classified
	// error: it wraps ErrStoreFailed (and ErrStoreTimeout for a timeout),
	// or, for a call abandoned because the caller's context ended, the
	// context's error.
	Err error
	// Store is the Limiter's store, the one given to New, so a hook
	// serving several Limiters can tell their stores apart (package
	// metrics/prometheus uses it not to count a call twice).
	Store Store
}

// Result is the decision on one request across all of a Limiter's limits.
type Result struct {
	// Allowed reports whether the request was admitted (and charged).
	Allowed bool
	// Decisions holds one Decision per limit, in the order of the
	// request's limits (WithLimits, or the PolicySet of WithLimitsFunc;
	// for Limiter.Adjust, only the adjusted limit), shadow limits
	// included. It is empty when the store failed.
	Decisions []Decision
	// RetryAfter is 0 when Allowed; otherwise the longest RetryAfter of
	// the refusing limits, or RetryNever if any of them can never admit
	// the request. For a refusal because the store failed (FailClosed) it
	// is one second.
	RetryAfter time.Duration
	// Delay is how long the caller must wait before acting on an
	// admission: the longest Decision.Delay, nonzero only with LeakyBucket
	// limits (the request's slot in the queue). The middleware waits it
	// out before running the handler; callers of Limiter.Take must too.
	Delay time.Duration
	// Bypassed reports that the store failed and FailOpen let the request
	// through without a decision.
	Bypassed bool
}

// Binding returns the decision that binds: when refused, the refusing
// decision that can never be satisfied (the first such), otherwise the
// one with the longest RetryAfter (the first on ties); when allowed, the
// decision with the least fraction of its capacity left (Remaining/Burst,
// first on ties). Shadow limits never bind. It returns nil when there are
// no (enforced) decisions. The pointer refers to an element of r.Decisions.
func (r Result) Binding() *Decision {
	var b *Decision
	for i := range r.Decisions {
		d := &r.Decisions[i]
		if d.Limit != nil && d.Limit.shadow {
			continue
		}
		if r.Allowed {
			if b == nil || tighter(d, b) {
				b = d
			}
			continue
		}
		switch {
		case d.Allowed:
		case b == nil:
			b = d
		case b.Never():
		case d.Never() || d.RetryAfter > b.RetryAfter:
			b = d
		}
	}
	return b
}

// ShadowLimited reports whether a shadow limit (Limit.Shadow) refused the
// request: a refusal that enforcing the limit would have caused.
func (r Result) ShadowLimited() bool {
	for i := range r.Decisions {
		if d := &r.Decisions[i]; !d.Allowed && d.Limit != nil && d.Limit.shadow {
			return true
		}
	}
	return false
}

// resultOf summarises the decisions of a Take. Shadow limits' decisions
// do not count.
func resultOf(ds []Decision) Result {
	res := Result{Allowed: true, Decisions: ds}
	for i := range ds {
		d := &ds[i]
		if d.Limit != nil && d.Limit.shadow {
			continue
		}
		if d.Allowed {
			res.Delay = max(res.Delay, d.Delay)
			continue
		}
		res.Allowed = false
		switch {
		case d.Never():
			res.RetryAfter = RetryNever
		case res.RetryAfter != RetryNever && d.RetryAfter > res.RetryAfter:
			res.RetryAfter = d.RetryAfter
		}
	}
	if !res.Allowed {
		res.Delay = 0
	}
	return res
}

// tooLarge reports whether a refusal can never be admitted.
func (r Result) tooLarge() bool { return !r.Allowed && r.RetryAfter == RetryNever }

// Rejection describes a refused request to a RejectHandler. It carries no
// key: keys may be secrets.
type Rejection struct {
	// Result is the decision. For a store failure under FailClosed it has
	// no decisions and a RetryAfter of one second.
	Result
	// Status is the status the default handler answers with:
	// 429 Too Many Requests (retry after RetryAfter), 413 Content Too
	// Large (the cost exceeds a limit's burst: retrying cannot help), the
	// status of WithQuotaExhaustedStatus (a long quota is exhausted) or
	// 503 Service Unavailable (the store failed under FailClosed).
	Status int
	// Costs holds the request's cost for each limit, aligned with
	// Decisions; nil for a store failure.
	Costs []int64
	// Err is the store error for a 503, nil otherwise.
	Err error
}

// RejectHandler writes the response to a refused request. Before it is
// called, the middleware has set the rate-limit fields (HeaderWriter) and,
// for 429 and 503, Retry-After in w.Header(); the handler may change them.
type RejectHandler func(w http.ResponseWriter, r *http.Request, rej Rejection)

// Stats are counters since the Limiter was created. Each is read
// atomically, but the set is not one snapshot.
type Stats struct {
	// Allowed counts requests (and Take calls) admitted. Each decided
	// request counts once, in Allowed, Limited or TooLarge, as
	// Hooks.OnDecision reports it.
	Allowed uint64
	// Limited counts refusals that a later retry can pass (429),
	// including requests the store admitted but WithMaxWait refused.
	Limited uint64
	// TooLarge counts refusals whose cost exceeds a limit's burst (413).
	TooLarge uint64
	// Bypassed counts requests let through without a decision: store
	// failures under FailOpen, and key errors under WithSkipOnKeyError.
	Bypassed uint64
	// StoreErrors counts failed store calls (every call that
	// Hooks.OnStoreError reports), timeouts included, but not calls
	// abandoned because the request's own context ended.
	StoreErrors uint64
	// KeyErrors counts requests whose key function failed.
	KeyErrors uint64
	// CostErrors counts requests refused because a cost function failed.
	CostErrors uint64
	// Settled counts requests whose reported usage was settled with the
	// store after the handler returned.
	Settled uint64
	// ShadowLimited counts requests admitted although a shadow limit
	// (Limit.Shadow) refused them: the extra refusals that enforcing the
	// shadow limits would cause. They also count in Allowed.
	ShadowLimited uint64
	// Released counts requests whose reservation was released because
	// the handler failed (5xx or panic) without reporting usage (see
	// WithChargeOnServerError).
	Released uint64
	// PlanErrors counts requests refused because the WithLimitsFunc
	// function failed (an unknown plan, say).
	PlanErrors uint64
}

type counters struct {
	allowed, limited, tooLarge, bypassed, storeErrors, keyErrors, costErrors, settled atomic.Uint64
	shadowLimited, released, planErrors                                               atomic.Uint64
}

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

	// AI options (ai.go, plans.go).
	limitsFunc          LimitsFunc
	clampPPM            int64 // WithReserveClamp, parts per million; 0: none
	chargeOnServerError bool
	quotaThreshold      time.Duration
	quotaStatus         int         // 0: none
	format              ErrorFormat // WithErrorFormat
}

// Option configures a Limiter. Options that get invalid arguments make New
// fail with an error wrapping ErrInvalidConfig.
type Option func(*config) error

// WithKey sets the key function (default KeyByAPIKey()).
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
// (HeadersIETF, HeadersXRateLimit, combined with |), HeadersNone for none,
// and any other HeaderWriter, such as llm.OpenAIHeaders(), beside them:
//
//	ratelimit.WithHeaders(ratelimit.HeadersIETF, llm.OpenAIHeaders())
//
// At least one writer is required, none may be nil, and a style must be
// known. A later WithHeaders replaces an earlier one.
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
				others = append(others, w)
			}
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
// waits on a dead store for longer than d.
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
	// error's status and message when it chose a status (an error with a
	// StatusCode() int method, such as *StatusError), else with 400 and a
	// generic message for a cost function and 500 for WithLimitsFunc,
	// whose failure is a server-side fault.
	RequestError func(w http.ResponseWriter, r *http.Request, limit string, err error)
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

// Limiter enforces a set of limits on HTTP requests (Handler) or on any
// keyed event (Take). It is safe for concurrent use; its configuration is
// fixed by New.
type Limiter struct {
	store   Store
	limits  []Limit // Decisions point into this slice
	key     KeyFunc
	headers *styleWriter
	failure FailureMode
	timeout time.Duration
	reject  RejectHandler
	keyErr  func(w http.ResponseWriter, r *http.Request, err error)
	skipKey bool
	hooks   Hooks
	stats   counters

	set                 *PolicySet // the WithLimits set (l.limits); nil with WithLimitsFunc alone
	limitsFunc          LimitsFunc
	clampPPM            int64
	chargeOnServerError bool
	quotaThreshold      time.Duration
	quotaStatus         int
	// requestError is ErrorFormat.RequestError (WithErrorFormat), or nil
	// for the problem details of writeCostError and limitsError.
	requestError func(w http.ResponseWriter, r *http.Request, limit string, err error)
	// sleep waits d or until ctx ends (a variable so tests need not
	// sleep).
	sleep func(ctx context.Context, d time.Duration) error
	// now is the clock of StoreCall.Duration (time.Now; a fake clock in
	// tests). It is read only when Hooks.OnStoreCall is set.
	now func() time.Time

	// maxWait bounds Result.Delay when maxWaitSet (WithMaxWait).
	maxWait    time.Duration
	maxWaitSet bool
}

// New returns a Limiter that keeps its state in store. It validates the
// whole configuration, so a bad one fails here and never reaches a
// request (the one exception: key functions built with invalid arguments,
// such as KeyConst("") or KeyByIP(IPv6Prefix(0)), cannot report it before
// they run, and answer every request with 500 and a message naming the
// mistake): the store must not be nil, there must be at least one limit
// (WithLimits) or a WithLimitsFunc, every limit must be valid (Limit.Err)
// and the names unique (the sets of WithLimitsFunc are validated by
// NewPolicySet and NewPlans). Every error wraps ErrInvalidConfig.
//
// Defaults: key KeyByAPIKey(), headers HeadersIETF, FailOpen, store timeout
// DefaultStoreTimeout, DefaultRejectHandler, DefaultKeyErrorHandler.
func New(store Store, opts ...Option) (*Limiter, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalidConfig)
	}
	if v := reflect.ValueOf(store); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil, fmt.Errorf("%w: nil %T store", ErrInvalidConfig, store)
	}
	c := config{key: KeyByAPIKey(), style: HeadersIETF, storeTimeout: DefaultStoreTimeout}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: option %d is nil", ErrInvalidConfig, i)
		}
		if err := o(&c); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
	}
	var set *PolicySet
	if len(c.limits) > 0 || c.limitsFunc == nil {
		var err error
		if set, err = NewPolicySet(c.limits...); err != nil {
			return nil, err // wraps ErrInvalidConfig
		}
		c.limits = set.limits
	}
	if c.skipKeyErr && c.keyErr != nil {
		return nil, fmt.Errorf("%w: WithSkipOnKeyError and WithKeyErrorHandler exclude each other", ErrInvalidConfig)
	}
	l := &Limiter{
		store:   store,
		limits:  c.limits,
		key:     c.key,
		failure: c.failure,
		timeout: c.storeTimeout,
		reject:  c.reject,
		keyErr:  c.keyErr,
		skipKey: c.skipKeyErr,
		hooks:   c.hooks,
		sleep:   sleep,
		now:     time.Now,

		set:                 set,
		limitsFunc:          c.limitsFunc,
		clampPPM:            c.clampPPM,
		chargeOnServerError: c.chargeOnServerError,
		quotaThreshold:      c.quotaThreshold,
		quotaStatus:         c.quotaStatus,
		requestError:        c.format.RequestError,

		maxWait:    c.maxWait,
		maxWaitSet: c.maxWaitSet,
	}
	l.headers = newStyleWriter(c.style, c.headers, l.limits)
	switch {
	case l.reject != nil:
	case c.format.Reject != nil:
		l.reject = c.format.Reject
	default:
		l.reject = DefaultRejectHandler
	}
	switch {
	case l.keyErr != nil:
	case c.format.KeyError != nil:
		l.keyErr = c.format.KeyError
	default:
		l.keyErr = DefaultKeyErrorHandler
	}
	return l, nil
}

// Limits returns a copy of the Limiter's limits, in order.
func (l *Limiter) Limits() []Limit { return append([]Limit(nil), l.limits...) }

// Stats returns the Limiter's counters.
func (l *Limiter) Stats() Stats {
	s := &l.stats
	return Stats{
		Allowed:     s.allowed.Load(),
		Limited:     s.limited.Load(),
		TooLarge:    s.tooLarge.Load(),
		Bypassed:    s.bypassed.Load(),
		StoreErrors: s.storeErrors.Load(),
		KeyErrors:   s.keyErrors.Load(),
		CostErrors:  s.costErrors.Load(),
		Settled:     s.settled.Load(),

		ShadowLimited: s.shadowLimited.Load(),
		Released:      s.released.Load(),
		PlanErrors:    s.planErrors.Load(),
	}
}

// index returns the position of the limit named name, or -1.
func (l *Limiter) index(name string) int {
	for i := range l.limits {
		if l.limits[i].Name() == name {
			return i
		}
	}
	return -1
}

// Handler returns next wrapped by the limiter, for chi's r.Use(lim.Handler)
// or r.With(lim.Handler), or to wrap any http.Handler.
//
// For each request it computes the key (KeyFunc), the request's limits
// (WithLimits, or the WithLimitsFunc function: an error answers with its
// StatusError status or 500, nothing charged) and the cost for every
// limit (Limit.Cost; 1 without a cost function; clamped by
// WithReserveClamp), then asks the store to charge all limits at once,
// with the store timeout as deadline. Shadow limits (Limit.Shadow) are
// decided and reported but never refuse:
//
//   - Admitted: the rate-limit fields are set and next runs. Afterwards —
//     when it returns, panics or its client disconnects — the usage the
//     handler reported with ReportUsage is settled with the store; a
//     failed call (5xx, or a panic before any status) without a report
//     releases its estimates (see WithChargeOnServerError). With a
//     LeakyBucket limit, next runs only once the request's slot comes
//     (Result.Delay); if the request's context ends while it waits, next
//     never runs, its reservation is refunded and the answer is 503.
//   - Refused: the rate-limit fields are set and the RejectHandler answers:
//     by default 429 with Retry-After (or the WithQuotaExhaustedStatus
//     status for a long quota), or 413 without it when a cost exceeds a
//     limit's burst (waiting cannot help), with an RFC 9457 problem body
//     (see DefaultRejectHandler; WithErrorFormat for another shape, such
//     as llm.OpenAIErrors).
//   - The key function fails: DefaultKeyErrorHandler (a 4xx problem), or
//     next runs unlimited under WithSkipOnKeyError.
//   - A cost function fails: a problem with the status its error names
//     (StatusError), else 400; nothing is charged. A negative cost is a
//     bug in the cost function and answered with 500.
//   - The store fails or times out: FailOpen runs next unlimited;
//     FailClosed answers 503 with Retry-After: 1.
//   - The request's context ends before the store answers (the client
//     left): 503, nothing counted, next does not run.
//
// Wrapping several routes with one Limiter gives each key one budget
// across all of them; use Compose(key, KeyByRoute()) for per-route budgets.
func (l *Limiter) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.serve(w, r, next)
	})
}

func (l *Limiter) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	ctx := r.Context()
	key, err := l.key(r)
	if err == nil && key == "" {
		err = fmt.Errorf("%w: the key function returned an empty key", ErrMissingKey)
	}
	if err != nil {
		l.stats.keyErrors.Add(1)
		if !l.skipKey {
			l.keyErr(w, r, err)
			return
		}
		l.bypass(ctx, err)
		s := l.newState(ctx, "", l.set)
		s.bypassed = true
		next.ServeHTTP(w, r.WithContext(s))
		return
	}

	set := l.set
	if l.limitsFunc != nil {
		if set, err = l.limitsFunc(r, key); err == nil && set == nil {
			err = errors.New("ratelimit: the WithLimitsFunc function returned no limits and no error")
		}
		if err != nil {
			l.stats.planErrors.Add(1)
			l.limitsError(w, r, err)
			return
		}
	}
	s := l.newState(ctx, key, set)
	for i := range set.limits {
		lim := &set.limits[i]
		cost := int64(1)
		if fn := lim.cost; fn != nil {
			if cost, err = fn(r); err == nil && cost < 0 {
				err = &StatusError{Code: http.StatusInternalServerError,
					Err: fmt.Errorf("ratelimit: the cost function of limit %q returned %d, a negative cost", lim.Name(), cost)}
			}
			if err != nil {
				l.stats.costErrors.Add(1)
				l.costError(w, r, lim, err)
				return
			}
			cost = l.reserve(lim, cost)
		}
		s.costs[i] = cost
		s.reqs[i] = Request{Key: key, Limit: lim, Cost: cost}
	}

	res, err := l.take(ctx, s.reqs, s.out)
	if err != nil {
		if ctx.Err() != nil {
			writeEnded(w)
			return
		}
		if l.failure == FailOpen {
			l.bypass(ctx, err)
			s.bypassed = true
			next.ServeHTTP(w, r.WithContext(s))
			return
		}
		w.Header().Set("Retry-After", "1")
		l.reject(w, r, Rejection{Result: Result{RetryAfter: time.Second}, Status: http.StatusServiceUnavailable, Err: err})
		return
	}

	overWait := res.Allowed && l.maxWaitSet && res.Delay > l.maxWait
	if overWait {
		res = l.refundOverMaxWait(ctx, key, s.costs, res)
	}
	l.record(ctx, res)

	l.headers.write(w.Header(), res, set.policy)
	if !res.Allowed {
		status := http.StatusTooManyRequests // a WithMaxWait refusal
		if !overWait {
			status = l.refusalStatus(res)
		}
		if !res.tooLarge() {
			w.Header().Set("Retry-After", formatSeconds(retryAfterSeconds(res.RetryAfter)))
		}
		l.reject(w, r, Rejection{Result: res, Status: status, Costs: s.costs})
		return
	}
	// Settle on every exit path: a deferred call runs when next returns,
	// panics (the panic then continues unchanged, http.ErrAbortHandler
	// included) or calls runtime.Goexit.
	defer l.settle(s)
	if res.Delay > 0 && l.sleep(ctx, res.Delay) != nil {
		// The request ended while queued: it never runs, so refund its
		// reservation (it was charged; the settlement makes it free).
		s.mu.Lock()
		clear(s.reported)
		s.mu.Unlock()
		writeEnded(w)
		return
	}
	if set.hasCost && !l.chargeOnServerError {
		// Watch the status, to release the reservation of a failed call.
		s.rw.ResponseWriter, s.watch = w, true
		w = &s.rw
	}
	next.ServeHTTP(w, r.WithContext(s))
	s.returned = true
}

// sleep waits d, or until ctx ends (returning its error).
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// writeEnded answers a request whose context ended before it could run.
// The client has usually gone, so nobody reads it, but the response must
// not look like the handler's.
func writeEnded(w http.ResponseWriter) {
	writeProblem(w, &problem{Type: "about:blank", Title: http.StatusText(http.StatusServiceUnavailable),
		Status: http.StatusServiceUnavailable, Detail: "the request ended before it could be served"})
}

// bypass records a request let through without a decision.
func (l *Limiter) bypass(ctx context.Context, reason error) {
	l.stats.bypassed.Add(1)
	if l.hooks.OnBypass != nil {
		l.hooks.OnBypass(ctx, reason)
	}
}

// take asks the store to decide reqs within the store timeout. An error
// is either a store failure (counted, reported to OnStoreError) or, when
// ctx itself ended, the caller's cancellation (not counted): callers tell
// them apart with ctx.Err(). The decision is not recorded: the caller
// records the final Result once (record).
func (l *Limiter) take(ctx context.Context, reqs []Request, out []Decision) (Result, error) {
	if err := l.call(ctx, OpTake, reqs, out); err != nil {
		return Result{}, err
	}
	res := resultOf(out[:len(reqs)])
	if res.Allowed && res.ShadowLimited() {
		// Only shadow limits refused, so the store charged nothing (all
		// or nothing): charge the enforced limits alone.
		if err := l.retakeAdmitting(ctx, reqs, out); err != nil {
			return Result{}, err
		}
		res = resultOf(out[:len(reqs)])
	}
	return res, nil
}

// record counts the final decision on one request in Stats and reports it
// to Hooks.OnDecision: once per decided request.
func (l *Limiter) record(ctx context.Context, res Result) {
	switch {
	case res.Allowed:
		l.stats.allowed.Add(1)
		if res.ShadowLimited() {
			l.stats.shadowLimited.Add(1)
		}
	case res.tooLarge():
		l.stats.tooLarge.Add(1)
	default:
		l.stats.limited.Add(1)
	}
	if l.hooks.OnDecision != nil {
		l.hooks.OnDecision(ctx, res)
	}
}

// retakeAdmitting decides again, after a Take that only shadow limits
// refused and that therefore charged nothing (all or nothing), the
// requests of reqs that must be charged: every enforced limit and every
// shadow limit that had room. Their new decisions replace theirs in out;
// a refusing shadow limit keeps its refusal and stays uncharged, as it
// would be if enforced. If a shadow limit that had room refuses this time
// (another request spent it in between), it joins the refusing ones and
// the Take is made again without it, so the loop ends after at most one
// retake per shadow limit. If an enforced limit refuses, the request is
// refused: nothing is charged twice either way.
func (l *Limiter) retakeAdmitting(ctx context.Context, reqs []Request, out []Decision) error {
	idx := make([]int, 0, len(reqs))
	for {
		idx = idx[:0]
		for i := range reqs {
			if !reqs[i].Limit.shadow || out[i].Allowed {
				idx = append(idx, i)
			}
		}
		if len(idx) == 0 {
			return nil // refusing shadow limits only: nothing to charge
		}
		reqs2, out2 := make([]Request, len(idx)), make([]Decision, len(idx))
		for j, i := range idx {
			reqs2[j] = reqs[i]
		}
		if err := l.call(ctx, OpTake, reqs2, out2); err != nil {
			return err
		}
		shadowRefused, enforcedRefused := false, false
		for j, i := range idx {
			if !out2[j].Allowed {
				if reqs[i].Limit.shadow {
					shadowRefused = true
				} else {
					enforcedRefused = true
				}
			}
		}
		if !shadowRefused || enforcedRefused {
			for j, i := range idx {
				out[i] = out2[j]
			}
			return nil
		}
		// Only shadow limits refused again, so nothing was charged: record
		// their refusals (they leave the set) and take the rest again.
		for j, i := range idx {
			if !out2[j].Allowed {
				out[i] = out2[j]
			}
		}
	}
}

// call makes one store call, op, with the store timeout; classifies,
// counts and reports its failure (storeError); and reports the call to
// Hooks.OnStoreCall. Every store call of the Limiter goes through here.
func (l *Limiter) call(ctx context.Context, op StoreOp, reqs []Request, out []Decision) error {
	hook := l.hooks.OnStoreCall
	tctx, cancel := context.WithTimeout(ctx, l.timeout)
	var start time.Time
	if hook != nil {
		start = l.now()
	}
	var err error
	if op == OpTake {
		err = l.store.Take(tctx, reqs, out)
	} else {
		err = l.store.Adjust(tctx, reqs, out)
	}
	var d time.Duration
	if hook != nil {
		d = max(l.now().Sub(start), 0)
	}
	if err != nil {
		err = l.storeError(ctx, tctx, err)
	}
	cancel()
	if hook != nil {
		hook(ctx, StoreCall{Op: op, Requests: len(reqs), Duration: d, Err: err, Store: l.store})
	}
	return err
}

// storeCallError is the classified error of a failed store call. It wraps
// ErrStoreFailed; for a timeout also ErrStoreTimeout, and err then wraps
// context.DeadlineExceeded.
type storeCallError struct {
	timeout time.Duration // > 0: the call missed this store timeout
	err     error         // the store's error
}

func (e *storeCallError) Error() string {
	if e.timeout > 0 {
		return ErrStoreTimeout.Error() + " after " + e.timeout.String() + ": " + e.err.Error()
	}
	return "ratelimit: store: " + e.err.Error()
}

func (e *storeCallError) Unwrap() []error {
	if e.timeout > 0 {
		return []error{ErrStoreFailed, ErrStoreTimeout, e.err}
	}
	return []error{ErrStoreFailed, e.err}
}

// storeError classifies a failed store call made with tctx, a child of ctx
// with the store timeout, and counts and reports it unless ctx itself had
// ended (then the error wraps ctx's error, and not ErrStoreFailed).
func (l *Limiter) storeError(ctx, tctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		if !errors.Is(err, cerr) {
			return fmt.Errorf("ratelimit: store call abandoned: %w: %w", err, cerr)
		}
		return fmt.Errorf("ratelimit: store call abandoned: %w", err)
	}
	e := &storeCallError{err: err}
	if errors.Is(tctx.Err(), context.DeadlineExceeded) && !errors.Is(err, context.DeadlineExceeded) {
		e.err = fmt.Errorf("%w: %w", err, context.DeadlineExceeded)
	}
	if errors.Is(e.err, context.DeadlineExceeded) {
		e.timeout = l.timeout
	}
	l.stats.storeErrors.Add(1)
	if l.hooks.OnStoreError != nil {
		l.hooks.OnStoreError(ctx, e)
	}
	return e
}

// Take charges costs (aligned with Limits; none given means 1 each) to key
// on all limits at once, without HTTP: for outbound calls, queues, or
// custom middleware. Like the middleware it uses the store timeout, the
// failure mode, Stats and Hooks.
//
// Shadow limits never refuse, as in the middleware. A refusal is not an
// error: err is nil and res.Allowed false, with res.RetryAfter saying how
// long to wait (RetryNever: never). Invalid arguments — no WithLimits
// limits (WithLimitsFunc alone), an empty key, a number of costs other
// than 0 or
// len(Limits()), a negative cost — return an error wrapping
// ErrInvalidRequest and the zero Result. When the store fails, err is the
// store error and res is what the failure mode decides: FailOpen gives
// Allowed and Bypassed; FailClosed a refusal with a RetryAfter of one
// second. When ctx ends first, err wraps ctx's error and res is the zero
// Result.
func (l *Limiter) Take(ctx context.Context, key string, costs ...int64) (Result, error) {
	n := len(l.limits)
	switch {
	case n == 0:
		return Result{}, fmt.Errorf("%w: Take: the Limiter has no WithLimits limits (only WithLimitsFunc)", ErrInvalidRequest)
	case key == "":
		return Result{}, fmt.Errorf("%w: Take: empty key", ErrInvalidRequest)
	case len(costs) != 0 && len(costs) != n:
		return Result{}, fmt.Errorf("%w: Take: %d costs for %d limits", ErrInvalidRequest, len(costs), n)
	}
	reqs := make([]Request, n)
	for i := range reqs {
		cost := int64(1)
		if len(costs) > 0 {
			if cost = costs[i]; cost < 0 {
				return Result{}, fmt.Errorf("%w: Take: negative cost %d for limit %q", ErrInvalidRequest, cost, l.limits[i].Name())
			}
		}
		reqs[i] = Request{Key: key, Limit: &l.limits[i], Cost: cost}
	}
	res, err := l.take(ctx, reqs, make([]Decision, n))
	if err != nil {
		if ctx.Err() != nil {
			return Result{}, err
		}
		if l.failure == FailOpen {
			l.bypass(ctx, err)
			return Result{Allowed: true, Bypassed: true}, err
		}
		return Result{RetryAfter: time.Second}, err
	}
	l.record(ctx, res)
	return res, nil
}

// Adjust charges (delta > 0) or refunds (delta < 0) usage of the limit
// named limitName to key without a check, for usage known outside any
// request (ReportUsage settles requests). A charge may leave the limit in
// debt that later requests wait out. The Result has one Decision: the
// limit's state afterwards. Errors: an unknown name wraps ErrUnknownLimit,
// an empty key ErrInvalidRequest; a store failure (counted in
// Stats.StoreErrors; the failure mode does not apply) wraps ErrStoreFailed.
func (l *Limiter) Adjust(ctx context.Context, key, limitName string, delta int64) (Result, error) {
	i := l.index(limitName)
	switch {
	case i < 0:
		return Result{}, fmt.Errorf("%w: %q", ErrUnknownLimit, limitName)
	case key == "":
		return Result{}, fmt.Errorf("%w: Adjust: empty key", ErrInvalidRequest)
	}
	reqs := []Request{{Key: key, Limit: &l.limits[i], Cost: delta}}
	out := make([]Decision, 1)
	if err := l.call(ctx, OpAdjust, reqs, out); err != nil {
		return Result{}, err
	}
	return Result{Allowed: true, Decisions: out}, nil
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
//     refusing limits in "violated-policies" and the wait in
//     "retry-after-seconds" (the Retry-After value):
//     {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429,"detail":"quota exceeded: the \"requests\" limit allows 60 requests per minute; retry after 1 second","violated-policies":["requests"],"retry-after-seconds":1}
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
				p.ViolatedPolicies = append(p.ViolatedPolicies, d.Limit.Name())
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
				p.ViolatedPolicies = append(p.ViolatedPolicies, d.Limit.Name())
			}
		}
		secs := retryAfterSeconds(rej.RetryAfter)
		p.RetryAfterSeconds = secs
		if d := rej.Binding(); d != nil {
			l := d.Limit
			p.Detail = fmt.Sprintf("quota exceeded: the %q limit allows %s per %s", l.Name(), units(l.Quota(), l.Unit()), periodPhrase(l.Period()))
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
// (StatusError), else 400 Bad Request. The detail is the error's message
// when the error chose its status (so it was written for clients) and a
// generic sentence otherwise. A 401 gets "WWW-Authenticate: Bearer" unless
// the response already has a WWW-Authenticate field, as RFC 9110 §15.5.2
// requires of 401 responses.
func DefaultKeyErrorHandler(w http.ResponseWriter, r *http.Request, err error) {
	status, show := statusOf(err, http.StatusBadRequest)
	detail := "the request carries no usable rate-limit key"
	if show {
		detail = err.Error()
	}
	if status == http.StatusUnauthorized && w.Header().Get("WWW-Authenticate") == "" {
		w.Header().Set("WWW-Authenticate", "Bearer")
	}
	writeProblem(w, &problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail})
}

// writeCostError answers a request whose cost function for l failed.
func writeCostError(w http.ResponseWriter, l *Limit, err error) {
	status, show := statusOf(err, http.StatusBadRequest)
	detail := fmt.Sprintf("the request's cost for the %q limit could not be estimated", l.Name())
	if show {
		detail = err.Error()
	}
	writeProblem(w, &problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail})
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

func formatSeconds(n int64) string { return strconv.FormatInt(n, 10) }
