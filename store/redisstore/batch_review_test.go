package redisstore_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/internal/redistest"
	"github.com/rampmeter/ratelimit/store/redisstore"
)

// panicOnce is a go-redis hook whose first script call (FCALL, EVALSHA,
// EVAL) panics, as a buggy tracing or metrics hook might.
type panicOnce struct{ armed *atomic.Bool }

func (panicOnce) DialHook(next redis.DialHook) redis.DialHook { return next }
func (panicOnce) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h panicOnce) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch cmd.Name() {
		case "fcall", "evalsha", "eval":
			if h.armed.CompareAndSwap(true, false) {
				panic("review: hook panics")
			}
		}
		return next(ctx, cmd)
	}
}

// TestPipelinedLoneCallPanicDoesNotWedge: with WithPipelining, a call that
// finds no batch on its way is sent from its caller's goroutine
// (batcher.do's inline path), with b.running set. A panic on that path (a
// go-redis hook, here) reaches the caller, where net/http's recovery (or
// any recover) keeps the process alive; it must not leave b.running set,
// or every later call of the store would queue for a loop goroutine that
// nobody starts and end at its context's deadline (found in review; fixed
// by batcher.handOver, deferred).
func TestPipelinedLoneCallPanicDoesNotWedge(t *testing.T) {
	run := func(t *testing.T, c *redis.Client, opts ...redisstore.Option) {
		var armed atomic.Bool
		armed.Store(true)
		c.AddHook(panicOnce{&armed})
		s, err := redisstore.New(c, append([]redisstore.Option{redisstore.WithPipelining()}, opts...)...)
		require.NoError(t, err)
		l := ratelimit.PerMinute(100).Named("review-panic")
		reqs := []ratelimit.Request{{Key: "k", Limit: &l, Cost: 1}}
		out := make([]ratelimit.Decision, 1)

		var recovered any
		func() {
			defer func() { recovered = recover() }()
			_ = s.Take(t.Context(), reqs, out)
		}()
		require.Equal(t, "review: hook panics", recovered)

		// The hook is disarmed: the store must work again.
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		err = s.Take(ctx, reqs, out)
		require.NoError(t, err, "the store is wedged after a recovered panic in a lone call")
		require.True(t, out[0].Allowed)
		require.Equal(t, int64(99), out[0].Remaining, "the call that panicked never reached Redis: this is the first charge")
	}
	t.Run("miniredis", func(t *testing.T) {
		m := miniredis.RunT(t)
		c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		run(t, c)
	})
	t.Run("redis", func(t *testing.T) {
		c := redistest.Client(t)
		run(t, c, redisstore.WithPrefix(redistest.Prefix(t)))
	})
}

// TestReviewPooledCallsUnderTimeouts hammers a pipelined store with
// callers of which many give up (short deadlines) while their calls are
// queued or on their way, so that pooled calls are reused while the batch
// loop may still hold the abandoned ones. On one key of a token bucket that
// never refills (frozen clock), every admitted Take leaves a different
// Remaining: a reply delivered to the wrong caller (a call reused while
// its batch still writes to it) shows as a repeated or missing value.
// Every Take that reported success is charged once: the admitted count
// is what the key holds, less the charges of callers that gave up after
// their call was sent.
func TestReviewPooledCallsUnderTimeouts(t *testing.T) {
	run := func(t *testing.T, c *redis.Client, opts ...redisstore.Option) {
		now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
		s, err := redisstore.New(c, append([]redisstore.Option{redisstore.WithPipelining(),
			redisstore.WithClock(func() time.Time { return now })}, opts...)...)
		require.NoError(t, err)
		const quota = 3000
		l := ratelimit.PerDay(quota).Named("review-pool")
		var mu sync.Mutex
		seen := map[int64]int{}
		var admitted, refused, gaveUp atomic.Int64
		var wg sync.WaitGroup
		for g := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 250 {
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration((g*7+i)%5)*100*time.Microsecond+50*time.Microsecond)
					if (g+i)%3 == 0 {
						cancel()
						ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
					}
					out := make([]ratelimit.Decision, 1)
					err := s.Take(ctx, []ratelimit.Request{{Key: "k", Limit: &l, Cost: 1}}, out)
					cancel()
					switch {
					case err != nil:
						gaveUp.Add(1)
					case out[0].Allowed:
						admitted.Add(1)
						mu.Lock()
						seen[out[0].Remaining]++
						mu.Unlock()
					default:
						refused.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		t.Logf("admitted %d, refused %d, gave up %d", admitted.Load(), refused.Load(), gaveUp.Load())
		for rem, n := range seen {
			require.Equal(t, 1, n, "remaining %d reported to %d callers", rem, n)
		}
		// What the key holds: a peek.
		out := make([]ratelimit.Decision, 1)
		require.NoError(t, s.Take(context.Background(), []ratelimit.Request{{Key: "k", Limit: &l, Cost: 0}}, out))
		charged := quota - out[0].Remaining
		require.GreaterOrEqual(t, charged, admitted.Load())
		require.LessOrEqual(t, charged, admitted.Load()+gaveUp.Load())
	}
	t.Run("miniredis", func(t *testing.T) {
		m := miniredis.RunT(t)
		c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		run(t, c)
	})
	t.Run("redis", func(t *testing.T) {
		c := redistest.Client(t)
		run(t, c, redisstore.WithPrefix(redistest.Prefix(t)))
	})
}
