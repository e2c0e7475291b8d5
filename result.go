package ratelimit

import "time"

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
	// is one second. The Result that the middleware gives a RejectHandler
	// and the HeaderWriters holds the wait the client is told: this one
	// plus the jitter of WithRetryJitter.
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
func (r Result) ShadowLimited() bool { return shadowLimited(r.Decisions) }

// shadowLimited is ShadowLimited for the decisions ds, without a copy of
// a Result.
func shadowLimited(ds []Decision) bool {
	for i := range ds {
		if d := &ds[i]; !d.Allowed && d.Limit != nil && d.Limit.shadow {
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

// resultOne is resultOf for the one decision ds[0], small enough to be
// inlined: the Result is then built where the caller holds it, not
// copied out of a call.
func resultOne(ds []Decision) Result {
	d := &ds[0]
	switch {
	case d.Limit != nil && d.Limit.shadow:
		return Result{Allowed: true, Decisions: ds}
	case d.Allowed:
		return Result{Allowed: true, Decisions: ds, Delay: max(0, d.Delay)}
	case d.Never():
		return Result{Decisions: ds, RetryAfter: RetryNever}
	}
	return Result{Decisions: ds, RetryAfter: max(0, d.RetryAfter)}
}

// detached returns a copy of *r with its own copy of the decisions, for
// code that may keep them (hooks, HeaderWriters, RejectHandlers): r's may
// live in the frame of Limiter.Take's caller or of the middleware.
func (r *Result) detached() Result {
	return Result{Allowed: r.Allowed, Decisions: append([]Decision(nil), r.Decisions...),
		RetryAfter: r.RetryAfter, Delay: r.Delay, Bypassed: r.Bypassed}
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
	// binding limit's Limit.WithRefusalStatus status (402 for a spent
	// budget, say), the status of WithQuotaExhaustedStatus (a long quota
	// is exhausted) or
	// 503 Service Unavailable (the store failed under FailClosed).
	Status int
	// Costs holds the request's cost for each limit, aligned with
	// Decisions; nil for a store failure.
	Costs []int64
	// Err is the store error for a 503, nil otherwise.
	Err error
}
