package redisstore

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/internal/redistest"
)

// TestBatchDecidesLikeSequentialCalls flushes one batch of calls by hand
// (no timing involved: the batch is formed here, not by the race of
// concurrent callers) and compares every reply with the same calls made
// one by one on a second server in the same state: Takes allowed and
// refused, a stacked Take refused on its second limit (which charges
// neither), an Adjust, repeated keys, a call with a malformed state (which
// fails alone), a call whose context has ended (never sent), on miniredis
// and on a real redis-server when one is configured.
func TestBatchDecidesLikeSequentialCalls(t *testing.T) {
	rpm := ratelimit.PerMinute(2).Named("rpm")
	day := ratelimit.PerDay(3).Named("day").WithAlgorithm(ratelimit.SlidingWindow)
	win := ratelimit.PerMinute(5).Named("win").WithAlgorithm(ratelimit.FixedWindow)
	calls := []struct {
		mode string
		reqs []ratelimit.Request
	}{
		{"t", []ratelimit.Request{{Key: "a", Limit: &rpm, Cost: 1}}},
		{"t", []ratelimit.Request{{Key: "a", Limit: &rpm, Cost: 1}, {Key: "a", Limit: &day, Cost: 1}}},
		{"t", []ratelimit.Request{{Key: "a", Limit: &rpm, Cost: 1}}},                                   // refused: rpm is spent
		{"t", []ratelimit.Request{{Key: "b", Limit: &win, Cost: 2}, {Key: "b", Limit: &day, Cost: 4}}}, // refused on day
		{"t", []ratelimit.Request{{Key: "bad", Limit: &rpm, Cost: 1}}},                                 // malformed state
		{"a", []ratelimit.Request{{Key: "a", Limit: &rpm, Cost: -1}}},
		{"t", []ratelimit.Request{{Key: "a", Limit: &rpm, Cost: 1}, {Key: "a", Limit: &rpm, Cost: 1}}}, // a repeated key
		{"t", []ratelimit.Request{{Key: "b", Limit: &win, Cost: 2}}},
	}
	now := time.Date(2026, 3, 4, 5, 6, 7, 891011000, time.UTC)
	run := func(t *testing.T, newClient func(t *testing.T) *redis.Client) {
		newStore := func(name string) *Store {
			c := newClient(t)
			s, err := New(c, WithClock(func() time.Time { return now }), WithPrefix("batchtest:"+t.Name()+":"+name+":"))
			require.NoError(t, err)
			require.NoError(t, c.Set(t.Context(), s.Key("bad", &rpm), "garbage", time.Minute).Err())
			t.Cleanup(func() {
				for _, k := range []string{"a", "b", "bad"} {
					for _, l := range []*ratelimit.Limit{&rpm, &day, &win} {
						c.Del(context.Background(), s.Key(k, l))
					}
				}
			})
			return s
		}
		seq, bat := newStore("seq"), newStore("batch")

		var want []string
		for _, c := range calls {
			args, err := seq.command(c.reqs, c.mode)
			require.NoError(t, err)
			reply, err := seq.evalOne(t.Context(), args)
			if err != nil {
				reply = "error: " + err.Error()
			}
			want = append(want, strings.Replace(reply, ":seq:", ":", 1))
		}

		b := &batcher{s: bat}
		var batch []*batchCall
		for _, c := range calls {
			args, err := bat.command(c.reqs, c.mode)
			require.NoError(t, err)
			batch = append(batch, &batchCall{ctx: t.Context(), args: args, n: len(c.reqs), done: make(chan struct{}, 1)})
		}
		// A call whose caller has gone is dropped before the batch is sent.
		gone, cancel := context.WithCancel(t.Context())
		cancel()
		args, err := bat.command([]ratelimit.Request{{Key: "a", Limit: &rpm, Cost: 1}}, "t")
		require.NoError(t, err)
		batch = append(batch[:2], append([]*batchCall{{ctx: gone, args: args, n: 1, done: make(chan struct{}, 1)}}, batch[2:]...)...)

		b.flush(batch)
		var got []string
		for i, c := range batch {
			<-c.done
			if i == 2 {
				require.ErrorIs(t, c.err, context.Canceled)
				continue
			}
			if c.err != nil {
				got = append(got, strings.Replace("error: "+c.err.Error(), ":batch:", ":", 1))
			} else {
				got = append(got, c.line())
			}
		}
		require.Equal(t, want, got)
		require.Contains(t, got[4], "malformed rate-limit state")
		requireSameKeys(t, seq, bat, []string{"a", "b", "bad"}, &rpm, &day, &win)
	}
	t.Run("miniredis", func(t *testing.T) {
		m := miniredis.RunT(t)
		run(t, func(t *testing.T) *redis.Client {
			c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = c.Close() })
			return c
		})
	})
	t.Run("redis", func(t *testing.T) {
		// Two prefixes on the shared server stand for the two servers.
		run(t, func(t *testing.T) *redis.Client {
			addr := redistest.Addr(t)
			c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = c.Close() })
			return c
		})
	})
}

