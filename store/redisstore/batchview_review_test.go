package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/internal/chaos"
	"github.com/rampmeter/ratelimit/internal/redistest"
)

// TestReviewBatchViewRandom flushes random batches (up to maxBatch calls)
// by hand and holds every reply, and every key's value and expiry, to the
// same calls made one by one: every algorithm the script has (buckets,
// GCRA, fixed windows aligned and first-hit, sliding window, sliding log,
// concurrency cap, calendar day), Takes of one request (the compact form
// when a batch has only those) and stacks of several limits, a key
// repeated inside a call, Adjusts that charge, refund part way and refund
// to a fresh state (a delete), releases of a concurrency slot (Adjust at
// the charge time), the clock moving between batches and within a batch
// (WithClock: the batch decides at its callers' latest time).
func TestReviewBatchViewRandom(t *testing.T) {
	tb := ratelimit.PerMinute(5).Named("tb")
	lb := ratelimit.PerMinute(6).Named("lb").WithAlgorithm(ratelimit.LeakyBucket)
	gcra := ratelimit.PerMinute(4).Named("gcra").WithAlgorithm(ratelimit.GCRA)
	fw := ratelimit.PerMinute(4).Named("fw").WithAlgorithm(ratelimit.FixedWindow)
	fw1 := ratelimit.PerMinute(3).Named("fw1").WithAlgorithm(ratelimit.FixedWindow).AlignToFirstHit()
	sw := ratelimit.PerMinute(4).Named("sw").WithAlgorithm(ratelimit.SlidingWindow)
	log := ratelimit.PerMinute(3).Named("log").WithAlgorithm(ratelimit.SlidingLog)
	conc := ratelimit.Concurrent(2, time.Minute).Named("conc")
	cal := ratelimit.PerCalendarDay(6, time.UTC).Named("cal")
	limits := []*ratelimit.Limit{&tb, &lb, &gcra, &fw, &fw1, &sw, &log, &conc, &cal}
	for _, l := range limits {
		require.NoError(t, l.Err(), l.String())
	}
	keys := []string{"hot", "k1", "k2"}

	type call struct {
		mode string
		reqs []ratelimit.Request
	}
	run := func(t *testing.T, c *redis.Client, seed uint64, compactOnly bool) {
		rng := rand.New(rand.NewPCG(seed, 7))
		clock := time.Date(2026, 3, 4, 23, 59, 30, 0, time.UTC) // the calendar day rolls over
		var now time.Time
		base := fmt.Sprintf("review:%s:%x:", t.Name(), rand.Uint64())
		newStore := func(name string) *Store {
			s, err := New(c, WithClock(func() time.Time { return now }), WithPrefix(base+name+":"))
			require.NoError(t, err)
			t.Cleanup(func() {
				for _, k := range keys {
					for _, l := range limits {
						c.Del(context.Background(), s.Key(k, l))
					}
				}
			})
			return s
		}
		seq, bat := newStore("seq"), newStore("bat")
		// charged[i]: At of the Takes allowed so far, by (key, limit), to
		// release concurrency slots and settle windows.
		ats := map[string][]int64{}
		randReq := func(take bool) ratelimit.Request {
			l := limits[rng.IntN(len(limits))]
			k := keys[rng.IntN(len(keys))]
			r := ratelimit.Request{Key: k, Limit: l, Cost: rng.Int64N(3)}
			if !take {
				r.Cost = rng.Int64N(9) - 6
				if r.Cost == 0 {
					r.Cost = -100 // to a fresh state
				}
				if a := ats[k+l.ID()]; len(a) > 0 {
					r.At = a[rng.IntN(len(a))]
				}
			}
			return r
		}
		var nok, nrefused, nerr int
		defer func() {
			t.Logf("seed %d: %d calls admitted (or adjusted), %d with a refusal, %d errors", seed, nok, nrefused, nerr)
			require.NotZero(t, nok)
			require.NotZero(t, nrefused)
			require.Zero(t, nerr)
		}()
		for round := range 12 {
			clock = clock.Add(time.Duration(rng.IntN(20_000)) * time.Millisecond)
			n := 2 + rng.IntN(maxBatch-1)
			var calls []call
			var nows []time.Time
			for range n {
				var cl call
				switch x := rng.IntN(10); {
				case compactOnly || x < 5:
					cl = call{"t", []ratelimit.Request{randReq(true)}}
				case x < 8:
					m := 2 + rng.IntN(3)
					cl.mode = "t"
					for range m {
						cl.reqs = append(cl.reqs, randReq(true))
					}
				default:
					cl.mode = "a"
					for range 1 + rng.IntN(2) {
						cl.reqs = append(cl.reqs, randReq(false))
					}
				}
				calls = append(calls, cl)
				// Each caller reads the clock a little later.
				nows = append(nows, clock.Add(time.Duration(len(nows))*time.Microsecond))
			}
			// The batch decides at its callers' latest time: so do the
			// calls one by one.
			latest := nows[len(nows)-1]
			var want []string
			for _, cl := range calls {
				now = latest
				args, err := seq.command(cl.reqs, cl.mode)
				require.NoError(t, err)
				stride := 2
				if cl.mode != "t" {
					stride = 3
				}
				seq.calendarArgs(cl.reqs, args, stride, 0)
				reply, err := seq.evalOne(t.Context(), args)
				if err != nil {
					reply = "error: " + err.Error()
				}
				want = append(want, reply)
			}
			var batch []*batchCall
			for i, cl := range calls {
				now = nows[i]
				args, err := bat.command(cl.reqs, cl.mode)
				require.NoError(t, err)
				stride := 2
				if cl.mode != "t" {
					stride = 3
				}
				// The bounds from the batch's time, as the sequential calls'.
				bat.calendarArgs(cl.reqs, args, stride, ratelimit.Micros(latest))
				batch = append(batch, &batchCall{ctx: t.Context(), args: args, n: len(cl.reqs), done: make(chan struct{}, 1)})
			}
			(&batcher{s: bat}).flush(batch)
			for i, bc := range batch {
				<-bc.done
				got := bc.line()
				switch {
				case bc.err != nil:
					nerr++
				case calls[i].mode == "t" && refusedReply(got, len(calls[i].reqs)):
					nrefused++
				default:
					nok++
				}
				if bc.err != nil {
					got = "error: " + bc.err.Error()
				}
				require.Equal(t, strings.ReplaceAll(want[i], ":seq:", ":bat:"), got,
					"round %d call %d of %d: %s %v", round, i, len(calls), calls[i].mode, calls[i].reqs)
				// Record the charge times of allowed Takes.
				if calls[i].mode == "t" && bc.err == nil && strings.Count(got, " ") > 0 {
					f := strings.Fields(got)
					if len(f) >= 1+5*len(calls[i].reqs) {
						allowed := true
						for j := range calls[i].reqs {
							allowed = allowed && f[1+5*j] == "1"
						}
						if allowed {
							var at int64
							fmt.Sscan(f[0], &at)
							for _, r := range calls[i].reqs {
								ats[r.Key+r.Limit.ID()] = append(ats[r.Key+r.Limit.ID()], at)
							}
						}
					}
				}
			}
			for _, k := range keys {
				for _, l := range limits {
					sk, bk := seq.Key(k, l), bat.Key(k, l)
					sv, serr := c.Get(t.Context(), sk).Result()
					bv, berr := c.Get(t.Context(), bk).Result()
					require.Equal(t, serr, berr, "round %d key %q of %s", round, k, l.ID())
					require.Equal(t, sv, bv, "round %d key %q of %s", round, k, l.ID())
					sttl := c.PTTL(t.Context(), sk).Val()
					bttl := c.PTTL(t.Context(), bk).Val()
					d := sttl - bttl
					require.True(t, d > -2*time.Second && d < 2*time.Second && (sttl > 0) == (bttl > 0),
						"round %d expiry of key %q of %s: %v one by one, %v batched", round, k, l.ID(), sttl, bttl)
				}
			}
		}
	}
	for _, compactOnly := range []bool{true, false} {
		name := "general"
		if compactOnly {
			name = "compact"
		}
		t.Run(name+"/miniredis", func(t *testing.T) {
			m := miniredis.RunT(t)
			c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = c.Close() })
			for seed := range uint64(4) {
				run(t, c, seed, compactOnly)
			}
		})
		t.Run(name+"/redis", func(t *testing.T) {
			c := redistest.Client(t)
			for seed := range uint64(4) {
				run(t, c, seed, compactOnly)
			}
		})
	}
}

