package resilient

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/rampmeter/ratelimit"
)

// ErrInvalidOption is wrapped by the errors New returns for a nil primary
// store or an invalid Option, and by Share.Err.
var ErrInvalidOption = errors.New("resilient: invalid option")

// Defaults of the options.
const (
	// DefaultTimeout is the deadline of a primary call unless WithTimeout
	// says otherwise: ratelimit.DefaultStoreTimeout, the Limiter's own.
	DefaultTimeout = ratelimit.DefaultStoreTimeout
	// DefaultFailureThreshold is the number of consecutive failures that
	// open the circuit.
	DefaultFailureThreshold = 5
	// DefaultBackoff is the wait after the circuit first opens before a
	// probe; it doubles with each failed probe up to DefaultMaxBackoff.
	DefaultBackoff = 100 * time.Millisecond
	// DefaultMaxBackoff caps the wait between probes.
	DefaultMaxBackoff = 5 * time.Second
	// DefaultJitter is the fraction of each backoff that is randomly
	// taken off, so that instances that opened together probe apart.
	DefaultJitter = 0.2
	// DefaultMaxInFlight bounds the primary calls running at once,
	// abandoned ones included.
	DefaultMaxInFlight = 256
)

// Op names the Store method a hook reports on.
type Op string

const (
	// OpTake is Store.Take.
	OpTake Op = "take"
	// OpAdjust is Store.Adjust.
	OpAdjust Op = "adjust"
)

// ErrorKind classifies why a call was not decided by the primary store.
type ErrorKind string

const (
	// KindTimeout: the primary did not answer by the deadline (the call
	// was abandoned by the guard, or the primary itself returned a
	// deadline error). Its outcome is unknown: it may have been charged.
	KindTimeout ErrorKind = "timeout"
	// KindError: the primary returned an error (connection refused, a
	// Redis error such as OOM or BUSY, ...).
	KindError ErrorKind = "error"
	// KindCircuitOpen: the primary was not called because the circuit is
	// open (or half-open with its probe in flight).
	KindCircuitOpen ErrorKind = "circuit_open"
	// KindSaturated: the primary was not called because MaxInFlight calls
	// to it were already running (abandoned ones included).
	KindSaturated ErrorKind = "saturated"
)

// Hooks are optional callbacks for metrics and logs. Each may be nil. They
// run synchronously on the caller's goroutine (OnCircuitChange under the
// breaker's lock), so they must be fast, must not call the Store's Take or
// Adjust, and must be safe for concurrent use. State and Stats may be
// called from them.
type Hooks struct {
	// OnStoreError is called for every call the primary did not decide,
	// with its kind and error: failures and timeouts of the primary, and
	// calls not sent to it (circuit open, saturated). A caller's own
	// cancellation is not reported.
	OnStoreError func(ctx context.Context, op Op, kind ErrorKind, err error)
	// OnFallback is called for every call decided (or adjusted) by the
	// fallback store instead of the primary; reason is the error that
	// OnStoreError reported for it.
	OnFallback func(ctx context.Context, op Op, reason error)
	// OnCircuitChange is called for every transition of the circuit
	// breaker, in order.
	OnCircuitChange func(from, to State)
	// OnLatency is called after every call sent to the primary with the
	// time the caller waited for it: up to the deadline when the call was
	// abandoned. err is the primary's error (nil on success).
	OnLatency func(ctx context.Context, op Op, d time.Duration, err error)
}

// Option configures a Store; see New.
type Option func(*config) error

type config struct {
	timeout     time.Duration
	threshold   int
	backoff     time.Duration
	maxBackoff  time.Duration
	jitter      float64
	maxInFlight int
	fallback    ratelimit.Store
	share       Share
	hooks       Hooks
	now         func() time.Time
	rand        func() float64
}

func defaults() config {
	return config{
		timeout:     DefaultTimeout,
		threshold:   DefaultFailureThreshold,
		backoff:     DefaultBackoff,
		maxBackoff:  DefaultMaxBackoff,
		jitter:      DefaultJitter,
		maxInFlight: DefaultMaxInFlight,
		now:         time.Now,
		rand:        rand.Float64,
	}
}