// requireSameKeys checks that the two stores' keys of every (key, limit)
// pair hold the same value, and both an expiry or neither.
func requireSameKeys(t *testing.T, seq, bat *Store, keys []string, limits ...*ratelimit.Limit) {
	t.Helper()
	for _, k := range keys {
		for _, l := range limits {
			sk, bk := seq.Key(k, l), bat.Key(k, l)
			sv, serr := seq.client.Get(t.Context(), sk).Result()
			bv, berr := bat.client.Get(t.Context(), bk).Result()
			require.Equal(t, serr, berr, "key %q of %s", k, l.ID())
			require.Equal(t, sv, bv, "key %q of %s", k, l.ID())
			sttl, err := seq.client.PTTL(t.Context(), sk).Result()
			require.NoError(t, err)
			bttl, err := bat.client.PTTL(t.Context(), bk).Result()
			require.NoError(t, err)
			require.Equal(t, sttl > 0, bttl > 0, "expiry of key %q of %s: %v, %v", k, l.ID(), sttl, bttl)
		}
	}
}

// TestBatchRepeatedKeys flushes batches of many calls on a few keys (a hot
// key), which the script decides reading each key once and writing it
// once: every reply, and what every key holds afterwards, must be what the
// same calls made one by one give. The batches take limits to refusal,
// refund a key back to a fresh state (deleted), and come in the compact
// form (one-request Takes only) and the general one, on miniredis and on a
// real redis-server when one is configured.
func TestBatchRepeatedKeys(t *testing.T) {
	tb := ratelimit.PerMinute(5).Named("tb")
	gcra := ratelimit.PerMinute(4).Named("gcra").WithAlgorithm(ratelimit.GCRA)
	log := ratelimit.PerMinute(3).Named("log").WithAlgorithm(ratelimit.SlidingLog)
	win := ratelimit.PerMinute(4).Named("win").WithAlgorithm(ratelimit.SlidingWindow)
	limits := []*ratelimit.Limit{&tb, &gcra, &log, &win}
	type call struct {
		mode string
		reqs []ratelimit.Request
	}
	take := func(k string, l *ratelimit.Limit, cost int64) call {
		return call{"t", []ratelimit.Request{{Key: k, Limit: l, Cost: cost}}}
	}
	var compact, general []call
	for i := range 8 { // past every limit: the last Takes are refused
		for _, l := range limits {
			compact = append(compact, take("hot", l, 1))
		}
		compact = append(compact, take(fmt.Sprint("k", i%3), &tb, 2))
	}
	general = append(general, compact[:10]...)
	general = append(general,
		call{"a", []ratelimit.Request{{Key: "hot", Limit: &tb, Cost: -100}}}, // refunded to a fresh state: deleted
		take("hot", &gcra, 0), // a peek
		call{"t", []ratelimit.Request{{Key: "hot", Limit: &tb, Cost: 1}, {Key: "hot", Limit: &log, Cost: 1}}},
		call{"a", []ratelimit.Request{{Key: "k1", Limit: &tb, Cost: -1}}},
		call{"t", []ratelimit.Request{{Key: "hot", Limit: &tb, Cost: 2}, {Key: "hot", Limit: &tb, Cost: 2}}},
		call{"a", []ratelimit.Request{{Key: "fresh", Limit: &tb, Cost: -3}}}, // nothing to refund: no key
		take("hot", &tb, 3), // refused
	)
	now := time.Date(2026, 3, 4, 5, 6, 7, 891011000, time.UTC)
	run := func(t *testing.T, c *redis.Client, calls []call) {
		newStore := func(name string) *Store {
			s, err := New(c, WithClock(func() time.Time { return now }), WithPrefix("batchtest:"+t.Name()+":"+name+":"))
			require.NoError(t, err)
			t.Cleanup(func() {
				for _, k := range []string{"hot", "k0", "k1", "k2", "fresh"} {
					for _, l := range limits {
						c.Del(context.Background(), s.Key(k, l))
					}
				}
			})
			return s
		}
		seq, bat := newStore("seq"), newStore("batch")
		var want []string
		for _, c := range calls {
			args, err := seq.command(c.reqs, c.mode)
			require.NoError(t, err)
			reply, err := seq.evalOne(t.Context(), args)
			if err != nil {
				reply = "error: " + err.Error()
			}
			want = append(want, reply)
		}
		var batch []*batchCall
		for _, c := range calls {
			args, err := bat.command(c.reqs, c.mode)
			require.NoError(t, err)
			batch = append(batch, &batchCall{ctx: t.Context(), args: args, n: len(c.reqs), done: make(chan struct{}, 1)})
		}
		(&batcher{s: bat}).flush(batch)
		var got []string
		for _, c := range batch {
			<-c.done
			require.NoError(t, c.err)
			got = append(got, c.line())
		}
		require.Equal(t, want, got)
		require.Contains(t, got[len(got)-1], " 0 ", "the last Take is refused")
		requireSameKeys(t, seq, bat, []string{"hot", "k0", "k1", "k2", "fresh"}, limits...)
	}
	for _, tc := range []struct {
		name  string
		calls []call
	}{{"compact", compact}, {"general", general}} {
		t.Run(tc.name+"/miniredis", func(t *testing.T) {
			m := miniredis.RunT(t)
			c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = c.Close() })
			run(t, c, tc.calls)
		})
		t.Run(tc.name+"/redis", func(t *testing.T) {
			run(t, redistest.Client(t), tc.calls)
		})
	}
}

