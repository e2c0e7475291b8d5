package memory

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/storetest"
)

// fakeClock is a clock tests set by hand.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) Now() time.Time      { return time.Unix(0, c.ns.Load()).UTC() }
func (c *fakeClock) Set(t time.Time)     { c.ns.Store(t.UnixNano()) }
func (c *fakeClock) Add(d time.Duration) { c.ns.Add(int64(d)) }

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// newTestStore returns a store on a fake clock set to t0.
func newTestStore(t testing.TB, opts ...Option) (*Store, *fakeClock) {
	t.Helper()
	c := &fakeClock{}
	c.Set(t0)
	s, err := New(append([]Option{WithClock(c.Now)}, opts...)...)
	require.NoError(t, err)
	return s, c
}

func TestConformance(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"default", nil},
		{"one shard", []Option{WithShards(1)}},
		{"1024 shards", []Option{WithShards(1024)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) storetest.Harness {
				s, c := newTestStore(t, tc.opts...)
				return storetest.Harness{Store: s, SetTime: c.Set}
			})
		})
	}
}

// TestProperties runs the suite's property tests: random sequences of
// clock moves, stacked Takes and Adjusts on every algorithm, decided
// identically by this store and the model (RAMPMETER_PROPERTY_CHECKS
// sets the number of sequences per algorithm).
func TestProperties(t *testing.T) {
	storetest.RunProperties(t, func(t *testing.T) storetest.Harness {
		s, c := newTestStore(t)
		return storetest.Harness{Store: s, SetTime: c.Set}
	})
}

func TestNewOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"nil clock", []Option{WithClock(nil)}},
		{"zero max keys", []Option{WithMaxKeys(0)}},
		{"negative max keys", []Option{WithMaxKeys(-1)}},
		{"zero shards", []Option{WithShards(0)}},
		{"negative shards", []Option{WithShards(-2)}},
		{"shards not a power of two", []Option{WithShards(3)}},
		{"too many shards", []Option{WithShards(MaxShards * 2)}},
		{"nil option", []Option{nil}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(tc.opts...)
			assert.ErrorIs(t, err, ErrInvalidOption)
			assert.Nil(t, s)
		})
	}

	// Valid configurations: the shard count is capped by the largest
	// power of two not above MaxKeys/MinShardKeys (at least 1), and the
	// shard caps add up to MaxKeys.
	for _, tc := range []struct {
		name                string
		opts                []Option
		wantShards, wantCap int
	}{
		{"defaults", nil, DefaultShards, DefaultMaxKeys},
		{"one shard", []Option{WithShards(1)}, 1, DefaultMaxKeys},
		{"max shards", []Option{WithShards(MaxShards)}, MaxShards, DefaultMaxKeys},
		{"one key", []Option{WithMaxKeys(1)}, 1, 1},
		{"15 keys → 1 shard", []Option{WithMaxKeys(15)}, 1, 15},
		{"31 keys → 1 shard", []Option{WithMaxKeys(31)}, 1, 31},     // 31/16 = 1
		{"32 keys → 2 shards", []Option{WithMaxKeys(32)}, 2, 32},    // 32/16 = 2
		{"63 keys → 2 shards", []Option{WithMaxKeys(63)}, 2, 63},    // 63/16 = 3 → 2
		{"64 keys → 4 shards", []Option{WithMaxKeys(64)}, 4, 64},    // 64/16 = 4
		{"100 keys → 4 shards", []Option{WithMaxKeys(100)}, 4, 100}, // 100/16 = 6 → 4
		{"4096 keys, 4096 shards → 256", []Option{WithShards(4096), WithMaxKeys(4096)}, 256, 4096},
		{"the same, options swapped", []Option{WithMaxKeys(4096), WithShards(4096)}, 256, 4096},
		{"1024 keys, 16 shards: as asked", []Option{WithMaxKeys(1024), WithShards(16)}, 16, 1024},
		{"10,007 keys", []Option{WithMaxKeys(10_007), WithShards(16)}, 16, 10_007},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(tc.opts...)
			require.NoError(t, err)
			require.Len(t, s.shards, tc.wantShards)
			total, lo, hi := 0, s.shards[0].max, s.shards[0].max
			for i := range s.shards {
				m := s.shards[i].max
				total += m
				lo, hi = min(lo, m), max(hi, m)
			}
			assert.Equal(t, tc.wantCap, total, "shard caps add up to MaxKeys")
			assert.LessOrEqual(t, hi-lo, 1, "caps are even")
			assert.GreaterOrEqual(t, lo, min(MinShardKeys, tc.wantCap), "every shard holds MinShardKeys entries, or all of them")
			assert.Equal(t, lo, s.minCap)
			assert.NoError(t, s.Close())
		})
	}
}

