package redisstore_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/internal/chaos"
	"github.com/rampmeter/ratelimit/internal/redistest"
	"github.com/rampmeter/ratelimit/store/redisstore"
)

// stack returns n distinct limits of 100 requests per minute (scale 600000
// µs per unit, drain 1), named l0..l{n-1}.
func stack(t testing.TB, n int) []*ratelimit.Limit {
	ls := make([]*ratelimit.Limit, n)
	for i := range ls {
		ls[i] = limitOf(t, ratelimit.PerMinute(100).Named(fmt.Sprint("l", i)))
	}
	return ls
}

// TestOneRoundTrip counts the commands a Take or Adjust sends: one FCALL
// however many limits are stacked (on miniredis, which has no Functions,
// one EVALSHA), plus the reload only right after the library (the script
// cache) was flushed: "Function not found", FUNCTION LOAD, FCALL again
// (NOSCRIPT, EVAL), after which one command alone works again.
// The real server is one of the test's own: on the shared one, another
// process's test loaded the library again between the flush and the Take
// (and a flush there disturbs everyone else).
func TestOneRoundTrip(t *testing.T) {
	for _, backend := range []string{"miniredis", "redis"} {
		t.Run(backend, func(t *testing.T) {
			var addr string
			if backend == "miniredis" {
				addr = miniredis.RunT(t).Addr()
			} else {
				addr = chaos.StartRedis(t).Addr
			}
			client := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1, ContextTimeoutEnabled: true})
			defer client.Close()
			prefix := redistest.Prefix(t)
			s, err := redisstore.New(client, redisstore.WithPrefix(prefix))
			require.NoError(t, err)
			require.NoError(t, client.Ping(t.Context()).Err()) // connection set up before counting
			hook := &countHook{}
			client.AddHook(hook)

			// The first call: miniredis has no FCALL (then EVALSHA, and EVAL
			// for the empty script cache), a fresh redis-server no library.
			warm := []ratelimit.Request{req("warm-up", limitOf(t, ratelimit.PerMinute(1)), 1)}
			require.NoError(t, s.Take(t.Context(), warm, make([]ratelimit.Decision, 1)))
			one, reload := []string{"fcall"}, []string{"fcall", "function", "fcall"}
			flush := func() error { return client.FunctionFlush(t.Context()).Err() }
			if backend == "miniredis" {
				assert.Equal(t, []string{"fcall", "evalsha", "eval"}, hook.take(), "first call")
				one, reload = []string{"evalsha"}, []string{"evalsha", "eval"}
				flush = func() error { return client.ScriptFlush(t.Context()).Err() }
			} else {
				assert.Equal(t, reload, hook.take(), "first call")
				// The script cache is not the library's.
				require.NoError(t, client.ScriptFlush(t.Context()).Err())
				hook.take()
				require.NoError(t, s.Take(t.Context(), warm, make([]ratelimit.Decision, 1)))
				assert.Equal(t, one, hook.take(), "after SCRIPT FLUSH")
			}

			for _, n := range []int{1, 2, 5} {
				ls := stack(t, n)
				reqs := make([]ratelimit.Request, n)
				for i, l := range ls {
					reqs[i] = req(fmt.Sprint("caller", n), l, 1)
				}
				out := make([]ratelimit.Decision, n)

				require.NoError(t, flush())
				hook.take()
				require.NoError(t, s.Take(t.Context(), reqs, out))
				assert.Equal(t, reload, hook.take(), "stack of %d after the flush", n)
				for i := range out {
					// 100 per minute, 1 taken: 99 left, full again in 600 ms,
					// decided at the server's TIME.
					assert.Positive(t, out[i].At)
					out[i].At = 0
					assert.Equal(t, ratelimit.Decision{Limit: ls[i], Allowed: true, Remaining: 99, Reset: 600 * time.Millisecond}, out[i])
				}

				require.NoError(t, s.Take(t.Context(), reqs, out))
				assert.Equal(t, one, hook.take(), "stack of %d", n)
				require.NoError(t, s.Adjust(t.Context(), reqs, out))
				assert.Equal(t, one, hook.take(), "Adjust, stack of %d", n)
			}
		})
	}
}

