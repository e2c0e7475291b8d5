package ratelimit_test

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/internal/redistest"
	"github.com/rampmeter/ratelimit/store/redisstore"
)

// storeFactory makes a fresh, empty store deciding by the clock now.
type storeFactory struct {
	name string
	new  func(t testing.TB, now func() time.Time) ratelimit.Store
}

// storeFactories are the stores the AI metering tests run on: the memory
// store, the Redis store on miniredis (its Lua path, in process), and the
// Redis store on the real redis-server (skipped when none answers, unless
// RAMPMETER_REQUIRE_REDIS=1). The Redis stores decide by the test's fake
// clock (WithClock), under a key prefix unique to the test.
func storeFactories() []storeFactory {
	return []storeFactory{
		{"memory", newStore},
		{"miniredis", func(t testing.TB, now func() time.Time) ratelimit.Store {
			mr := miniredis.RunT(t)
			c := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = c.Close() })
			s, err := redisstore.New(c, redisstore.WithClock(now))
			require.NoError(t, err)
			return s
		}},
		{"redis", func(t testing.TB, now func() time.Time) ratelimit.Store {
			c := redistest.Client(t) // skips (or fails in CI) without a server
			// The fake clock may stand still while the server counts the
			// keys' PX down on its wall clock: an hour's margin keeps a
			// state of a few units (a second for PerMinute(60)) from
			// expiring under a stall of a loaded machine. A margin changes
			// no decision.
			s, err := redisstore.New(c, redisstore.WithPrefix(redistest.Prefix(t)), redisstore.WithClock(now),
				redisstore.WithExpiryMargin(time.Hour))
			require.NoError(t, err)
			return s
		}},
	}
}

// onEachStore runs fn as a subtest on each store factory.
func onEachStore(t *testing.T, fn func(t *testing.T, f storeFactory)) {
	for _, f := range storeFactories() {
		t.Run(f.name, func(t *testing.T) { fn(t, f) })
	}
}

// newLimiterOn builds a Limiter on a fresh store of f with a fake clock,
// keyed by API key, and a store timeout of a minute.
func newLimiterOn(t testing.TB, f storeFactory, opts ...ratelimit.Option) (*ratelimit.Limiter, *recordingStore, *fakeClock) {
	t.Helper()
	clock := newClock()
	store := &recordingStore{Store: f.new(t, clock.Now)}
	// A generous store deadline: these tests check decisions, not
	// timeouts, and the Redis stores are slow under the race detector.
	opts = append([]ratelimit.Option{ratelimit.WithKey(ratelimit.KeyByAPIKey()), ratelimit.WithStoreTimeout(time.Minute)}, opts...)
	lim, err := ratelimit.New(store, opts...)
	require.NoError(t, err)
	return lim, store, clock
}

// peek returns the Remaining of each limit for key, straight from store
// (a Take of cost 0: nothing is charged, and no Stats or hooks move).
func peek(t testing.TB, store ratelimit.Store, key string, limits ...ratelimit.Limit) []int64 {
	t.Helper()
	reqs := make([]ratelimit.Request, len(limits))
	for i := range limits {
		reqs[i] = ratelimit.Request{Key: key, Limit: &limits[i]}
	}
	out := make([]ratelimit.Decision, len(limits))
	require.NoError(t, store.Take(t.Context(), reqs, out))
	rem := make([]int64, len(limits))
	for i, d := range out {
		rem[i] = d.Remaining
	}
	return rem
}
