package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrInvalidRequest is wrapped by the errors a Store returns for a malformed
// call: an empty key, an invalid limit, a negative cost in Take, or an output
// slice shorter than the requests. Nothing is charged when it is returned.
var ErrInvalidRequest = errors.New("ratelimit: invalid store request")

// RetryNever is the RetryAfter of a Decision whose cost exceeds the limit's
// burst: waiting cannot help, so clients must not retry the same request.
const RetryNever time.Duration = -1

// Request asks a Store to charge Cost units of Limit to Key.
type Request struct {
	// Key names who pays: an API key, a client IP, a route, or a
	// composition. Stores never keep it in clear (the Redis store hashes
	// it); it must not be empty.
	Key string
	// Limit is the policy to enforce. It must be valid (Limit.Err() == nil).
	Limit *Limit
	// Cost is the number of units to charge. In Take it must be ≥ 0; 0
	// peeks at the state without charging. In Adjust it may be negative (a
	// refund).
	Cost int64
}

// Decision is a Store's answer for one Request.
type Decision struct {
	// Limit is the policy decided (the Request's Limit).
	Limit *Limit
	// Allowed reports whether this limit had room for the cost. In a
	// stacked Take the request as a whole is admitted only if every
	// Decision is Allowed; when one refuses, none is charged.
	Allowed bool
	// Remaining is the number of whole units left after this decision,
	// rounded down and clamped to [0, Burst].
	Remaining int64
	// Reset is the time until the limit is back to its full capacity
	// (zero when it already is).
	Reset time.Duration
	// RetryAfter is zero when Allowed; otherwise the time until this cost
	// would fit, or RetryNever when it never can (cost > Burst).
	RetryAfter time.Duration
}

// Never reports whether the request was refused because its cost exceeds the
// limit's burst, so that no amount of waiting admits it.
func (d Decision) Never() bool { return d.RetryAfter == RetryNever }

// Store keeps the state of every (key, limit) pair and decides requests
// against it. Implementations must be safe for concurrent use and must pass
// the conformance suite in package storetest.
type Store interface {
	// Take decides reqs atomically, all or nothing: if every limit has room
	// for its cost, every one is charged and every Decision is Allowed;
	// otherwise nothing is charged, the refusing limits report Allowed
	// false with their RetryAfter, and the others report their uncharged
	// state. Decisions are written to out[i] for reqs[i]; len(out) must be
	// at least len(reqs). A non-nil error (a malformed request wrapping
	// ErrInvalidRequest, a context deadline, a store failure) means no
	// decision was made and, when the store can know it, nothing was
	// charged.
	Take(ctx context.Context, reqs []Request, out []Decision) error

	// Adjust charges (Cost > 0) or refunds (Cost < 0) usage without a
	// check, to settle an estimate against the real usage once it is
	// known. A charge may push a limit into debt, which later requests
	// wait out; a refund never raises a limit above its full capacity.
	// The state after the adjustment is written to out as in Take, with
	// Allowed true.
	Adjust(ctx context.Context, reqs []Request, out []Decision) error
}

// CheckRequests validates a Store call. Store implementations call it first
// so that every store rejects the same malformed input with the same error.
// take selects Take's rule that costs be non-negative.
func CheckRequests(reqs []Request, out []Decision, take bool) error {
	if len(out) < len(reqs) {
		return fmt.Errorf("%w: %d decisions for %d requests", ErrInvalidRequest, len(out), len(reqs))
	}
	for i := range reqs {
		r := &reqs[i]
		switch {
		case r.Key == "":
			return fmt.Errorf("%w: request %d: empty key", ErrInvalidRequest, i)
		case r.Limit == nil:
			return fmt.Errorf("%w: request %d: nil limit", ErrInvalidRequest, i)
		case take && r.Cost < 0:
			return fmt.Errorf("%w: request %d: negative cost %d in Take (use Adjust to refund)", ErrInvalidRequest, i, r.Cost)
		}
		if err := r.Limit.Err(); err != nil {
			return fmt.Errorf("%w: request %d: %w", ErrInvalidRequest, i, err)
		}
	}
	return nil
}

// State is the stored state of one (key, limit) pair, as the algorithms'
// pure functions read and write it. The zero State is a key never seen (or
// idle long enough to be forgotten).
type State struct {
	// Level is the capacity in use, in the limit's internal units (see
	// Limit.Params): 0 is a full bucket, Burst×scale an empty one, and
	// more than that is debt left by Adjust. It drains at drain internal
	// units per microsecond.
	Level int64
	// Updated is when Level was computed, in microseconds since the Unix
	// epoch.
	Updated int64
}

// Micros converts t to microseconds since the Unix epoch, the time unit of
// State and of the stores.
func Micros(t time.Time) int64 { return t.UnixMicro() }

// TakeAt applies Take's rule for one limit at now (µs since the Unix epoch):
// it returns the state after charging cost if the cost fits, and the
// unchanged (but brought up to date) state otherwise. A cost of 0 peeks.
// The limit must be valid and cost ≥ 0. The Redis store's Lua script mirrors
// this function; the conformance suite holds them equal.
func (l *Limit) TakeAt(s State, now, cost int64) (State, Decision) {
	s = l.drainTo(s, now)
	capacity := l.Burst() * l.scale
	d := Decision{Limit: l, Allowed: true}
	switch {
	case cost > l.Burst():
		d.Allowed, d.RetryAfter = false, RetryNever
	case s.Level+cost*l.scale > capacity:
		d.Allowed = false
		d.RetryAfter = micros(ceilDiv(s.Level+cost*l.scale-capacity, l.drain))
	default:
		s.Level += cost * l.scale
	}
	l.describe(s, &d)
	return s, d
}

// AdjustAt applies Adjust's rule for one limit at now: delta > 0 adds usage
// (possibly beyond capacity, as debt, up to an internal bound of at least
// twice the capacity), delta < 0 refunds it, never below an empty level.
func (l *Limit) AdjustAt(s State, now, delta int64) (State, Decision) {
	s = l.drainTo(s, now)
	switch {
	case delta > 0:
		if delta > (maxLevel-s.Level)/l.scale {
			s.Level = maxLevel
		} else {
			s.Level += delta * l.scale
		}
	case delta < 0:
		if delta <= -ceilDiv(s.Level, l.scale) {
			s.Level = 0
		} else {
			s.Level += delta * l.scale
		}
	}
	d := Decision{Limit: l, Allowed: true}
	l.describe(s, &d)
	return s, d
}

// ExpiresAt returns the time (µs since the Unix epoch) at which s drains to
// a full bucket, after which a store may forget it: a forgotten key behaves
// exactly like s would.
func (l *Limit) ExpiresAt(s State) int64 {
	return s.Updated + ceilDiv(s.Level, l.drain)
}

// drainTo brings s forward to now. A clock that moves backwards is treated
// as standing still, so no capacity is created or lost.
func (l *Limit) drainTo(s State, now int64) State {
	if now <= s.Updated {
		return s
	}
	elapsed := now - s.Updated
	if elapsed >= ceilDiv(s.Level, l.drain) {
		s.Level = 0
	} else {
		s.Level -= elapsed * l.drain
	}
	s.Updated = now
	return s
}

func (l *Limit) describe(s State, d *Decision) {
	capacity := l.Burst() * l.scale
	if s.Level < capacity {
		d.Remaining = (capacity - s.Level) / l.scale
	}
	d.Reset = micros(ceilDiv(s.Level, l.drain))
}

func micros(n int64) time.Duration { return time.Duration(n) * time.Microsecond }