// TestNoScriptRecovery flushes the Function library, and with Functions
// denied the script cache, of a real server (its own, see newPrivate) and
// checks that the next Take still decides, charges exactly once and loads
// the library (the script) again. The keys get a minute's expiry margin:
// the first Take's state (one unit of 100 ms on the fake clock) must
// outlast the flush and the reload on the server's wall clock, however
// long a loaded machine stalls between them.
func TestNoScriptRecovery(t *testing.T) {
	t.Run("function", func(t *testing.T) {
		e := newPrivate(t, redisstore.WithExpiryMargin(time.Minute))
		l := limitOf(t, ratelimit.PerSecond(10))
		e.take(req("k", l, 1))
		require.NoError(t, e.client.FunctionFlush(t.Context()).Err())
		// Level 1e5 (one unit of 1e5 µs) + 2 units = 3e5 µs: 7 left.
		d := e.take(req("k", l, 2))[0]
		require.Equal(t, ratelimit.Decision{Limit: l, Allowed: true, Remaining: 7, Reset: 300 * time.Millisecond, At: e.micros()}, d)
		require.Equal(t, formatState(l, ratelimit.State{Level: 300_000, Updated: e.micros()}), e.stored(e.store.Key("k", l)))
		libs, err := e.client.FunctionList(t.Context(), redis.FunctionListQuery{}).Result()
		require.NoError(t, err)
		require.Len(t, libs, 1, "FUNCTION LOAD loads the library again")
		require.True(t, strings.HasPrefix(libs[0].Name, "rampmeter_"), libs[0].Name)
	})
	t.Run("script", func(t *testing.T) {
		// A user who may not call Functions: the store sends scripts.
		srv := chaos.StartRedis(t, "--user", "scripter", "on", ">pw", "~*", "&*", "+@all", "-fcall", "-function")
		client := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "scripter", Password: "pw", ContextTimeoutEnabled: true, MaxRetries: -1})
		t.Cleanup(func() { _ = client.Close() })
		e := newRealOn(t, client, redisstore.WithExpiryMargin(time.Minute))
		l := limitOf(t, ratelimit.PerSecond(10))
		e.take(req("k", l, 1))
		require.NoError(t, e.client.ScriptFlush(t.Context()).Err())
		d := e.take(req("k", l, 2))[0]
		require.Equal(t, ratelimit.Decision{Limit: l, Allowed: true, Remaining: 7, Reset: 300 * time.Millisecond, At: e.micros()}, d)
		require.Equal(t, formatState(l, ratelimit.State{Level: 300_000, Updated: e.micros()}), e.stored(e.store.Key("k", l)))
		exists, err := e.client.ScriptExists(t.Context(), redis.NewScript(scriptSource(t)).Hash()).Result()
		require.NoError(t, err)
		require.Equal(t, []bool{true}, exists, "EVAL loads the script into the cache again")
	})
}

// scriptSource reads the embedded script from disk for its SHA-1.
func scriptSource(t *testing.T) string {
	b, err := os.ReadFile("ratelimit.lua")
	require.NoError(t, err)
	return string(b)
}

