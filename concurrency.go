package ratelimit

import (
	"context"
	"io"
	"net/http"
	"sync"
)

// The release of concurrency slots (Concurrent): a slot taken with a
// request's admission is given back, once, when the work it admitted ends.
//
//   - Limiter.Handler: when the handler returns or panics (settle, which
//     runs deferred; a client that disconnects ends the handler through
//     its context). A failing status written early releases a token
//     reservation at once (releaseEarly), but not the slot: the handler
//     is still running.
//   - Limiter.Reserve: Reservation.Release, or Reservation.Cancel.
//   - Transport: when the response body is closed, or the round trip
//     fails.
//
// A release is an Adjust of −cost dated at the Take's Decision.At, which
// names the slot: a late release (after the slot's maximum hold) finds
// nothing to release and changes nothing.

// holdsSlot reports whether charges of lim are concurrency slots, given
// back when the work ends rather than settled against reported usage.
func holdsSlot(lim *Limit) bool { return lim.algorithm == Concurrency }

// hasSlots reports whether any admitted decision of ds holds a slot.
func hasSlots(ds []Decision) bool {
	for i := range ds {
		if ds[i].Allowed && ds[i].Limit != nil && holdsSlot(ds[i].Limit) {
			return true
		}
	}
	return false
}

// releaseSlots gives back the slots the admitted decisions ds took for
// key, cost(i) slots for decision i, in one Adjust; it makes no call
// when there are none. The call ignores ctx's cancellation: the work
// has ended, and its slots must return even if its caller has gone.
func (l *Limiter) releaseSlots(ctx context.Context, key string, ds []Decision, cost func(i int) int64) error {
	var reqs []Request
	for i := range ds {
		d := &ds[i]
		if d.Allowed && d.Limit != nil && holdsSlot(d.Limit) && cost(i) > 0 {
			reqs = append(reqs, Request{Key: key, Limit: d.Limit, Cost: -cost(i), At: d.At})
		}
	}
	if len(reqs) == 0 {
		return nil
	}
	return l.call(context.WithoutCancel(ctx), OpAdjust, reqs, make([]Decision, len(reqs)))
}

// Release tells the limiter that the work this reservation admitted has
// ended, and gives back the slots it holds on the Limiter's concurrency
// caps (Concurrent) at once, instead of when their maximum hold ends. The
// units of the rate limits stay spent (use Cancel for work that never
// started). It does nothing for a refused or bypassed reservation, for one
// without a concurrency cap, after Cancel, and the second time. Its store
// call ignores ctx's cancellation (the slots must come back even when the
// work ended because ctx did) but not its values; it uses the store
// timeout. An error is a store failure (wrapping ErrStoreFailed, counted in
// Stats.StoreErrors): the slots then return after their maximum hold.
//
// A worker that takes a slot per job:
//
//	r, err := lim.Reserve(ctx, key)
//	if err != nil || !r.OK() { ... }
//	defer r.Release(ctx)
//	time.Sleep(r.Delay())
//	doJob()
func (r *Reservation) Release(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done || r.released || !r.res.Allowed || r.res.Bypassed {
		return nil
	}
	r.released = true
	return r.lim.releaseSlots(ctx, r.key, r.res.Decisions, r.cost)
}

// slotBody is a response body whose Close (or the end of the body, read
// through) releases the slots of the call that fetched it, once.
type slotBody struct {
	io.ReadCloser
	once    sync.Once
	release func()
}

func (b *slotBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.release)
	return err
}

// slotReleaser returns a function that releases, at most once, the slots
// that the admission res (with costs, nil meaning 1 per limit) took for
// key; nil when res holds none. Transport calls it when the response body
// is closed or the round trip fails.
func (l *Limiter) slotReleaser(ctx context.Context, key string, res Result, costs []int64) func() {
	if !res.Allowed || res.Bypassed || !hasSlots(res.Decisions) {
		return nil
	}
	r := &Reservation{lim: l, key: key, costs: costs, res: res}
	return func() { _ = r.Release(ctx) }
}

// bodyReleasing returns resp with a body whose Close calls release, once
// (release at once when resp has no body).
func bodyReleasing(resp *http.Response, release func()) *http.Response {
	if resp.Body == nil {
		release()
		return resp
	}
	resp.Body = &slotBody{ReadCloser: resp.Body, release: release}
	return resp
}
