package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Store calls: every call of the Limiter to its Store, with the store
// timeout, the classification of failures, and Limiter.Take and Adjust.

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
		err = l.storeError(ctx, tctx, op, err)
	} else if a := l.alert; a != nil && a.open.Load() {
		a.log(ctx, a.succeeded(l.now()))
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
		return ErrStoreTimeout.Error() + " after " + e.timeout.String() + ": " + strings.TrimPrefix(e.err.Error(), errPrefix)
	}
	return "ratelimit: store: " + strings.TrimPrefix(e.err.Error(), errPrefix)
}

func (e *storeCallError) Unwrap() []error {
	if e.timeout > 0 {
		return []error{ErrStoreFailed, ErrStoreTimeout, e.err}
	}
	return []error{ErrStoreFailed, e.err}
}

// storeError classifies a failed store call of op made with tctx, a child
// of ctx with the store timeout, and counts and reports it (Stats, Hooks,
// the store-failure alert) unless ctx itself had ended (then the error
// wraps ctx's error, and not ErrStoreFailed).
func (l *Limiter) storeError(ctx, tctx context.Context, op StoreOp, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		msg := "ratelimit: store call abandoned: " + strings.TrimPrefix(err.Error(), errPrefix)
		if !errors.Is(err, cerr) {
			return &wrappedError{msg: msg + ": " + cerr.Error(), errs: []error{err, cerr}}
		}
		return &wrappedError{msg: msg, errs: []error{err}}
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
	if l.alert != nil {
		l.alert.log(ctx, l.alert.failed(l.now(), op, e))
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
// than 0 or len(Limits()), a negative cost — return an error wrapping
// ErrInvalidRequest and the zero Result. When the store fails, err is the
// store error and res is what the failure mode decides: FailOpen gives
// Allowed and Bypassed; FailClosed a refusal with a RetryAfter of one
// second. When ctx ends first, err wraps ctx's error and res is the zero
// Result.
//
// A slot taken on a concurrency cap (Concurrent) is held until the cap's
// maximum hold ends: Take returns no handle to release it early. Use
// Reserve, whose Reservation.Release gives it back.
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
		if l.alert != nil {
			l.alert.decided()
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