func TestNilContext(t *testing.T) {
	s, _ := newTestStore(t)
	l := ratelimit.PerSecond(1)
	var ctx context.Context
	out := make([]ratelimit.Decision, 1)
	assert.ErrorIs(t, s.Take(ctx, []ratelimit.Request{{Key: "k", Limit: &l, Cost: 1}}, out), ratelimit.ErrInvalidRequest)
	assert.ErrorIs(t, s.Adjust(ctx, []ratelimit.Request{{Key: "k", Limit: &l, Cost: 1}}, out), ratelimit.ErrInvalidRequest)
}

// The clock is read with the shards of the call locked, so that one key's
// decisions are made at times that never go backwards: two racing callers
// cannot decide at times in the opposite order of their turns in the lock.
func TestClockReadUnderLock(t *testing.T) {
	var s *Store
	var reads, unlocked atomic.Int64
	s, err := New(WithShards(1), WithClock(func() time.Time {
		reads.Add(1)
		if s.shards[0].mu.TryLock() {
			unlocked.Add(1)
			s.shards[0].mu.Unlock()
		}
		return t0
	}))
	require.NoError(t, err)
	l := ratelimit.PerSecond(10)
	take(t, s, ratelimit.Request{Key: "k", Limit: &l, Cost: 1})
	take(t, s, ratelimit.Request{Key: "k", Limit: &l, Cost: 1}, ratelimit.Request{Key: "j", Limit: &l, Cost: 1})
	assert.Equal(t, int64(2), reads.Load(), "one reading per call")
	assert.Zero(t, unlocked.Load(), "read with the shard locked")
}

// A clock that panics does not leave its shards locked.
func TestPanickingClockUnlocks(t *testing.T) {
	var fail atomic.Bool
	s, err := New(WithShards(2), WithClock(func() time.Time {
		if fail.Load() {
			panic("clock failed")
		}
		return t0
	}))
	require.NoError(t, err)
	l := ratelimit.PerSecond(10)
	stack := []ratelimit.Request{{Key: "a", Limit: &l, Cost: 1}, {Key: "b", Limit: &l, Cost: 1}, {Key: "c", Limit: &l, Cost: 1}}
	out := make([]ratelimit.Decision, len(stack))
	call := func(reqs []ratelimit.Request) (panicked any, err error) {
		defer func() { panicked = recover() }()
		return nil, s.Take(context.Background(), reqs, out)
	}
	// A shard left locked would hang the calls after the first: run them
	// with a deadline far beyond their microseconds of work.
	done := make(chan struct{})
	var p1, p2, p3 any
	go func() {
		defer close(done)
		fail.Store(true)
		p1, _ = call(stack[:1])
		p2, _ = call(stack)
		fail.Store(false)
		p3, err = call(stack)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("a shard stayed locked after the clock panicked")
	}
	assert.Equal(t, "clock failed", p1, "one request")
	assert.Equal(t, "clock failed", p2, "a stack")
	require.Nil(t, p3)
	require.NoError(t, err)
	assert.True(t, out[0].Allowed && out[1].Allowed && out[2].Allowed)
}

func take(t testing.TB, s *Store, reqs ...ratelimit.Request) []ratelimit.Decision {
	t.Helper()
	out := make([]ratelimit.Decision, len(reqs))
	require.NoError(t, s.Take(context.Background(), reqs, out))
	return out
}

func remaining(t testing.TB, s *Store, key string, l *ratelimit.Limit) int64 {
	t.Helper()
	return take(t, s, ratelimit.Request{Key: key, Limit: l})[0].Remaining
}

