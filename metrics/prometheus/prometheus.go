// Package prometheus exports a Limiter's decisions, bypasses, store
// errors, store latency and circuit-breaker state as Prometheus metrics,
// with github.com/prometheus/client_golang.
//
//	m, err := rmprom.New(prometheus.DefaultRegisterer) // or your own registry
//	lim, err := ratelimit.New(store, ratelimit.WithHooks(m.Hooks()), ...)
//
// The Hooks feed every metric, store latency included (from
// ratelimit.Hooks.OnStoreCall). InstrumentStore is for a store used
// without a Limiter; see store_duration_seconds below for using both.
//
// Nothing is registered globally: New registers with the Registerer it is
// given, or with none (nil), in which case the Metrics, a
// prometheus.Collector, can be registered later.
//
// # Metrics
//
// With the default namespace "rampmeter":
//
//	rampmeter_requests_total{outcome}            counter
//	rampmeter_bypasses_total{cause}              counter
//	rampmeter_decisions_total{policy, outcome}   counter
//	rampmeter_store_errors_total{kind}           counter
//	rampmeter_store_duration_seconds{op, result} histogram
//	rampmeter_circuit_open{circuit}              gauge
//
// requests_total counts each request (or Limiter.Take) once, by outcome:
// "allowed" (admitted and charged; shadow refusals included), "limited"
// (refused, 429; including requests refused by ratelimit.WithMaxWait),
// "too_large" (refused because a cost exceeds a limit's burst, 413) or
// "bypassed" (let through without a decision: the store failed under
// FailOpen, or the key function failed under WithSkipOnKeyError). Under
// FailClosed a store failure is a store error and no request outcome.
//
// bypasses_total splits the bypassed requests by cause (hooks.BypassCause):
// "store" (the store failed under FailOpen; the reason wraps
// ratelimit.ErrStoreFailed) or "key" (the key function failed under
// WithSkipOnKeyError). Its total equals requests_total{outcome="bypassed"}.
//
// decisions_total counts each limit's verdict on each decided request, with
// policy the limit's name (Limit.Name; names are configuration, so the
// label set is bounded) and outcome:
//
//   - "allowed": the limit had room and the request was charged to it;
//   - "limited": the limit refused; a later retry can pass;
//   - "too_large": the limit refused because the cost exceeds its burst;
//   - "shadow": a shadow limit (Limit.Shadow) refused, and so would have
//     refused the request had it been enforced;
//   - "uncharged": the limit had room, but another limit refused, so
//     (stores decide all or nothing) nothing was charged to it (or, after
//     a WithMaxWait refusal, its charge was refunded).
//
// store_errors_total counts failed store calls by kind: "timeout" (the
// store timeout passed), "canceled" or "other" (hooks.ErrorKind). Calls
// abandoned because the request's own context ended are not store errors
// (see ratelimit.Stats.StoreErrors).
//
// store_duration_seconds is the duration of every store call, by op
// ("take" or "adjust") and result ("ok" or "error"), so it includes calls
// that time out. The Hooks observe every call a Limiter makes (each
// decision, the second Take of a shadow-limited request, Limiter.Adjust,
// settlements, Reservation.Cancel, WithMaxWait refunds), as the Limiter
// measures it (ratelimit.StoreCall.Duration). InstrumentStore measures
// the calls made through its wrapper, by anyone. Each call is counted
// once: when a Limiter's store is, or wraps, a wrapper from
// InstrumentStore of the same Metrics (found through the stores' Unwrap
// methods, such as store/resilient's), the wrapper observes the calls and
// the Hooks skip them.
// So with a Limiter use the Hooks alone; wrap with InstrumentStore only a
// store that code other than a Limiter also calls.
//
// circuit_open is 1 while the named circuit breaker is open (the store is
// not being called) and 0 otherwise; SetCircuitState sets it, for example
// from a failover store's state-change callback.
package prometheus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/hooks"
)

// ErrInvalidOption is wrapped by the errors New returns for an invalid
// Option.
var ErrInvalidOption = errors.New("ratelimit/metrics/prometheus: invalid option")

