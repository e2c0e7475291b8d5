package redisstore

import (
	"hash/maphash"
	"math/bits"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
)

// TestKeyCacheTwoWay pins the cache's replacement in a cache smaller than a
// set: with two slots (one set of two) two pairs stay cached together, a
// third evicts the one that came first, and a hit moves nothing; with one
// slot each pair evicts the last.
// A cached pair is returned as the very entry made on its miss.
func TestKeyCacheTwoWay(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	l := ratelimit.PerMinute(60)
	require.NoError(t, l.Err())

	s, err := New(client, WithKeyCache(2))
	require.NoError(t, err)
	a, b := s.entry("a", &l), s.entry("b", &l)
	require.Same(t, a, s.entry("a", &l))
	require.Same(t, b, s.entry("b", &l))
	require.Same(t, a, s.entry("a", &l))
	c := s.entry("c", &l) // evicts a, the older of the set
	require.Same(t, c, s.entry("c", &l))
	require.Same(t, b, s.entry("b", &l))
	a2 := s.entry("a", &l)
	require.NotSame(t, a, a2)
	require.Equal(t, *a, *a2)

	one, err := New(client, WithKeyCache(1))
	require.NoError(t, err)
	a = one.entry("a", &l)
	require.Same(t, a, one.entry("a", &l))
	one.entry("b", &l)
	require.NotSame(t, a, one.entry("a", &l))
}

// TestKeyCacheFourWay pins the replacement of a full set: with four slots
// (one set) four pairs stay cached together whatever order they are used
// in, a fifth evicts the one that came first (not the one used last: a hit
// moves nothing), and the next miss the second oldest. With eight slots
// (two sets) every pair stays in its own set.
func TestKeyCacheFourWay(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	l := ratelimit.PerMinute(60)
	require.NoError(t, l.Err())

	s, err := New(client, WithKeyCache(4))
	require.NoError(t, err)
	keys := []string{"a", "b", "c", "d"}
	first := map[string]*keyEntry{}
	for _, k := range keys {
		first[k] = s.entry(k, &l)
	}
	for _, k := range []string{"d", "a", "c", "b", "a", "d"} {
		require.Same(t, first[k], s.entry(k, &l), k)
	}
	e := s.entry("e", &l) // evicts a, the first in, though b was used after it
	require.Same(t, e, s.entry("e", &l))
	for _, k := range []string{"b", "c", "d"} {
		require.Same(t, first[k], s.entry(k, &l), k)
	}
	a2 := s.entry("a", &l) // a miss, which evicts b
	require.NotSame(t, first["a"], a2)
	require.Equal(t, *first["a"], *a2)
	require.NotSame(t, first["b"], s.entry("b", &l))

	// A set is four slots, at an index that is a multiple of four.
	s8, err := New(client, WithKeyCache(8))
	require.NoError(t, err)
	for i := range 64 {
		e := s8.entry(strconv.Itoa(i), &l)
		base := e.h & 7 &^ 3
		found := false
		for j := base; j < base+4; j++ {
			found = found || s8.cache[j].e.Load() == e
		}
		require.True(t, found, "entry %d not in its set at %d", i, base)
	}
}

// TestLimitEntry: the limit table gives the ID's hash and params for any
// Limit with that ID, whether it shares the ID's string (a copy of the
// Limit) or not (the same limit built again), and nil for an algorithm the
// script lacks; entries of equal IDs are interchangeable in the key cache.
func TestLimitEntry(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	s, err := New(client)
	require.NoError(t, err)
	l := ratelimit.PerMinute(60).Named("rpm")
	copied := l
	rebuilt := ratelimit.PerMinute(60).Named("rpm")
	// other's ID must not share the hash table's slot with l's (one seed
	// in 64 would make it so): the hash lookup below would then miss, as
	// it may, and make an equal entry anew.
	hslot := func(id string) uint64 {
		return maphash.String(s.seed, id) >> (64 - bits.TrailingZeros(uint(len(s.limitsH))))
	}
	other := ratelimit.PerMinute(61).Named("rpm")
	for rate := int64(62); hslot(other.ID()) == hslot(l.ID()); rate++ {
		other = ratelimit.PerMinute(rate).Named("rpm")
	}
	for _, x := range []*ratelimit.Limit{&l, &copied, &rebuilt, &other} {
		require.NoError(t, x.Err())
		e := s.limit(x, x.ID())
		require.NotNil(t, e)
		require.Equal(t, x.ID(), e.id)
		require.Equal(t, maphash.String(s.seed, x.ID()), e.h)
		require.Equal(t, limitParams(x), e.params)
		require.Same(t, e, s.limit(x, x.ID()), "a second lookup recomputes")
	}
	// A Limit built again for each call (a new ID string each time) finds
	// the entry of its ID by hash instead of making one.
	byHash := s.limit(&rebuilt, rebuilt.ID())
	for range 3 {
		again := ratelimit.PerMinute(60).Named("rpm")
		require.Same(t, byHash, s.limit(&again, again.ID()))
	}
	require.Same(t, s.entry("k", &l), s.entry("k", &copied))
	require.Same(t, s.entry("k", &l), s.entry("k", &rebuilt))
	require.NotEqual(t, s.entry("k", &l).rkey, s.entry("k", &other).rkey)
}
