package redisstore_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/internal/chaos"
	"github.com/rampmeter/ratelimit/internal/clocktest"
	"github.com/rampmeter/ratelimit/internal/redistest"
	"github.com/rampmeter/ratelimit/store/redisstore"
)

// t0 is the instant the tests start at; its microsecond fraction catches a
// lost sub-second part of TIME.
var t0 = time.Date(2026, 3, 4, 5, 6, 7, 891011000, time.UTC)

// env is one store under test on one Redis, with control of its clock.
type env struct {
	t      *testing.T
	name   string
	client *redis.Client
	store  *redisstore.Store
	prefix string
	mr     *miniredis.Miniredis // nil on the real server
	clock  *fakeClock           // the store's clock on the real server
	now    time.Time
	latest time.Time // the latest time set, up to which miniredis TTLs ran
}

// real reports whether e runs on the real redis-server, whose key expiry
// follows the wall clock rather than the test's clock.
func (e *env) real() bool { return e.mr == nil }

// setTime moves the clock the store decides by.
func (e *env) setTime(t time.Time) {
	e.now = t
	if e.mr == nil {
		e.clock.Set(t)
		return
	}
	e.mr.SetTime(t) // TIME, which the store reads
	// Count TTLs down only when the clock passes its latest value, as a
	// real server's absolute expiry times would: a key written at w with
	// PX p then expires no earlier than w+p, so never while its state
	// could still hold capacity. (miniredis's own ClockTTL restarts its
	// countdown after the clock steps back and would expire keys early.)
	if t.After(e.latest) {
		e.mr.FastForward(t.Sub(e.latest))
		e.latest = t
	}
}

// advance moves the clock by d (which may be negative).
func (e *env) advance(d time.Duration) { e.setTime(e.now.Add(d)) }

// micros is the current test time in µs since the epoch.
func (e *env) micros() int64 { return ratelimit.Micros(e.now) }

type fakeClock = clocktest.Clock

