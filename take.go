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
// Hooks.OnStoreCall. Every store call of the Limiter goes through here or
// through callOne.
func (l *Limiter) call(ctx context.Context, op StoreOp, reqs []Request, out []Decision) error {
	if op == OpTake && l.local != nil && l.tryTake(ctx, reqs, out) {
		return nil
	}
	tctx, cancel := l.storeContext(ctx)
	var start time.Time
	if l.hooks.OnStoreCall != nil {
		start = l.now()
	}
	var err error
	if op == OpTake {
		err = l.store.Take(tctx, reqs, out)
	} else {
		err = l.store.Adjust(tctx, reqs, out)
	}
	return l.called(ctx, tctx, cancel, op, len(reqs), start, err)
}

// callOne is call for a Take of the one request r, through the store's
// SingleTaker (l.one, non-nil), writing the decision to *out: no slice
// crosses the interface, and the Decision's fields come back in registers
// (see SingleTaker). A LocalTaker store is asked first (tryOne).
func (l *Limiter) callOne(ctx context.Context, r Request, out *Decision) error {
	if l.local != nil && l.tryOne(ctx, r, out) {
		return nil
	}
	tctx, cancel := l.storeContext(ctx)
	var start time.Time
	if l.hooks.OnStoreCall != nil {
		start = l.now()
	}
	allowed, remaining, reset, retryAfter, delay, at, err := l.one.TakeOne(tctx, r)
	// Field by field: a field added to Decision must be added here, in
	// tryOne and to SingleTaker and LocalTaker
	// (TestTakeOneDecisionCopiedWhole).
	limit := r.Limit
	if err != nil {
		limit = nil // a failed call decides nothing
	}
	out.Limit, out.Allowed, out.Remaining, out.Reset = limit, allowed, remaining, reset
	out.RetryAfter, out.Delay, out.At = retryAfter, delay, at
	if l.quiet(err, cancel) {
		return nil // what called would do, without its call
	}
	return l.called(ctx, tctx, cancel, OpTake, 1, start, err)
}

// tryTake is call for a Take of reqs by the store's LocalTaker (l.local,
// non-nil) when it decides them at once: it reports whether it did, the
// decisions written to out and the call ended as called ends a successful
// one. It tries only while ctx has not ended: a call on an ended context
// goes to the store's Take, which reports it.
func (l *Limiter) tryTake(ctx context.Context, reqs []Request, out []Decision) bool {
	start, ok := l.tryStart(ctx)
	if !ok {
		return false
	}
	if !l.local.TryTake(reqs, out) {
		return false
	}
	l.tryDone(ctx, len(reqs), start)
	return true
}

// tryStart begins a LocalTaker attempt with ctx: it reports false when
// ctx has ended (the call goes to the store's Take, which reports it),
// and the attempt's start time when Hooks.OnStoreCall is set.
func (l *Limiter) tryStart(ctx context.Context) (start time.Time, ok bool) {
	if ctx.Err() != nil {
		return time.Time{}, false
	}
	if l.hooks.OnStoreCall != nil {
		start = l.now()
	}
	return start, true
}

// tryDone ends an attempt that decided n requests as called ends a
// successful store call.
func (l *Limiter) tryDone(ctx context.Context, n int, start time.Time) {
	if !l.quiet(nil, nil) {
		_ = l.called(ctx, ctx, nil, OpTake, n, start, nil) // nil: no error to classify
	}
}

// tryOne is tryTake for the one request r, through TryTakeOne, writing
// the decision to *out (see callOne).
func (l *Limiter) tryOne(ctx context.Context, r Request, out *Decision) bool {
	start, ok := l.tryStart(ctx)
	if !ok {
		return false
	}
	decided, allowed, remaining, reset, retryAfter, delay, at := l.local.TryTakeOne(r)
	if !decided {
		return false
	}
	out.Limit, out.Allowed, out.Remaining, out.Reset = r.Limit, allowed, remaining, reset
	out.RetryAfter, out.Delay, out.At = retryAfter, delay, at
	l.tryDone(ctx, 1, start)
	return true
}

