package memory

import (
	"errors"
	"fmt"
	"time"
)

// ErrInvalidOption is wrapped by the error New returns for an option it
// cannot use.
var ErrInvalidOption = errors.New("memory: invalid option")

// ErrStackTooLarge is wrapped, together with ratelimit.ErrInvalidRequest, by
// the error Take and Adjust return for a stack that names more distinct
// (key, limit) entries in one shard than the shard can hold (MinShardKeys
// at least, unless MaxKeys is smaller): such a stack cannot be stored whole,
// so it is refused before anything is locked or charged, rather than
// decided as if the entries that do not fit were fresh. The entries of one
// key share a shard, so a stack on one key fits when it has at most
// min(MaxKeys, MinShardKeys) distinct limits.
var ErrStackTooLarge = errors.New("memory: stack has more entries in one shard than the shard holds")

const (
	// DefaultMaxKeys is the default cap on stored (key, limit) entries.
	DefaultMaxKeys = 1 << 20
	// DefaultShards is the default number of shards.
	DefaultShards = 64
	// MaxShards is the largest number of shards WithShards accepts.
	MaxShards = 1 << 16
	// MinShardKeys is the fewest entries a shard is sized to hold: New
	// uses at most MaxKeys/MinShardKeys shards (rounded down to a power of
	// two, and at least one), so that the limits of one key, which share
	// a shard, fit in it together with other keys' entries. It is twice
	// the longest stack decided without allocating (8 requests): a stack
	// of one key under up to 16 limits always fits (when MaxKeys ≥ 16),
	// and a full shard keeps candidates for eviction besides the entries
	// of a call of 8.
	MinShardKeys = 16
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
// clock may move backwards, which creates no capacity and revives no entry
// its shard has seen expire (see "Memory, expiry and sweeping" in the
// package documentation); each step back costs a sweep of every shard it
// reaches. now must not be nil and must be safe for concurrent use. The store calls it once per call,
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
// evict old ones as the package documentation describes. The cap also
// bounds the number of shards (see WithShards): below 2×MinShardKeys the
// store has one shard, of n entries, and a stack of more than n distinct
// entries fails with ErrStackTooLarge.
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
// lock contention between keys. n is an upper bound: the store uses fewer
// shards when MaxKeys/MinShardKeys is smaller than n (the largest power of
// two not above MaxKeys/MinShardKeys, and at least one), so that every
// shard holds at least MinShardKeys entries (all of MaxKeys when it is
// smaller), enough for the limits of one key, which share a shard. The
// clamp is silent, like the order of the options: WithShards(4096) with
// WithMaxKeys(4096) makes 256 shards of 16 entries.
func WithShards(n int) Option {
	return func(c *config) error {
		if n < 1 || n > MaxShards || n&(n-1) != 0 {
			return fmt.Errorf("%w: shards must be a power of two from 1 to %d, got %d", ErrInvalidOption, MaxShards, n)
		}
		c.shards = n
		return nil
	}
}
