package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/rampmeter/ratelimit/internal/fieldbuf"
)

// ErrNoReservation is wrapped by ReportUsage's error when ctx does not come
// from a request admitted by Limiter.Handler (or the request has already
// been settled, because its handler returned).
var ErrNoReservation = errors.New("ratelimit: no reservation in context")

// ErrUnknownLimit is wrapped by the errors of ReportUsage and
// Limiter.Adjust for a limit name that no Limiter involved has.
var ErrUnknownLimit = errors.New("ratelimit: unknown limit")

// ReportUsage reports the real usage, in the limit's unit, of the request
// whose context is ctx for the limit named limitName — for example the
// total AI tokens of a completion, once the model has answered. n is the
// request's total, not an increment: a later call replaces an earlier one.
// It must be ≥ 0.
//
// When the handler returns (normally, by panicking, or after its client
// disconnected), the middleware settles the difference with the store in
// one Adjust call: usage above the reserved cost (the cost function's
// estimate, or 1) is charged, possibly leaving the key in debt that its
// next requests wait out; usage below it is refunded. Limits without a
// report keep their reservation, unless the call failed: a response with a
// status outside 2xx (400 for a body the handler refused, 502 for a failed
// upstream call), or a panic before any status, releases the reservation
// of every limit with a cost function, while limits without one
// (requests) still count the request (see WithChargeOnFailure) unless the
// status is a 5xx and WithRefundOnServerError is set. It is safe to call
// from any goroutine until the handler returns; streaming handlers call it
// once the final usage is known, before returning.
//
// When limiters are nested (a global limiter around a per-route one), the
// usage is reported to each of them that has a limit of that name. For a
// request let through without a decision (the store failed under FailOpen,
// or WithSkipOnKeyError) the report is accepted and ignored.
// A report for a concurrency cap (Concurrent) is accepted and ignored: its
// slot is released when the handler returns, whatever the report.
//
// Only a request charged to a set of limits with a cost function or a
// concurrency cap (or by a Limiter with WithRefundOnServerError) has a
// reservation: the middleware
// keeps no per-request state for the others, whose every limit costs 1
// and has nothing to settle, so a report to them is an error (or reaches
// only the enclosing Limiters that have a reservation).
//
// Errors: ErrNoReservation when ctx is not from Limiter.Handler (or its
// Limiters keep no reservation, see above) or the request was already
// settled; ErrUnknownLimit when no limiter of the
// request has the name; ErrInvalidRequest when n < 0.
func ReportUsage(ctx context.Context, limitName string, n int64) error {
	s, _ := ctx.Value(stateKey{}).(*reqState)
	if s == nil {
		return fmt.Errorf("%w: ReportUsage(%q) needs the context of a request admitted by Limiter.Handler", ErrNoReservation, limitName)
	}
	if n < 0 {
		return fmt.Errorf("%w: ReportUsage(%q, %d): usage must be ≥ 0", ErrInvalidRequest, limitName, n)
	}
	found, settled := false, false
	for ; s != nil; s = s.parent {
		if s.set == nil {
			// Let through before its limits were known (a key error
			// under WithSkipOnKeyError with WithLimitsFunc): any name.
			found = found || s.bypassed
			continue
		}
		i := s.set.index(limitName)
		if i < 0 {
			continue
		}
		found = true
		s.mu.Lock()
		if s.settled {
			settled = true
		} else {
			s.reports()[i] = n
		}
		s.mu.Unlock()
	}
	switch {
	case !found:
		return fmt.Errorf("%w: ReportUsage(%q): the request's limiters have no such limit", ErrUnknownLimit, limitName)
	case settled:
		return fmt.Errorf("%w: ReportUsage(%q): the request was already settled (report before the handler returns)", ErrNoReservation, limitName)
	}
	return nil
}

// Reserved returns the cost reserved for the limit named limitName by the
// request whose context is ctx — the estimate its cost function returned
// (clamped by WithReserveClamp), or 1 — and true; or 0 and false when ctx
// is not from a request admitted by Limiter.Handler, no limiter of the
// request has that limit, the request was let through without a decision
// (FailOpen, WithSkipOnKeyError) or has no reservation (see ReportUsage),
// or the limit is a shadow limit that refused it (and so was not charged). With nested limiters the innermost
// one that has the limit answers.
func Reserved(ctx context.Context, limitName string) (int64, bool) {
	for s, _ := ctx.Value(stateKey{}).(*reqState); s != nil; s = s.parent {
		if s.set == nil {
			continue
		}
		if i := s.set.index(limitName); i >= 0 {
			if s.bypassed || !s.out[i].Allowed {
				return 0, false
			}
			return s.costs[i], true
		}
	}
	return 0, false
}

