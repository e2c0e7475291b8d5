package ratelimit

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"
)

// deadlineCtx is the context of one store call made with the store
// timeout (WithStoreTimeout): context.WithDeadline(parent, deadline) in
// every answer it gives (Deadline, Done, Err, Value, and so
// context.Cause), except that it starts the deadline's timer only when
// the store first asks for Done (or once the deadline has passed). A store
// that decides without waiting, such as one that only checks ctx.Err on
// entry, never asks, and the call then costs one small allocation and a
// clock reading instead of a context.WithTimeout's timer, its allocations,
// and the timer's start and stop. (A Take that a LocalTaker, such as
// store/lease serving from a lease, decides at once gets no context at
// all.) A store that waits (go-redis selects on Done while taking a
// pooled connection) gets the real deadline context, created on its first
// Done. NonBlocking stores get the caller's context as is (storeContext).
type deadlineCtx struct {
	parent   context.Context
	deadline time.Time // now + the store timeout, with a monotonic reading
	// timed is the deadline context once started (materialize): every
	// answer comes from it from then on.
	timed    atomic.Pointer[timedCtx]
	canceled atomic.Bool // the call ended (cancel)
	detached atomic.Bool // the call ended before the parent (stored before canceled)
	mu       sync.Mutex  // held while timed is started, so that it starts once
}

// timedCtx is a started deadlineCtx: the context.WithDeadline and its
// cancel function.
type timedCtx struct {
	ctx    context.Context
	cancel context.CancelFunc
}

// newDeadlineCtx returns the context of a store call with ctx and the
// store timeout d (> 0). Its cancel method ends it, releasing the timer if
// one was started, and may be called more than once. (A method value
// c.cancel as a context.CancelFunc would cost an allocation per call.)
func newDeadlineCtx(ctx context.Context, d time.Duration) *deadlineCtx {
	return &deadlineCtx{parent: ctx, deadline: time.Now().Add(d)}
}

// Deadline returns the earlier of the parent's deadline and the call's, as
// context.WithDeadline does.
func (c *deadlineCtx) Deadline() (time.Time, bool) {
	if pd, ok := c.parent.Deadline(); ok && pd.Before(c.deadline) {
		return pd, true
	}
	return c.deadline, true
}

// Done returns the channel that closes when the parent ends, the
// deadline passes or the call ends, starting the deadline's timer on the
// first call.
func (c *deadlineCtx) Done() <-chan struct{} { return c.materialize().Done() }

// Err returns the error context.WithDeadline(parent, deadline) would:
// nil while neither the parent ended, nor the deadline passed, nor the
// call ended (cancel); then the parent's error if the parent has ended,
// else context.DeadlineExceeded if the deadline passed before the call
// ended, else context.Canceled. Without a started timer it asks the
// parent and the monotonic clock. Two differences, both about a call's
// deadline that passed unobserved (no Done and no Err until then), since
// no timer marked the moment: if the call then ends (cancel), Err reads
// context.Canceled, as cancel reads no clock; if the parent then ends
// first, Err reads the parent's error (and Cause its cause). The Limiter
// classifies a failed call (storeError) before it cancels, and looks at
// a successful call's context no more.
func (c *deadlineCtx) Err() error {
	if t := c.timed.Load(); t != nil {
		return t.ctx.Err()
	}
	if c.canceled.Load() && c.detached.Load() {
		return c.materialize().Err()
	}
	if err := c.parent.Err(); err != nil {
		// A Done on another goroutine may have started (and ended) the
		// timed context meanwhile: its answer stands, so that Err never
		// changes once non-nil.
		if t := c.timed.Load(); t != nil {
			return t.ctx.Err()
		}
		return err
	}
	if c.canceled.Load() || time.Until(c.deadline) <= 0 {
		// Ended: start the timed context, which ends at once, so that
		// Done, Value (context.Cause) and Err all agree from now on.
		return c.materialize().Err()
	}
	return nil
}

// Value returns the parent's value for key, or, once the timer has
// started, the timed context's (a child of the parent). context.Cause
// calls Err first, which starts the timed context once the call has
// ended, so Cause then finds the timed context's cause.
func (c *deadlineCtx) Value(key any) any {
	if t := c.timed.Load(); t != nil {
		return t.ctx.Value(key)
	}
	return c.parent.Value(key)
}

// String describes the context as context.WithDeadline's does.
func (c *deadlineCtx) String() string {
	name := reflect.TypeOf(c.parent).String()
	if s, ok := c.parent.(fmt.Stringer); ok {
		name = s.String()
	}
	if pd, ok := c.parent.Deadline(); ok && pd.Before(c.deadline) {
		return name + ".WithCancel"
	}
	return name + ".WithDeadline(" + c.deadline.String() + " [" + time.Until(c.deadline).String() + "])"
}

// materialize returns the timed context, starting it on the first call:
// context.WithDeadline(parent, deadline) while the call runs, or, once it
// has ended (cancel), context.WithCancel(parent), canceled at once.
func (c *deadlineCtx) materialize() context.Context {
	if t := c.timed.Load(); t != nil {
		return t.ctx
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.timed.Load()
	if t == nil {
		t = new(timedCtx)
		if c.canceled.Load() {
			p := c.parent
			if c.detached.Load() {
				p = context.WithoutCancel(p)
			}
			t.ctx, t.cancel = context.WithCancel(p)
		} else {
			t.ctx, t.cancel = context.WithDeadline(c.parent, c.deadline)
		}
		c.timed.Store(t)
		// cancel stores canceled, then loads timed; this stores timed, then
		// loads canceled: one of the two sees the other (and a CancelFunc
		// may be called twice).
		if c.canceled.Load() {
			t.cancel()
		}
	}
	return t.ctx
}

// cancel ends the call: its context reports context.Canceled from now on
// (unless it had ended already), and a started timer is released. A call
// ended while its parent runs is detached from the parent, as a
// context.WithDeadline's cancel detaches it: the parent's later end (its
// error, its cause, its deadline) no longer shows.
func (c *deadlineCtx) cancel() {
	if c.timed.Load() == nil && c.parent.Err() == nil {
		c.detached.Store(true)
	}
	c.canceled.Store(true)
	if t := c.timed.Load(); t != nil {
		t.cancel()
	}
}