// TestBatchScriptErrorWritesNothing: a batch whose script fails part way
// (a call with an argument no Store sends, on which the script raises a
// Lua error) writes nothing at all, not even the calls decided before the
// failing one: every caller gets the error, and no call is applied.
func TestBatchScriptErrorWritesNothing(t *testing.T) {
	tb := ratelimit.PerMinute(5).Named("tb")
	now := time.Date(2026, 3, 4, 5, 6, 7, 891011000, time.UTC)
	run := func(t *testing.T, c *redis.Client) {
		s, err := New(c, WithClock(func() time.Time { return now }), WithPrefix("batchtest:"+t.Name()+":"))
		require.NoError(t, err)
		t.Cleanup(func() { c.Del(context.Background(), s.Key("a", &tb), s.Key("b", &tb)) })
		var batch []*batchCall
		for _, k := range []string{"a", "b", "a"} {
			args, err := s.command([]ratelimit.Request{{Key: k, Limit: &tb, Cost: 1}}, "t")
			require.NoError(t, err)
			batch = append(batch, &batchCall{ctx: t.Context(), args: args, n: 1, done: make(chan struct{}, 1)})
		}
		batch[1].args[len(batch[1].args)-1] = "not a number"
		(&batcher{s: s}).flush(batch)
		for _, c := range batch {
			<-c.done
			require.Error(t, c.err)
		}
		n, err := c.Exists(t.Context(), s.Key("a", &tb), s.Key("b", &tb)).Result()
		require.NoError(t, err)
		require.Zero(t, n, "a failed batch wrote a key")
	}
	t.Run("miniredis", func(t *testing.T) {
		m := miniredis.RunT(t)
		c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		run(t, c)
	})
	t.Run("redis", func(t *testing.T) { run(t, redistest.Client(t)) })
}

// line returns the reply of a call decided in a batch as a lone call's
// reply would read: with the decision time in front, which the batch's
// reply gives once for all its calls.
func (c *batchCall) line() string {
	if c.at < 0 {
		return c.reply
	}
	return fmt.Sprintf("%d %s", c.at, c.reply)
}

// panicHook holds the first command it sees until gate is closed, and
// panics with "boom" on every batch command (mode "b" or "B") while armed.
type panicHook struct {
	first atomic.Bool
	gate  chan struct{}
	armed atomic.Bool
}

func (h *panicHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *panicHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *panicHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.first.CompareAndSwap(false, true) {
			<-h.gate
		}
		args := cmd.Args() // fcall name numkeys keys... mode ...; HELLO has fewer
		if len(args) < 3 {
			return next(ctx, cmd)
		}
		if nk, ok := args[2].(int); ok && len(args) > 3+nk && h.armed.Load() {
			if m := args[3+nk]; m == "b" || m == "B" {
				panic("boom")
			}
		}
		return next(ctx, cmd)
	}
}