// stateKey is the context key of a request's *reqState.
type stateKey struct{}

// reqState is one admitted request's reservation and usage reports. It is
// the context the handler sees: embedding the request's context and
// answering Value(stateKey{}) itself saves the allocation of a
// context.WithValue. It also holds the handler's copy of the request
// (withRequest) and the context of the store calls that settle it
// (detached), and, for a set of at most four limits, its per-limit
// slices point into arrays of the same allocation (newState), so that a
// request costs one allocation here.
type reqState struct {
	context.Context

	lim    *Limiter
	set    *PolicySet // the request's limits; nil if unknown (bypassed)
	parent *reqState  // an enclosing limiter's state, for ReportUsage
	key    string

	// rw wraps the handler's ResponseWriter when watch is set, so that
	// settle can release the reservation of a failed call (not 2xx).
	rw statusWriter

	bypassed bool // no reservation: nothing to settle
	watch    bool // rw wraps the handler's writer
	returned bool // the handler returned (rather than panicking)
	nested   bool // an inner limiter's state has this one as parent; under mu
	settled  bool // under mu

	// earlyReleased has bit i set when limit i's charge was released at
	// the failing status (releaseEarly): settle then counts it as 0.
	earlyReleased uint64

	mu sync.Mutex

	// costs holds per limit the reserved cost, and after them, up to its
	// capacity, the usage reported per limit (reports; -1: not reported;
	// under mu): one slice for both, to keep the state in its size class.
	costs []int64
	out   []Decision // per limit: Result.Decisions (may be kept by hooks)

	// fields holds the values of the response's rate-limit fields when a
	// writer beside the style can put them there (styleWriter.wantsBuf);
	// else nil. It is in the same allocation (newState).
	fields *fieldbuf.Buf

	req http.Request // the handler's request (withRequest)
}

// statesOf2 and statesOf4 are a reqState with the storage of its
// per-limit slices, for sets of up to two and four limits: two sizes, so
// that the common one or two limits do not pay for four.
type (
	statesOf2 struct {
		reqState
		costs [2 * 2]int64 // costs, then reports
		out   [2]Decision
	}
	statesOf4 struct {
		reqState
		costs [2 * 4]int64
		out   [4]Decision
	}
	// statesOf2F and statesOf4F add the response's field storage
	// (reqState.fields).
	statesOf2F struct {
		statesOf2
		fields fieldbuf.Buf
	}
	statesOf4F struct {
		statesOf4
		fields fieldbuf.Buf
	}
)

// reports returns the usage reported per limit (-1: not reported; under
// mu): the second half of costs' array.
func (s *reqState) reports() []int64 {
	n := len(s.costs)
	return s.costs[n : 2*n : 2*n]
}

func (s *reqState) Value(key any) any {
	if key == (stateKey{}) {
		return s
	}
	return s.Context.Value(key)
}

// withRequest returns r with s as its context, as r.WithContext(s)
// would, but as the copy that s holds: no allocation of its own. The
// handler may keep it; it keeps s alive, as the copy's context would.
func (s *reqState) withRequest(r *http.Request) *http.Request {
	s.req = *r.WithContext(s) // inlined: the copy WithContext makes stays on the stack
	return &s.req
}

// detachedContext is a reqState seen as the request's context without
// its cancellation, as context.WithoutCancel(s.Context) makes it, for the
// store calls that settle the request (settle, releaseEarly): a client
// that disconnects must still pay for what it used. It is the reqState
// itself under another type, (*detachedContext)(s), so it costs neither
// an allocation nor a field. Its values are the request context's; it is
// never done and has no deadline.
type detachedContext reqState

func (*detachedContext) Deadline() (time.Time, bool) { return time.Time{}, false }
func (*detachedContext) Done() <-chan struct{}       { return nil }
func (*detachedContext) Err() error                  { return nil }
func (c *detachedContext) Value(key any) any         { return c.Context.Value(key) }
func (c *detachedContext) String() string            { return contextName(c.Context) + ".WithoutCancel" }

// detached returns s as the context of its settlement's store calls.
func (s *reqState) detached() *detachedContext { return (*detachedContext)(s) }

// contextName names ctx as the context package's String methods do.
func contextName(ctx context.Context) string {
	if s, ok := ctx.(fmt.Stringer); ok {
		return s.String()
	}
	return reflect.TypeOf(ctx).String()
}