// TestTTLIsTimeUntilFull checks the PX of written keys: the time until the
// bucket is full again, in milliseconds rounded up, at least 1. miniredis
// counts TTLs down on the test clock, so its values are exact; the real
// server counts down on its wall clock, so there PTTL is bounded by the
// time since the write (requireRealPTTL).
func TestTTLIsTimeUntilFull(t *testing.T) {
	onBoth(t, func(t *testing.T, newEnv func(*testing.T, ...redisstore.Option) *env) {
		e := newEnv(t)
		var wrote time.Time // just before the last write
		mark := func() { wrote = time.Now() }
		pttl := func(key string, want time.Duration) {
			t.Helper()
			got, err := e.client.PTTL(t.Context(), key).Result()
			require.NoError(t, err)
			if e.real() {
				requireRealPTTL(t, got, want, wrote, key)
			} else {
				require.Equal(t, want, got, "PTTL of %s", key)
			}
		}
		rpm := limitOf(t, ratelimit.PerMinute(60)) // scale 1e6, drain 1
		k := e.store.Key("k", rpm)

		// 5 units = 5e6 µs of level draining at 1 per µs: full in 5 s.
		mark()
		e.take(req("k", rpm, 5))
		pttl(k, 5*time.Second)
		// 2 s later the level is 3e6; a take of 1 makes it 4e6: 4 s.
		e.advance(2 * time.Second)
		mark()
		e.take(req("k", rpm, 1))
		pttl(k, 4*time.Second)
		// The clock steps back 1 s, beyond ratelimit.ClockStepTolerance:
		// the state is rebased (level 4e6, dated now), and a take of 1
		// makes the level 5e6: full in 5 s.
		e.advance(-time.Second)
		mark()
		e.take(req("k", rpm, 1))
		pttl(k, 5*time.Second)
		e.advance(time.Second)
		// Debt: 1 s later the level is 4e6; Adjust +60 makes it 64e6: 64 s.
		mark()
		e.adjust(req("k", rpm, 60))
		pttl(k, 64*time.Second)
		// A peek and a refused take write nothing: the TTL still counts down
		// from the last write (exactly 0 elapsed on miniredis).
		e.take(req("k", rpm, 0))
		e.take(req("k", rpm, 1))
		pttl(k, 64*time.Second)

		// Every(7, 3s): one unit is 3e6 internal units draining at 7 per
		// µs, full after ceil(3e6/7) = 428572 µs, rounded up to 429 ms.
		seven := limitOf(t, ratelimit.Every(7, 3*time.Second))
		mark()
		e.take(req("k", seven, 1))
		pttl(e.store.Key("k", seven), 429*time.Millisecond)

		if !e.real() {
			// Every(1, 1µs): full after 1 µs, but the PX is at least 1 ms.
			tiny := limitOf(t, ratelimit.Every(1, time.Microsecond))
			e.take(req("k", tiny, 1))
			pttl(e.store.Key("k", tiny), time.Millisecond)

			// When the TTL elapses the key is gone, and a peek sees a full
			// bucket, as it would have by draining.
			e.advance(65 * time.Second)
			require.Empty(t, scanPrefix(t, e.client, e.prefix))
			require.Equal(t, ratelimit.Decision{Limit: rpm, Allowed: true, Remaining: 60, At: e.micros()}, e.take(req("k", rpm, 0))[0])
		}
	})
}

// TestRefundDeletesKey checks that a key whose level returns to 0 through
// Adjust is deleted rather than stored as zero, and that a partial refund
// keeps it.
func TestRefundDeletesKey(t *testing.T) {
	onBoth(t, func(t *testing.T, newEnv func(*testing.T, ...redisstore.Option) *env) {
		e := newEnv(t)
		rpm := limitOf(t, ratelimit.PerMinute(60))
		k := e.store.Key("k", rpm)

		e.take(req("k", rpm, 3))
		require.Equal(t, formatState(rpm, ratelimit.State{Level: 3_000_000, Updated: e.micros()}), e.stored(k))
		// 1 s later the level is 2e6; refunding 1 leaves 1e6: kept.
		e.advance(time.Second)
		d := e.adjust(req("k", rpm, -1))[0]
		require.Equal(t, ratelimit.Decision{Limit: rpm, Allowed: true, Remaining: 59, Reset: time.Second, At: e.micros()}, d)
		require.Equal(t, formatState(rpm, ratelimit.State{Level: 1_000_000, Updated: e.micros()}), e.stored(k))
		// Refunding 5 more than the 1 in use empties the bucket: deleted.
		d = e.adjust(req("k", rpm, -5))[0]
		require.Equal(t, ratelimit.Decision{Limit: rpm, Allowed: true, Remaining: 60, At: e.micros()}, d)
		require.Equal(t, "", e.stored(k))
		require.Empty(t, scanPrefix(t, e.client, e.prefix))

		// A refund on a key never seen writes nothing either.
		e.adjust(req("other", rpm, -1))
		require.Empty(t, scanPrefix(t, e.client, e.prefix))
	})
}

// TestRefusedTakeWritesNothing checks all-or-nothing on the stored state: a
// stacked Take refused by one limit leaves every key as it was.
func TestRefusedTakeWritesNothing(t *testing.T) {
	onBoth(t, func(t *testing.T, newEnv func(*testing.T, ...redisstore.Option) *env) {
		e := newEnv(t)
		rpm := limitOf(t, ratelimit.PerMinute(60).Named("requests"))
		tpd := limitOf(t, ratelimit.PerDay(100_000).Named("tokens")) // scale 864000, drain 1
		e.take(req("k", rpm, 1), req("k", tpd, 99_000))
		before := []string{e.stored(e.store.Key("k", rpm)), e.stored(e.store.Key("k", tpd))}
		ds := e.take(req("k", rpm, 1), req("k", tpd, 2_000))
		// tokens: 1000 left of 100000, 2000 wanted: wait until 1000 more
		// units drain, 1000 × 864000 µs = 864 s. requests reports its
		// uncharged state: 59 left, full in 1 s.
		require.Equal(t, []ratelimit.Decision{
			{Limit: rpm, Allowed: true, Remaining: 59, Reset: time.Second, At: e.micros()},
			{Limit: tpd, Remaining: 1000, Reset: 99_000 * 864 * time.Millisecond, RetryAfter: 864 * time.Second, At: e.micros()},
		}, ds)
		require.Equal(t, before, []string{e.stored(e.store.Key("k", rpm)), e.stored(e.store.Key("k", tpd))})
	})
}

