package memory

import (
	"fmt"
	"hash/maphash"
	"testing"
	"unsafe"

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

// getTwo finds one key's entries under two limits in one walk of a chain
// that colliding keys share, whatever their order in it, and says which
// are absent or expired, as get does for each.
func TestGetTwoOnCollidingChain(t *testing.T) {
	sh := newTestShard(100)
	a := ratelimit.PerDay(10).Named("a")
	b := ratelimit.PerDay(10).Named("b")
	c := ratelimit.PerDay(10).Named("c")
	const h, now = 42, 1_000
	// The chain, head first: y/b, x/c, x/b (expired), y/a, x/a.
	for i, e := range []struct {
		key string
		l   *ratelimit.Limit
		exp int64
	}{{"x", &a, 5_000}, {"y", &a, 5_000}, {"x", &b, now}, {"x", &c, 7_000}, {"y", &b, 5_000}} {
		sh.put(h, e.key, e.l.ID(), none, &ratelimit.State{Level: int64(i + 1)}, e.exp, 0, nil)
	}
	for _, tc := range []struct {
		key            string
		la, lb         *ratelimit.Limit
		slotA, slotB   int32
		staleA, staleB bool
		levelA, levelB int64
	}{
		{"x", &a, &c, 0, 3, false, false, 1, 4},
		{"x", &c, &a, 3, 0, false, false, 4, 1},
		{"x", &a, &b, 0, 2, false, true, 1, 0}, // x/b expired: stale, not loaded
		{"y", &b, &a, 4, 1, false, false, 5, 2},
		{"y", &a, &c, 1, none, false, false, 2, 0}, // y/c absent
		{"z", &a, &b, none, none, false, false, 0, 0},
	} {
		var stA, stB ratelimit.State
		key := string([]byte(tc.key)) // equal, not the same string
		slotA, staleA, slotB, staleB := sh.getTwo(h, key, tc.la.ID(), tc.lb.ID(), tc.la, tc.lb, now, &stA, &stB)
		name := tc.key + "/" + tc.la.Name() + "+" + tc.lb.Name()
		assert.Equal(t, []any{tc.slotA, tc.staleA, tc.slotB, tc.staleB}, []any{slotA, staleA, slotB, staleB}, name)
		assert.Equal(t, []int64{tc.levelA, tc.levelB}, []int64{stA.Level, stB.Level}, name)
	}
}

// The entries of one key share one stored copy of the key (getTwo compares
// the second by address), a copy of the caller's string; another key with
// the same hash has its own.
func TestEntriesOfOneKeyShareItsCopy(t *testing.T) {
	sh := newTestShard(100)
	a := ratelimit.PerDay(10).Named("a")
	b := ratelimit.PerDay(10).Named("b")
	const h = 42
	key := string([]byte("key"))
	sh.put(h, key, a.ID(), none, &ratelimit.State{Level: 1}, 5_000, 0, nil)
	sh.put(h, string([]byte("other")), a.ID(), none, &ratelimit.State{Level: 2}, 5_000, 0, nil)
	sh.put(h, string([]byte("key")), b.ID(), none, &ratelimit.State{Level: 3}, 5_000, 0, nil)
	ka, kb, ko := sh.names[sh.find(h, "key", a.ID())].key, sh.names[sh.find(h, "key", b.ID())].key, sh.names[sh.find(h, "other", a.ID())].key
	assert.Equal(t, "key", ka)
	assert.True(t, unsafe.StringData(ka) == unsafe.StringData(kb), "one copy for the key's entries")
	assert.False(t, unsafe.StringData(ka) == unsafe.StringData(key), "a copy, not the caller's string")
	assert.False(t, unsafe.StringData(ko) == unsafe.StringData(ka), "another key's own copy")
}

// TestShardHotLine: the fields every decision touches (see shardData)
// share the lock's cache line.
func TestShardHotLine(t *testing.T) {
	var sd shardData
	if end := unsafe.Offsetof(sd.index.cells) + unsafe.Sizeof(sd.index.cells); end > 64 {
		t.Fatalf("the hot fields end at byte %d, past the lock's 64-byte line", end)
	}
	if unsafe.Sizeof(shard{})%cacheLine != 0 {
		t.Fatalf("shard is %d bytes, not a multiple of %d", unsafe.Sizeof(shard{}), cacheLine)
	}
}
