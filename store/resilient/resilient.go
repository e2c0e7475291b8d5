package resilient

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rampmeter/ratelimit"
)

// ErrTimeout is wrapped, together with context.DeadlineExceeded, by the
// error of a primary call that did not return by its deadline. Its outcome
// is unknown: the primary may have charged it. It is never retried.
var ErrTimeout = errors.New("resilient: primary store did not answer in time")

// ErrCircuitOpen is wrapped by the error of a call that was not sent to the
// primary store because the circuit breaker is open.
var ErrCircuitOpen = errors.New("resilient: circuit open")

// ErrSaturated is wrapped by the error of a call that was not sent to the
// primary store because the bound on primary calls in flight (abandoned
// ones included, see WithMaxInFlight) was reached.
var ErrSaturated = errors.New("resilient: too many primary calls in flight")

// Stats are counters since the Store was created. Each is read
// atomically; the set is not one snapshot.
type Stats struct {
	// PrimaryCalls counts calls sent to the primary store.
	PrimaryCalls uint64
	// Timeouts counts primary calls that did not answer by their
	// deadline (KindTimeout), abandoned ones included.
	Timeouts uint64
	// Abandoned counts primary calls the guard stopped waiting for at
	// their deadline while they were still running (they are included in
	// Timeouts).
	Abandoned uint64
	// Errors counts primary calls that failed otherwise (KindError).
	Errors uint64
	// Rejected counts calls not sent to the primary because the circuit
	// was open (KindCircuitOpen).
	Rejected uint64
	// Saturated counts calls not sent to the primary because the in-flight
	// bound was reached (KindSaturated).
	Saturated uint64
	// Fallbacks counts calls decided or adjusted by the fallback store.
	Fallbacks uint64
	// Opens counts the times the circuit opened (after the failure
	// threshold, or after a failed probe).
	Opens uint64
	// InFlight is the number of primary calls running now, abandoned
	// ones included; at most WithMaxInFlight.
	InFlight int64
}

// Store is a ratelimit.Store that guards a primary store (the Redis store)
// with a per-call deadline, a circuit breaker and an optional local
// fallback. It is safe for concurrent use. See the package documentation.
type Store struct {
	primary  ratelimit.Store
	fallback ratelimit.Store // nil: errors go to the caller
	scaler   *scaler
	timeout  time.Duration
	maxIn    int64
	hooks    Hooks
	breaker  breaker
	inFlight atomic.Int64
	calls    sync.Pool // of *call

	primaryCalls, timeouts, abandoned, errs, rejected, saturated, fallbacks atomic.Uint64
}

var _ ratelimit.Store = (*Store)(nil)

// New returns a Store in front of primary. Without WithFallback, calls the
// primary does not decide return an error, so the Limiter's failure mode
// (FailOpen or FailClosed) applies. New returns an error wrapping
// ErrInvalidOption for a nil primary or an invalid option.
func New(primary ratelimit.Store, opts ...Option) (*Store, error) {
	if primary == nil {
		return nil, fmt.Errorf("%w: nil primary store", ErrInvalidOption)
	}
	c := defaults()
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil Option", ErrInvalidOption)
		}
		if err := o(&c); err != nil {
			return nil, err
		}
	}
	s := &Store{
		primary:  primary,
		fallback: c.fallback,
		timeout:  c.timeout,
		maxIn:    int64(c.maxInFlight),
		hooks:    c.hooks,
	}
	if c.fallback != nil {
		s.scaler = newScaler(c.share)
	}
	s.breaker = breaker{
		threshold: int64(c.threshold),
		base:      c.backoff,
		cap:       c.maxBackoff,
		jitter:    c.jitter,
		now:       c.now,
		rand:      c.rand,
		onChange:  c.hooks.OnCircuitChange,
	}
	s.calls.New = func() any { return &call{done: make(chan struct{}, 1)} }
	return s, nil
}

// State returns the circuit breaker's state.
func (s *Store) State() State { return State(s.breaker.state.Load()) }

// Unwrap returns the primary store s guards (not the fallback), following
// the convention of ratelimit.Store for wrapping stores.
func (s *Store) Unwrap() ratelimit.Store { return s.primary }

// Stats returns the counters.
func (s *Store) Stats() Stats {
	return Stats{
		PrimaryCalls: s.primaryCalls.Load(),
		Timeouts:     s.timeouts.Load(),
		Abandoned:    s.abandoned.Load(),
		Errors:       s.errs.Load(),
		Rejected:     s.rejected.Load(),
		Saturated:    s.saturated.Load(),
		Fallbacks:    s.fallbacks.Load(),
		Opens:        s.breaker.openCount.Load(),
		InFlight:     s.inFlight.Load(),
	}
}