// TestRawKeyNeverInRedis checks that no Redis key or value under the prefix
// contains the caller's key, and that caller keys shaped like hash tags do
// not move the slot.
func TestRawKeyNeverInRedis(t *testing.T) {
	onBoth(t, func(t *testing.T, newEnv func(*testing.T, ...redisstore.Option) *env) {
		e := newEnv(t)
		secrets := []string{"sk-live-4f9a8b7c6d5e", "{sk-live-tagged}", "203.0.113.7"}
		ls := stack(t, 3)
		for _, k := range secrets {
			e.take(req(k, ls[0], 1), req(k, ls[1], 2), req(k, ls[2], 3))
			e.adjust(req(k, ls[1], 5))
		}
		keys := scanPrefix(t, e.client, e.prefix)
		require.Len(t, keys, 9)
		for _, key := range keys {
			v := e.stored(key)
			for _, k := range secrets {
				require.NotContains(t, key, k)
				require.NotContains(t, v, k)
			}
			// prefix {22 base64url characters}:limit-id; the only braces
			// are the store's, so Cluster hashes the HMAC.
			rest := strings.TrimPrefix(key, e.prefix)
			require.Equal(t, byte('{'), rest[0], key)
			require.Equal(t, "}:", rest[23:25], key)
			require.Equal(t, 1, strings.Count(key, "{"), key)
			require.Equal(t, 1, strings.Count(key, "}"), key)
		}
	})
}

// TestKeyFormat pins the key layout: prefix + "{" + the first 22 base64url
// characters of HMAC-SHA256(secret, key) + "}:" + Limit.ID().
func TestKeyFormat(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer client.Close()
	l := limitOf(t, ratelimit.PerMinute(60).Named("requests"))
	secret := []byte("0123456789abcdef0123456789abcdef")

	s, err := redisstore.New(client, redisstore.WithPrefix("app:"), redisstore.WithKeySecret(secret))
	require.NoError(t, err)
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte("alice"))
	want := "app:{" + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))[:22] + "}:" + l.ID()
	require.Equal(t, want, s.Key("alice", l))
	require.Equal(t, "app:{", want[:5])

	// The default secret is fixed, so every process computes the same keys.
	d1, err := redisstore.New(client)
	require.NoError(t, err)
	d2, err := redisstore.New(client)
	require.NoError(t, err)
	require.Equal(t, d1.Key("alice", l), d2.Key("alice", l))
	require.True(t, strings.HasPrefix(d1.Key("alice", l), redisstore.DefaultPrefix+"{"))
	require.NotEqual(t, strings.TrimPrefix(d1.Key("alice", l), "rampmeter:"), strings.TrimPrefix(s.Key("alice", l), "app:"))
	require.NotEqual(t, d1.Key("alice", l), d1.Key("bob", l))

	// Same caller key, different limits: same hash tag (one Cluster slot).
	other := limitOf(t, ratelimit.PerDay(1000).Named("tokens"))
	tag := func(k string) string { return k[strings.Index(k, "{") : strings.Index(k, "}")+1] }
	require.Equal(t, tag(s.Key("alice", l)), tag(s.Key("alice", other)))

	require.Equal(t, "", s.Key("alice", nil))
	var zero ratelimit.Limit
	require.Equal(t, "", s.Key("alice", &zero))
}

