package lease

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/rampmeter/ratelimit"
)

// ErrInvalidOption is wrapped by the error New returns for a nil backing
// store or an Option it cannot use.
var ErrInvalidOption = errors.New("lease: invalid option")

// Defaults of the options.
const (
	// DefaultLifetime is how long a lease's units may be handed out after
	// they were charged, unless WithLifetime says otherwise.
	DefaultLifetime = time.Second
	// DefaultMaxShare is the largest fraction of a limit's burst one
	// instance holds in a lease, unless WithMaxShare says otherwise.
	DefaultMaxShare = 0.1
	// DefaultHotRequests is the number of requests for one key and limit
	// within one lease lifetime from which an instance leases capacity for
	// it, unless WithHotThreshold says otherwise.
	DefaultHotRequests = 10
	// DefaultMaxKeys caps the (key, limit) pairs the Store tracks, unless
	// WithMaxKeys says otherwise.
	DefaultMaxKeys = 1 << 16
	// DefaultCallTimeout is the deadline of the backing-store calls the
	// Store makes on its own (returning units in the background and on
	// Close), unless WithCallTimeout says otherwise: the Limiter's own
	// store timeout.
	DefaultCallTimeout = ratelimit.DefaultStoreTimeout
)

const (
	// maxLifetime bounds WithLifetime: a lease is short by design, and the
	// bound keeps every µs product in the sizing arithmetic small.
	maxLifetime = time.Hour
	// minExpiryInterval bounds how often the background goroutine wakes.
	minExpiryInterval = time.Millisecond
)

// Option configures a Store built by New.
type Option func(*config) error

type config struct {
	lifetime    time.Duration
	sharePPM    int64 // DefaultMaxShare in parts per million
	hot         int64
	maxKeys     int
	callTimeout time.Duration
	interval    time.Duration // 0: no background expiry
	intervalSet bool
	now         func() time.Time
}

func defaults() config {
	return config{
		lifetime:    DefaultLifetime,
		sharePPM:    int64(DefaultMaxShare * 1e6),
		hot:         DefaultHotRequests,
		maxKeys:     DefaultMaxKeys,
		callTimeout: DefaultCallTimeout,
	}
}

// WithLifetime sets the lease lifetime L: the longest time after a lease was
// charged in the backing store during which its units are handed out, from
// 1 ms to 1 hour (default DefaultLifetime, 1 s). A longer lifetime means
// fewer backing-store calls and a looser bound: the token bucket and GCRA
// admit at most Burst + Rate×(T + L) in any span T (see the package
// documentation), and unused units stay idle in leases for up to L.
func WithLifetime(d time.Duration) Option {
	return func(c *config) error {
		if d < time.Millisecond || d > maxLifetime {
			return fmt.Errorf("%w: lifetime must be from 1ms to %v, got %v", ErrInvalidOption, maxLifetime, d)
		}
		c.lifetime = d
		return nil
	}
}

// WithMaxShare sets the largest fraction of a limit's burst (its quota, for
// the window algorithms) that one instance holds in one lease: a lease is at
// most floor(share × Burst) units beyond the request that took it. share
// must be in (0, 1] (default DefaultMaxShare, 0.1); with n instances, up to
// n × share × Burst units can sit in leases at once. A limit whose
// share × Burst is below one unit is never leased: it passes through.
func WithMaxShare(share float64) Option {
	return func(c *config) error {
		if !(share > 0 && share <= 1) || math.IsNaN(share) {
			return fmt.Errorf("%w: max share must be in (0, 1], got %v", ErrInvalidOption, share)
		}
		c.sharePPM = max(1, int64(math.Round(share*1e6)))
		return nil
	}
}

// WithHotThreshold sets how many requests for one key and limit this
// instance must see within one lease lifetime before it leases capacity
// for them (n ≥ 1; default DefaultHotRequests, 10). Below it a key is cold
// and every request goes straight to the backing store, as without this
// decorator. A threshold of math.MaxInt64 disables leasing.
func WithHotThreshold(n int64) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("%w: hot threshold must be at least 1 request, got %d", ErrInvalidOption, n)
		}
		c.hot = n
		return nil
	}
}

// WithMaxKeys caps the (key, limit) pairs the Store tracks (n ≥ 1; default
// DefaultMaxKeys, 65,536). A pair is tracked while it has a lease or was
// requested within the current lifetime-long interval or the one before
// (pairs of limits that pass through count too, until forgotten); calls
// naming a new pair beyond the cap pass straight through. An entry takes
// a few hundred bytes.
func WithMaxKeys(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("%w: max keys must be at least 1, got %d", ErrInvalidOption, n)
		}
		c.maxKeys = n
		return nil
	}
}

// WithCallTimeout sets the deadline of the backing-store calls the Store
// makes on its own behalf, outside any request: returning unused units
// from the background goroutine, after a caller has gone, and on Close
// (default DefaultCallTimeout). d must be positive. Calls made for a
// request use the request's context.
func WithCallTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: call timeout must be positive, got %v", ErrInvalidOption, d)
		}
		c.callTimeout = d
		return nil
	}
}

// WithExpiryInterval sets how often a background goroutine returns the
// unused units of leases that have ended (and forgets idle keys): default
// a tenth of the lifetime, at least 1 ms. 0 starts no goroutine: ended
// leases are then returned by the next request for their key, or by
// calling Expire (tests with a fake clock and simulations do). d must be
// ≥ 0.
func WithExpiryInterval(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("%w: expiry interval must be ≥ 0, got %v", ErrInvalidOption, d)
		}
		c.interval, c.intervalSet = d, true
		return nil
	}
}

// WithClock sets the local clock by which leases age. It must be safe for
// concurrent use and must not call the Store. Tests pass a fake clock
// (with WithExpiryInterval(0), since the background goroutine ticks in
// real time). The default is the monotonic clock, so a step of the wall
// clock neither ends nor prolongs a lease. The local clock only measures
// elapsed time: decisions' At values stay on the backing store's clock.
func WithClock(now func() time.Time) Option {
	return func(c *config) error {
		if now == nil {
			return fmt.Errorf("%w: nil clock", ErrInvalidOption)
		}
		c.now = now
		return nil
	}
}