// callAdjustOne is call for an Adjust of the one request r through the
// store's SingleAdjuster (l.adjustOne, non-nil), for a settlement, which
// reads no decision: no slice crosses the interface and no scratch is
// taken (see SingleAdjuster).
func (l *Limiter) callAdjustOne(ctx context.Context, r Request) error {
	tctx, cancel := l.storeContext(ctx)
	var start time.Time
	if l.hooks.OnStoreCall != nil {
		start = l.now()
	}
	_, _, _, _, _, _, err := l.adjustOne.AdjustOne(tctx, r)
	if l.quiet(err, cancel) {
		return nil // what called would do, without its call
	}
	return l.called(ctx, tctx, cancel, OpAdjust, 1, start, err)
}

// quiet reports whether called would do nothing for a call that returned
// err with cancel (from storeContext): no error, no context to end, no
// OnStoreCall hook and no open store-failure alert to close.
func (l *Limiter) quiet(err error, cancel *deadlineCtx) bool {
	return err == nil && cancel == nil && l.hooks.OnStoreCall == nil && (l.alert == nil || !l.alert.open.Load())
}

// storeContext returns the context of a store call made with ctx, and
// the deadlineCtx whose cancel method ends the call (nil when there is
// none): ctx itself for a store that cannot block (NonBlocking), whose
// calls no deadline could interrupt, else a deadlineCtx with the store
// timeout, which starts the timeout's timer only if the store asks for
// Done.
func (l *Limiter) storeContext(ctx context.Context) (context.Context, *deadlineCtx) {
	if l.nonBlocking {
		return ctx, nil
	}
	c := newDeadlineCtx(ctx, l.timeout)
	return c, c
}

