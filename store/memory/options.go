package memory

import (
	"errors"
	"fmt"
	"time"
)

// ErrInvalidOption is wrapped by the error New returns for an option it
// cannot use.
var ErrInvalidOption = errors.New("memory: invalid option")

const (
	// DefaultMaxKeys is the default cap on stored (key, limit) entries.
	DefaultMaxKeys = 1 << 20
	// DefaultShards is the default number of shards.
	DefaultShards = 64
	// MaxShards is the largest number of shards WithShards accepts.
	MaxShards = 1 << 16
)

// Option configures a Store built by New.
type Option func(*config) error

type config struct {
	now     func() time.Time
	maxKeys int
	shards  int
}

// WithClock sets the clock the store decides by: any clock, for example a
// fake one in tests, or time.Now to follow the wall clock exactly. The
// clock may move backwards, which creates no capacity. now must not be nil
// and must be safe for concurrent use. The store calls it once per call,
// with shard locks held, so it must return promptly and must not call the
// store (a panic in it unlocks them before it propagates).
//
// The default clock is monotonic: the wall time read once, at New, plus
// the time elapsed since by Go's monotonic clock. It costs one clock read
// per call instead of time.Now's two (about 25 ns instead of 50 on a
// virtual machine with a TSC clock source), and it never steps: setting
// the wall clock (an operator, an NTP step) neither refills nor freezes
// buckets. The price is drift from the wall clock: the default clock is
// off by every step the wall clock has taken since New, and, where the
// monotonic clock stops while the machine is suspended (Linux's
// CLOCK_MONOTONIC does), behind by the time spent suspended (buckets do
// not refill during a suspension). NTP's frequency corrections (slewing)
// apply to both clocks alike. The drift shows wherever the store's time
// is read against the wall clock: Decision.At, absolute reset times in
// response headers, and the boundaries of windows aligned to the Unix
// epoch, which fall on multiples of Period by the store's clock. The
// decisions are as exact as ever on the store's own timeline. Pass
// WithClock(time.Now) where those times must follow the wall clock.
func WithClock(now func() time.Time) Option {
	return func(c *config) error {
		if now == nil {
			return fmt.Errorf("%w: nil clock", ErrInvalidOption)
		}
		c.now = now
		return nil
	}
}

// WithMaxKeys caps the number of stored (key, limit) entries at n (n ≥ 1;
// default DefaultMaxKeys, 1,048,576). When the cap is reached, new entries
// evict old ones as the package documentation describes.
func WithMaxKeys(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("%w: max keys must be at least 1, got %d", ErrInvalidOption, n)
		}
		c.maxKeys = n
		return nil
	}
}

// WithShards sets the number of independently locked shards: a power of two
// from 1 to MaxShards (default DefaultShards, 64). More shards mean less
// lock contention between keys. The store uses fewer shards when MaxKeys is
// smaller than n (the largest power of two not above MaxKeys), so that
// every shard can hold at least one entry.
func WithShards(n int) Option {
	return func(c *config) error {
		if n < 1 || n > MaxShards || n&(n-1) != 0 {
			return fmt.Errorf("%w: shards must be a power of two from 1 to %d, got %d", ErrInvalidOption, MaxShards, n)
		}
		c.shards = n
		return nil
	}
}
