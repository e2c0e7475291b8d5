package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrNeverFits is wrapped by the error of Wait (and of Transport.RoundTrip)
// when a cost exceeds a limit's burst: no amount of waiting admits it, so
// Wait returns at once instead of waiting forever.
var ErrNeverFits = errors.New("ratelimit: cost can never fit")

// Reservation is the outcome of Limiter.Reserve: units charged to a key for
// an action the caller performs at its slot (Delay from the decision), or a
// refusal saying how long to wait. A Reservation is safe for concurrent
// use.
type Reservation struct {
	lim   *Limiter
	key   string
	costs []int64 // as given to Reserve; nil means 1 per limit
	res   Result

	mu       sync.Mutex
	done     bool // Cancel has run
	released bool // Release has run: the slots are given back
}

// Reserve charges costs to key on all of the Limiter's limits at once,
// exactly like Take (same costs, store timeout, failure mode, Stats and
// Hooks), and returns the decision as a Reservation. An admitted
// reservation's units are spent: the caller acts once Delay has passed
// (at once unless a limit is a LeakyBucket), or calls Cancel to give the
// units back as far as that is safe.
//
// Errors follow Take. Invalid arguments (an empty key, a number of costs
// other than 0 or len(Limits()), a negative cost) return an error wrapping
// ErrInvalidRequest and a nil Reservation; so does a ctx that ends before
// the store answers (the error wraps ctx's). When the store fails, the
// error is the store error and the Reservation holds what the failure mode
// decides: under FailOpen it is OK with no delay and Result().Bypassed set;
// under FailClosed it is refused with a Delay of one second.
func (l *Limiter) Reserve(ctx context.Context, key string, costs ...int64) (*Reservation, error) {
	res, err := l.Take(ctx, key, costs...)
	if err != nil && !res.Allowed && res.RetryAfter == 0 {
		// No decision and no failure-mode result: bad arguments or ctx.
		return nil, err
	}
	r := &Reservation{lim: l, key: key, res: res}
	if len(costs) > 0 {
		r.costs = append([]int64(nil), costs...)
	}
	return r, err
}

// OK reports whether the reservation was admitted (its units are charged).
func (r *Reservation) OK() bool { return r.res.Allowed }

// Delay returns how long after the decision the caller must wait: for an
// admitted reservation the time until its slot (Result.Delay; nonzero only
// with LeakyBucket limits), for a refused one the time until the same cost
// would fit (Result.RetryAfter), or RetryNever when it never can.
func (r *Reservation) Delay() time.Duration {
	if r.res.Allowed {
		return r.res.Delay
	}
	return r.res.RetryAfter
}

// Result returns the decision across all limits.
func (r *Reservation) Result() Result { return r.res }

// cost returns the cost reserved on limit i.
func (r *Reservation) cost(i int) int64 {
	if r.costs == nil {
		return 1
	}
	return r.costs[i]
}

// Cancel tells the limiter that the caller will not act on this
// reservation (and has not), and gives its units back as far as that
// cannot let other callers exceed a limit. It does nothing for a refused
// or bypassed reservation, and nothing the second time. Its store calls
// use ctx (pass context.WithoutCancel of a cancelled context) and the
// store timeout; an error is a store failure (wrapping ErrStoreFailed,
// counted in Stats.StoreErrors), after which some units may remain
// charged.
//
// Per limit:
//
//   - Concurrency (Concurrent): the slots are given back, as Release does
//     (unless it already has).
//   - TokenBucket, GCRA and the window algorithms are meters: the units
//     are refunded with one Adjust (Request.At set to the decision's At,
//     so a window algorithm credits the window that was charged). This is
//     what ReportUsage does with a smaller usage.
//   - LeakyBucket is a queue of slots. Refunding a slot that is not the
//     last one would let the next caller be scheduled into the slot of
//     one already waiting, two sends at once (the Reservation.Cancel bugs
//     of golang.org/x/time/rate, golang/go#56924 and #69419). So Cancel
//     first reads the queue (a Take of cost 0) and refunds only if the
//     queue still ends where this reservation ended it, that is, no later
//     reservation or debt has been added, and the reservation's slot has
//     not entirely passed. Then the next caller gets exactly the cancelled
//     slot. Otherwise the units stay charged and the slot goes unused:
//     the queue keeps its spacing at the cost of that slot's throughput.
//     After the refund Cancel reads the queue's end again from the
//     Adjust's answer; if a reservation slipped in between the read and
//     the refund, it charges the units back at once.
//
// The remaining error is bounded: a reservation made by another caller
// during Cancel's own store round trips (between the refund and the
// charge back; or between the read and the refund when the refund lands
// after the cancelled slot has begun, so that the emptied queue hides the
// newcomer) can get a slot overlapping the one reserved before it, by at
// most the cancelled units, once per such race. Without reservations on
// the key concurrent with Cancel, Cancel is exact. A LeakyBucket
// whose emission interval Period/Quota is neither a whole number of
// microseconds nor at least 2µs is never refunded: the microsecond
// resolution of the store's answers cannot tell one unit from rounding.
func (r *Reservation) Cancel(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done || !r.res.Allowed || r.res.Bypassed {
		r.done = true
		return nil
	}
	r.done = true
	return r.lim.release(ctx, r)
}

