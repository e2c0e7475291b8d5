package lease_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/internal/clocktest"
	"github.com/rampmeter/ratelimit/store/lease"
	"github.com/rampmeter/ratelimit/store/memory"
)

// t0 is the instant the fake-clock tests start at: a whole minute, so that
// window arithmetic in the comments starts from 0.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// counting wraps a backing store and counts its calls and the units
// charged to each (key, limit) pair: the sum of the costs of admitted
// Takes and of Adjusts (refunds negative). Every unit the fleet admits
// must be among them.
type counting struct {
	ratelimit.Store
	mu      sync.Mutex
	takes   int
	adjusts int
	charged map[string]int64
	// before, if set, runs before each Take reaches the store (a test
	// injects another instance's call there, to race a refill).
	before func(reqs []ratelimit.Request)
	// fail, if set, is returned by every call instead of calling the store.
	fail error
}

func newCounting(s ratelimit.Store) *counting {
	return &counting{Store: s, charged: map[string]int64{}}
}

func pairOf(r ratelimit.Request) string { return r.Key + "|" + r.Limit.ID() }

func (c *counting) Take(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	c.mu.Lock()
	before, fail := c.before, c.fail
	c.takes++
	c.mu.Unlock()
	if before != nil {
		before(reqs)
	}
	if fail != nil {
		return fail
	}
	if err := c.Store.Take(ctx, reqs, out); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range reqs {
		if !out[i].Allowed {
			return nil
		}
	}
	for _, r := range reqs {
		c.charged[pairOf(r)] += r.Cost
	}
	return nil
}

func (c *counting) Adjust(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	c.mu.Lock()
	c.adjusts++
	fail := c.fail
	c.mu.Unlock()
	if fail != nil {
		return fail
	}
	if err := c.Store.Adjust(ctx, reqs, out); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range reqs {
		c.charged[pairOf(r)] += r.Cost
	}
	return nil
}

// calls returns the number of backing-store calls so far.
func (c *counting) calls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.takes + c.adjusts
}

func (c *counting) setFail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fail = err
}

func (c *counting) setBefore(f func(reqs []ratelimit.Request)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.before = f
}

// chargedAll returns the units charged to l over all keys.
func (c *counting) chargedAll(l *ratelimit.Limit) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for p, units := range c.charged {
		if strings.HasSuffix(p, "|"+l.ID()) {
			n += units
		}
	}
	return n
}

func (c *counting) chargedTo(key string, l *ratelimit.Limit) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.charged[key+"|"+l.ID()]
}

// fleet is n instances, each a lease.Store, over one memory store, all on
// one fake clock, with no background goroutine (Expire is called by the
// test). Their own backing calls (returns) get a minute: the deadline is
// real time, and on a loaded machine under the race detector a goroutine
// can wait longer than the default 50 ms for the CPU, and a return that
// times out is lost, by design.
type fleet struct {
	t       *testing.T
	clock   *clocktest.Clock
	mem     *memory.Store
	backing *counting
	stores  []*lease.Store
	// limiters, when not nil, are the Limiters take goes through, by
	// instance and stack (viaLimiter).
	limiters map[string]*ratelimit.Limiter
}