// TestOptions checks that New rejects every invalid option with
// ErrInvalidOption.
func TestOptions(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer client.Close()
	for name, opts := range map[string][]redisstore.Option{
		"empty prefix":      {redisstore.WithPrefix("")},
		"prefix with {":     {redisstore.WithPrefix("app{")},
		"prefix with }":     {redisstore.WithPrefix("app}:")},
		"nil clock":         {redisstore.WithClock(nil)},
		"nil secret":        {redisstore.WithKeySecret(nil)},
		"empty secret":      {redisstore.WithKeySecret([]byte{})},
		"nil option":        {nil},
		"good then invalid": {redisstore.WithPrefix("ok:"), redisstore.WithPrefix("")},
	} {
		_, err := redisstore.New(client, opts...)
		require.ErrorIs(t, err, redisstore.ErrInvalidOption, name)
	}
	_, err := redisstore.New(nil)
	require.ErrorIs(t, err, redisstore.ErrInvalidOption)

	// WithKeySecret copies: changing the caller's slice changes nothing.
	secret := []byte("secret")
	s, err := redisstore.New(client, redisstore.WithKeySecret(secret))
	require.NoError(t, err)
	l := limitOf(t, ratelimit.PerMinute(1))
	before := s.Key("k", l)
	secret[0] = 'X'
	require.Equal(t, before, s.Key("k", l))
}

// TestInvalidRequestsSendNothing checks that malformed calls, calls with a
// done context and empty calls never reach Redis.
func TestInvalidRequestsSendNothing(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()
	hook := &countHook{}
	client.AddHook(hook)
	s, err := redisstore.New(client)
	require.NoError(t, err)
	l := limitOf(t, ratelimit.PerMinute(1))
	var zero ratelimit.Limit
	out := make([]ratelimit.Decision, 2)

	for name, reqs := range map[string][]ratelimit.Request{
		"empty key":     {req("", l, 1)},
		"nil limit":     {{Key: "k", Cost: 1}},
		"invalid limit": {req("k", &zero, 1)},
		"short out":     {req("k", l, 1), req("k", l, 1), req("k", l, 1)},
	} {
		require.ErrorIs(t, s.Take(t.Context(), reqs, out), ratelimit.ErrInvalidRequest, name)
		require.ErrorIs(t, s.Adjust(t.Context(), reqs, out), ratelimit.ErrInvalidRequest, name)
	}
	require.ErrorIs(t, s.Take(t.Context(), []ratelimit.Request{req("k", l, -1)}, out), ratelimit.ErrInvalidRequest)

	require.NoError(t, s.Take(t.Context(), nil, nil))
	require.NoError(t, s.Adjust(t.Context(), nil, nil))

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.ErrorIs(t, s.Take(ctx, []ratelimit.Request{req("k", l, 1)}, out), context.Canceled)
	require.ErrorIs(t, s.Adjust(ctx, []ratelimit.Request{req("k", l, 1)}, out), context.Canceled)

	require.Empty(t, hook.take())
	require.Empty(t, m.Keys())
}

// TestCrossSlotRefused checks the pre-check on sharded clients: one call
// may stack limits of one caller key only, and a violation is reported
// without contacting any node (the client points at nothing).
func TestCrossSlotRefused(t *testing.T) {
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, MaxRedirects: -1, ContextTimeoutEnabled: true})
	defer cluster.Close()
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1", "b": "127.0.0.1:2"}, ContextTimeoutEnabled: true})
	defer ring.Close()
	ls := stack(t, 2)
	for name, client := range map[string]redis.UniversalClient{"cluster": cluster, "ring": ring} {
		hook := &countHook{}
		client.AddHook(hook)
		s, err := redisstore.New(client)
		require.NoError(t, err)
		out := make([]ratelimit.Decision, 3)
		reqs := []ratelimit.Request{req("alice", ls[0], 1), req("alice", ls[1], 1), req("bob", ls[0], 1)}
		err = s.Take(t.Context(), reqs, out)
		require.ErrorIs(t, err, ratelimit.ErrInvalidRequest, name)
		require.Contains(t, err.Error(), "CROSSSLOT", name)
		require.ErrorIs(t, s.Adjust(t.Context(), reqs, out), ratelimit.ErrInvalidRequest, name)
		// The same in a long call, where caller keys are looked up in a map.
		long := make([]ratelimit.Request, 10)
		for i := range long {
			long[i] = req("alice", ls[i%2], 1)
		}
		long[9].Key = "bob"
		require.ErrorIs(t, s.Take(t.Context(), long, make([]ratelimit.Decision, 10)), ratelimit.ErrInvalidRequest, name)
		require.Empty(t, hook.take(), name)
	}
}