// release gives back the units of admitted reservation r as Cancel
// documents.
func (l *Limiter) release(ctx context.Context, r *Reservation) error {
	ds := r.res.Decisions
	refund := make([]bool, len(ds))
	var peek []Request
	var peeked []int // index in ds of each peek request
	for i := range ds {
		d := &ds[i]
		switch {
		case !d.Allowed || r.cost(i) <= 0 || r.released && holdsSlot(d.Limit):
			// Not charged (a refusing shadow limit), nothing to give, or
			// a slot given back by Release already.
		case d.Limit.Algorithm() != LeakyBucket:
			refund[i] = true
		case exactQueue(d.Limit):
			peek = append(peek, Request{Key: r.key, Limit: d.Limit})
			peeked = append(peeked, i)
		}
	}
	if len(peek) > 0 {
		out := make([]Decision, len(peek))
		if err := l.call(ctx, OpTake, peek, out); err != nil {
			return err
		}
		for j, i := range peeked {
			end := queueEnd(&ds[i])
			p := &out[j]
			refund[i] = max(p.At, ds[i].At)+p.Reset.Microseconds() <= end && p.At < end
		}
	}
	var reqs []Request
	var refunded []int
	for i, ok := range refund {
		if ok {
			reqs = append(reqs, Request{Key: r.key, Limit: ds[i].Limit, Cost: -r.cost(i), At: ds[i].At})
			refunded = append(refunded, i)
		}
	}
	if len(reqs) == 0 {
		return nil
	}
	out := make([]Decision, len(reqs))
	if err := l.call(ctx, OpAdjust, reqs, out); err != nil {
		return err
	}
	// Without another reservation since the read, the queue now ends at
	// least floor(c×scale/drain) µs before the cancelled reservation's
	// end, or it is empty; any reservation in between ends it later (see
	// exactQueue for why the two cannot meet).
	var back []Request
	for j, i := range refunded {
		lim := ds[i].Limit
		if lim.Algorithm() != LeakyBucket {
			continue
		}
		scale, drain, _ := lim.Params()
		c := r.cost(i)
		a := &out[j]
		at := max(a.At, ds[i].At)
		if at+a.Reset.Microseconds() > max(at, queueEnd(&ds[i])-c*scale/drain) {
			back = append(back, Request{Key: r.key, Limit: lim, Cost: c})
		}
	}
	if len(back) > 0 {
		return l.call(ctx, OpAdjust, back, make([]Decision, len(back)))
	}
	return nil
}

// queueEnd returns when the LeakyBucket queue ended right after decision d
// charged it, in µs since the Unix epoch by the store's clock: the end of
// d's own slot.
func queueEnd(d *Decision) int64 { return d.At + d.Reset.Microseconds() }

// exactQueue reports whether the store's answers for LeakyBucket l (whole
// microseconds, rounded up) are precise enough for Cancel to tell whether
// a unit was added to the queue. With an emission interval e = scale/drain
// µs, a unit moves the queue's end by e, while rounding moves it by less
// than 1µs: a whole e ≥ 1 is exact, and a fractional e needs e ≥ 2.
func exactQueue(l *Limit) bool {
	scale, drain, _ := l.Params()
	return drain > 0 && (drain == 1 || scale >= 2*drain)
}

// Wait blocks until key may act at the given costs (aligned with Limits;
// none means 1 each), charging them: the blocking counterpart of Take, for
// outbound calls, queues and workers. It reserves (Reserve) and then:
//
//   - admitted: it returns at the reservation's slot, at once unless a
//     limit is a LeakyBucket (Wait is how callers send at exactly a
//     LeakyBucket's rate, with no bursts);
//   - refused: it waits RetryAfter and tries again, as often as needed;
//   - refused because a cost exceeds a limit's burst: it returns at once
//     an error wrapping ErrNeverFits;
//   - the store fails: under FailOpen it returns nil (counted in
//     Stats.Bypassed and reported to Hooks.OnBypass), under FailClosed the
//     store error.
//
// ctx bounds the whole wait. When ctx ends during a wait, Wait cancels its
// reservation (Reservation.Cancel: the slot is given back when that is
// safe) and returns ctx.Err(). When ctx has a deadline that the next slot
// or retry would pass, Wait does not wait for nothing: it cancels at once
// and returns an error wrapping context.DeadlineExceeded. Invalid
// arguments return an error wrapping ErrInvalidRequest.
//
// Wait returns no reservation, so a slot it takes on a concurrency cap
// (Concurrent) is not released before the cap's maximum hold ends; workers
// use Reserve and Reservation.Release instead (Transport does so).
func (l *Limiter) Wait(ctx context.Context, key string, costs ...int64) error {
	_, err := l.wait(ctx, key, costs)
	return err
}