// DefaultNamespace is the metric name prefix unless WithNamespace sets
// another.
const DefaultNamespace = "rampmeter"

// DefaultLatencyBuckets are the upper bounds, in seconds, of the store
// latency histogram's buckets: 100 µs to 1 s, finer around the default
// store timeout (50 ms), where calls to a sick store pile up.
var DefaultLatencyBuckets = []float64{
	0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.04, 0.05, 0.075, 0.1, 0.25, 0.5, 1,
}

// Bypass causes (label "cause" of bypasses_total) are hooks.CauseStore and
// hooks.CauseKey.

// Request outcomes (label "outcome" of requests_total).
const (
	OutcomeAllowed  = "allowed"
	OutcomeLimited  = "limited"
	OutcomeTooLarge = "too_large"
	OutcomeBypassed = "bypassed"
	// OutcomeShadow and OutcomeUncharged are decision outcomes only.
	OutcomeShadow    = "shadow"
	OutcomeUncharged = "uncharged"
)

// Option configures New.
type Option func(*config) error

type config struct {
	namespace string
	subsystem string
	buckets   []float64
	labels    prometheus.Labels
}

// WithNamespace sets the first part of every metric name (default
// DefaultNamespace). It must be a valid metric name part ([a-zA-Z_:]
// [a-zA-Z0-9_:]*); the empty string leaves the names without a namespace.
func WithNamespace(ns string) Option {
	return func(c *config) error {
		if ns != "" && !validName(ns) {
			return fmt.Errorf("%w: namespace %q", ErrInvalidOption, ns)
		}
		c.namespace = ns
		return nil
	}
}

// WithSubsystem sets a middle part of every metric name
// (rampmeter_<subsystem>_requests_total), for example to tell several
// Limiters apart; the default is none. It must be a valid metric name part
// or empty. WithConstLabels is the other way to tell Limiters apart.
func WithSubsystem(s string) Option {
	return func(c *config) error {
		if s != "" && !validName(s) {
			return fmt.Errorf("%w: subsystem %q", ErrInvalidOption, s)
		}
		c.subsystem = s
		return nil
	}
}

// WithLatencyBuckets sets the upper bounds, in seconds, of the store
// latency histogram's buckets (default DefaultLatencyBuckets). They must
// be strictly increasing and positive; at least one is required.
func WithLatencyBuckets(b ...float64) Option {
	return func(c *config) error {
		if len(b) == 0 {
			return fmt.Errorf("%w: no latency buckets", ErrInvalidOption)
		}
		for i, v := range b {
			if !(v > 0) || i > 0 && !(v > b[i-1]) {
				return fmt.Errorf("%w: latency buckets must be positive and strictly increasing, got %v", ErrInvalidOption, b)
			}
		}
		c.buckets = append([]float64(nil), b...)
		return nil
	}
}

// WithConstLabels adds labels with fixed values to every metric, for
// example {"limiter": "public-api"}. Names must not collide with the
// metrics' own labels (outcome, cause, policy, kind, op, result, circuit).
func WithConstLabels(l prometheus.Labels) Option {
	return func(c *config) error {
		for k := range l {
			switch k {
			case "outcome", "cause", "policy", "kind", "op", "result", "circuit":
				return fmt.Errorf("%w: constant label %q collides with a metric label", ErrInvalidOption, k)
			}
			if !validName(k) || k[0] == ':' {
				return fmt.Errorf("%w: label name %q", ErrInvalidOption, k)
			}
		}
		c.labels = make(prometheus.Labels, len(l))
		for k, v := range l {
			c.labels[k] = v
		}
		return nil
	}
}

func validName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == ':' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return s != ""
}

// Metrics holds a Limiter's metrics. It is a prometheus.Collector and safe
// for concurrent use. One Metrics may serve several Limiters (their counts
// add up) unless they should be told apart (WithConstLabels).
type Metrics struct {
	requests  *prometheus.CounterVec
	bypasses  *prometheus.CounterVec
	decisions *prometheus.CounterVec
	storeErrs *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	circuit   *prometheus.GaugeVec

	// Pre-resolved children, so the hot path does no label lookup.
	reqAllowed, reqLimited, reqTooLarge, reqBypassed prometheus.Counter
	bypassStore, bypassKey                           prometheus.Counter
	errTimeout, errCanceled, errOther                prometheus.Counter
	takeOK, takeErr, adjustOK, adjustErr             prometheus.Observer

	policies sync.Map // policy name -> *policyCounters

	now func() time.Time // time.Now; a fake clock in tests
}