// TestMixedKeysStandalone checks that a standalone client accepts one call
// over several caller keys, deciding and charging each.
func TestMixedKeysStandalone(t *testing.T) {
	e := newMini(t)
	l := limitOf(t, ratelimit.PerMinute(2))
	ds := e.take(req("alice", l, 1), req("bob", l, 2), req("alice", l, 1))
	// alice: 1 then 1 more (sequential on one key): 0 left, full in 60 s.
	require.Equal(t, []ratelimit.Decision{
		{Limit: l, Allowed: true, Remaining: 1, Reset: 30 * time.Second, At: e.micros()},
		{Limit: l, Allowed: true, Remaining: 0, Reset: 60 * time.Second, At: e.micros()},
		{Limit: l, Allowed: true, Remaining: 0, Reset: 60 * time.Second, At: e.micros()},
	}, ds)
	require.Len(t, e.mr.Keys(), 2)

	// A long call (over 8 requests, where caller keys are looked up in a
	// map): 12 requests cycling over 3 callers on PerMinute(100), scale
	// 600000. Request i is caller i%3's (i/3+1)-th unit.
	per := limitOf(t, ratelimit.PerMinute(100))
	reqs := make([]ratelimit.Request, 12)
	for i := range reqs {
		reqs[i] = req(fmt.Sprint("caller", i%3), per, 1)
	}
	for i, d := range e.take(reqs...) {
		n := int64(i/3 + 1)
		require.Equal(t, ratelimit.Decision{Limit: per, Allowed: true, Remaining: 100 - n, Reset: time.Duration(n) * 600 * time.Millisecond, At: e.micros()}, d, "request %d", i)
	}
	require.Len(t, e.mr.Keys(), 5)
}

// TestStoreErrors checks that failures are reported with context: a state
// not written by this store, a wrong-type key and an unreachable server.
func TestStoreErrors(t *testing.T) {
	e := newMini(t)
	l := limitOf(t, ratelimit.PerMinute(2))
	out := make([]ratelimit.Decision, 1)

	require.NoError(t, e.mr.Set(e.store.Key("garbage", l), "not a state"))
	err := e.store.Take(t.Context(), []ratelimit.Request{req("garbage", l, 1)}, out)
	require.ErrorContains(t, err, "redisstore: take: ")
	require.ErrorContains(t, err, "malformed rate-limit state")

	e.mr.HSet(e.store.Key("hash", l), "f", "v")
	err = e.store.Adjust(t.Context(), []ratelimit.Request{req("hash", l, 1)}, out)
	require.ErrorContains(t, err, "redisstore: adjust: ")
	require.ErrorContains(t, err, "WRONGTYPE")

	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true})
	defer down.Close()
	s, err := redisstore.New(down)
	require.NoError(t, err)
	err = s.Take(t.Context(), []ratelimit.Request{req("k", l, 1)}, out)
	require.ErrorContains(t, err, "redisstore: take: ")
	var opErr interface{ Timeout() bool }
	require.True(t, errors.As(err, &opErr), "the go-redis error stays reachable: %v", err)
}

// WithExpiryMargin lengthens every key's expiry by the margin and changes no
// decision: PerSecond(1) charged once is full again after 1 s, so the key
// lives 1,000 ms plus the 60,000 ms margin.
func TestExpiryMargin(t *testing.T) {
	e := newMini(t, redisstore.WithExpiryMargin(time.Minute))
	l := ratelimit.PerSecond(1)
	out := make([]ratelimit.Decision, 1)
	require.NoError(t, e.store.Take(t.Context(), []ratelimit.Request{{Key: "k", Limit: &l, Cost: 1}}, out))
	assert.Equal(t, time.Second, out[0].Reset)
	assert.Equal(t, time.Second+time.Minute, e.mr.TTL(e.store.Key("k", &l)))

	// Past the state's own expiry the kept key decides like a fresh one.
	e.advance(1500 * time.Millisecond)
	require.NoError(t, e.store.Take(t.Context(), []ratelimit.Request{{Key: "k", Limit: &l, Cost: 1}}, out))
	assert.True(t, out[0].Allowed)
	assert.Equal(t, int64(0), out[0].Remaining)

	for _, d := range []time.Duration{-time.Millisecond, 25 * time.Hour} {
		_, err := redisstore.New(e.client, redisstore.WithExpiryMargin(d))
		assert.ErrorIs(t, err, redisstore.ErrInvalidOption, d.String())
	}
}