// WithTimeout sets the deadline of each primary call (default
// DefaultTimeout, 50 ms); the caller's context deadline applies too, and
// the earlier one wins. d must be positive. The deadline holds even when
// the primary ignores its context (see the package documentation).
func WithTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: timeout must be positive, got %v", ErrInvalidOption, d)
		}
		c.timeout = d
		return nil
	}
}

// WithFailureThreshold sets the number of consecutive failed primary calls
// that open the circuit (default DefaultFailureThreshold, 5); n ≥ 1.
func WithFailureThreshold(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("%w: failure threshold must be at least 1, got %d", ErrInvalidOption, n)
		}
		c.threshold = n
		return nil
	}
}

// WithBackoff sets how long an open circuit waits before it probes the
// primary: initial after it opens, doubled after each failed probe, at most
// max (defaults DefaultBackoff, 100 ms, and DefaultMaxBackoff, 5 s). Both
// must be positive and initial ≤ max.
func WithBackoff(initial, max time.Duration) Option {
	return func(c *config) error {
		if initial <= 0 || max < initial {
			return fmt.Errorf("%w: backoff must satisfy 0 < initial ≤ max, got %v and %v", ErrInvalidOption, initial, max)
		}
		c.backoff, c.maxBackoff = initial, max
		return nil
	}
}

// WithJitter sets the fraction of each backoff that is randomly taken off
// (default DefaultJitter, 0.2): a backoff d becomes d × (1 − j×r) with r
// drawn uniformly from [0, 1) (see WithRand). 0 disables jitter; j must be
// in [0, 1).
func WithJitter(j float64) Option {
	return func(c *config) error {
		if !(j >= 0 && j < 1) {
			return fmt.Errorf("%w: jitter must be in [0, 1), got %v", ErrInvalidOption, j)
		}
		c.jitter = j
		return nil
	}
}

// WithMaxInFlight bounds the primary calls running at once, including
// calls the guard abandoned at their deadline that have not returned yet
// (default DefaultMaxInFlight, 256). While the bound is reached, calls are
// not sent to the primary (KindSaturated; they go to the fallback or fail
// with ErrSaturated), so a hung primary holds at most n goroutines. Set n
// above the number of concurrent store calls you expect when the primary
// is healthy; n ≥ 1.
func WithMaxInFlight(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("%w: max in flight must be at least 1, got %d", ErrInvalidOption, n)
		}
		c.maxInFlight = n
		return nil
	}
}

// WithFallback makes the Store decide with local while the primary fails
// or the circuit is open, each limit scaled to share of itself (see
// ScaleLimit): for example memory.New() and EvenShare(instances). local
// must be an in-process store that answers without blocking: it is called
// without the caller's deadline, so that a call whose deadline the primary
// used up still gets a decision.
func WithFallback(local ratelimit.Store, share Share) Option {
	return func(c *config) error {
		if local == nil {
			return fmt.Errorf("%w: nil fallback store", ErrInvalidOption)
		}
		if err := share.Err(); err != nil {
			return err
		}
		c.fallback, c.share = local, share
		return nil
	}
}

// WithHooks sets the callbacks for metrics and logs.
func WithHooks(h Hooks) Option {
	return func(c *config) error {
		c.hooks = h
		return nil
	}
}

// WithClock sets the clock of the circuit breaker's backoff (default
// time.Now). Tests pass a fake clock; the deadline guard always uses real
// timers (testing/synctest fakes those). now must not be nil.
func WithClock(now func() time.Time) Option {
	return func(c *config) error {
		if now == nil {
			return fmt.Errorf("%w: nil clock", ErrInvalidOption)
		}
		c.now = now
		return nil
	}
}

// WithRand sets the source of the backoff jitter: a function returning
// numbers in [0, 1) (default math/rand/v2's Float64). Tests pass a fixed
// sequence. It must not be nil and must be safe for concurrent use (it is
// called under the breaker's lock).
func WithRand(fn func() float64) Option {
	return func(c *config) error {
		if fn == nil {
			return fmt.Errorf("%w: nil rand", ErrInvalidOption)
		}
		c.rand = fn
		return nil
	}
}