// overfull reports whether reqs name more distinct entries in one of s's
// shards than it holds: the calls Take and Adjust refuse with
// ErrStackTooLarge.
func overfull(s *Store, reqs []ratelimit.Request) bool {
	type entry struct{ key, id string }
	perShard := map[uint64]map[entry]bool{}
	for _, r := range reqs {
		idx := s.hash(r.Key) & s.mask
		if perShard[idx] == nil {
			perShard[idx] = map[entry]bool{}
		}
		perShard[idx][entry{r.Key, r.Limit.ID()}] = true
	}
	for idx, m := range perShard {
		if len(m) > s.shards[idx].max {
			return true
		}
	}
	return false
}

// shardLensWithinCaps checks the cap shard by shard.
func shardLensWithinCaps(t *testing.T, s *Store) {
	t.Helper()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n, m := sh.live, sh.max
		sh.mu.Unlock()
		require.LessOrEqual(t, n, m, "shard %d", i)
	}
}

func TestCapHolds(t *testing.T) {
	const maxKeys, keys = 10_000, 200_000
	s, _ := newTestStore(t, WithMaxKeys(maxKeys))
	l := ratelimit.PerDay(1000)
	// A heavy user has spent 900 of 1000: its entry expires in
	// 900 × 86.4s, much later than the flood's entries, which hold one
	// unit each (86.4s). Eviction takes the earliest-expiring entry of
	// every sample, and every sample of the victim's shard (which holds
	// 10,000/64 ≈ 156 entries) includes flood entries, so the flood can
	// never push the victim out.
	take(t, s, ratelimit.Request{Key: "victim", Limit: &l, Cost: 900})
	for i := range keys {
		d := take(t, s, ratelimit.Request{Key: fmt.Sprintf("flood-%d", i), Limit: &l, Cost: 1})
		require.True(t, d[0].Allowed)
		if i%1000 == 999 {
			require.LessOrEqual(t, s.Len(), maxKeys, "after %d keys", i+1)
		}
	}
	shardLensWithinCaps(t, s)
	// Every shard received far more than its cap (about 3,125 new keys for
	// a cap of about 156) and nothing expires on a stopped clock, so every
	// shard is exactly full.
	assert.Equal(t, maxKeys, s.Len())
	assert.Equal(t, int64(100), remaining(t, s, "victim", &l), "the heavy user's state survived the flood")
}

func TestEvictionPicksEarliestExpiring(t *testing.T) {
	// One shard of 8 entries: eviction samples all of them, so it must
	// evict exactly the earliest-expiring entry.
	s, _ := newTestStore(t, WithShards(1), WithMaxKeys(8))
	l := ratelimit.PerSecond(1).WithBurst(100) // one unit refills in 1s
	// Costs in seconds until each entry expires. "d" expires first but is
	// inserted last and touched again last, so neither FIFO nor LRU would
	// pick it.
	costs := []struct {
		key  string
		cost int64
	}{{"a", 5}, {"b", 3}, {"c", 8}, {"e", 7}, {"f", 6}, {"g", 9}, {"h", 4}, {"d", 1}}
	for _, c := range costs {
		take(t, s, ratelimit.Request{Key: c.key, Limit: &l, Cost: c.cost})
	}
	take(t, s, ratelimit.Request{Key: "d", Limit: &l, Cost: 0}) // touch
	require.Equal(t, 8, s.Len())

	take(t, s, ratelimit.Request{Key: "new1", Limit: &l, Cost: 50})
	assert.Equal(t, 8, s.Len())
	// "d" (1s) went; peeking does not store it again.
	assert.Equal(t, int64(100), remaining(t, s, "d", &l), "d evicted")
	for _, k := range []string{"a", "b", "c", "e", "f", "g", "h"} {
		assert.Less(t, remaining(t, s, k, &l), int64(100), "%s kept", k)
	}
	// Next earliest: "b" (3s).
	take(t, s, ratelimit.Request{Key: "new2", Limit: &l, Cost: 50})
	assert.Equal(t, int64(100), remaining(t, s, "b", &l), "b evicted")
	assert.Equal(t, int64(95), remaining(t, s, "a", &l), "a kept")
	assert.Equal(t, 8, s.Len())
}

