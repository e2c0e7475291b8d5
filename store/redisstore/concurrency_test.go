package redisstore_test

import (
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/internal/redistest"
	"github.com/rampmeter/ratelimit/store/redisstore"
)

// TestConcurrencyCapAcrossInstances (issue 13.1): five instances — each a
// Limiter with its own go-redis client and store, deciding by Redis TIME —
// serve one key from 64 goroutines each, through the middleware, on one
// real redis-server, under a cap of 8 requests in flight. The handler
// itself counts the requests running in it across all instances: the most
// ever at once must be at most 8 (and, with 320 goroutines pressing,
// exactly 8). After 100,000 requests every slot is back and the key is
// gone from Redis: nothing leaks.
func TestConcurrencyCapAcrossInstances(t *testing.T) {
	addr := redistest.Addr(t)
	const (
		instances = 5
		perInst   = 64
		capN      = 8
	)
	total := int64(100_000)
	if testing.Short() {
		total = 10_000
	}
	prefix := redistest.Prefix(t)
	cap8 := ratelimit.Concurrent(capN, time.Minute)
	var inFlight, peak atomic.Int64
	handler := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n := inFlight.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		for range 20 { // stay a while, so that requests overlap
			runtime.Gosched()
		}
		inFlight.Add(-1)
	})
	mws := make([]http.Handler, instances)
	lims := make([]*ratelimit.Limiter, instances)
	for i := range instances {
		client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, PoolSize: perInst})
		t.Cleanup(func() { _ = client.Close() })
		store, err := redisstore.New(client, redisstore.WithPrefix(prefix))
		require.NoError(t, err)
		// A deadline of a minute: every request must be decided by Redis
		// (FailOpen would let one through unlimited).
		lims[i], err = ratelimit.New(store, ratelimit.WithKey(ratelimit.KeyByAPIKey()), ratelimit.WithLimits(cap8),
			ratelimit.WithStoreTimeout(time.Minute), ratelimit.WithFailureMode(ratelimit.FailClosed))
		require.NoError(t, err)
		mws[i] = lims[i].Handler(handler)
	}
	var next, admitted, refused, other atomic.Int64
	var wg sync.WaitGroup
	for i := range instances {
		for range perInst {
			wg.Go(func() {
				for next.Add(1) <= total {
					r := httptest.NewRequest("POST", "/v1/chat/completions", nil)
					r.Header.Set("Authorization", "Bearer sk-hot")
					w := httptest.NewRecorder()
					mws[i].ServeHTTP(w, r)
					switch {
					case w.Code == http.StatusOK:
						admitted.Add(1)
					case w.Code == http.StatusTooManyRequests && w.Header().Get("Retry-After") == "1":
						refused.Add(1)
					default:
						other.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	t.Logf("%d requests: %d admitted, %d refused (429, Retry-After: 1); at most %d in flight", total, admitted.Load(), refused.Load(), peak.Load())
	assert.Equal(t, int64(0), other.Load(), "every answer is 200 or 429 with Retry-After: 1")
	assert.Equal(t, total, admitted.Load()+refused.Load())
	assert.LessOrEqual(t, peak.Load(), int64(capN), "never more than the cap in flight")
	assert.Positive(t, refused.Load(), "320 goroutines press against a cap of 8")
	var stats ratelimit.Stats
	for _, l := range lims {
		s := l.Stats()
		stats.Settled += s.Settled
		stats.StoreErrors += s.StoreErrors
	}
	assert.Equal(t, admitted.Load(), int64(stats.Settled), "one release per admitted request")
	assert.Zero(t, stats.StoreErrors)
	// Every slot is back, and the key is gone from Redis.
	c := redistest.Client(t)
	assert.Empty(t, scanPrefix(t, c, prefix), "no key left")
	res, err := lims[0].Take(t.Context(), "sk-hot", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(capN), res.Decisions[0].Remaining)
}

// TestConcurrencyKilledHolderRedis: slots of a holder that never releases
// return after the maximum hold, and the key's expiry is the newest slot's
// start plus the maximum hold (per-slot expiry by pruning, never a
// counter). On miniredis and a real Redis, by the test's clock.
func TestConcurrencyKilledHolderRedis(t *testing.T) {
	onBoth(t, func(t *testing.T, newEnv func(*testing.T, ...redisstore.Option) *env) {
		e := newEnv(t)
		cap2 := ratelimit.Concurrent(2, 30*time.Second)
		lim, err := ratelimit.New(e.store, ratelimit.WithLimits(cap2), ratelimit.WithStoreTimeout(time.Minute))
		require.NoError(t, err)
		first, err := lim.Take(t.Context(), "k") // a holder that dies: no release
		require.NoError(t, err)
		require.True(t, first.Allowed)
		e.advance(10 * time.Second)
		r, err := lim.Reserve(t.Context(), "k")
		require.NoError(t, err)
		require.True(t, r.OK())
		keys := scanPrefix(t, e.client, e.prefix)
		require.Len(t, keys, 1)
		// The newest slot started now: the key lives its maximum hold.
		assert.Equal(t, 30*time.Second, e.client.PTTL(t.Context(), keys[0]).Val().Round(time.Second))
		res, err := lim.Take(t.Context(), "k")
		require.NoError(t, err)
		assert.False(t, res.Allowed, "full")
		assert.Equal(t, time.Second, res.RetryAfter, "the first slot's hold ends in 20 s: capped at 1 s")
		// The live holder releases; the dead one's slot stays until 30 s.
		require.NoError(t, r.Release(t.Context()))
		assert.Equal(t, 20*time.Second, e.client.PTTL(t.Context(), keys[0]).Val().Round(time.Second), "the first slot's hold")
		e.advance(20*time.Second - time.Microsecond)
		res, err = lim.Take(t.Context(), "k", 0)
		require.NoError(t, err)
		assert.Equal(t, int64(1), res.Decisions[0].Remaining, "1µs before the hold ends")
		e.advance(time.Microsecond)
		res, err = lim.Take(t.Context(), "k", 0)
		require.NoError(t, err)
		assert.Equal(t, int64(2), res.Decisions[0].Remaining, "the dead holder's slot is back")
	})
}
