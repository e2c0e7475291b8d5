// Package clocktest provides the manual clock that tests hand to stores
// (memory.WithClock, redisstore.WithClock) instead of sleeping.
package clocktest

import (
	"sync"
	"time"
)

// Clock is a clock that moves only when a test moves it. It is safe for
// concurrent use; the zero Clock reads the zero time.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// New returns a Clock reading t.
func New(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set moves the clock to t, backwards too.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// Advance moves the clock forward by d (backwards for d < 0).
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
