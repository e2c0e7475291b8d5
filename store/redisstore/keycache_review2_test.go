package redisstore

// Review 2 (issue 10): the four-way key cache and the limit tables (by the
// ID's address, then by its hash) against the documented key format,
// derived here independently of the store's code.

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
)

// rv2Key is the Redis key of (key, l) as Store.Key documents it: prefix +
// "{" + the first 22 base64url characters of HMAC-SHA256(secret, key) +
// "}:" + l.ID().
func rv2Key(prefix string, secret []byte, key string, l *ratelimit.Limit) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(key))
	tag := base64.RawURLEncoding.EncodeToString(m.Sum(nil))[:22]
	return prefix + "{" + tag + "}:" + l.ID()
}

// rv2Params is the script's params string of l as ratelimit.lua's header
// documents it: "<algo><scale>:<drain>:<burst>:<quota>:<period µs>".
func rv2Params(l *ratelimit.Limit) string {
	code := map[ratelimit.Algorithm]string{
		ratelimit.TokenBucket: "t", ratelimit.LeakyBucket: "l", ratelimit.GCRA: "g", ratelimit.FixedWindow: "f",
		ratelimit.SlidingWindow: "s", ratelimit.SlidingLog: "o", ratelimit.Concurrency: "c", ratelimit.CalendarWindow: "k",
	}[l.Algorithm()]
	if l.Algorithm() == ratelimit.FixedWindow && l.AlignsToFirstHit() {
		code = "F"
	}
	scale, drain, _ := l.Params()
	return fmt.Sprintf("%s%d:%d:%d:%d:%d", code, scale, drain, l.Burst(), l.Quota(), l.Period().Microseconds())
}

// rv2Limits returns limits of every algorithm, several with one name and
// different parameters, two pairs with equal IDs in distinct strings, and
// enough of them (over 64) that the direct-mapped limit tables collide.
func rv2Limits(t *testing.T) []*ratelimit.Limit {
	t.Helper()
	berlin := time.FixedZone("Berlin", 3600)
	var ls []ratelimit.Limit
	for i := range 70 {
		ls = append(ls, ratelimit.PerMinute(int64(1+i)).Named("same"))
	}
	ls = append(ls,
		ratelimit.PerMinute(60).Named("same").WithAlgorithm(ratelimit.LeakyBucket),
		ratelimit.PerMinute(60).Named("same").WithAlgorithm(ratelimit.GCRA),
		ratelimit.PerMinute(60).Named("same").WithAlgorithm(ratelimit.FixedWindow),
		ratelimit.PerMinute(60).Named("same").WithAlgorithm(ratelimit.FixedWindow).AlignToFirstHit(),
		ratelimit.PerMinute(60).Named("same").WithAlgorithm(ratelimit.SlidingWindow),
		ratelimit.PerMinute(60).Named("same").WithAlgorithm(ratelimit.SlidingLog),
		ratelimit.PerMinute(60).Named("same").WithBurst(7),
		ratelimit.Every(60, time.Minute+time.Microsecond).Named("same"),
		ratelimit.Concurrent(3, time.Minute).Named("same"),
		ratelimit.PerCalendarDay(60, time.UTC).Named("same"),
		ratelimit.PerCalendarMonth(60, berlin).Named("same"),
		ratelimit.Every(1<<40, time.Microsecond).Named("huge"),
		ratelimit.PerMinute(60).Named("same"), // the ID of ls[59], another string
		ratelimit.PerMinute(1).Named("same"),  // the ID of ls[0], another string
	)
	out := make([]*ratelimit.Limit, len(ls))
	for i := range ls {
		require.NoError(t, ls[i].Err(), ls[i].String())
		out[i] = &ls[i]
	}
	require.Equal(t, out[59].ID(), out[len(out)-2].ID())
	require.NotSame(t, unsafe.StringData(out[59].ID()), unsafe.StringData(out[len(out)-2].ID()))
	return out
}

