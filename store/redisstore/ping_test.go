package redisstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit/internal/chaos"
	"github.com/rampmeter/ratelimit/internal/redistest"
	"github.com/rampmeter/ratelimit/store/redisstore"
)

// pingCtx is a context with the deadline a start-up check would use.
func pingCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestPingSucceeds(t *testing.T) {
	t.Run("miniredis", func(t *testing.T) {
		e := newMini(t, redisstore.WithPrefix("ping:"))
		require.NoError(t, e.store.Ping(pingCtx(t)))
		// The probe key lives a millisecond: nothing is left once it has
		// passed.
		require.Len(t, e.mr.Keys(), 1)
		assert.True(t, strings.HasPrefix(e.mr.Keys()[0], "ping:{"))
		e.mr.FastForward(time.Millisecond)
		assert.Empty(t, e.mr.Keys())
		require.NoError(t, e.store.Ping(pingCtx(t)), "and again")
	})
	t.Run("redis", func(t *testing.T) {
		s, err := redisstore.New(redistest.Client(t), redisstore.WithPrefix(redistest.Prefix(t)))
		require.NoError(t, err)
		require.NoError(t, s.Ping(pingCtx(t)))
	})
}

func TestPingFails(t *testing.T) {
	t.Run("no server", func(t *testing.T) {
		m := miniredis.RunT(t)
		addr := m.Addr()
		m.Close()
		client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
		defer client.Close()
		s, err := redisstore.New(client)
		require.NoError(t, err, "New does not contact Redis")
		err = s.Ping(pingCtx(t))
		require.Error(t, err)
		assert.True(t, strings.HasPrefix(err.Error(), "redisstore: ping: "), err.Error())
		assert.Contains(t, err.Error(), "connection refused")
	})
	t.Run("server clock in 1970", func(t *testing.T) {
		e := newMini(t)
		e.mr.SetTime(time.Unix(3, 0))
		assert.EqualError(t, e.store.Ping(pingCtx(t)),
			"redisstore: ping: the Redis server's clock (TIME) reads 1970-01-01T00:00:03Z, before 2020 or past 2255: the store would decide by a wrong time")
	})
	t.Run("zero WithClock clock", func(t *testing.T) {
		e := newMini(t, redisstore.WithClock(func() time.Time { return time.Time{} }))
		assert.EqualError(t, e.store.Ping(pingCtx(t)),
			"redisstore: ping: the WithClock clock reads 0001-01-01T00:00:00Z, before 2020 or past 2255: the store would decide by a wrong time")
	})
	t.Run("wrong password", func(t *testing.T) {
		m := miniredis.RunT(t)
		m.RequireAuth("right")
		client := redis.NewClient(&redis.Options{Addr: m.Addr(), Password: "wrong", ContextTimeoutEnabled: true, MaxRetries: -1})
		defer client.Close()
		s, err := redisstore.New(client)
		require.NoError(t, err)
		err = s.Ping(pingCtx(t))
		require.Error(t, err)
		assert.True(t, strings.HasPrefix(err.Error(), "redisstore: ping: "), err.Error())
	})
	// The next two start redis-servers of their own (skipped without the
	// binary): a read-only replica, as a reader endpoint would be, and a
	// user whose ACL denies scripts.
	t.Run("read-only replica", func(t *testing.T) {
		primary := chaos.StartRedis(t)
		replica := chaos.StartRedis(t, "--replicaof", "127.0.0.1", strings.Split(primary.Addr, ":")[1])
		client := redis.NewClient(&redis.Options{Addr: replica.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
		defer client.Close()
		s, err := redisstore.New(client)
		require.NoError(t, err)
		err = s.Ping(pingCtx(t))
		require.Error(t, err)
		assert.True(t, strings.HasPrefix(err.Error(), "redisstore: ping: "), err.Error())
		assert.Contains(t, err.Error(), "READONLY")
	})
	t.Run("scripts denied", func(t *testing.T) {
		srv := chaos.StartRedis(t, "--user", "pinger", "on", ">pw", "~*", "&*", "+@all", "-eval", "-evalsha", "-fcall", "-function")
		client := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "pinger", Password: "pw", ContextTimeoutEnabled: true, MaxRetries: -1})
		defer client.Close()
		s, err := redisstore.New(client)
		require.NoError(t, err)
		err = s.Ping(pingCtx(t))
		require.Error(t, err)
		assert.True(t, strings.HasPrefix(err.Error(), "redisstore: ping: "), err.Error())
		assert.Contains(t, err.Error(), "NOPERM")
	})
}
