package redisstore_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/redisstore"
	"github.com/rampmeter/ratelimit/store/storetest"
)

// The pipelined mode (WithPipelining) runs the same suites as the default
// mode: conformance and properties on miniredis (Redis TIME) and on the
// real server (WithClock). On the real server the keys are kept alive by a
// day of WithExpiryMargin rather than by pinKeys, whose MULTI/EXEC hook
// sees single commands only, not the autopipeliner's batches; a margin
// changes no decision.

// pipelinedReal is newReal in pipelined mode, with keys outliving the fake
// clock's jumps.
func pipelinedReal(t *testing.T, opts ...redisstore.Option) *env {
	return newReal(t, append([]redisstore.Option{redisstore.WithPipelining(), redisstore.WithExpiryMargin(24 * time.Hour)}, opts...)...)
}

func pipelinedMini(t *testing.T, opts ...redisstore.Option) *env {
	return newMini(t, append([]redisstore.Option{redisstore.WithPipelining()}, opts...)...)
}

func TestConformanceMiniredisPipelined(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		e := pipelinedMini(t)
		return storetest.Harness{Store: e.store, SetTime: e.setTime}
	})
}

func TestConformanceRedisPipelined(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		e := pipelinedReal(t)
		return storetest.Harness{Store: e.store, SetTime: e.setTime}
	})
}

func TestPropertiesMiniredisPipelined(t *testing.T) {
	storetest.RunProperties(t, func(t *testing.T) storetest.Harness {
		e := pipelinedMini(t)
		return storetest.Harness{Store: e.store, SetTime: e.setTime}
	})
}

func TestPropertiesRedisPipelined(t *testing.T) {
	storetest.RunProperties(t, func(t *testing.T) storetest.Harness {
		e := pipelinedReal(t)
		return storetest.Harness{Store: e.store, SetTime: e.setTime}
	})
}

// TestPipelinedConcurrentExact: 64 goroutines share one pipelined store
// and charge one key of quota 1000 (a frozen clock: nothing refills) and a
// second stacked limit of quota 1500 tokens, at costs 1 and 1; every
// goroutine also charges a caller of its own. Exactly 1000 stacked Takes
// are admitted on the shared key, the tokens limit is charged exactly 1000
// times (never for a refused Take), and every private caller gets exactly
// its quota of 3 -- however the calls were batched.
func TestPipelinedConcurrentExact(t *testing.T) {
	onBothPipelined(t, func(t *testing.T, e *env) {
		rpm := limitOf(t, ratelimit.PerHour(1000).Named("requests"))
		tokens := limitOf(t, ratelimit.PerHour(1500).Named("tokens"))
		own := limitOf(t, ratelimit.PerHour(3).Named("own"))
		const workers, perWorker = 64, 40 // 2560 Takes on the shared key
		var admitted, ownAdmitted atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			wg.Go(func() {
				reqs := []ratelimit.Request{req("shared", rpm, 1), req("shared", tokens, 1)}
				mine := []ratelimit.Request{req("own-"+string(rune('A'+w%26))+string(rune('a'+w/26)), own, 1)}
				out := make([]ratelimit.Decision, 2)
				for range perWorker {
					if err := e.store.Take(context.Background(), reqs, out); err != nil {
						errs <- err
						return
					}
					if out[0].Allowed && out[1].Allowed {
						admitted.Add(1)
					} else if out[1].Remaining < 500 {
						errs <- errors.New("a refused Take charged the tokens limit")
						return
					}
					if err := e.store.Take(context.Background(), mine, out[:1]); err != nil {
						errs <- err
						return
					}
					if out[0].Allowed {
						ownAdmitted.Add(1)
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Equal(t, int64(1000), admitted.Load())
		require.Equal(t, int64(3*workers), ownAdmitted.Load())
		d := e.take(req("shared", rpm, 0), req("shared", tokens, 0))
		require.Equal(t, int64(0), d[0].Remaining)
		require.Equal(t, int64(500), d[1].Remaining, "tokens charged once per admitted Take, never for a refused one")
	})
}

// onBothPipelined runs fn on miniredis and the real server, pipelined.
func onBothPipelined(t *testing.T, fn func(t *testing.T, e *env)) {
	t.Run("miniredis", func(t *testing.T) { fn(t, pipelinedMini(t)) })
	t.Run("redis", func(t *testing.T) { fn(t, pipelinedReal(t)) })
}

// TestPipelinedDeadline: against a Redis that never answers, a pipelined
// Take returns the context's error once its deadline passes (it does not
// wait for the connection's 1-minute read timeout), and the script was
// sent once: neither the autopipeliner nor the store re-sends it.
func TestPipelinedDeadline(t *testing.T) {
	evals, err := untilSent(t, 50*time.Millisecond, func(b *blackHole, timeout time.Duration) error {
		client := redis.NewClient(&redis.Options{
			Addr: b.ln.Addr().String(), ContextTimeoutEnabled: true, ReadTimeout: time.Minute, WriteTimeout: time.Minute,
			MaxRetries: 3, MinRetryBackoff: time.Millisecond, Protocol: 2,
		})
		defer client.Close()
		require.NoError(t, client.Ping(t.Context()).Err())
		ctx, cancel := context.WithTimeout(t.Context(), timeout)
		defer cancel()
		return takeWith(t, client, ctx, redisstore.WithPipelining())
	})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "redisstore: take: ")
	require.Equal(t, int32(1), evals)
}

// TestPipelinedNoReplayAfterConnectionLoss: a connection that closes after
// the script was sent fails the call, and the script is not sent again,
// whatever MaxRetries says.
func TestPipelinedNoReplayAfterConnectionLoss(t *testing.T) {
	for _, maxRetries := range []int{0, 3, -1} {
		b := newBlackHole(t, true)
		err := takeOnce(t, &redis.Options{
			Addr: b.ln.Addr().String(), MaxRetries: maxRetries, MinRetryBackoff: time.Millisecond, Protocol: 2,
			ContextTimeoutEnabled: true,
		}, t.Context(), redisstore.WithPipelining())
		require.ErrorContains(t, err, "redisstore: take: ")
		require.Equal(t, int32(1), b.evals.Load(), "EVALSHAs sent with MaxRetries %d", maxRetries)
	}
}

// TestPipelinedNoScript: after SCRIPT FLUSH a pipelined Take falls back to
// EVAL once and decides exactly.
func TestPipelinedNoScript(t *testing.T) {
	e := newPrivate(t, redisstore.WithPipelining())
	l := limitOf(t, ratelimit.PerMinute(2))
	require.True(t, e.take(req("k", l, 1))[0].Allowed)
	require.NoError(t, e.client.ScriptFlush(t.Context()).Err())
	d := e.take(req("k", l, 1))
	require.True(t, d[0].Allowed)
	require.Equal(t, int64(0), d[0].Remaining)
	require.False(t, e.take(req("k", l, 1))[0].Allowed)
}

// TestPipeliningNeedsAutoPipeline: a Ring has no AutoPipeline, so
// WithPipelining is refused at construction.
func TestPipeliningNeedsAutoPipeline(t *testing.T) {
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}, ContextTimeoutEnabled: true})
	defer ring.Close()
	_, err := redisstore.New(ring, redisstore.WithPipelining())
	require.ErrorIs(t, err, redisstore.ErrInvalidOption)
	require.ErrorContains(t, err, "WithPipelining")
}