// rv2Keys are caller keys with the bytes a key format could trip on.
func rv2Keys() []string {
	keys := []string{
		"a", "b", "ab", "a}", "{a", "{a}", "}:", ":", "a:b", "a}:same", "{}", "}{", "x}:same:tb:60",
		"\xff", "\xff\xfe", "\x00", "a\x00", "\x00a", "é", "e\u0301", "\xc3", "\xc3\xa9",
		strings.Repeat("k", maxCachedKey), strings.Repeat("k", maxCachedKey) + "x", strings.Repeat("k", maxCachedKey) + "y",
		strings.Repeat("z", 10_000),
	}
	for i := range 40 {
		keys = append(keys, fmt.Sprintf("caller-%d", i))
	}
	return keys
}

// TestReview2KeyCacheMatchesDocumentedKeys: for every key cache size at
// the bounds (0, 1, 2, 3, 4, 5, 8, 2^20) and several prefixes and
// secrets, every (key, limit) pair's entry, looked up many times in a
// random order (hits, misses, evictions, limits rebuilt per call so their
// IDs are new strings), has the documented Redis key and params; Store.Key
// agrees; and no two pairs with different (key, ID) share a Redis key.
func TestReview2KeyCacheMatchesDocumentedKeys(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	limits := rv2Limits(t)
	keys := rv2Keys()
	for _, bad := range []int{-1, 1<<20 + 1} {
		_, err := New(client, WithKeyCache(bad))
		require.ErrorIs(t, err, ErrInvalidOption)
	}
	type conf struct {
		prefix string
		secret []byte
	}
	confs := []conf{{DefaultPrefix, defaultKeySecret}, {"p:", []byte("s")}, {"a:b:c", []byte{0, 0xff}}}
	for _, size := range []int{0, 1, 2, 3, 4, 5, 8, 1 << 20} {
		for ci, c := range confs {
			t.Run(fmt.Sprintf("size=%d/conf=%d", size, ci), func(t *testing.T) {
				s, err := New(client, WithKeyCache(size), WithPrefix(c.prefix), WithKeySecret(c.secret))
				require.NoError(t, err)
				owner := map[string]string{} // Redis key -> key + "\x00" + ID
				rng := rand.New(rand.NewPCG(uint64(size), uint64(ci)))
				for range 6000 {
					k := keys[rng.IntN(len(keys))]
					l := limits[rng.IntN(len(limits))]
					if rng.IntN(4) == 0 {
						// The same limit built again: its ID in a new string.
						cp := l.Named(l.Name())
						require.NotSame(t, unsafe.StringData(l.ID()), unsafe.StringData(cp.ID()))
						l = &cp
					}
					want := rv2Key(c.prefix, c.secret, k, l)
					e := s.entry(k, l)
					require.NotNil(t, e)
					require.Equal(t, want, e.rkey, "entry(%q, %s)", k, l.ID())
					require.Equal(t, rv2Params(l), e.params, "entry(%q, %s)", k, l.ID())
					require.Equal(t, k, e.key)
					require.Equal(t, l.ID(), e.id)
					require.Equal(t, want, s.Key(k, l))
					pair := k + "\x00" + l.ID()
					if o, ok := owner[want]; ok {
						require.Equal(t, o, pair, "two pairs share the Redis key %q", want)
					}
					owner[want] = pair
				}
			})
		}
	}
}

// TestReview2KeyCacheConcurrentRebuiltLimits: many goroutines on a tiny
// cache (one and four slots) with limits rebuilt on every call (each ID a
// new string, so the address table misses and the hash table serves),
// limits shared, and more than 64 IDs (so both tables' slots are
// overwritten under the readers): every entry must be the pair's own.
// Run with -race.
func TestReview2KeyCacheConcurrentRebuiltLimits(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	limits := rv2Limits(t)
	keys := rv2Keys()
	for _, size := range []int{1, 4, 64} {
		s, err := New(client, WithKeyCache(size))
		require.NoError(t, err)
		var wg sync.WaitGroup
		for g := range 6 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(g), uint64(size)+7))
				for range 4000 {
					k := keys[rng.IntN(len(keys))]
					l := limits[rng.IntN(len(limits))]
					if rng.IntN(2) == 0 {
						cp := l.Named(l.Name())
						l = &cp
					}
					e := s.entry(k, l)
					if e == nil || e.key != k || e.id != l.ID() || e.rkey != rv2Key(DefaultPrefix, defaultKeySecret, k, l) || e.params != rv2Params(l) {
						t.Errorf("size %d: entry(%q, %s) = %+v", size, k, l.ID(), e)
						return
					}
				}
			})
		}
		wg.Wait()
	}
}
