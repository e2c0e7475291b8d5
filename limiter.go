package ratelimit

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Limiter enforces a set of limits on HTTP requests (Handler) or on any
// keyed event (Take). It is safe for concurrent use; its configuration is
// fixed by New.
type Limiter struct {
	store Store
	one   SingleTaker // store, when it is one: the single-limit path
	pair  PairTaker   // store, when it is one: the two-limit path
	// adjustOne: store, when it is one: the settlement of one limit.
	adjustOne SingleAdjuster
	// local: store, when it is one: the Takes it decides at once, tried
	// before the store call's context is built.
	local LocalTaker
	// nonBlocking: the store cannot block (NonBlocking), so its calls get
	// no store timeout.
	nonBlocking bool
	scratch     sync.Pool // of *scratch: the slices of decide's store calls
	limits      []Limit   // Decisions point into this slice
	key         KeyFunc
	headers     *styleWriter
	failure     FailureMode
	timeout     time.Duration
	reject      RejectHandler
	keyErr      func(w http.ResponseWriter, r *http.Request, err error)
	skipKey     bool
	hooks       Hooks
	stats       counters

	set                 *PolicySet // the WithLimits set (l.limits); nil with WithLimitsFunc alone
	limitsFunc          LimitsFunc
	clampPPM            int64
	chargeOnFailure     bool
	refundOnServerError bool
	quotaThreshold      time.Duration
	quotaStatus         int
	// requestError is ErrorFormat.RequestError (WithErrorFormat), or nil
	// for the problem details of writeCostError and limitsError.
	requestError func(w http.ResponseWriter, r *http.Request, limit string, err error)
	// sleep waits d or until ctx ends (a variable so tests need not
	// sleep).
	sleep func(ctx context.Context, d time.Duration) error
	// now is the clock of StoreCall.Duration and of the store-failure
	// alert (time.Now; a fake clock in tests). It is read around a store
	// call only when Hooks.OnStoreCall is set, and otherwise only on a
	// failed call and, while the alert's episode is open, a successful one.
	now func() time.Time
	// alert is the store-failure alert, or nil (WithoutStoreAlert).
	alert *storeAlert

	// maxWait bounds Result.Delay when maxWaitSet (WithMaxWait).
	maxWait    time.Duration
	maxWaitSet bool

	namespaceState             // WithName (name.go)
	jitter         retryJitter // WithRetryJitter (retry.go)
}

// New returns a Limiter that keeps its state in store. It validates the
// whole configuration, so a bad one fails here and never reaches a
// request: the store must not be nil, there must be at least one limit
// (WithLimits) or a WithLimitsFunc, every limit must be valid (Limit.Err)
// and the names unique (the sets of WithLimitsFunc are validated by
// NewPolicySet and NewPlans), the key function must not be a built-in
// one made with invalid arguments, such as KeyConst("") or
// KeyByIP(IPv6Prefix(0)) (also inside Compose), and, unless the Limiter
// is named (WithName), no other unnamed Limiter on the same store in
// this process may have a limit of the same name (see WithName). Every
// error wraps ErrInvalidConfig.
//
// Defaults: key KeyByIP() (see WithKey), headers HeadersIETF, FailOpen,
// store timeout DefaultStoreTimeout, DefaultRejectHandler,
// DefaultKeyErrorHandler, and the store-failure alert on slog.Default()
// (WithStoreAlert).
func New(store Store, opts ...Option) (*Limiter, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalidConfig)
	}
	if v := reflect.ValueOf(store); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil, fmt.Errorf("%w: nil %T store", ErrInvalidConfig, store)
	}
	c := config{key: KeyByIP(), style: HeadersIETF, storeTimeout: DefaultStoreTimeout}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: option %d is nil", ErrInvalidConfig, i)
		}
		if err := o(&c); err != nil {
			return nil, wrap(ErrInvalidConfig, "", err)
		}
	}
	if err := misconfiguration(c.key); err != nil {
		return nil, wrap(ErrInvalidConfig, "WithKey", err)
	}
	var set *PolicySet
	if len(c.limits) > 0 || c.limitsFunc == nil {
		var err error
		if set, err = NewPolicySet(c.limits...); err != nil {
			return nil, err // wraps ErrInvalidConfig
		}
	}
	if c.skipKeyErr && c.keyErr != nil {
		return nil, fmt.Errorf("%w: WithSkipOnKeyError and WithKeyErrorHandler exclude each other", ErrInvalidConfig)
	}
	if c.chargeOnFailure && c.refundOnServerError {
		// Both decide the reservations of a 5xx: one keeps, one refunds.
		return nil, fmt.Errorf("%w: WithChargeOnFailure and WithRefundOnServerError exclude each other", ErrInvalidConfig)
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
		chargeOnFailure:     c.chargeOnFailure,
		refundOnServerError: c.refundOnServerError,
		quotaThreshold:      c.quotaThreshold,
		quotaStatus:         c.quotaStatus,
		requestError:        c.format.RequestError,

		maxWait:    c.maxWait,
		maxWaitSet: c.maxWaitSet,
	}
	l.stats.decisions.init()
	l.one, _ = store.(SingleTaker)
	l.pair, _ = store.(PairTaker)
	l.adjustOne, _ = store.(SingleAdjuster)
	l.local, _ = store.(LocalTaker)
	if nb, ok := store.(NonBlocking); ok {
		l.nonBlocking = nb.NonBlocking()
	}
	if !c.alertOff {
		l.alert = &storeAlert{logger: c.alertLogger, interval: c.alertInterval, mode: c.failure}
		if l.alert.interval == 0 {
			l.alert.interval = DefaultStoreAlertInterval
		}
	}
	l.headers = &styleWriter{style: c.style, others: c.headers}
	l.name = c.name
	l.rebind = c.name != "" || c.style&HeadersShadow != 0
	l.jitter = newRetryJitter(c.jitterPPM)
	if set != nil {
		l.set = l.boundSet(set)
		l.limits = l.set.limits
	}
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
	// Last: a New that fails leaves no claim behind.
	if err := claim(store, l.limits, l.name != ""); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return l, nil
}