// wait is Wait, returning the admission it waited for (the zero Result
// with an error; a Bypassed one under FailOpen).
func (l *Limiter) wait(ctx context.Context, key string, costs []int64) (Result, error) {
	for {
		// Take rather than Reserve: a Reservation is needed only to
		// cancel, so the common path allocates none.
		res, err := l.Take(ctx, key, costs...)
		switch {
		case err != nil && !res.Allowed && res.RetryAfter == 0:
			// No decision: bad arguments, or ctx ended.
			if cerr := ctx.Err(); cerr != nil {
				return Result{}, cerr
			}
			return Result{}, err
		case err != nil && res.Bypassed:
			return res, nil
		case err != nil:
			return Result{}, err
		case res.tooLarge():
			return Result{}, (&Reservation{res: res, costs: costs}).neverFits()
		case !res.Allowed:
			if err := l.waitFor(ctx, max(res.RetryAfter, time.Microsecond)); err != nil {
				return Result{}, err
			}
			continue
		}
		if res.Delay <= 0 {
			return res, nil
		}
		if err := l.waitFor(ctx, res.Delay); err != nil {
			// Give the slot back; a failure is counted in Stats and
			// hooks, and the caller's error is the cancellation.
			r := &Reservation{lim: l, key: key, costs: costs, res: res}
			_ = r.Cancel(context.WithoutCancel(ctx))
			return Result{}, err
		}
		return res, nil
	}
}

// waitFor sleeps d unless ctx's deadline comes first.
func (l *Limiter) waitFor(ctx context.Context, d time.Duration) error {
	if dl, ok := ctx.Deadline(); ok && d > time.Until(dl) {
		return fmt.Errorf("ratelimit: Wait: %v to wait, past the context's deadline: %w", d, context.DeadlineExceeded)
	}
	return l.sleep(ctx, d)
}

// neverFits returns the ErrNeverFits error of a refused reservation.
func (r *Reservation) neverFits() error {
	b := r.res.Binding()
	if b == nil {
		return ErrNeverFits
	}
	i := 0
	for i = range r.res.Decisions {
		if &r.res.Decisions[i] == b {
			break
		}
	}
	return fmt.Errorf("%w: a cost of %s exceeds the %q limit's burst of %d",
		ErrNeverFits, units(r.cost(i), b.Limit.Unit()), b.Limit.Name(), b.Limit.Burst())
}

// refundOverMaxWait refunds the reservation of an admitted request whose
// slot is more than WithMaxWait away (see WithMaxWait) and returns the
// refusal the client gets: the decisions of res (modified in place: the
// Result was not reported yet), those of the limits that would hold the
// request too long refusing with RetryAfter = Delay − maxWait, and the
// states after the refund when it succeeded. costs are the request's
// costs, aligned with res.Decisions. A failed refund is a store error
// (counted and reported); the request is refused all the same.
func (l *Limiter) refundOverMaxWait(ctx context.Context, key string, costs []int64, res Result) Result {
	ds := res.Decisions
	var reqs []Request
	var idx []int
	for i := range ds {
		if ds[i].Allowed && i < len(costs) && costs[i] > 0 {
			reqs = append(reqs, Request{Key: key, Limit: ds[i].Limit, Cost: -costs[i], At: ds[i].At})
			idx = append(idx, i)
		}
	}
	if len(reqs) > 0 {
		// The refund must happen even if the client has gone.
		out := make([]Decision, len(reqs))
		if l.call(context.WithoutCancel(ctx), OpAdjust, reqs, out) == nil {
			for j, i := range idx {
				ds[i].Remaining, ds[i].Reset = out[j].Remaining, out[j].Reset
			}
		}
	}
	for i := range ds {
		if d := &ds[i]; d.Allowed && !d.Limit.shadow && d.Delay > l.maxWait {
			d.Allowed, d.RetryAfter, d.Delay = false, d.Delay-l.maxWait, 0
		}
	}
	return resultOf(ds)
}
