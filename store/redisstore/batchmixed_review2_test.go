package redisstore

// Review 2 (issue 10): a pipelined batch of calls of every algorithm on
// the same few keys, many calls per key, against the same calls made one
// by one (no model needed: a batch must decide each call exactly as if
// alone, in order, and leave the same keys).

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
)

// TestReview2BatchMixedAlgorithmsMatchesLone: random batches of up to 40
// calls over two caller keys and every algorithm the script implements
// (token and leaky bucket, GCRA, fixed window aligned to the epoch and to
// the first hit, sliding window, sliding log, concurrency cap, calendar
// day), as one-request Takes (the compact form when a batch has only
// those), stacks with repeated keys, stacks mixing inlined buckets and
// generic algorithms, and Adjusts (refunds placed by the At of an earlier
// decision, releases of concurrency slots); the clock moving forward,
// across UTC midnight, and back within and beyond ClockStepTolerance. The
// batch's reply lines must equal the replies of the same calls made one by
// one on another prefix, and every key must hold the same value and
// expiry afterwards (PTTL exact on miniredis, present-or-not on Redis).
func TestReview2BatchMixedAlgorithmsMatchesLone(t *testing.T) {
	tb := ratelimit.PerMinute(5).Named("tb")
	lb := ratelimit.Every(3, 2*time.Second).Named("lb").WithBurst(4).WithAlgorithm(ratelimit.LeakyBucket)
	gc := ratelimit.PerMinute(4).Named("gc").WithAlgorithm(ratelimit.GCRA)
	fw := ratelimit.PerMinute(4).Named("fw").WithAlgorithm(ratelimit.FixedWindow)
	fh := ratelimit.PerMinute(4).Named("fh").WithAlgorithm(ratelimit.FixedWindow).AlignToFirstHit()
	sw := ratelimit.PerMinute(4).Named("sw").WithAlgorithm(ratelimit.SlidingWindow)
	sl := ratelimit.PerMinute(3).Named("sl").WithAlgorithm(ratelimit.SlidingLog)
	cc := ratelimit.Concurrent(2, 30*time.Second).Named("cc")
	cal := ratelimit.PerCalendarDay(6, time.UTC).Named("cal")
	all := []*ratelimit.Limit{&tb, &lb, &gc, &fw, &fh, &sw, &sl, &cc, &cal}
	for _, l := range all {
		require.NoError(t, l.Err(), l.String())
	}
	callers := []string{"hot", "k1"}
	tol := ratelimit.ClockStepTolerance

	run := func(t *testing.T, c *redis.Client, real bool, seed uint64) {
		rng := rand.New(rand.NewPCG(seed, 0xba7c))
		// Just before a UTC midnight, near real time (a real server's
		// expiries run on its own clock).
		now := time.Now().UTC().Truncate(24 * time.Hour).Add(24*time.Hour - 3*time.Minute)
		if real {
			now = time.Now().Truncate(time.Microsecond)
		}
		base := fmt.Sprintf("review2-mixed:%x:", rand.Uint64())
		newStore := func(name string) *Store {
			s, err := New(c, WithClock(func() time.Time { return now }), WithPrefix(base+name+":"), WithExpiryMargin(time.Hour))
			require.NoError(t, err)
			t.Cleanup(func() {
				for _, k := range callers {
					for _, l := range all {
						c.Del(context.Background(), s.Key(k, l))
					}
				}
			})
			return s
		}
		bat, lone := newStore("bat"), newStore("lone")
		var ats []int64 // At of earlier decisions, for Adjusts
		randReq := func(k string) ratelimit.Request {
			l := all[rng.IntN(len(all))]
			return ratelimit.Request{Key: k, Limit: l, Cost: []int64{0, 1, 1, 2, l.Burst(), l.Burst() + 1}[rng.IntN(6)]}
		}
		randCall := func(compact bool) rvCall {
			k := callers[rng.IntN(len(callers))]
			if compact {
				return rvCall{"t", []ratelimit.Request{randReq(k)}}
			}
			switch x := rng.IntN(10); {
			case x < 4:
				return rvCall{"t", []ratelimit.Request{randReq(k)}}
			case x < 7: // a stack of 2 to 4, keys and limits may repeat
				var reqs []ratelimit.Request
				for range 2 + rng.IntN(3) {
					r := randReq(k)
					if rng.IntN(3) == 0 {
						r.Key = callers[rng.IntN(len(callers))]
					}
					reqs = append(reqs, r)
				}
				return rvCall{"t", reqs}
			default:
				r := randReq(k)
				r.Cost = rng.Int64N(5) - 3
				if len(ats) > 0 && rng.IntN(3) > 0 {
					r.At = ats[rng.IntN(len(ats))]
				}
				return rvCall{"a", []ratelimit.Request{r}}
			}
		}
		keyState := func(s *Store) map[string]string {
			st := map[string]string{}
			for _, k := range callers {
				for _, l := range all {
					rk := s.Key(k, l)
					v, err := c.Get(t.Context(), rk).Result()
					if err == redis.Nil {
						continue
					}
					require.NoError(t, err)
					px := c.PTTL(t.Context(), rk).Val()
					if real {
						st[k+" "+l.Name()] = fmt.Sprintf("%s px>0:%v", v, px > 0)
					} else {
						st[k+" "+l.Name()] = fmt.Sprintf("%s px:%v", v, px)
					}
				}
			}
			return st
		}
		for round := range 80 {
			switch rng.IntN(10) {
			case 0:
				now = now.Add(-time.Duration(1+rng.Int64N(tol.Microseconds())) * time.Microsecond)
			case 1:
				now = now.Add(-[]time.Duration{tol, tol + time.Microsecond, 40 * time.Second}[rng.IntN(3)])
			default:
				now = now.Add(time.Duration(rng.Int64N(int64(12 * time.Second))))
			}
			compact := rng.IntN(4) == 0
			var calls []rvCall
			for range 2 + rng.IntN(39) {
				calls = append(calls, randCall(compact))
			}
			var batch []*batchCall
			for _, cl := range calls {
				args, err := bat.command(cl.reqs, cl.mode)
				require.NoError(t, err)
				bat.calendarArgs(cl.reqs, args, map[string]int{"t": 2, "a": 3}[cl.mode], 0)
				batch = append(batch, &batchCall{ctx: t.Context(), args: args, n: len(cl.reqs), done: make(chan struct{}, 1)})
			}
			(&batcher{s: bat}).flush(batch)
			for i, cl := range calls {
				bc := batch[i]
				<-bc.done
				msg := fmt.Sprintf("seed %d round %d call %d of %d (%s %s) at %d", seed, round, i, len(calls), cl.mode, rvDescribe(cl.reqs), ratelimit.Micros(now))
				require.NoError(t, bc.err, msg)
				got := make([]ratelimit.Decision, len(cl.reqs))
				require.NoError(t, parseReply(bc.reply, bc.at, cl.reqs, got), msg)
				want := make([]ratelimit.Decision, len(cl.reqs))
				if cl.mode == "t" {
					require.NoError(t, lone.Take(t.Context(), cl.reqs, want), msg)
				} else {
					require.NoError(t, lone.Adjust(t.Context(), cl.reqs, want), msg)
				}
				require.Equal(t, want, got, msg)
				for _, d := range got {
					if d.Limit == &cc && d.Allowed {
						ats = append(ats, d.At)
					}
				}
				ats = append(ats, got[0].At)
			}
			require.Equal(t, keyState(lone), keyState(bat), "seed %d round %d: stored keys", seed, round)
		}
	}
	rvOnBoth(t, 3, run)
}