// newState returns the state of a request for key charged to set (nil:
// not known), whose context is ctx: one allocation for sets of up to four
// limits (the field storage included, when the Limiter's writers want it),
// four or five for more.
func (l *Limiter) newState(ctx context.Context, key string, set *PolicySet) *reqState {
	if !statesMade.Load() {
		statesMade.Store(true)
	}
	n := 0
	if set != nil {
		n = len(set.limits)
	}
	withFields := l.headers.wantsBuf()
	var s *reqState
	switch {
	case n <= 2:
		var v *statesOf2
		if withFields {
			vf := new(statesOf2F)
			v = &vf.statesOf2
			v.fields = &vf.fields
		} else {
			v = new(statesOf2)
		}
		s = &v.reqState
		s.costs, s.out = v.costs[:n:2*n], v.out[:n]
	case n <= 4:
		var v *statesOf4
		if withFields {
			vf := new(statesOf4F)
			v = &vf.statesOf4
			v.fields = &vf.fields
		} else {
			v = new(statesOf4)
		}
		s = &v.reqState
		s.costs, s.out = v.costs[:n:2*n], v.out[:n]
	default:
		s = new(reqState)
		s.costs, s.out = make([]int64, n, 2*n), make([]Decision, n)
		if withFields {
			s.fields = new(fieldbuf.Buf)
		}
	}
	s.Context, s.lim, s.key, s.set = ctx, l, key, set
	s.parent, _ = ctx.Value(stateKey{}).(*reqState)
	if p := s.parent; p != nil {
		p.mu.Lock()
		p.nested = true
		p.mu.Unlock()
	}
	reported := s.reports()
	for i := range reported {
		reported[i] = -1
	}
	return s
}

// releases reports whether the settlement of a request answered with
// status (0: unknown, or the handler returned without writing; 101: a
// hijacked connection) releases the charge of lim when the handler
// reported no usage for it: on a failed call (a status outside 2xx), the
// reservation of a limit with a cost function (unless
// WithChargeOnFailure), and on a 5xx with WithRefundOnServerError the
// unit of a limit without one.
func (l *Limiter) releases(lim *Limit, status int) bool {
	if lim.cost != nil {
		return failedStatus(status) && !l.chargeOnFailure
	}
	return status >= 500 && l.refundOnServerError
}

// failedStatus reports whether a response status (0: unknown) makes the
// call a failed one (outside 2xx; 101 counts as served), whose charges
// releases may release.
func failedStatus(status int) bool { return status >= 300 }

// releaseEarly runs when the handler of an admitted, watched request
// writes its final status, before the status leaves. When that status
// releases charges (a failed call, see releases), the release that settle
// would make once the handler returns is made now, in one Adjust, and the
// rate-limit fields are written again with the released limits' decisions
// from the store's answer (the others keep their admission decisions): a
// 502's x-ratelimit-remaining-tokens then shows the tokens it gave back,
// not the reservation refunded a moment later. Usage reported after the
// status is settled when the handler returns, against what is then still
// charged. If the Adjust fails, nothing changes and settle tries the
// release again. With nested Limiters, only the innermost one rewrites
// (see rewriteFields): an outer Limiter's release happens all the same,
// but its members of the fields keep their admission values. Limits from
// the 65th on are released by settle only.
func (l *Limiter) releaseEarly(s *reqState) {
	status := s.rw.status
	if !failedStatus(status) {
		return // the common case: nothing to release, no lock taken
	}
	s.mu.Lock()
	if s.settled || s.bypassed || s.set == nil {
		s.mu.Unlock()
		return
	}
	var reqs []Request
	var idx []int
	reported := s.reports()
	for i := range reported {
		lim := &s.set.limits[i]
		if i >= 64 || !s.out[i].Allowed || reported[i] >= 0 || s.costs[i] == 0 || !l.releases(lim, status) || holdsSlot(lim) {
			continue
		}
		reqs = append(reqs, Request{Key: s.key, Limit: lim, Cost: -s.costs[i], At: s.out[i].At})
		idx = append(idx, i)
		s.earlyReleased |= 1 << i
	}
	nested := s.nested
	s.mu.Unlock()
	if len(reqs) == 0 {
		return
	}
	out := make([]Decision, len(reqs))
	if l.call(s.detached(), OpAdjust, reqs, out) != nil {
		s.mu.Lock()
		for _, i := range idx {
			s.earlyReleased &^= 1 << i
		}
		s.mu.Unlock()
		return // counted and reported by call
	}
	l.stats.released.Add(1)
	l.stats.settled.Add(1)
	if nested {
		return // an inner Limiter's fields come last: leave them
	}
	ds := append([]Decision(nil), s.out...) // s.out may be kept by hooks
	for j, i := range idx {
		ds[i] = out[j]
	}
	l.rewriteFields(s, resultOf(s.out), resultOf(ds))
}