// policyCounters are one policy's decisions_total children, by outcome.
type policyCounters struct {
	allowed, limited, tooLarge, shadow, uncharged prometheus.Counter
}

var _ prometheus.Collector = (*Metrics)(nil)

// New returns Metrics registered with reg, or unregistered when reg is
// nil. Errors: an invalid Option (wrapping ErrInvalidOption), or reg's
// error (for example prometheus.AlreadyRegisteredError when another
// Metrics with the same names is registered; use WithNamespace,
// WithSubsystem or WithConstLabels to tell them apart).
func New(reg prometheus.Registerer, opts ...Option) (*Metrics, error) {
	c := config{namespace: DefaultNamespace, buckets: DefaultLatencyBuckets}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil Option", ErrInvalidOption)
		}
		if err := o(&c); err != nil {
			return nil, err
		}
	}
	opt := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: c.namespace, Subsystem: c.subsystem, Name: name, Help: help, ConstLabels: c.labels}
	}
	m := &Metrics{now: time.Now}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts(opt("requests_total",
		"Requests (and Limiter.Take calls) by outcome: allowed, limited, too_large, bypassed.")), []string{"outcome"})
	m.bypasses = prometheus.NewCounterVec(prometheus.CounterOpts(opt("bypasses_total",
		"Requests let through without a decision, by cause: store (the store failed, FailOpen), key (the key function failed, WithSkipOnKeyError).")),
		[]string{"cause"})
	m.decisions = prometheus.NewCounterVec(prometheus.CounterOpts(opt("decisions_total",
		"Verdicts of each limit (policy) on decided requests: allowed, limited, too_large, shadow, uncharged.")),
		[]string{"policy", "outcome"})
	m.storeErrs = prometheus.NewCounterVec(prometheus.CounterOpts(opt("store_errors_total",
		"Failed store calls by kind: timeout, canceled, other.")), []string{"kind"})
	ho := opt("store_duration_seconds", "Duration of store calls (Take, Adjust), successful or not.")
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ho.Namespace, Subsystem: ho.Subsystem,
		Name: ho.Name, Help: ho.Help, ConstLabels: ho.ConstLabels, Buckets: c.buckets}, []string{"op", "result"})
	m.circuit = prometheus.NewGaugeVec(prometheus.GaugeOpts(opt("circuit_open",
		"1 while the named circuit breaker is open (the store is not called), 0 otherwise.")), []string{"circuit"})

	m.reqAllowed = m.requests.WithLabelValues(OutcomeAllowed)
	m.reqLimited = m.requests.WithLabelValues(OutcomeLimited)
	m.reqTooLarge = m.requests.WithLabelValues(OutcomeTooLarge)
	m.reqBypassed = m.requests.WithLabelValues(OutcomeBypassed)
	m.bypassStore = m.bypasses.WithLabelValues(hooks.CauseStore)
	m.bypassKey = m.bypasses.WithLabelValues(hooks.CauseKey)
	m.errTimeout = m.storeErrs.WithLabelValues(hooks.KindTimeout)
	m.errCanceled = m.storeErrs.WithLabelValues(hooks.KindCanceled)
	m.errOther = m.storeErrs.WithLabelValues(hooks.KindOther)
	m.takeOK = m.latency.WithLabelValues("take", "ok")
	m.takeErr = m.latency.WithLabelValues("take", "error")
	m.adjustOK = m.latency.WithLabelValues("adjust", "ok")
	m.adjustErr = m.latency.WithLabelValues("adjust", "error")

	if reg != nil {
		if err := reg.Register(m); err != nil {
			return nil, fmt.Errorf("ratelimit/metrics/prometheus: register: %w", err)
		}
	}
	return m, nil
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.requests.Describe(ch)
	m.bypasses.Describe(ch)
	m.decisions.Describe(ch)
	m.storeErrs.Describe(ch)
	m.latency.Describe(ch)
	m.circuit.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.requests.Collect(ch)
	m.bypasses.Collect(ch)
	m.decisions.Collect(ch)
	m.storeErrs.Collect(ch)
	m.latency.Collect(ch)
	m.circuit.Collect(ch)
}