func TestEvictionSparesTheCallsOwnEntries(t *testing.T) {
	l := ratelimit.PerSecond(1).WithBurst(100)
	req := func(k string, cost int64) ratelimit.Request { return ratelimit.Request{Key: k, Limit: &l, Cost: cost} }

	// Two entries fit. A stack of two new keys evicts the two old ones
	// and keeps both of its own: the second insertion must not evict the
	// first.
	s, _ := newTestStore(t, WithShards(1), WithMaxKeys(2))
	take(t, s, req("a", 1), req("b", 1))
	take(t, s, req("c", 10), req("d", 20))
	assert.Equal(t, 2, s.Len())
	assert.Equal(t, int64(90), remaining(t, s, "c", &l))
	assert.Equal(t, int64(80), remaining(t, s, "d", &l))

	// One entry fits and the call needs two: the call cannot be stored
	// whole, so it fails before anything is charged (it used to keep the
	// first entry and drop the second, whose limit then never refused).
	s, _ = newTestStore(t, WithShards(1), WithMaxKeys(1))
	out := make([]ratelimit.Decision, 2)
	err := s.Take(context.Background(), []ratelimit.Request{req("a", 10), req("b", 20)}, out)
	assert.ErrorIs(t, err, ErrStackTooLarge)
	assert.ErrorIs(t, err, ratelimit.ErrInvalidRequest)
	assert.Equal(t, make([]ratelimit.Decision, 2), out, "nothing written")
	assert.Equal(t, 0, s.Len(), "nothing charged")
	assert.Equal(t, int64(100), remaining(t, s, "a", &l))
}

func TestSweepForgetsExpired(t *testing.T) {
	l := ratelimit.PerSecond(1).WithBurst(10) // cost 1 expires after 1s
	req := func(k string) ratelimit.Request { return ratelimit.Request{Key: k, Limit: &l, Cost: 1} }

	t.Run("interval", func(t *testing.T) {
		s, c := newTestStore(t, WithShards(1))
		// The first insertion sweeps the empty shard: last sweep at t0.
		for i := range 100 {
			take(t, s, req(fmt.Sprint("k", i)))
		}
		require.Equal(t, 100, s.Len())
		// 2s later every entry has expired, but the last sweep was only
		// 2s ago: a new entry is added and the old ones stay (counted by
		// Len) until read or swept.
		c.Set(t0.Add(2 * time.Second))
		take(t, s, req("new"))
		assert.Equal(t, 101, s.Len())
		// Reading an expired entry finds a fresh key and deletes it.
		assert.Equal(t, int64(10), remaining(t, s, "k0", &l))
		assert.Equal(t, 100, s.Len())
		// One minute after the last sweep, the next insertion sweeps:
		// k1..k99 and "new" (expired at 3s) go; only "new2" remains.
		c.Set(t0.Add(time.Minute))
		take(t, s, req("new2"))
		assert.Equal(t, 1, s.Len())
	})

	t.Run("full shard", func(t *testing.T) {
		s, c := newTestStore(t, WithShards(1), WithMaxKeys(100))
		for i := range 100 {
			take(t, s, req(fmt.Sprint("k", i)))
		}
		require.Equal(t, 100, s.Len())
		// 500ms later the shard is full of live entries and was swept
		// less than 1s ago: one entry is evicted instead.
		c.Set(t0.Add(500 * time.Millisecond))
		take(t, s, req("x"))
		assert.Equal(t, 100, s.Len())
		// At 2s every entry, "x" (expired at 1.5s) included, has
		// expired and the full shard was swept more than 1s ago: the
		// insertion sweeps instead of evicting.
		c.Set(t0.Add(2 * time.Second))
		take(t, s, req("y"))
		assert.Equal(t, 1, s.Len())
	})

	t.Run("peeks and refunds store nothing", func(t *testing.T) {
		s, _ := newTestStore(t)
		take(t, s, ratelimit.Request{Key: "p", Limit: &l, Cost: 0})
		out := make([]ratelimit.Decision, 1)
		require.NoError(t, s.Adjust(context.Background(), []ratelimit.Request{{Key: "r", Limit: &l, Cost: -5}}, out))
		assert.Equal(t, 0, s.Len())
		// Refunding everything deletes the entry: it is full again.
		take(t, s, req("k"))
		require.Equal(t, 1, s.Len())
		require.NoError(t, s.Adjust(context.Background(), []ratelimit.Request{{Key: "k", Limit: &l, Cost: -1}}, out))
		assert.Equal(t, 0, s.Len())
	})
}