// Drain waits until no primary call is running, abandoned ones included,
// or until ctx ends (returning its error). Call it at shutdown, before
// closing the primary's client, so that no goroutine outlives the Store.
func (s *Store) Drain(ctx context.Context) error {
	if s.inFlight.Load() == 0 {
		return nil
	}
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for s.inFlight.Load() != 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// Take implements ratelimit.Store.Take: the primary decides within the
// deadline unless the circuit is open; otherwise the fallback decides, each
// limit scaled to the configured share, or the call fails. Decisions of the
// fallback point to the caller's Limits (reqs[i].Limit), with Remaining and
// Reset of the scaled limit. A failed or timed-out primary call is never
// retried: its outcome is unknown.
//
// A cost above a scaled burst but within the caller's own Limit.Burst is
// refused by the fallback, but not with RetryNever: it fits once the
// primary decides again. Its RetryAfter is the time until the circuit's
// next probe while the circuit is open, else (the circuit is closed or
// half-open, or the probe is due) the initial backoff (WithBackoff): the
// earliest moment at which the primary may decide the retry. A cost above
// the caller's Limit.Burst stays RetryNever.
func (s *Store) Take(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	return s.do(ctx, OpTake, reqs, out)
}

// Adjust implements ratelimit.Store.Adjust on the store that is active: the
// primary while it answers, the fallback (if any) while the circuit is open
// or when the primary's Adjust fails. A settlement may therefore land on
// another store than the one that decided its Take, around the moments the
// circuit changes state; it is never replayed to the primary later.
func (s *Store) Adjust(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	return s.do(ctx, OpAdjust, reqs, out)
}

func (s *Store) do(ctx context.Context, op Op, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	if err := ratelimit.CheckRequests(reqs, out, op == OpTake); err != nil {
		return err
	}
	if len(reqs) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	a := s.breaker.allow()
	if a == rejected {
		s.rejected.Add(1)
		return s.notDecided(ctx, op, KindCircuitOpen, fmt.Errorf("resilient: %s: %w", op, ErrCircuitOpen), reqs, out)
	}
	if s.inFlight.Add(1) > s.maxIn {
		s.inFlight.Add(-1)
		s.breaker.release(a)
		s.saturated.Add(1)
		err := fmt.Errorf("resilient: %s: %w (%d)", op, ErrSaturated, s.maxIn)
		return s.notDecided(ctx, op, KindSaturated, err, reqs, out)
	}
	s.primaryCalls.Add(1)
	start := time.Now()
	err := s.guarded(ctx, op, reqs, out)
	if s.hooks.OnLatency != nil {
		s.hooks.OnLatency(ctx, op, time.Since(start), err)
	}
	if err == nil {
		s.breaker.success(a)
		return nil
	}
	if errors.Is(ctx.Err(), context.Canceled) || errors.Is(err, ratelimit.ErrInvalidRequest) {
		// The caller went away, or the primary refused the request
		// itself: nothing was learned about the primary's health.
		s.breaker.release(a)
		return err
	}
	s.breaker.failure(a)
	kind := KindError
	if isTimeout(err) {
		kind = KindTimeout
		s.timeouts.Add(1)
	} else {
		s.errs.Add(1)
	}
	return s.notDecided(ctx, op, kind, err, reqs, out)
}

// notDecided reports a call the primary did not decide and hands it to the
// fallback, or returns err when there is none.
func (s *Store) notDecided(ctx context.Context, op Op, kind ErrorKind, err error, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	if s.hooks.OnStoreError != nil {
		s.hooks.OnStoreError(ctx, op, kind, err)
	}
	if s.fallback == nil {
		return err
	}
	local := make([]ratelimit.Request, len(reqs))
	for i, r := range reqs {
		l, serr := s.scaler.scaled(r.Limit)
		if serr != nil {
			return fmt.Errorf("%w; fallback: %w", err, serr)
		}
		// The scaled copy has lost the name of the Limiter the limit
		// belongs to (ratelimit.WithName), which its ID starts with
		// ("ip/"): keep their states apart by the key.
		if ns, _, named := strings.Cut(r.Limit.ID(), "/"); named {
			r.Key = ns + "/" + r.Key
		}
		r.Limit = l
		local[i] = r
	}
	// Without the caller's cancellation: the primary may have used up the
	// deadline, and the in-process store answers at once.
	lctx := context.WithoutCancel(ctx)
	var ferr error
	if op == OpTake {
		ferr = s.fallback.Take(lctx, local, out)
	} else {
		ferr = s.fallback.Adjust(lctx, local, out)
	}
	if ferr != nil {
		return fmt.Errorf("%w; fallback: %w", err, ferr)
	}
	for i := range reqs {
		out[i].Limit = reqs[i].Limit
		if out[i].Never() && reqs[i].Cost <= reqs[i].Limit.Burst() {
			// Too big for the scaled burst, not for the limit: the
			// primary may admit it once it is back. Refuse it for
			// now, retryable (see Take).
			out[i].Allowed = false
			out[i].RetryAfter = s.breaker.retryIn()
		}
	}
	s.fallbacks.Add(1)
	if s.hooks.OnFallback != nil {
		s.hooks.OnFallback(ctx, op, err)
	}
	return nil
}

// isTimeout reports whether err says that a deadline passed: a context
// deadline, ErrTimeout, or a network timeout (a socket deadline).
func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// call is one primary call run on its own goroutine, so that the caller can
// stop waiting at the deadline even if the primary ignores its context.
// The call owns copies of the requests and decisions: an abandoned call
// writes nothing the caller can see.
type call struct {
	s      *Store
	op     Op
	ctx    context.Context
	cancel context.CancelFunc
	reqs   []ratelimit.Request
	out    []ratelimit.Decision
	err    error
	state  atomic.Int32  // running, finished or abandoned
	done   chan struct{} // receives one value when a call finishes unabandoned
}

const (
	running int32 = iota
	finished
	abandonedState
)

// guarded runs the primary call with the deadline and waits for it at most
// until then. It returns the primary's error, or one wrapping ErrTimeout
// and context.DeadlineExceeded (or the caller's cancellation) when it
// stopped waiting.
func (s *Store) guarded(ctx context.Context, op Op, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	c := s.calls.Get().(*call)
	c.s, c.op = s, op
	start := time.Now()
	if dl, ok := ctx.Deadline(); ok && !dl.After(start.Add(s.timeout)) {
		c.ctx, c.cancel = ctx, noCancel // the caller's deadline comes first: no timer of ours
	} else {
		c.ctx, c.cancel = context.WithTimeout(ctx, s.timeout)
	}
	c.reqs = append(c.reqs[:0], reqs...)
	c.out = append(c.out[:0], out[:len(reqs)]...)
	c.err = nil
	c.state.Store(running)
	go c.run()

	select {
	case <-c.done:
	case <-c.ctx.Done():
		if c.state.CompareAndSwap(running, abandonedState) {
			// The call is the goroutine's now; it recycles it.
			s.abandoned.Add(1)
			if err := ctx.Err(); errors.Is(err, context.Canceled) {
				return fmt.Errorf("resilient: %s: %w", op, err)
			}
			return fmt.Errorf("resilient: %s: %w after %v: %w", op, ErrTimeout,
				time.Since(start).Round(time.Microsecond), context.DeadlineExceeded)
		}
		<-c.done // it finished at the same moment
	}
	c.cancel()
	err := c.err
	if err == nil {
		copy(out, c.out)
	}
	c.recycle()
	return err
}

func (c *call) run() {
	c.err = c.call()
	c.s.inFlight.Add(-1)
	// Cancel only after the hand-over: the waiter must not mistake this
	// cancellation for the deadline.
	if c.state.CompareAndSwap(running, finished) {
		c.done <- struct{}{} // the waiter owns c from here on
		return
	}
	c.cancel()
	c.recycle() // abandoned: nobody waits
}

func noCancel() {}

// call makes the primary call. A panic in it becomes an error: on this
// goroutine it would otherwise end the process rather than reach the
// caller's recovery (net/http's, say).
func (c *call) call() (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("resilient: %s: primary store panicked: %v", c.op, v)
		}
	}()
	if c.op == OpTake {
		return c.s.primary.Take(c.ctx, c.reqs, c.out)
	}
	return c.s.primary.Adjust(c.ctx, c.reqs, c.out)
}

// recycle returns c to the pool without references to the caller's data.
func (c *call) recycle() {
	s := c.s
	clear(c.reqs)
	clear(c.out)
	c.s, c.ctx, c.cancel, c.err = nil, nil, nil, nil
	s.calls.Put(c)
}