// Hooks returns the ratelimit.Hooks that update requests_total,
// bypasses_total, decisions_total, store_errors_total and
// store_duration_seconds (see the package documentation for the last
// with InstrumentStore). Combine them with other hooks with hooks.Join.
func (m *Metrics) Hooks() ratelimit.Hooks {
	return ratelimit.Hooks{
		OnDecision:   m.onDecision,
		OnStoreError: m.onStoreError,
		OnBypass:     m.onBypass,
		OnStoreCall:  m.onStoreCall,
	}
}

func (m *Metrics) onBypass(_ context.Context, reason error) {
	m.reqBypassed.Inc()
	if hooks.BypassCause(reason) == hooks.CauseStore {
		m.bypassStore.Inc()
	} else {
		m.bypassKey.Inc()
	}
}

func (m *Metrics) onStoreCall(_ context.Context, call ratelimit.StoreCall) {
	if m.wraps(call.Store) {
		return // the wrapper observes it
	}
	var ok, failed prometheus.Observer
	switch call.Op {
	case ratelimit.OpTake:
		ok, failed = m.takeOK, m.takeErr
	case ratelimit.OpAdjust:
		ok, failed = m.adjustOK, m.adjustErr
	default:
		return // no other Store method exists
	}
	observe(ok, failed, call.Err, call.Duration)
}

func (m *Metrics) onDecision(_ context.Context, res ratelimit.Result) {
	switch {
	case res.Allowed:
		m.reqAllowed.Inc()
	case res.RetryAfter == ratelimit.RetryNever:
		m.reqTooLarge.Inc()
	default:
		m.reqLimited.Inc()
	}
	for i := range res.Decisions {
		d := &res.Decisions[i]
		if d.Limit == nil {
			continue
		}
		pc := m.policy(d.Limit.Name())
		switch {
		case d.Allowed && res.Allowed:
			pc.allowed.Inc()
		case d.Allowed:
			pc.uncharged.Inc()
		case d.Limit.IsShadow():
			pc.shadow.Inc()
		case d.Never():
			pc.tooLarge.Inc()
		default:
			pc.limited.Inc()
		}
	}
}

// policy returns the counters of the named policy, creating them on first
// use.
func (m *Metrics) policy(name string) *policyCounters {
	if pc, ok := m.policies.Load(name); ok {
		return pc.(*policyCounters)
	}
	pc := &policyCounters{
		allowed:   m.decisions.WithLabelValues(name, OutcomeAllowed),
		limited:   m.decisions.WithLabelValues(name, OutcomeLimited),
		tooLarge:  m.decisions.WithLabelValues(name, OutcomeTooLarge),
		shadow:    m.decisions.WithLabelValues(name, OutcomeShadow),
		uncharged: m.decisions.WithLabelValues(name, OutcomeUncharged),
	}
	actual, _ := m.policies.LoadOrStore(name, pc)
	return actual.(*policyCounters)
}

func (m *Metrics) onStoreError(_ context.Context, err error) {
	switch hooks.ErrorKind(err) {
	case hooks.KindTimeout:
		m.errTimeout.Inc()
	case hooks.KindCanceled:
		m.errCanceled.Inc()
	default:
		m.errOther.Inc()
	}
}

// SetCircuitState sets circuit_open{circuit=name} to 1 when open, else 0.
// Call it from a circuit breaker's state-change callback, with open true
// whenever the breaker keeps calls from the store: for store/resilient,
//
//	resilient.WithHooks(resilient.Hooks{OnCircuitChange: func(_, to resilient.State) {
//		m.SetCircuitState("redis", to != resilient.Closed) // half-open lets only its probe through
//	}})
//
// name identifies the breaker, e.g. the store's name; keep the set of names
// bounded.
func (m *Metrics) SetCircuitState(name string, open bool) {
	v := 0.0
	if open {
		v = 1
	}
	m.circuit.WithLabelValues(name).Set(v)
}