// TestLongStacks covers stacks longer than the stack-allocated scratch space
// and than the linear duplicate search.
func TestLongStacks(t *testing.T) {
	l := ratelimit.Every(30, 30*time.Second) // burst 30, one unit per second
	for _, n := range []int{stackN + 1, 4*stackN + 1, 100} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			s, _ := newTestStore(t)
			// n requests of 1 on one entry. If n ≤ 30 all fit and the
			// i-th leaves 29-i units and a level of i+1 units (i+1
			// seconds). Otherwise the first 30 fill the working copy;
			// each later one is refused, charges nothing, and so sees the
			// same level of 30 units, one unit (1s) too many; nothing is
			// committed and every decision reports the full bucket.
			reqs := make([]ratelimit.Request, n)
			for i := range reqs {
				reqs[i] = ratelimit.Request{Key: "same", Limit: &l, Cost: 1}
			}
			out := take(t, s, reqs...)
			for i, d := range out {
				want := ratelimit.Decision{Limit: &l, Allowed: true, Remaining: int64(29 - i), Reset: time.Duration(i+1) * time.Second}
				if n > 30 {
					want = ratelimit.Decision{Limit: &l, Allowed: i < 30, Remaining: 30}
					if i >= 30 {
						want.RetryAfter = time.Second
					}
				}
				want.At = d.At // the store's clock, checked by the conformance suite
				assert.Equal(t, want, d, "decision %d", i)
			}
			wantSame := int64(30)
			if n <= 30 {
				wantSame = int64(30 - n)
			}
			assert.Equal(t, wantSame, remaining(t, s, "same", &l))

			// n requests of 1 over n/2+1 keys, request i on key
			// i mod (n/2+1): key i appears twice if i+n/2+1 < n (28
			// left), otherwise once (29 left). All fit and commit.
			for i := range reqs {
				reqs[i] = ratelimit.Request{Key: fmt.Sprint("k", i%(n/2+1)), Limit: &l, Cost: 1}
			}
			out = take(t, s, reqs...)
			for i, d := range out {
				require.True(t, d.Allowed, "decision %d", i)
			}
			for i := range n/2 + 1 {
				want := int64(28)
				if i+n/2+1 >= n {
					want = 29
				}
				assert.Equal(t, want, remaining(t, s, fmt.Sprint("k", i), &l), "k%d", i)
			}
		})
	}
}