// newMini returns an env on a fresh miniredis whose TIME (used by the store,
// which gets no WithClock) and key expiry follow the test clock.
func newMini(t *testing.T, opts ...redisstore.Option) *env {
	t.Helper()
	m := miniredis.RunT(t)
	m.SetTime(t0)
	client := redis.NewClient(&redis.Options{Addr: m.Addr(), PoolSize: 4, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	s, err := redisstore.New(client, opts...)
	require.NoError(t, err)
	return &env{t: t, name: "miniredis", client: client, store: s, prefix: redisstore.DefaultPrefix, mr: m, now: t0, latest: t0}
}

// newReal returns an env on the real redis-server (skipping without one)
// with a unique prefix and a fake clock (WithClock); its keys are deleted
// when t ends.
func newReal(t *testing.T, opts ...redisstore.Option) *env {
	t.Helper()
	return newRealOn(t, redistest.Client(t), opts...)
}

// newPrivate is newReal on a redis-server of the test's own (started by
// internal/chaos on a free port, stopped by PID), for tests that flush the
// script cache: on the shared server other processes' tests load the
// script again, or flush it, between two of the test's commands, and a
// flush there would disturb every other user of the server.
func newPrivate(t *testing.T, opts ...redisstore.Option) *env {
	t.Helper()
	srv := chaos.StartRedis(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	return newRealOn(t, client, opts...)
}

func newRealOn(t *testing.T, client *redis.Client, opts ...redisstore.Option) *env {
	t.Helper()
	prefix := redistest.Prefix(t)
	clock := clocktest.New(t0)
	opts = append([]redisstore.Option{redisstore.WithPrefix(prefix), redisstore.WithClock(clock.Now)}, opts...)
	s, err := redisstore.New(client, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { deletePrefix(t, client, prefix) })
	return &env{t: t, name: "redis", client: client, store: s, prefix: prefix, clock: clock, now: t0}
}

// deletePrefix removes every key under prefix; tests share the server and
// must never FLUSHDB it.
func deletePrefix(t testing.TB, c redis.UniversalClient, prefix string) {
	ctx := context.Background()
	keys := scanPrefix(t, c, prefix)
	if len(keys) > 0 {
		if err := c.Del(ctx, keys...).Err(); err != nil {
			t.Errorf("cleanup: DEL: %v", err)
		}
	}
}

func scanPrefix(t testing.TB, c redis.UniversalClient, prefix string) []string {
	t.Helper()
	var keys []string
	iter := c.Scan(context.Background(), 0, escapeGlob(prefix)+"*", 1000).Iterator()
	for iter.Next(context.Background()) {
		keys = append(keys, iter.Val())
	}
	require.NoError(t, iter.Err())
	return keys
}

func escapeGlob(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`)
	return r.Replace(s)
}

// onBoth runs fn as a subtest on miniredis and on the real server.
func onBoth(t *testing.T, fn func(t *testing.T, newEnv func(*testing.T, ...redisstore.Option) *env)) {
	t.Run("miniredis", func(t *testing.T) { fn(t, newMini) })
	t.Run("redis", func(t *testing.T) { fn(t, newReal) })
}

func (e *env) take(reqs ...ratelimit.Request) []ratelimit.Decision {
	e.t.Helper()
	out := make([]ratelimit.Decision, len(reqs))
	require.NoError(e.t, e.store.Take(e.t.Context(), reqs, out))
	return out
}

func (e *env) adjust(reqs ...ratelimit.Request) []ratelimit.Decision {
	e.t.Helper()
	out := make([]ratelimit.Decision, len(reqs))
	require.NoError(e.t, e.store.Adjust(e.t.Context(), reqs, out))
	return out
}

func req(key string, l *ratelimit.Limit, cost int64) ratelimit.Request {
	return ratelimit.Request{Key: key, Limit: l, Cost: cost}
}

// limitOf returns a pointer to a valid limit, failing t otherwise.
func limitOf(t testing.TB, l ratelimit.Limit) *ratelimit.Limit {
	t.Helper()
	require.NoError(t, l.Err())
	return &l
}

// stored reads the raw state string of a key ("" when absent).
func (e *env) stored(key string) string {
	e.t.Helper()
	v, err := e.client.Get(e.t.Context(), key).Result()
	if err == redis.Nil {
		return ""
	}
	require.NoError(e.t, err)
	return v
}

// countHook records the name of every command a client sends.
type countHook struct {
	mu    sync.Mutex
	names []string
}

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.mu.Lock()
		h.names = append(h.names, cmd.Name())
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.mu.Lock()
		for _, c := range cmds {
			h.names = append(h.names, c.Name())
		}
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

// take returns the commands recorded so far and forgets them.
func (h *countHook) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.names
	h.names = nil
	return n
}

// requireRealPTTL checks got, a PTTL read on the real server, of a key
// written with PX want by a call that started at since. The server counts
// TTLs down on its wall clock from the write: by the PTTL it has taken off
// the milliseconds between its clock readings for the two commands, which
// both fall between since and now, so at most d + 1 ms, d being now − since
// truncated to the millisecond (each reading is truncated). Hence
// want − d − 1 ms ≤ got ≤ want, or the key is gone if that bound is ≤ 0.
// (A fixed allowance cannot hold: on a loaded machine the write and the
// PTTL have been 56 ms apart, and could be seconds.)
func requireRealPTTL(t testing.TB, got, want time.Duration, since time.Time, key string) {
	t.Helper()
	lo := want - time.Since(since).Truncate(time.Millisecond) - time.Millisecond
	if got == -2*time.Nanosecond { // no such key
		require.LessOrEqual(t, lo, time.Duration(0), "PTTL of %s: gone, with %v left", key, lo)
		return
	}
	require.LessOrEqual(t, got, want, "PTTL of %s", key)
	require.GreaterOrEqual(t, got, max(lo, 0), "PTTL of %s", key)
}