// InstrumentStore returns a Store that calls s and records the duration
// of every Take and Adjust in store_duration_seconds. It is for a store
// called without a Limiter (or also by other code): a Limiter's Hooks
// already measure every call the Limiter makes. A Limiter may still be
// given the wrapper, directly or inside stores that expose what they wrap
// with an Unwrap() ratelimit.Store method (store/resilient does): its
// Hooks then leave the calls to the wrapper, so no call counts twice (as
// long as the Hooks and the wrapper come from the same Metrics). The
// wrapper has the Store methods and Unwrap, which returns s: keep s to
// call anything else on it (Close, Key).
//
// The wrapper forwards the optional interfaces the Limiter's hot path
// uses: it is a ratelimit.SingleTaker exactly when s is (its TakeOne
// calls and measures s's, as Take does), a ratelimit.PairTaker exactly
// when s is (its TakeTwo likewise), a ratelimit.SingleAdjuster exactly
// when s is (its AdjustOne calls and measures s's, as Adjust does), and
// it is as NonBlocking as s (measuring a call waits for nothing).
func (m *Metrics) InstrumentStore(s ratelimit.Store) ratelimit.Store {
	i := &instrumented{s: s, m: m}
	one, isOne := s.(ratelimit.SingleTaker)
	pair, isPair := s.(ratelimit.PairTaker)
	adj, isAdj := s.(ratelimit.SingleAdjuster)
	o, p, a := withOne{i, one}, withPair{i, pair}, withAdjustOne{i, adj}
	switch {
	case isOne && isPair && isAdj:
		return &instrumentedOnePairAdjust{i, o, p, a}
	case isOne && isPair:
		return &instrumentedOnePair{i, o, p}
	case isOne && isAdj:
		return &instrumentedOneAdjust{i, o, a}
	case isPair && isAdj:
		return &instrumentedPairAdjust{i, p, a}
	case isOne:
		return &instrumentedOne{i, o}
	case isPair:
		return &instrumentedPair{i, p}
	case isAdj:
		return &instrumentedAdjust{i, a}
	}
	return i
}

// maxUnwrap bounds the walk down a chain of wrapping stores, should one
// wrap itself.
const maxUnwrap = 32

// wraps reports whether s is, or wraps (through Unwrap methods), a
// wrapper InstrumentStore of m returned.
func (m *Metrics) wraps(s ratelimit.Store) bool {
	for range maxUnwrap {
		if w, ok := s.(interface{ base() *instrumented }); ok && w.base().m == m {
			return true
		}
		u, ok := s.(interface{ Unwrap() ratelimit.Store })
		if !ok {
			return false
		}
		s = u.Unwrap()
	}
	return false
}

type instrumented struct {
	s ratelimit.Store
	m *Metrics
}

func (i *instrumented) Take(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	start := i.m.now()
	err := i.s.Take(ctx, reqs, out)
	observe(i.m.takeOK, i.m.takeErr, err, i.m.now().Sub(start))
	return err
}

func (i *instrumented) Adjust(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	start := i.m.now()
	err := i.s.Adjust(ctx, reqs, out)
	observe(i.m.adjustOK, i.m.adjustErr, err, i.m.now().Sub(start))
	return err
}

func observe(ok, failed prometheus.Observer, err error, d time.Duration) {
	if err != nil {
		failed.Observe(d.Seconds())
		return
	}
	ok.Observe(d.Seconds())
}

// Unwrap returns the store the wrapper measures.
func (i *instrumented) Unwrap() ratelimit.Store { return i.s }

// NonBlocking implements ratelimit.NonBlocking: the answer of the store
// measured (false if it does not say), since measuring waits for nothing.
func (i *instrumented) NonBlocking() bool {
	nb, ok := i.s.(ratelimit.NonBlocking)
	return ok && nb.NonBlocking()
}