// Limits returns a copy of the Limiter's limits, in order.
func (l *Limiter) Limits() []Limit { return append([]Limit(nil), l.limits...) }

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
	// store after the handler returned, or whose failed call's release
	// was settled when the handler wrote its status. The release of a
	// concurrency cap's slot (Concurrent) is a settlement too.
	Settled uint64
	// ShadowLimited counts requests admitted although a shadow limit
	// (Limit.Shadow) refused them: the extra refusals that enforcing the
	// shadow limits would cause. They also count in Allowed.
	ShadowLimited uint64
	// Released counts requests whose reservation was released because
	// the handler failed (a status outside 2xx, or a panic) without
	// reporting usage (see WithChargeOnFailure and
	// WithRefundOnServerError).
	Released uint64
	// PlanErrors counts requests refused because the WithLimitsFunc
	// function failed (an unknown plan, say).
	PlanErrors uint64
}

type counters struct {
	// decisions counts Allowed and Limited, which change with every
	// decision: striped, so that goroutines deciding at once on other
	// cores do not contend for one cache line (a shared atomic costs more
	// than the rest of Take).
	decisions                                                       decisionCounters
	tooLarge, bypassed, storeErrors, keyErrors, costErrors, settled atomic.Uint64
	shadowLimited, released, planErrors                             atomic.Uint64
}

// counterStripes is the number of stripes of decisionCounters, a power of
// two.
const counterStripes = 1 << stripeBits

// stripeBits is log2(counterStripes).
const stripeBits = 4

// cacheLine is the size of the CPU's cache line that a stripe fills, in
// bytes (64 on amd64 and most arm64 cores).
const cacheLine = 64

// stripe is one stripe of decisionCounters: a cache line of its own.
type stripe struct {
	allowed, limited atomic.Uint64
	_                [cacheLine - 16]byte
}

// decisionCounters counts the allowed and the limited decisions, which
// many goroutines add to at once: each addition goes to one of its
// stripes, each a cache line of its own, chosen by the address of the
// adding goroutine's stack (goroutines have distinct stacks, and a
// goroutine keeps its stripe while its stack does not move), and a Load
// sums the stripes. Reading them while others add sees each stripe
// atomically, not one snapshot of the sum, as with the other counters of
// Stats.
//
// The stripes live in their own allocation, aligned to a cache line: in
// the Limiter, whose fields every request reads, the first and the last
// stripe would share their lines with those fields, and every addition to
// them would evict the other cores' copies of the Limiter.
type decisionCounters struct {
	stripes *[counterStripes]stripe // cache-line aligned, inside buf
}

// init allocates the stripes.
func (c *decisionCounters) init() {
	// One stripe more than needed, so that an aligned run of
	// counterStripes fits whatever the allocation's alignment.
	buf := new([counterStripes + 1]stripe)
	off := (cacheLine - uintptr(unsafe.Pointer(buf))%cacheLine) % cacheLine
	c.stripes = (*[counterStripes]stripe)(unsafe.Add(unsafe.Pointer(buf), off))
}

// mine returns the stripe of the calling goroutine.
func (c *decisionCounters) mine() *stripe {
	var probe byte
	// Only the address's value is used, never dereferenced: probe stays
	// on the stack. Stacks are at least 2 KiB and aligned to their size:
	// the address in 2 KiB units, Fibonacci-hashed so that neighbouring
	// stacks (goroutines started one after another) get distinct stripes.
	a := uint64(uintptr(unsafe.Pointer(&probe))) >> 11
	return &c.stripes[a*0x9E3779B97F4A7C15>>(64-stripeBits)]
}

// addAllowed counts an allowed decision.
func (c *decisionCounters) addAllowed() { c.mine().allowed.Add(1) }

// addLimited counts a limited decision.
func (c *decisionCounters) addLimited() { c.mine().limited.Add(1) }

// load returns the sums of the stripes: allowed and limited.
func (c *decisionCounters) load() (allowed, limited uint64) {
	for i := range c.stripes {
		allowed += c.stripes[i].allowed.Load()
		limited += c.stripes[i].limited.Load()
	}
	return allowed, limited
}

// Stats returns the Limiter's counters.
func (l *Limiter) Stats() Stats {
	s := &l.stats
	allowed, limited := s.decisions.load()
	return Stats{
		Allowed:     allowed,
		Limited:     limited,
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
		if l.limits[i].nameOf() == name {
			return i
		}
	}
	return -1
}

// bypass records a request let through without a decision.
func (l *Limiter) bypass(ctx context.Context, reason error) {
	l.stats.bypassed.Add(1)
	if l.hooks.OnBypass != nil {
		l.hooks.OnBypass(ctx, reason)
	}
}

// record counts the final decision on one request in Stats and reports it
// to Hooks.OnDecision: once per decided request.
func (l *Limiter) record(ctx context.Context, res *Result) {
	switch {
	case res.Allowed:
		l.stats.decisions.addAllowed()
		if shadowLimited(res.Decisions) {
			l.stats.shadowLimited.Add(1)
		}
	case res.tooLarge():
		l.stats.tooLarge.Add(1)
	default:
		l.stats.decisions.addLimited()
	}
	if l.hooks.OnDecision != nil {
		// A copy of the decisions: the hook may keep them, and res's may
		// live in the caller's frame (Take, serveLight).
		l.hooks.OnDecision(ctx, res.detached())
	}
}
