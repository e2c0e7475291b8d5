package ratelimit

import (
	"context"
	"time"
)

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
	// res.Decisions is the hook's own copy (one allocation per decision:
	// without OnDecision, Limiter.Take and the middleware keep the
	// decisions off the heap).
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