// base returns the wrapper's own fields: every variant of the wrapper
// has it, so that wraps recognises them all.
func (i *instrumented) base() *instrumented { return i }

// withOne gives a wrapper the method TakeOne: it calls the store's
// TakeOne (one, the store measured as a SingleTaker) and records its
// duration as a Take's.
type withOne struct {
	i   *instrumented
	one ratelimit.SingleTaker
}

// TakeOne implements ratelimit.SingleTaker: it calls the store's TakeOne
// and records its duration as a Take's.
func (w withOne) TakeOne(ctx context.Context, r ratelimit.Request) (allowed bool, remaining int64, reset, retryAfter, delay time.Duration, at int64, err error) {
	start := w.i.m.now()
	allowed, remaining, reset, retryAfter, delay, at, err = w.one.TakeOne(ctx, r)
	observe(w.i.m.takeOK, w.i.m.takeErr, err, w.i.m.now().Sub(start))
	return allowed, remaining, reset, retryAfter, delay, at, err
}

// withPair gives a wrapper the method TakeTwo: it calls the store's
// TakeTwo (pair, the store measured as a PairTaker) and records its
// duration as a Take's.
type withPair struct {
	i    *instrumented
	pair ratelimit.PairTaker
}

// TakeTwo implements ratelimit.PairTaker: it calls the store's TakeTwo
// and records its duration as a Take's.
func (w withPair) TakeTwo(ctx context.Context, keyA string, limitA *ratelimit.Limit, costA int64, keyB string, limitB *ratelimit.Limit, costB int64) (allowedA bool, remainingA int64, resetA, retryAfterA, delayA time.Duration, atA int64, allowedB bool, remainingB int64, resetB, retryAfterB, delayB time.Duration, atB int64, err error) {
	start := w.i.m.now()
	allowedA, remainingA, resetA, retryAfterA, delayA, atA,
		allowedB, remainingB, resetB, retryAfterB, delayB, atB, err = w.pair.TakeTwo(ctx, keyA, limitA, costA, keyB, limitB, costB)
	observe(w.i.m.takeOK, w.i.m.takeErr, err, w.i.m.now().Sub(start))
	return allowedA, remainingA, resetA, retryAfterA, delayA, atA,
		allowedB, remainingB, resetB, retryAfterB, delayB, atB, err
}

// withAdjustOne gives a wrapper the method AdjustOne: it calls the
// store's AdjustOne (adj, the store measured as a SingleAdjuster) and
// records its duration as an Adjust's.
type withAdjustOne struct {
	i   *instrumented
	adj ratelimit.SingleAdjuster
}

// AdjustOne implements ratelimit.SingleAdjuster: it calls the store's
// AdjustOne and records its duration as an Adjust's.
func (w withAdjustOne) AdjustOne(ctx context.Context, r ratelimit.Request) (allowed bool, remaining int64, reset, retryAfter, delay time.Duration, at int64, err error) {
	start := w.i.m.now()
	allowed, remaining, reset, retryAfter, delay, at, err = w.adj.AdjustOne(ctx, r)
	observe(w.i.m.adjustOK, w.i.m.adjustErr, err, w.i.m.now().Sub(start))
	return allowed, remaining, reset, retryAfter, delay, at, err
}

// The variants of instrumented for a store that is some of SingleTaker,
// PairTaker and SingleAdjuster: each has the methods of exactly the
// optional interfaces the store measured has (store/memory has all
// three).
type (
	instrumentedOne struct {
		*instrumented
		withOne
	}
	instrumentedPair struct {
		*instrumented
		withPair
	}
	instrumentedAdjust struct {
		*instrumented
		withAdjustOne
	}
	instrumentedOnePair struct {
		*instrumented
		withOne
		withPair
	}
	instrumentedOneAdjust struct {
		*instrumented
		withOne
		withAdjustOne
	}
	instrumentedPairAdjust struct {
		*instrumented
		withPair
		withAdjustOne
	}
	instrumentedOnePairAdjust struct {
		*instrumented
		withOne
		withPair
		withAdjustOne
	}
)