func TestZeroAllocs(t *testing.T) {
	s, _ := newTestStore(t)
	// One unit refills per µs and the clock stands still: every take of 1
	// is allowed and charged, against an existing entry.
	a := ratelimit.PerSecond(1_000_000).WithBurst(1 << 40).Named("a")
	b := ratelimit.PerSecond(1_000_000).WithBurst(1 << 40).Named("b")
	tiny := ratelimit.PerDay(1).Named("tiny")
	stack8 := make([]ratelimit.Request, 8)
	for i := range stack8 {
		stack8[i] = ratelimit.Request{Key: fmt.Sprint("s", i), Limit: &a, Cost: 1}
	}
	cases := []struct {
		name   string
		adjust bool
		reqs   []ratelimit.Request
	}{
		{"one", false, []ratelimit.Request{{Key: "k", Limit: &a, Cost: 1}}},
		{"peek", false, []ratelimit.Request{{Key: "k", Limit: &a, Cost: 0}}},
		{"refused", false, []ratelimit.Request{{Key: "t", Limit: &tiny, Cost: 1}}},
		{"stack of 2, one key", false, []ratelimit.Request{{Key: "k", Limit: &a, Cost: 1}, {Key: "k", Limit: &b, Cost: 1}}},
		{"stack of 2, two keys", false, []ratelimit.Request{{Key: "k", Limit: &a, Cost: 1}, {Key: "other", Limit: &b, Cost: 1}}},
		{"stack of 2, refused", false, []ratelimit.Request{{Key: "k", Limit: &a, Cost: 1}, {Key: "t", Limit: &tiny, Cost: 1}}},
		{"stack of 8", false, stack8},
		{"adjust one", true, []ratelimit.Request{{Key: "k", Limit: &a, Cost: 1}}},
		{"adjust 2", true, []ratelimit.Request{{Key: "k", Limit: &a, Cost: 1}, {Key: "other", Limit: &b, Cost: -1}}},
	}
	ctx := context.Background()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := make([]ratelimit.Decision, len(tc.reqs))
			call := func() error {
				if tc.adjust {
					return s.Adjust(ctx, tc.reqs, out)
				}
				return s.Take(ctx, tc.reqs, out)
			}
			// Create the entries first: only an existing entry is free.
			warm := make([]ratelimit.Request, len(tc.reqs))
			for i, r := range tc.reqs {
				warm[i] = ratelimit.Request{Key: r.Key, Limit: r.Limit, Cost: 1}
			}
			require.NoError(t, s.Take(ctx, warm, make([]ratelimit.Decision, len(warm))))
			require.NoError(t, call())
			allocs := testing.AllocsPerRun(1000, func() { _ = call() })
			assert.Zero(t, allocs, "allocations per decision")
		})
	}
}

