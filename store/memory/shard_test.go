package memory

import (
	"fmt"
	"hash/maphash"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
)

func newTestShard(maxEntries int) *shard {
	sh := &shard{}
	sh.max = maxEntries
	sh.seed = maphash.MakeSeed()
	return sh
}

// level reads the stored level of (key, l), or -1 if there is no live entry.
func (sh *shard) level(h uint64, key string, l *ratelimit.Limit, now int64) int64 {
	var st ratelimit.State
	if slot, stale := sh.get(h, key, l.ID(), l, now, &st); slot == none || stale {
		return -1
	}
	return st.Level
}

// Keys whose 64-bit hashes collide share a chain, as one key's entries
// under several limits do: every entry stays reachable, whichever is
// removed, and the index forgets a hash once its chain is empty. Real
// collisions are too rare to provoke, so the test passes one hash for
// distinct keys.
func TestChainsOfCollidingKeys(t *testing.T) {
	sh := newTestShard(100)
	a := ratelimit.PerDay(10).Named("a")
	b := ratelimit.PerDay(10).Named("b")
	const h, now, exp = 42, 1_000, 1_000_000
	type ent struct {
		key string
		l   *ratelimit.Limit
	}
	ents := []ent{{"x", &a}, {"y", &a}, {"x", &b}, {"z", &b}}
	for i, e := range ents {
		sh.put(h, e.key, e.l.ID(), none, &ratelimit.State{Level: int64(i + 1)}, exp, now, nil)
	}
	require.Equal(t, 4, sh.live)
	require.Equal(t, 1, sh.index.len())
	for i, e := range ents {
		assert.Equal(t, int64(i+1), sh.level(h, e.key, e.l, now), "%s/%s", e.key, e.l.Name())
	}
	assert.Equal(t, int64(-1), sh.level(h, "y", &b, now), "absent: another key's limit")
	assert.Equal(t, int64(-1), sh.level(43, "x", &a, now), "absent: another hash")

	// Remove from the middle, the head and the tail of the chain.
	for n, victim := range []int{1, 3, 0} {
		sh.remove(h, sh.find(h, ents[victim].key, ents[victim].l.ID()))
		ents[victim].key = ""
		for i, e := range ents {
			if e.key != "" {
				assert.Equal(t, int64(i+1), sh.level(h, e.key, e.l, now), "after removal %d: %s/%s", n, e.key, e.l.Name())
			}
		}
	}
	require.Equal(t, 1, sh.live)
	sh.remove(h, sh.find(h, "x", b.ID()))
	assert.Zero(t, sh.index.len())
	assert.Zero(t, sh.live)
	assert.Len(t, sh.free, 4, "every slot is free for reuse")

	// Freed slots are reused before the slab grows.
	sh.put(h, "w", a.ID(), none, &ratelimit.State{Level: 9}, exp, now, nil)
	assert.Len(t, sh.slab, 4)
	assert.Equal(t, int64(9), sh.level(h, "w", &a, now))
}

// One key under several limits: sweeping and eviction find each entry's
// chain from its key, and unlink only that entry.
func TestChainsSweepAndEvict(t *testing.T) {
	sh := newTestShard(4)
	limits := make([]ratelimit.Limit, 4)
	for i := range limits {
		limits[i] = ratelimit.PerDay(10).Named(fmt.Sprint("l", i))
	}
	h := maphash.String(sh.seed, "k")
	// Entry i expires at (i+1)×1000, except l2, the latest.
	expires := []int64{1000, 2000, 9000, 3000}
	for i := range limits {
		sh.put(h, "k", limits[i].ID(), none, &ratelimit.State{Level: int64(i + 1)}, expires[i], 0, nil)
	}
	require.Equal(t, 4, sh.live)

	// The shard is full: a new entry evicts the earliest-expiring one,
	// l0, and spares the entries of the calling stack (l1).
	other := ratelimit.PerDay(10).Named("other")
	protect := []ratelimit.Request{{Key: "k", Limit: &limits[1]}}
	sh.put(maphash.String(sh.seed, "n"), "n", other.ID(), none, &ratelimit.State{Level: 5}, 8000, 500, protect)
	assert.Equal(t, 4, sh.live)
	assert.Equal(t, int64(-1), sh.level(h, "k", &limits[0], 500), "l0 evicted")
	for _, i := range []int{1, 2, 3} {
		assert.Equal(t, int64(i+1), sh.level(h, "k", &limits[i], 500), "l%d kept", i)
	}

	// A sweep at 3000 deletes l1 (2000) and l3 (3000) from the middle of
	// the chain and keeps l2 and the other key.
	sh.sweep(3000)
	assert.Equal(t, 2, sh.live)
	assert.Equal(t, int64(3), sh.level(h, "k", &limits[2], 3000))
	assert.Equal(t, int64(5), sh.level(maphash.String(sh.seed, "n"), "n", &other, 3000))
	assert.Equal(t, int64(-1), sh.level(h, "k", &limits[1], 3000))
}

// A sliding log's timestamps live beside the slab, by slot, and go with
// their entry.
func TestSlidingLogStorage(t *testing.T) {
	sh := newTestShard(10)
	l := ratelimit.PerMinute(5).WithAlgorithm(ratelimit.SlidingLog)
	h := maphash.String(sh.seed, "k")
	st := ratelimit.State{Log: []int64{10, 20}}
	sh.put(h, "k", l.ID(), none, &st, 100, 0, nil)
	var got ratelimit.State
	slot, stale := sh.get(h, "k", l.ID(), &l, 50, &got)
	require.False(t, stale)
	require.NotEqual(t, int32(none), slot)
	assert.Equal(t, []int64{10, 20}, got.Log)
	sh.remove(h, slot)
	assert.Empty(t, sh.logs)
}
