package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

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
//     failed call (a status outside 2xx, or a panic before any status)
//     without a report releases its estimates (see WithChargeOnFailure
//     and WithRefundOnServerError), as soon as the handler writes the
//     failing status when it does, so that the response's rate-limit
//     fields show the state after the release. With a
//     LeakyBucket limit, next runs only once the request's slot comes
//     (Result.Delay); if the request's context ends while it waits, next
//     never runs, its reservation is refunded and the answer is 503 with
//     Retry-After the Delay it was given, in whole seconds rounded up.
//   - Refused: the rate-limit fields are set and the RejectHandler answers:
//     by default 429 with Retry-After, the wait plus jitter
//     (WithRetryJitter), in whole seconds rounded up (or the WithQuotaExhaustedStatus
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
		next.ServeHTTP(w, s.withRequest(r))
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
		set = l.bind(set)
	}
	if !l.needsState(set) {
		l.serveLight(w, r, next, key, set)
		return
	}
	s := l.newState(ctx, key, set)
	for i := range set.limits {
		lim := &set.limits[i]
		cost := int64(1)
		if fn := lim.cost; fn != nil {
			if cost, err = fn(r); err == nil && cost < 0 {
				err = &StatusError{Code: http.StatusInternalServerError, Message: "The server could not compute the cost of this request.",
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
	}

	res, err := l.decide(ctx, key, set.limits, s.costs, s.out)
	if err != nil {
		if l.storeFailed(w, r, err) {
			s.bypassed = true
			next.ServeHTTP(w, s.withRequest(r))
		}
		return
	}

	overWait := res.Allowed && l.maxWaitSet && res.Delay > l.maxWait
	if overWait {
		res = l.refundOverMaxWait(ctx, key, s.costs, res)
	}
	l.record(ctx, &res)

	if !res.Allowed {
		// What the client is told: the true wait plus jitter, from here on.
		res.RetryAfter = l.jitter.apply(res.RetryAfter)
	}
	if overWait {
		l.headers.writeBuf(w.Header(), overWaitFields(&res), set.policy, s.fields)
	} else {
		l.headers.writeBuf(w.Header(), res, set.policy, s.fields)
	}
	if !res.Allowed {
		l.refuse(w, r, &res, overWait, s.costs)
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
		clear(s.reports())
		s.mu.Unlock()
		// Its slot was Delay away: a retry should not come sooner.
		w.Header().Set("Retry-After", formatSeconds(retryAfterSeconds(res.Delay)))
		writeEnded(w)
		return
	}
	if set.hasCost && !l.chargeOnFailure || l.refundOnServerError {
		// Watch the status, to release the reservation of a failed call.
		s.rw.ResponseWriter, s.rw.state, s.watch = w, s, true
		w = &s.rw
	}
	next.ServeHTTP(w, s.withRequest(r))
	s.returned = true
}

// needsState reports whether a request charged to set needs its reqState:
// when a limit has a cost function (ReportUsage, Reserved, the release of
// a failed call) or is a concurrency cap (its slot returns when the
// handler does), or a failed call's status may refund every limit
// (WithRefundOnServerError). Every other request takes serveLight, which
// allocates no state, does not copy the request and watches no status.
func (l *Limiter) needsState(set *PolicySet) bool {
	return set.hasCost || set.hasSlot || l.refundOnServerError
}

// serveLight is serve for a request whose set needs no state (needsState):
// each limit costs 1, nothing is settled after the handler, and the
// decisions live in this frame. The handler gets r itself.
func (l *Limiter) serveLight(w http.ResponseWriter, r *http.Request, next http.Handler, key string, set *PolicySet) {
	ctx := r.Context()
	if statesMade.Load() {
		l.markNested(ctx)
	}
	var ds [inlineDecisions]Decision
	res, err := l.decide(ctx, key, set.limits, nil, ds[:])
	if err != nil {
		if l.storeFailed(w, r, err) {
			next.ServeHTTP(w, r)
		}
		return
	}

	overWait := res.Allowed && l.maxWaitSet && res.Delay > l.maxWait
	if overWait {
		res = l.refundOverMaxWait(ctx, key, ones(len(set.limits)), res)
	}
	l.record(ctx, &res)

	if !res.Allowed {
		// What the client is told: the true wait plus jitter, from here on.
		res.RetryAfter = l.jitter.apply(res.RetryAfter)
	}
	h := w.Header()
	fields := &res
	if overWait {
		f := overWaitFields(&res)
		fields = &f
	}
	l.headers.writeOwn(h, fields, set.policy, nil)
	if len(l.headers.others) > 0 {
		l.headers.writeOthers(h, fields.detached(), nil)
	}
	if !res.Allowed {
		l.refuse(w, r, &res, overWait, ones(len(set.limits)))
		return
	}
	if res.Delay > 0 && l.sleep(ctx, res.Delay) != nil {
		// The request ended while queued: it never runs, so refund its
		// reservation (it was charged), as settle would.
		l.refundQueued(ctx, key, &res)
		// Its slot was Delay away: a retry should not come sooner.
		w.Header().Set("Retry-After", formatSeconds(retryAfterSeconds(res.Delay)))
		writeEnded(w)
		return
	}
	next.ServeHTTP(w, r)
}

// storeFailed handles a store call of serve or serveLight for r that
// failed with err. When r's context ended (the client left) it answers
// 503 and nothing is counted; otherwise the failure counts as a decision
// for the store-failure alert, and then under FailOpen the request is
// counted as bypassed and storeFailed reports true: the caller runs next
// unlimited. Under FailClosed it answers 503 with Retry-After: 1 through
// the RejectHandler. It reports false whenever it answered.
func (l *Limiter) storeFailed(w http.ResponseWriter, r *http.Request, err error) bool {
	ctx := r.Context()
	if ctx.Err() != nil {
		writeEnded(w)
		return false
	}
	if l.alert != nil {
		l.alert.decided()
	}
	if l.failure == FailOpen {
		l.bypass(ctx, err)
		return true
	}
	w.Header().Set("Retry-After", "1")
	l.reject(w, r, Rejection{Result: Result{RetryAfter: time.Second}, Status: http.StatusServiceUnavailable, Err: err})
	return false
}

// statesMade is set once any Limiter in the process has made a reqState
// (newState): until then no request's context can hold one, and
// serveLight need not look for it.
var statesMade atomic.Bool

// markNested tells the reqState of an enclosing Limiter in ctx, if any,
// that a Limiter inside it wrote fields after its own (see releaseEarly).
func (l *Limiter) markNested(ctx context.Context) {
	if p, _ := ctx.Value(stateKey{}).(*reqState); p != nil {
		p.mu.Lock()
		p.nested = true
		p.mu.Unlock()
	}
}

// refuse answers a refused request: Retry-After unless waiting cannot
// help, then the RejectHandler with the status of the refusal (429 for a
// WithMaxWait refusal, overWait). res's decisions are copied for it.
func (l *Limiter) refuse(w http.ResponseWriter, r *http.Request, res *Result, overWait bool, costs []int64) {
	status := http.StatusTooManyRequests // a WithMaxWait refusal
	if !overWait {
		status = l.refusalStatus(res)
	}
	if !res.tooLarge() {
		w.Header().Set("Retry-After", formatSeconds(retryAfterSeconds(res.RetryAfter)))
	}
	l.reject(w, r, Rejection{Result: res.detached(), Status: status, Costs: append([]int64(nil), costs...)})
}

// refundQueued refunds the unit that each admitting limit of res charged
// to key, for a request of serveLight that ended while queued: settle's
// refund for a request whose state has all its reports cleared.
func (l *Limiter) refundQueued(ctx context.Context, key string, res *Result) {
	reqs := make([]Request, 0, len(res.Decisions))
	for i := range res.Decisions {
		if d := &res.Decisions[i]; d.Allowed {
			reqs = append(reqs, Request{Key: key, Limit: d.Limit, Cost: -1, At: d.At})
		}
	}
	if len(reqs) == 0 {
		return
	}
	if l.call(context.WithoutCancel(ctx), OpAdjust, reqs, make([]Decision, len(reqs))) == nil {
		l.stats.settled.Add(1)
	}
}

// ones returns n costs of 1: the costs of a request of serveLight.
func ones(n int) []int64 {
	c := make([]int64, n)
	for i := range c {
		c[i] = 1
	}
	return c
}

// reserve returns the cost to reserve on l for an estimate of cost, after
// WithReserveClamp.
func (l *Limiter) reserve(lim *Limit, cost int64) int64 {
	if l.clampPPM == 0 || lim.cost == nil || cost > lim.burstOf() {
		return cost
	}
	// Burst × ppm / 10^6 in 128 bits: Burst < 2^51 and ppm ≤ 10^6 < 2^20.
	hi, lo := bits.Mul64(uint64(lim.burstOf()), uint64(l.clampPPM))
	q, _ := bits.Div64(hi, lo, 1_000_000)
	return min(cost, max(1, int64(q)))
}

// refusalStatus returns the status of a refusal res: 413 when it can never
// fit, the WithQuotaExhaustedStatus status when its binding limit is long,
// else 429.
func (l *Limiter) refusalStatus(res *Result) int {
	if res.tooLarge() {
		return http.StatusRequestEntityTooLarge
	}
	if d := res.Binding(); d != nil && d.Limit.refusal != 0 {
		return d.Limit.refusal // WithRefusalStatus
	}
	if l.quotaStatus != 0 {
		if d := res.Binding(); d != nil && d.Limit.Period() >= l.quotaThreshold && !holdsSlot(d.Limit) {
			return l.quotaStatus
		}
	}
	return http.StatusTooManyRequests
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

func formatSeconds(n int64) string { return strconv.FormatInt(n, 10) }
