package lease_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/internal/clocktest"
	"github.com/rampmeter/ratelimit/internal/redistest"
	"github.com/rampmeter/ratelimit/store/lease"
	"github.com/rampmeter/ratelimit/store/redisstore"
)

// commands counts the commands a go-redis client sends: all of them, and
// the store's scripts (EVALSHA, and EVAL when the server had no cached
// script), which are its round trips per decision. The others are each
// new connection's handshake (HELLO, CLIENT SETINFO).
type commands struct {
	all, scripts atomic.Int64
}

func (c *commands) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *commands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.all.Add(1)
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			c.scripts.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (c *commands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.all.Add(int64(len(cmds)))
		for _, cmd := range cmds {
			if n := cmd.Name(); n == "evalsha" || n == "eval" {
				c.scripts.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// redisAddr returns the address of the real redis-server (skipping or
// failing as internal/redistest says) or of a fresh miniredis, and a key
// prefix unique to the test.
func redisAddr(t *testing.T, real bool) (addr, prefix string) {
	t.Helper()
	if !real {
		return miniredis.RunT(t).Addr(), "lease:"
	}
	return redistest.Addr(t), redistest.Prefix(t)
}

// redisAddrB is redisAddr(real) for a benchmark.
func redisAddrB(b *testing.B) (addr, prefix string) {
	b.Helper()
	return redistest.Addr(b), redistest.Prefix(b)
}

// process is one simulated process: its own Redis client (with a command
// counter), Redis store and lease.Store.
type process struct {
	client *redis.Client
	cmds   *commands
	lease  *lease.Store
}

// newProcess connects a process to addr; clock is the fake clock of both
// the Redis store (WithClock) and the lease.Store, or nil for the real
// clocks (the Redis store then reads TIME). It is closed when t ends.
func newProcess(t *testing.T, addr, prefix string, clock func() time.Time, opts ...lease.Option) *process {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, PoolSize: 32})
	return newProcessOn(t, client, prefix, clock, nil, opts...)
}

// newBubbleProcess is a process for a synctest bubble: its Redis client
// sets no socket deadlines. The runtime applies a socket deadline by the
// real clock, while a deadline computed in a bubble (from a context, or
// ReadTimeout) is on the bubble's fake clock, years in the past, so every
// read not already buffered would fail at once with an i/o timeout. The
// Redis store's clock is the bubble's (WithClock(time.Now)), as is the
// lease.Store's, with its background expiry goroutine.
func newBubbleProcess(t *testing.T, addr, prefix string, opts ...lease.Option) *process {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, PoolSize: 32,
		ReadTimeout: -1, WriteTimeout: -1,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(context.WithoutCancel(ctx), network, addr)
		}})
	return newProcessOn(t, client, prefix, nil, []redisstore.Option{redisstore.AllowContextTimeoutDisabled(), redisstore.WithClock(time.Now)}, opts...)
}

func newProcessOn(t *testing.T, client *redis.Client, prefix string, clock func() time.Time, ropts []redisstore.Option, opts ...lease.Option) *process {
	t.Helper()
	p := &process{client: client, cmds: &commands{}}
	client.AddHook(p.cmds)
	ropts = append(ropts, redisstore.WithPrefix(prefix))
	if clock != nil {
		ropts = append(ropts, redisstore.WithClock(clock))
		// (Returns get a minute of real time: see newFleet.)
		opts = append([]lease.Option{lease.WithClock(clock), lease.WithExpiryInterval(0), lease.WithCallTimeout(time.Minute)}, opts...)
	}
	rs, err := redisstore.New(client, ropts...)
	require.NoError(t, err)
	p.lease, err = lease.New(rs, opts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = p.lease.Close()
		_ = client.Close()
	})
	return p
}

// TestRedisCallsPerDecision: 5 processes share one hot key on Redis, 200
// requests per second each, for a simulated minute on a fake clock, the
// background expiry run every 100 ms. The limit, 2,000 per second, is not
// reached, so every request is admitted; each process leases about a
// second's demand (200, the share cap 0.1 × 2,000) per refill, so it makes
// about one Take per 200 decisions, and a return only when a lease's
// leftover outlasts the bucket's refill of it (here never: 2,000 units
// refill in the lifetime): ≤ 0.02 Redis calls per decision (one call each
// without the decorator).
func TestRedisCallsPerDecision(t *testing.T) {
	for _, real := range []bool{false, true} {
		name := map[bool]string{false: "miniredis", true: "redis"}[real]
		t.Run(name, func(t *testing.T) {
			addr, prefix := redisAddr(t, real)
			clock := clocktest.New(t0)
			var procs []*process
			for range 5 {
				procs = append(procs, newProcess(t, addr, prefix, clock.Now))
			}
			l := ptr(ratelimit.PerSecond(2000).Named("route"))
			ctx := context.Background()
			out := make([]ratelimit.Decision, 1)
			decisions := 0
			for step := range 60_000 { // 1 ms apart: 1,000 per second
				clock.Set(t0.Add(time.Duration(step) * time.Millisecond))
				p := procs[step%5]
				require.NoError(t, p.lease.Take(ctx, []ratelimit.Request{{Key: "hot", Limit: l, Cost: 1}}, out))
				require.True(t, out[0].Allowed, "step %d", step)
				decisions++
				if step%100 == 99 {
					for _, p := range procs {
						require.NoError(t, p.lease.Expire(ctx))
					}
				}
			}
			var calls, all int64
			for _, p := range procs {
				calls += p.cmds.scripts.Load()
				all += p.cmds.all.Load()
			}
			perDecision := float64(calls) / float64(decisions)
			t.Logf("%s: %d Redis calls (%d commands with the connections' handshakes) for %d decisions: %.4f per decision",
				name, calls, all, decisions, perDecision)
			require.LessOrEqual(t, perDecision, 0.02)
		})
	}
}