// refusedReply reports whether the script's reply to a Take of n requests
// refuses one of them.
func refusedReply(reply string, n int) bool {
	f := strings.Fields(reply)
	for j := range n {
		if 1+5*j < len(f) && f[1+5*j] == "0" {
			return true
		}
	}
	return false
}

// TestReviewBatchOOM runs a batch on a private redis-server that is out of
// memory (maxmemory under used memory, noeviction): Redis refuses the
// batch's first write, and the script decides the batch again one call at
// a time, so that every call fails or succeeds as it would alone: the
// peeks (which write nothing) are answered, the Takes that would write
// fail with Redis's OOM error, and no key is written.
func TestReviewBatchOOM(t *testing.T) {
	srv := chaosStart(t)
	c := redis.NewClient(&redis.Options{Addr: srv, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	tb := ratelimit.PerMinute(5).Named("tb")
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	s, err := New(c, WithClock(func() time.Time { return now }), WithPrefix("review-oom:"))
	require.NoError(t, err)
	require.NoError(t, s.Take(t.Context(), []ratelimit.Request{{Key: "p", Limit: &tb, Cost: 2}}, make([]ratelimit.Decision, 1)))
	stored := c.Get(t.Context(), s.Key("p", &tb)).Val()
	require.NotEmpty(t, stored)
	require.NoError(t, c.Set(t.Context(), "ballast", strings.Repeat("x", 1<<20), 0).Err())
	require.NoError(t, c.ConfigSet(t.Context(), "maxmemory-policy", "noeviction").Err())
	require.NoError(t, c.ConfigSet(t.Context(), "maxmemory", "1048576").Err())
	t.Cleanup(func() { c.ConfigSet(context.Background(), "maxmemory", "0") })

	calls := []struct {
		key  string
		cost int64
	}{{"p", 0}, {"a", 1}, {"p", 1}, {"p", 0}, {"a", 0}}
	var batch []*batchCall
	for _, cl := range calls {
		args, err := s.command([]ratelimit.Request{{Key: cl.key, Limit: &tb, Cost: cl.cost}}, "t")
		require.NoError(t, err)
		batch = append(batch, &batchCall{ctx: t.Context(), args: args, n: 1, done: make(chan struct{}, 1)})
	}
	(&batcher{s: s}).flush(batch)
	var got []string
	for _, bc := range batch {
		<-bc.done
		if bc.err != nil {
			got = append(got, "error: "+strings.SplitN(bc.err.Error(), " ", 2)[0])
		} else {
			got = append(got, bc.line())
		}
	}
	us := ratelimit.Micros(now)
	// p holds 2 of 5 (refilling at one per 12 s).
	require.Equal(t, []string{
		fmt.Sprintf("%d 1 3 24000000 0 0", us),
		"error: OOM",
		"error: OOM",
		fmt.Sprintf("%d 1 3 24000000 0 0", us),
		fmt.Sprintf("%d 1 5 0 0 0", us),
	}, got)
	require.Equal(t, stored, c.Get(t.Context(), s.Key("p", &tb)).Val())
	require.Zero(t, c.Exists(t.Context(), s.Key("a", &tb)).Val())
}

// chaosStart starts a private redis-server (stopped by PID when t ends)
// and returns its address.
func chaosStart(t *testing.T) string { return chaos.StartRedis(t).Addr }

// TestReviewCompactBatchCallFailsAlone: in the compact form (every call a
// one-request Take), a call on a malformed state fails alone, with the
// script's error, and the calls around it, on the key before and after
// it, are decided and written as one by one.
func TestReviewCompactBatchCallFailsAlone(t *testing.T) {
	tb := ratelimit.PerMinute(5).Named("tb")
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	run := func(t *testing.T, c *redis.Client) {
		s, err := New(c, WithClock(func() time.Time { return now }), WithPrefix(fmt.Sprintf("review-compact:%x:", rand.Uint64())))
		require.NoError(t, err)
		t.Cleanup(func() { c.Del(context.Background(), s.Key("a", &tb), s.Key("bad", &tb)) })
		require.NoError(t, c.Set(t.Context(), s.Key("bad", &tb), "garbage", time.Minute).Err())
		var batch []*batchCall
		for _, k := range []string{"a", "bad", "a", "a"} {
			args, err := s.command([]ratelimit.Request{{Key: k, Limit: &tb, Cost: 2}}, "t")
			require.NoError(t, err)
			batch = append(batch, &batchCall{ctx: t.Context(), args: args, n: 1, done: make(chan struct{}, 1)})
		}
		(&batcher{s: s}).flush(batch)
		us := ratelimit.Micros(now)
		var got []string
		for _, bc := range batch {
			<-bc.done
			if bc.err != nil {
				got = append(got, "error: "+bc.err.Error())
			} else {
				got = append(got, bc.line())
			}
		}
		require.Equal(t, []string{
			fmt.Sprintf("%d 1 3 24000000 0 0", us),
			"error: ERR rampmeter: malformed rate-limit state at key " + s.Key("bad", &tb),
			fmt.Sprintf("%d 1 1 48000000 0 0", us),
			fmt.Sprintf("%d 0 1 48000000 12000000 0", us),
		}, got)
		require.Equal(t, "garbage", c.Get(t.Context(), s.Key("bad", &tb)).Val())
		pttl := c.PTTL(t.Context(), s.Key("a", &tb)).Val()
		require.True(t, pttl > 40*time.Second && pttl <= 48*time.Second+time.Duration(s.marginMs)*time.Millisecond+time.Millisecond, "%v", pttl)
	}
	t.Run("miniredis", func(t *testing.T) {
		m := miniredis.RunT(t)
		c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		run(t, c)
	})
	t.Run("redis", func(t *testing.T) { run(t, redistest.Client(t)) })
}
