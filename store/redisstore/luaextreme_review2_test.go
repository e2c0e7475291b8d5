package redisstore

// Review 2 (issue 10): the script's inlined bucket Takes (bucket_one,
// bucket_stack) and the generic path at the ends of the number ranges the
// script argues exact (capacity 2^51, level 2^52, drain 2^51, periods of
// 70 years, costs clamped to 2^53), which the existing differential tests
// (small limits: 5 or 6 per minute) never reach.

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
)

// TestReview2InlineExtremesMatchGo holds random calls on extreme buckets,
// alone and in batches, to the Go twin (rvModel: TakeAt, AdjustFrom,
// ClockStepped, ExpiresAt): every decision, stored value and PX. The
// limits: drain 2^51 per µs with capacity 2^51 (Every(2^51, 1µs), token
// and leaky), one unit per 70 years (scale 2.2e15 µs, capacity just under
// 2^51; token and leaky), scale 7 / drain 3 with burst 2^48 (leaky), and a
// rate of coprime odd numbers (scale 1000001, drain 1000003). Costs 0, 1,
// the burst, the burst + 1, random ones up to the burst, and MaxInt64
// (clamped to 2^53 on the way to Lua); Adjusts of ±1, ±the burst, random,
// and ±2^62 (the level saturates at 2^52 and 0); the clock moving forward
// by 1 µs to 12 days, and back within ClockStepTolerance, at it and
// beyond it.
func TestReview2InlineExtremesMatchGo(t *testing.T) {
	const year = 365 * 24 * time.Hour
	hd := ratelimit.Every(1<<51, time.Microsecond).Named("hd")
	hdL := ratelimit.Every(1<<51, time.Microsecond).Named("hdl").WithAlgorithm(ratelimit.LeakyBucket)
	slow := ratelimit.Every(1, 70*year).Named("slow")
	slowL := ratelimit.Every(1, 70*year).Named("slowl").WithAlgorithm(ratelimit.LeakyBucket)
	odd := ratelimit.Every(3, 7*time.Microsecond).Named("odd").WithBurst(1 << 48).WithAlgorithm(ratelimit.LeakyBucket)
	cop := ratelimit.Every(1000003, time.Second+time.Microsecond).Named("cop")
	fw := ratelimit.PerMinute(1 << 30).Named("fw").WithAlgorithm(ratelimit.FixedWindow)
	buckets := []*ratelimit.Limit{&hd, &hdL, &slow, &slowL, &odd, &cop}
	all := append(append([]*ratelimit.Limit{}, buckets...), &fw)
	for _, l := range all {
		require.NoError(t, l.Err(), l.String())
	}
	// The extremes are what the test is for.
	s1, d1, c1 := hd.Params()
	require.Equal(t, []int64{1, 1 << 51, 1 << 51}, []int64{s1, d1, c1})
	s2, d2, c2 := slow.Params()
	require.Equal(t, int64(70*year/time.Microsecond), s2)
	require.Equal(t, int64(1), d2)
	require.Less(t, c2, int64(1)<<51)
	callers := []string{"hot", "k1"}
	tol := ratelimit.ClockStepTolerance

	run := func(t *testing.T, c *redis.Client, real bool, seed uint64) {
		rng := rand.New(rand.NewPCG(seed, 0x5e7))
		now := time.Now().Truncate(time.Microsecond)
		base := fmt.Sprintf("review2-extreme:%x:", rand.Uint64())
		newStore := func(name string, opts ...Option) *Store {
			s, err := New(c, append([]Option{WithClock(func() time.Time { return now }), WithPrefix(base + name + ":")}, opts...)...)
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
		bat, lone := newStore("bat", WithExpiryMargin(time.Millisecond)), newStore("lone")
		mBat, mLone := newRVModel(), newRVModel()
		cost := func(l *ratelimit.Limit) int64 {
			switch rng.IntN(8) {
			case 0:
				return 0
			case 1:
				return l.Burst()
			case 2:
				return l.Burst() + 1
			case 3:
				return math.MaxInt64
			case 4:
				return 1
			default:
				return 1 + rng.Int64N(l.Burst())
			}
		}
		randCall := func() rvCall {
			k := callers[rng.IntN(len(callers))]
			switch x := rng.IntN(10); {
			case x < 4:
				l := buckets[rng.IntN(len(buckets))]
				return rvCall{"t", []ratelimit.Request{{Key: k, Limit: l, Cost: cost(l)}}}
			case x < 6:
				perm := rng.Perm(len(buckets))[:2+rng.IntN(3)]
				var reqs []ratelimit.Request
				for _, i := range perm {
					reqs = append(reqs, ratelimit.Request{Key: k, Limit: buckets[i], Cost: cost(buckets[i])})
				}
				return rvCall{"t", reqs}
			case x == 6:
				l := buckets[rng.IntN(len(buckets))]
				return rvCall{"t", []ratelimit.Request{{Key: k, Limit: l, Cost: cost(l)}, {Key: k, Limit: l, Cost: cost(l)}}}
			case x == 7:
				l := buckets[rng.IntN(len(buckets))]
				return rvCall{"t", []ratelimit.Request{{Key: k, Limit: l, Cost: cost(l)}, {Key: k, Limit: &fw, Cost: 1}}}
			default:
				l := buckets[rng.IntN(len(buckets))]
				d := []int64{1, -1, l.Burst(), -l.Burst(), 1 << 62, -(1 << 62), rng.Int64N(2*l.Burst()+1) - l.Burst()}[rng.IntN(7)]
				return rvCall{"a", []ratelimit.Request{{Key: k, Limit: l, Cost: d}}}
			}
		}
		pin := func(m *rvModel) {
			if !real {
				return
			}
			for k := range m.st {
				if !c.Persist(t.Context(), k).Val() && c.Exists(t.Context(), k).Val() == 0 {
					delete(m.st, k)
				}
			}
		}
		for round := range 50 {
			switch rng.IntN(9) {
			case 0:
				now = now.Add(-time.Duration(1+rng.Int64N(tol.Microseconds())) * time.Microsecond)
			case 1:
				now = now.Add(-[]time.Duration{tol, tol + time.Microsecond, time.Hour}[rng.IntN(3)])
			case 2:
				now = now.Add(time.Duration(1+rng.Int64N(1<<40)) * time.Microsecond)
			case 3:
				now = now.Add(time.Microsecond)
			default:
				now = now.Add(time.Duration(rng.Int64N(int64(10 * time.Second))))
			}
			us := ratelimit.Micros(now)
			pin(mBat)
			var calls []rvCall
			for range 2 + rng.IntN(16) {
				calls = append(calls, randCall())
			}
			var batch []*batchCall
			for _, cl := range calls {
				args, err := bat.command(cl.reqs, cl.mode)
				require.NoError(t, err)
				batch = append(batch, &batchCall{ctx: t.Context(), args: args, n: len(cl.reqs), done: make(chan struct{}, 1)})
			}
			since := time.Now()
			(&batcher{s: bat}).flush(batch)
			written := map[string]int64{}
			for i, cl := range calls {
				bc := batch[i]
				<-bc.done
				msg := fmt.Sprintf("seed %d round %d call %d of %d (%s %s) at %d", seed, round, i, len(calls), cl.mode, rvDescribe(cl.reqs), us)
				require.NoError(t, bc.err, msg)
				keys := rvKeys(bat, cl.reqs)
				want, w := mBat.apply(cl.mode == "t", keys, cl.reqs, us, bat.marginMs)
				for k, px := range w {
					written[k] = px
				}
				got := make([]ratelimit.Decision, len(cl.reqs))
				require.NoError(t, parseReply(bc.reply, bc.at, cl.reqs, got), msg)
				require.Equal(t, want, got, "batch: %s", msg)
			}
			rvCheckKeys(t, c, mBat, written, since, real, fmt.Sprintf("seed %d round %d, batch", seed, round))
			rvCheckLone(t, c, lone, mLone, pin, calls, us, real, fmt.Sprintf("seed %d round %d", seed, round))
		}
	}
	rvOnBoth(t, 4, run)
}