// called ends a store call of op on n requests made with tctx (from
// storeContext(ctx), whose cancel method it calls) since start (read only when
// Hooks.OnStoreCall is set) that returned err: it classifies and reports
// the failure, or closes the store-failure alert's episode, and reports
// the call to Hooks.OnStoreCall.
func (l *Limiter) called(ctx, tctx context.Context, cancel *deadlineCtx, op StoreOp, n int, start time.Time, err error) error {
	hook := l.hooks.OnStoreCall
	var d time.Duration
	if hook != nil {
		d = max(l.now().Sub(start), 0)
	}
	if err != nil {
		err = l.storeError(ctx, tctx, op, err)
	} else if a := l.alert; a != nil && a.open.Load() {
		a.log(ctx, a.succeeded(l.now()))
	}
	if cancel != nil {
		cancel.cancel()
	}
	if hook != nil {
		hook(ctx, StoreCall{Op: op, Requests: n, Duration: d, Err: err, Store: l.store})
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
//
// On store/memory, with up to two limits and no Hooks.OnDecision, Take
// allocates nothing unless the caller keeps the Result beyond its frame
// (then one allocation holds the decisions).
func (l *Limiter) Take(ctx context.Context, key string, costs ...int64) (Result, error) {
	// Small enough to be inlined: the decisions then live in the caller's
	// frame, and cost no allocation unless the caller keeps the Result.
	// (takeInto must not store ds through a pointer, or ds escapes.)
	var ds [inlineDecisions]Decision
	return l.takeInto(ctx, key, costs, ds[:])
}

// takeInto is Take, writing the Result's decisions to ds when it is long
// enough.
func (l *Limiter) takeInto(ctx context.Context, key string, costs []int64, ds []Decision) (Result, error) {
	n := len(l.limits)
	switch {
	case n == 0:
		return Result{}, fmt.Errorf("%w: Take: the Limiter has no WithLimits limits (only WithLimitsFunc)", ErrInvalidRequest)
	case key == "":
		return Result{}, fmt.Errorf("%w: Take: empty key", ErrInvalidRequest)
	case len(costs) != 0 && len(costs) != n:
		return Result{}, fmt.Errorf("%w: Take: %d costs for %d limits", ErrInvalidRequest, len(costs), n)
	}
	for i, cost := range costs {
		if cost < 0 {
			return Result{}, fmt.Errorf("%w: Take: negative cost %d for limit %q", ErrInvalidRequest, cost, l.limits[i].nameOf())
		}
	}
	var res Result
	var err error
	switch {
	case n == 1 && l.one != nil && len(ds) > 0:
		// decide's single path, without a copy of the Result out of it.
		if err = l.callOne(ctx, Request{Key: key, Limit: &l.limits[0], Cost: costOf(costs, 0)}, &ds[0]); err == nil {
			if d := &ds[0]; d.Allowed && l.hooks.OnDecision == nil {
				// The common case, recorded as record would, and the
				// Result built where it is returned (a Result copied
				// out of a variable costs more than building it).
				l.stats.decisions.addAllowed()
				return Result{Allowed: true, Decisions: ds[:1], Delay: delayOf(d)}, nil
			}
			res = resultOne(ds[:1])
		}
	case n == 2 && l.pair != nil && len(ds) >= 2:
		// decide's pair path, likewise.
		if err = l.callTwo(ctx, key, l.limits, costs, ds); err == nil {
			if da, db := &ds[0], &ds[1]; da.Allowed && db.Allowed && l.hooks.OnDecision == nil {
				// Both admit, so no shadow limit refused: what
				// resultOf and record would make of it.
				l.stats.decisions.addAllowed()
				return Result{Allowed: true, Decisions: ds[:2], Delay: max(delayOf(da), delayOf(db))}, nil
			}
			res, err = l.twoResult(ctx, key, l.limits, costs, ds)
		}
	default:
		res, err = l.decide(ctx, key, l.limits, costs, ds)
	}
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
	l.record(ctx, &res)
	return res, nil
}

// inlineDecisions is the number of decisions that Limiter.Take and the
// middleware's light path (serveLight) keep in their caller's frame; a
// request of more limits allocates its decisions.
const inlineDecisions = 2

// decide asks the store to charge limits (all at once) to key, costs[i]
// to limits[i] (1 each when costs is empty), as take does. The Result's
// decisions are written to ds when it is long enough, else to a new
// slice; nothing else escapes: a request of one limit goes through the
// store's SingleTaker when it has one, one of two limits through its
// PairTaker, and otherwise the slices of a store call are the Limiter's
// pooled scratch. (The Result is returned, not written
// through a pointer: a store of ds through a pointer would make it
// escape.)
func (l *Limiter) decide(ctx context.Context, key string, limits []Limit, costs []int64, ds []Decision) (Result, error) {
	n := len(limits)
	if len(ds) < n {
		ds = make([]Decision, n)
	}
	ds = ds[:n]
	if n == 1 && l.one != nil {
		if err := l.callOne(ctx, Request{Key: key, Limit: &limits[0], Cost: costOf(costs, 0)}, &ds[0]); err != nil {
			return Result{}, err
		}
		// A lone shadow limit that refused charged nothing, and nothing
		// else is to be charged: no retake (see take).
		return resultOne(ds), nil
	}
	if n == 2 && l.pair != nil {
		return l.decideTwo(ctx, key, limits, costs, ds)
	}
	var sc *scratch
	var reqs []Request
	var out []Decision
	if n <= inlineScratch {
		sc = l.getScratch()
		reqs, out = sc.reqs[:n], sc.out[:n]
	} else {
		reqs, out = make([]Request, n), make([]Decision, n)
	}
	for i := range reqs {
		reqs[i] = Request{Key: key, Limit: &limits[i], Cost: costOf(costs, i)}
	}
	res, err := l.take(ctx, reqs, out)
	if err == nil {
		copy(ds, out)
		res.Decisions = ds
	}
	if sc != nil {
		l.putScratch(sc, len(reqs))
	}
	return res, err
}

// decideTwo is decide for two limits through the store's PairTaker
// (l.pair, non-nil), writing the decisions to ds (two of them): no slice
// crosses the interface, and no scratch is needed.
func (l *Limiter) decideTwo(ctx context.Context, key string, limits []Limit, costs []int64, ds []Decision) (Result, error) {
	if err := l.callTwo(ctx, key, limits, costs, ds); err != nil {
		return Result{}, err
	}
	return l.twoResult(ctx, key, limits, costs, ds)
}

// callTwo is call for a Take of limits[0] and limits[1] (all or nothing)
// on key, through the store's PairTaker (l.pair, non-nil), writing the
// decisions to ds[0] and ds[1]: no slice crosses the interface. A
// LocalTaker store is asked first (tryTwo).
func (l *Limiter) callTwo(ctx context.Context, key string, limits []Limit, costs []int64, ds []Decision) error {
	if l.local != nil && l.tryTwo(ctx, key, limits, costs, ds) {
		return nil
	}
	tctx, cancel := l.storeContext(ctx)
	var start time.Time
	if l.hooks.OnStoreCall != nil {
		start = l.now()
	}
	la, lb := &limits[0], &limits[1]
	allowedA, remainingA, resetA, retryAfterA, delayA, atA,
		allowedB, remainingB, resetB, retryAfterB, delayB, atB, err := l.pair.TakeTwo(tctx, key, la, costOf(costs, 0), key, lb, costOf(costs, 1))
	if err != nil {
		la, lb = nil, nil // a failed call decides nothing
	}
	// Field by field: a field added to Decision must be added here, in
	// tryTwo and to PairTaker and LocalTaker
	// (TestTakeTwoDecisionsCopiedWhole).
	a, b := &ds[0], &ds[1]
	a.Limit, a.Allowed, a.Remaining, a.Reset, a.RetryAfter, a.Delay, a.At = la, allowedA, remainingA, resetA, retryAfterA, delayA, atA
	b.Limit, b.Allowed, b.Remaining, b.Reset, b.RetryAfter, b.Delay, b.At = lb, allowedB, remainingB, resetB, retryAfterB, delayB, atB
	if l.quiet(err, cancel) {
		return nil // what called would do, without its call
	}
	return l.called(ctx, tctx, cancel, OpTake, 2, start, err)
}

// tryTwo is tryTake for the stack of limits[0] and limits[1] on key,
// through TryTakeTwo, writing the decisions to ds[0] and ds[1] (see
// callTwo).
func (l *Limiter) tryTwo(ctx context.Context, key string, limits []Limit, costs []int64, ds []Decision) bool {
	start, ok := l.tryStart(ctx)
	if !ok {
		return false
	}
	la, lb := &limits[0], &limits[1]
	decided, allowedA, remainingA, resetA, retryAfterA, delayA, atA,
		allowedB, remainingB, resetB, retryAfterB, delayB, atB := l.local.TryTakeTwo(key, la, costOf(costs, 0), key, lb, costOf(costs, 1))
	if !decided {
		return false
	}
	a, b := &ds[0], &ds[1]
	a.Limit, a.Allowed, a.Remaining, a.Reset, a.RetryAfter, a.Delay, a.At = la, allowedA, remainingA, resetA, retryAfterA, delayA, atA
	b.Limit, b.Allowed, b.Remaining, b.Reset, b.RetryAfter, b.Delay, b.At = lb, allowedB, remainingB, resetB, retryAfterB, delayB, atB
	l.tryDone(ctx, 2, start)
	return true
}

// twoResult summarises the decisions ds[0] and ds[1] of callTwo on
// limits[0] and limits[1] (costs as given to it), and when only shadow
// limits refused (so the store charged nothing), takes the others again,
// as take does.
func (l *Limiter) twoResult(ctx context.Context, key string, limits []Limit, costs []int64, ds []Decision) (Result, error) {
	res := resultOf(ds[:2])
	if res.Allowed && res.ShadowLimited() {
		// Only shadow limits refused, so the store charged nothing: as
		// take does, with slices of their own (rare: no scratch kept).
		reqs := []Request{{Key: key, Limit: &limits[0], Cost: costOf(costs, 0)}, {Key: key, Limit: &limits[1], Cost: costOf(costs, 1)}}
		out := []Decision{ds[0], ds[1]}
		if err := l.retakeAdmitting(ctx, reqs, out); err != nil {
			return Result{}, err
		}
		copy(ds, out)
		res = resultOf(ds[:2])
	}
	return res, nil
}

// delayOf is what an allowed decision d adds to a Result's Delay (see
// resultOf): its Delay, or 0 for a shadow limit.
func delayOf(d *Decision) time.Duration {
	if d.Limit != nil && d.Limit.shadow {
		return 0
	}
	return max(0, d.Delay)
}

// costOf is the cost of limit i: costs[i], or 1 when costs is empty.
func costOf(costs []int64, i int) int64 {
	if len(costs) == 0 {
		return 1
	}
	return costs[i]
}

// scratch holds the slices of a store call of up to inlineScratch
// requests (more allocate theirs), so that Limiter.Take and the light middleware path allocate
// none (a slice passed through the Store interface escapes).
type scratch struct {
	reqs [inlineScratch]Request
	out  [inlineScratch]Decision
}

const inlineScratch = 4

// getScratch returns scratch from the Limiter's pool.
func (l *Limiter) getScratch() *scratch {
	if sc, ok := l.scratch.Get().(*scratch); ok {
		return sc
	}
	return new(scratch)
}

// putScratch returns sc to the pool, the keys and limits of its first n
// requests (the ones its user filled) cleared so that the pool keeps
// nothing alive: the pool's scratch has all its requests cleared.
func (l *Limiter) putScratch(sc *scratch, n int) {
	clear(sc.reqs[:n])
	l.scratch.Put(sc)
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