// rewriteFields replaces, in the response of s (whose Limiter is the
// innermost the request passed), the rate-limit fields written at
// admission from was with those of now: this Limiter's members of
// RateLimit (the end of the joined list; RateLimit-Policy does not
// change), X-RateLimit-* rebuilt across the Limiters of the request as
// at admission (outermost first, the enclosing ones from their admission
// decisions), and the other writers' fields (which set, not add).
func (l *Limiter) rewriteFields(s *reqState, was, now Result) {
	h, w := s.rw.Header(), l.headers
	if w.style&HeadersIETF != 0 && s.set.policy != "" {
		shadow := w.style&HeadersShadow != 0
		old := string(appendRateLimit(nil, &was, shadow))
		if v := h["Ratelimit"]; len(v) == 1 && strings.HasSuffix(v[0], old) {
			h["Ratelimit"] = []string{v[0][:len(v[0])-len(old)] + string(appendRateLimit(nil, &now, shadow))}
		}
	}
	if w.style&HeadersXRateLimit != 0 {
		var chain []*reqState
		for p := s.parent; p != nil; p = p.parent {
			chain = append(chain, p)
		}
		delete(h, "X-Ratelimit-Limit")
		delete(h, "X-Ratelimit-Remaining")
		delete(h, "X-Ratelimit-Reset")
		for i := len(chain) - 1; i >= 0; i-- {
			if p := chain[i]; p.set != nil && !p.bypassed && p.lim.headers.style&HeadersXRateLimit != 0 {
				pr := resultOf(p.out)
				writeXRateLimit(h, &pr)
			}
		}
		writeXRateLimit(h, &now)
	}
	for _, o := range w.others {
		o.WriteHeaders(h, now)
	}
}

// settle charges or refunds the difference between the reported usage and
// the reservation, once. The store call gets its own deadline and ignores
// the cancellation of the request's context: a client that disconnects
// must still pay for the tokens it consumed.
//
// A failed call — the response status is outside 2xx (3xx, 4xx, 5xx; a
// hijacked connection's 101 counts as served), or the handler panicked
// before writing one — releases the reservation of every limit with a cost
// function that got no report (unless WithChargeOnFailure): the estimate
// is refunded in full. Limits without a cost function keep their charge (a
// failed request is still a request) unless the status is a 5xx and
// WithRefundOnServerError is set, and reported usage is settled as
// reported.
func (l *Limiter) settle(s *reqState) {
	s.mu.Lock()
	if s.settled {
		s.mu.Unlock()
		return
	}
	s.settled = true
	status := 0 // unknown: nothing is released
	if s.watch {
		status = s.rw.status
		if status == 0 && !s.returned {
			status = http.StatusInternalServerError // panicked before answering
		}
		// 0: the handler returned without writing (200); 101: a hijacked
		// connection; else a final status ≥ 200.
	}
	// The Adjust requests: in this frame for up to inlineScratch, then
	// copied to the Limiter's scratch (a slice through the Store
	// interface escapes); their own slice for more.
	var small [inlineScratch]Request
	var large []Request
	reported := s.reports()
	if len(reported) > inlineScratch {
		large = make([]Request, len(reported))
	}
	n, released := 0, false
	for i, rep := range reported {
		if !s.out[i].Allowed {
			continue // not charged: a shadow limit that refused
		}
		lim := &s.set.limits[i]
		held := s.costs[i] // what the store holds for the request
		if i < 64 && s.earlyReleased&(1<<i) != 0 {
			held = 0
		}
		if holdsSlot(lim) {
			rep = 0 // the slot returns when the handler does: see concurrency.go
		} else if rep < 0 && l.releases(lim, status) {
			rep, released = 0, released || held != 0
		}
		if rep >= 0 && rep != held {
			// At: when the reservation was charged, so that window
			// algorithms settle in the window that was charged.
			r := Request{Key: s.key, Limit: lim, Cost: rep - held, At: s.out[i].At}
			if large != nil {
				large[n] = r
			} else {
				small[n] = r
			}
			n++
		}
	}
	s.mu.Unlock()
	if n == 0 || s.bypassed {
		return
	}
	if released {
		l.stats.released.Add(1)
	}
	// The decisions are not read: the Limiter's scratch takes them, or
	// for one request the store's SingleAdjuster returns them as values.
	var err error
	if l.adjustOne != nil && n == 1 && large == nil {
		err = l.callAdjustOne(s.detached(), small[0])
	} else if large == nil {
		sc := l.getScratch()
		copy(sc.reqs[:], small[:n])
		err = l.call(s.detached(), OpAdjust, sc.reqs[:n], sc.out[:n])
		l.putScratch(sc, n)
	} else {
		err = l.call(s.detached(), OpAdjust, large[:n], make([]Decision, n))
	}
	if err != nil {
		return // counted and reported by call
	}
	if s.earlyReleased == 0 { // else counted by releaseEarly
		l.stats.settled.Add(1)
	}
}
