package redisstore_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/redisstore"
)

// TestKeyCacheOption: sizes in [0, 2^20] are accepted, others refused.
func TestKeyCacheOption(t *testing.T) {
	e := newMini(t)
	for _, n := range []int{0, 1, 3, 8192, 1 << 20} {
		_, err := redisstore.New(e.client, redisstore.WithKeyCache(n))
		require.NoError(t, err, "size %d", n)
	}
	for _, n := range []int{-1, 1<<20 + 1} {
		_, err := redisstore.New(e.client, redisstore.WithKeyCache(n))
		require.ErrorIs(t, err, redisstore.ErrInvalidOption, "size %d", n)
	}
}

// TestKeyCacheCollisions: with a one-slot cache every (caller key, limit)
// pair evicts the previous one, and with the cache off none is kept; both
// decide exactly like the default store, on the same keys (the Redis key
// names are the same: Key), for callers that share a prefix, callers too
// long to cache, and limits that differ only in their name or rate.
func TestKeyCacheCollisions(t *testing.T) {
	for _, size := range []int{1, 0} {
		t.Run(fmt.Sprint("size ", size), func(t *testing.T) {
			e := newMini(t)
			small, err := redisstore.New(e.client, redisstore.WithKeyCache(size))
			require.NoError(t, err)
			limits := []*ratelimit.Limit{
				limitOf(t, ratelimit.PerMinute(3).Named("a")),
				limitOf(t, ratelimit.PerMinute(3).Named("b")),
				limitOf(t, ratelimit.PerMinute(4).Named("a")),
				limitOf(t, ratelimit.PerMinute(5).Named("w").WithAlgorithm(ratelimit.FixedWindow)),
			}
			callers := []string{"k", "k1", "k10", strings.Repeat("x", 300), strings.Repeat("x", 301)}
			out := make([]ratelimit.Decision, 1)
			for round := range 6 {
				for ci, c := range callers {
					for li, l := range limits {
						require.Equal(t, e.store.Key(c, l), small.Key(c, l))
						// Alternate the two stores on the same keys: each sees
						// the other's charges, so any key-name mix-up shows.
						s := e.store
						if (round+ci+li)%2 == 0 {
							s = small
						}
						require.NoError(t, s.Take(t.Context(), []ratelimit.Request{req(c, l, 1)}, out))
						quota := l.Quota()
						require.Equal(t, int64(round) < quota, out[0].Allowed, "round %d caller %d limit %d", round, ci, li)
						require.Equal(t, max(quota-int64(round)-1, 0), out[0].Remaining, "round %d caller %d limit %d", round, ci, li)
					}
				}
			}
		})
	}
}