func newFleet(t *testing.T, n int, opts ...lease.Option) *fleet {
	t.Helper()
	clock := clocktest.New(t0)
	mem, err := memory.New(memory.WithClock(clock.Now))
	require.NoError(t, err)
	f := &fleet{t: t, clock: clock, mem: mem, backing: newCounting(mem)}
	for range n {
		s, err := lease.New(f.backing, append([]lease.Option{lease.WithClock(clock.Now), lease.WithExpiryInterval(0),
			lease.WithCallTimeout(time.Minute)}, opts...)...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		f.stores = append(f.stores, s)
	}
	return f
}

// at sets the clock to t0+d.
func (f *fleet) at(d time.Duration) { f.clock.Set(t0.Add(d)) }

// take calls instance i's Take and requires it to succeed; or, once
// viaLimiter was called, Limiter.Take of a Limiter over instance i with
// the stack's limits.
func (f *fleet) take(i int, reqs ...ratelimit.Request) []ratelimit.Decision {
	f.t.Helper()
	if f.limiters != nil {
		return f.limiterTake(i, reqs)
	}
	out := make([]ratelimit.Decision, len(reqs))
	require.NoError(f.t, f.stores[i].Take(context.Background(), reqs, out))
	return out
}

// viaLimiter makes take go through a ratelimit.Limiter, one per instance
// and stack of limits, which tries each Take with the lease store's
// LocalTaker methods (TryTakeOne for one limit, the lease store being a
// SingleTaker; TryTakeTwo for two, as a PairTaker; TryTake for more)
// before it calls TakeOne, TakeTwo or Take with the store timeout: the decisions must be the same (Decision.Limit is
// the request's, not the Limiter's copy), and so must everything the
// test asserts about the stores.
func (f *fleet) viaLimiter() { f.limiters = map[string]*ratelimit.Limiter{} }

// limiterTake is take through a Limiter: the stack's requests must share
// one key (a Limiter charges one key per call).
func (f *fleet) limiterTake(i int, reqs []ratelimit.Request) []ratelimit.Decision {
	f.t.Helper()
	name := fmt.Sprint(i)
	var limits []ratelimit.Limit
	var costs []int64
	for _, r := range reqs {
		require.Equal(f.t, reqs[0].Key, r.Key, "a Limiter charges one key per call")
		name += "|" + r.Limit.ID()
		limits = append(limits, *r.Limit)
		costs = append(costs, r.Cost)
	}
	lim := f.limiters[name]
	if lim == nil {
		var err error
		lim, err = ratelimit.New(f.stores[i], ratelimit.WithLimits(limits...), ratelimit.WithoutStoreAlert())
		require.NoError(f.t, err)
		f.limiters[name] = lim
	}
	res, err := lim.Take(context.Background(), reqs[0].Key, costs...)
	require.NoError(f.t, err)
	require.Len(f.t, res.Decisions, len(reqs))
	out := make([]ratelimit.Decision, len(reqs))
	for j, d := range res.Decisions {
		require.Equal(f.t, reqs[j].Limit.ID(), d.Limit.ID())
		d.Limit = reqs[j].Limit
		out[j] = d
	}
	return out
}

func (f *fleet) take1(i int, key string, l *ratelimit.Limit, cost int64) ratelimit.Decision {
	f.t.Helper()
	return f.take(i, ratelimit.Request{Key: key, Limit: l, Cost: cost})[0]
}

// peek reads the backing store's state of (key, l) without charging it.
func (f *fleet) peek(key string, l *ratelimit.Limit) ratelimit.Decision {
	f.t.Helper()
	out := make([]ratelimit.Decision, 1)
	require.NoError(f.t, f.mem.Take(context.Background(), []ratelimit.Request{{Key: key, Limit: l}}, out))
	return out[0]
}

func (f *fleet) expire(i int) {
	f.t.Helper()
	require.NoError(f.t, f.stores[i].Expire(context.Background()))
}

func ptr(l ratelimit.Limit) *ratelimit.Limit { return &l }

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// decision builds an expected Decision (At is filled in by check).
func decision(l *ratelimit.Limit, allowed bool, remaining int64, reset, retry time.Duration) ratelimit.Decision {
	return ratelimit.Decision{Limit: l, Allowed: allowed, Remaining: remaining, Reset: reset, RetryAfter: retry}
}

// check asserts got equals want with want.At set to the fake clock's now
// (µs since the epoch): with no latency, the backing store's clock and
// the local one are the same clock.
func (f *fleet) check(want, got ratelimit.Decision, msgAndArgs ...any) {
	f.t.Helper()
	want.At = ratelimit.Micros(f.clock.Now())
	require.Equal(f.t, want, got, msgAndArgs...)
}