// TestStress races random stacks on a small store with a moving clock, for
// the race detector, the deadlock-free lock order and the cap.
func TestStress(t *testing.T) {
	const maxKeys = 32
	s, c := newTestStore(t, WithMaxKeys(maxKeys), WithShards(4))
	l1 := ratelimit.PerSecond(100).WithBurst(10).Named("l1")
	l2 := ratelimit.PerMinute(50).Named("l2")
	limits := []*ratelimit.Limit{&l1, &l2}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			reqs := make([]ratelimit.Request, 0, 4)
			out := make([]ratelimit.Decision, 4)
			for range 2000 {
				if rng.IntN(10) == 0 {
					c.Add(time.Duration(rng.IntN(50)) * time.Millisecond)
				}
				reqs = reqs[:0]
				for range 1 + rng.IntN(4) {
					reqs = append(reqs, ratelimit.Request{
						Key:   fmt.Sprint("k", rng.IntN(64)),
						Limit: limits[rng.IntN(2)],
						Cost:  int64(rng.IntN(3)),
					})
				}
				var err error
				if rng.IntN(5) == 0 {
					reqs[0].Cost = -reqs[0].Cost
					err = s.Adjust(context.Background(), reqs, out)
				} else {
					err = s.Take(context.Background(), reqs, out)
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	shardLensWithinCaps(t, s)
	assert.LessOrEqual(t, s.Len(), maxKeys)
}

// A call that finds its shard's lock busy reads the default clock before
// it gets the lock, so it can find that a racing call which read the clock
// after it has already decided in the shard at a later time. It then
// decides at that later time, so that one key's decisions never go
// backwards in time: here the race is staged by moving a shard's latest
// time past the clock, for a single request (with the lock free and
// busy), a stack of two across two shards and a longer stack.
func TestDefaultClockNeverGoesBackInAShard(t *testing.T) {
	s, err := New(WithShards(64))
	require.NoError(t, err)
	l := ratelimit.PerSecond(1000)
	shardOf := func(key string) *shard { return &s.shards[s.hash(key)&s.mask] }
	// Two keys in different shards, and a third.
	a, b, c := "a", "", ""
	for i := 0; b == "" || c == ""; i++ {
		k := fmt.Sprint("k", i)
		switch {
		case shardOf(k) == shardOf(a):
		case b == "":
			b = k
		case shardOf(k) != shardOf(b):
			c = k
		}
	}
	// ahead moves key's shard's latest time past the clock and past every
	// time set before, by s0 seconds.
	ahead := func(key string, s0 int64) int64 {
		sh := shardOf(key)
		sh.mu.Lock()
		defer sh.mu.Unlock()
		sh.clock = s.monotonic() + s0*1_000_000
		return sh.clock
	}
	latest := func(key string) int64 {
		sh := shardOf(key)
		sh.mu.Lock()
		defer sh.mu.Unlock()
		return sh.clock
	}

	at := ahead(a, 10)
	out := take(t, s, ratelimit.Request{Key: a, Limit: &l, Cost: 1})
	assert.Equal(t, at, out[0].At, "one request decides at its shard's latest time")

	// The same when the call reads the clock while the lock is busy (it
	// does if it finds the lock taken; if it comes late, it reads the
	// clock under the lock, and must decide at the shard's time all the
	// same).
	sh := shardOf(a)
	sh.mu.Lock()
	done := make(chan ratelimit.Decision)
	var err2 error
	go func() {
		out := make([]ratelimit.Decision, 1)
		err2 = s.Take(context.Background(), []ratelimit.Request{{Key: a, Limit: &l, Cost: 1}}, out)
		done <- out[0]
	}()
	time.Sleep(10 * time.Millisecond)     // let it find the lock taken
	sh.clock = s.monotonic() + 20_000_000 // past ahead(a, 10)
	at = sh.clock
	sh.mu.Unlock()
	d := <-done
	require.NoError(t, err2)
	assert.Equal(t, at, d.At, "a request that waited for the lock")

	at = ahead(b, 30)
	out = take(t, s, ratelimit.Request{Key: a, Limit: &l, Cost: 1}, ratelimit.Request{Key: b, Limit: &l, Cost: 1})
	assert.Equal(t, at, out[0].At, "a stack of two decides at the latest time of its shards")
	assert.Equal(t, at, out[1].At)
	assert.Equal(t, at, latest(a), "which becomes the latest time of both")

	at = ahead(c, 40)
	out = take(t, s, ratelimit.Request{Key: a, Limit: &l, Cost: 1}, ratelimit.Request{Key: b, Limit: &l, Cost: 1}, ratelimit.Request{Key: c, Limit: &l, Cost: 1})
	for i := range out {
		assert.Equal(t, at, out[i].At, "a longer stack too: request %d", i)
	}
	assert.Equal(t, at, latest(a))
	assert.Equal(t, at, latest(b))
}

// A key whose entry has expired and is charged again gets its state back
// in the entry's slot, as if the entry had been deleted and the key
// inserted afresh, without the work: the same slot and the same copy of
// the key, no sweep. Read without a charge, the expired entry is deleted
// as before.
func TestExpiredEntryChargedAgainInPlace(t *testing.T) {
	s, c := newTestStore(t, WithShards(1))
	l := ratelimit.PerSecond(10) // a cost of 1 expires after 100ms
	req := ratelimit.Request{Key: "k", Limit: &l, Cost: 1}
	take(t, s, req)
	sh := &s.shards[0]
	h := s.hash("k")
	slot := sh.find(h, "k", l.ID())
	require.NotEqual(t, int32(none), slot)
	key := unsafe.StringData(sh.names[slot].key)

	c.Add(time.Second) // expired
	out := take(t, s, req)
	// A fresh key: 10 units, one charged (first principles, as on a key
	// never seen).
	assert.True(t, out[0].Allowed)
	assert.Equal(t, int64(9), out[0].Remaining)
	assert.Equal(t, 100*time.Millisecond, out[0].Reset)
	assert.Equal(t, slot, sh.find(h, "k", l.ID()), "the same slot")
	assert.Same(t, key, unsafe.StringData(sh.names[slot].key), "the same copy of the key")
	assert.Equal(t, 1, s.Len())
	assert.Len(t, sh.slab, 1)
	checkShard(t, sh)

	c.Add(time.Second) // expired again; a peek deletes it
	out = take(t, s, ratelimit.Request{Key: "k", Limit: &l, Cost: 0})
	assert.Equal(t, int64(10), out[0].Remaining)
	assert.Zero(t, s.Len())
	checkShard(t, sh)
}