// TestBatchPanicFailsItsCalls: a panic while a batch is decided (here a
// go-redis hook's, before the batch command is written) fails every call
// of that batch with an error wrapping errBatchPanic instead of ending the
// process from the batcher's goroutine, and the store goes on: the lone
// call before the batch and the call after it are decided, and the failed
// calls charged nothing. Limit: 10 per minute at a fixed clock, so after
// the lone call (1) and the call after the batch (1) exactly 8 remain.
func TestBatchPanicFailsItsCalls(t *testing.T) {
	l := ratelimit.PerMinute(10).Named("rpm")
	now := time.Date(2026, 3, 4, 5, 6, 7, 891011000, time.UTC)
	run := func(t *testing.T, addr string) {
		h := &panicHook{gate: make(chan struct{})}
		h.armed.Store(true)
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		c.AddHook(h)
		t.Cleanup(func() { _ = c.Close() })
		s, err := New(c, WithPipelining(), WithClock(func() time.Time { return now }), WithPrefix("batchpanic:"+t.Name()+":"))
		require.NoError(t, err)
		t.Cleanup(func() { c.Del(context.Background(), s.Key("k", &l)) })
		take := func() ([]ratelimit.Decision, error) {
			out := make([]ratelimit.Decision, 1)
			err := s.Take(t.Context(), []ratelimit.Request{{Key: "k", Limit: &l, Cost: 1}}, out)
			return out, err
		}

		lone := make(chan error, 1)
		go func() { _, err := take(); lone <- err }()
		const queued = 3
		errs := make(chan error, queued)
		for !h.first.Load() { // the lone call is held in the hook
			runtime.Gosched()
		}
		for range queued {
			go func() { _, err := take(); errs <- err }()
		}
		for {
			s.batch.mu.Lock()
			n := len(s.batch.queue)
			s.batch.mu.Unlock()
			if n == queued {
				break
			}
			runtime.Gosched()
		}
		close(h.gate)
		require.NoError(t, <-lone)
		for range queued {
			err := <-errs
			require.ErrorIs(t, err, errBatchPanic)
			require.ErrorContains(t, err, "boom")
		}

		h.armed.Store(false)
		out, err := take()
		require.NoError(t, err)
		require.True(t, out[0].Allowed)
		require.Equal(t, int64(8), out[0].Remaining, "the failed batch charged something")
	}
	t.Run("miniredis", func(t *testing.T) { run(t, miniredis.RunT(t).Addr()) })
	t.Run("redis", func(t *testing.T) { run(t, redistest.Addr(t)) })
}

// TestBatchPanicError: a panic with an error value is wrapped, so that
// errors.Is finds both it and errBatchPanic, and flush still wakes every
// call of the batch, the one never sent included.
func TestBatchPanicError(t *testing.T) {
	l := ratelimit.PerMinute(10).Named("rpm")
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	boom := errors.New("hook failed")
	c.AddHook(hookFunc(func(ctx context.Context, cmd redis.Cmder) error { panic(boom) }))
	s, err := New(c)
	require.NoError(t, err)
	gone, cancel := context.WithCancel(t.Context())
	cancel()
	var batch []*batchCall
	for _, ctx := range []context.Context{t.Context(), gone, t.Context()} {
		args, err := s.command([]ratelimit.Request{{Key: "k", Limit: &l, Cost: 1}}, "t")
		require.NoError(t, err)
		batch = append(batch, &batchCall{ctx: ctx, args: args, n: 1, done: make(chan struct{}, 1)})
	}
	(&batcher{s: s}).flush(batch)
	for _, c := range batch {
		<-c.done
		require.ErrorIs(t, c.err, errBatchPanic)
		require.ErrorIs(t, c.err, boom)
	}
	require.False(t, m.Exists(s.Key("k", &l)))
}

// hookFunc is a go-redis hook of ProcessHook alone, run in place of the
// command.
type hookFunc func(ctx context.Context, cmd redis.Cmder) error

func (f hookFunc) DialHook(next redis.DialHook) redis.DialHook { return next }
func (f hookFunc) ProcessHook(redis.ProcessHook) redis.ProcessHook {
	return redis.ProcessHook(f)
}
func (f hookFunc) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
