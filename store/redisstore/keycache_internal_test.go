package redisstore

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
)

// TestKeyCacheTwoWay pins the cache's replacement: with two slots (one set
// of two) two pairs stay cached together, a third evicts the one that came
// first, and a hit moves nothing; with one slot each pair evicts the last.
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
