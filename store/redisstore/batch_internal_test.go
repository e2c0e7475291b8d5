package redisstore

import (
	"context"
	"strings"
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
			batch = append(batch, &batchCall{ctx: t.Context(), args: args, n: len(c.reqs), done: make(chan struct{})})
		}
		// A call whose caller has gone is dropped before the batch is sent.
		gone, cancel := context.WithCancel(t.Context())
		cancel()
		args, err := bat.command([]ratelimit.Request{{Key: "a", Limit: &rpm, Cost: 1}}, "t")
		require.NoError(t, err)
		batch = append(batch[:2], append([]*batchCall{{ctx: gone, args: args, n: 1, done: make(chan struct{})}}, batch[2:]...)...)

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
				got = append(got, c.reply)
			}
		}
		require.Equal(t, want, got)
		require.Contains(t, got[4], "malformed rate-limit state")
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
