package memory_test

// Review 2 (issue 10): the one- and two-request paths (TakeOne, TakeTwo,
// AdjustOne) against Take and Adjust with slices, and what a small key cap
// (WithMaxKeys) does to a stack.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/memory"
)

// TestReview2SmallCapStackEnforcesEveryLimit: WithMaxKeys(64) keeps 64
// shards (the largest power of two not above the cap) of one entry each.
// One caller with a stack of two limits, a roomy one (100/min) and a
// strict one (1/min), holds two entries, far below the cap of 64; yet the
// caller's two entries live in one shard (all limits of a key share its
// shard), which holds one: the second entry of the stack cannot be
// inserted (the only candidate for eviction is the call's own first entry,
// which is protected) and is dropped. The strict limit then starts afresh
// on every call and never refuses.
//
// Expected from first principles: at one instant, the first call charges
// 1 of 1 on the strict limit; the second call finds it empty and must be
// refused with RetryAfter = 60 s (one unit refills in 60 s), the roomy one
// reporting its uncharged state (99 left). The cap (64 entries) is not
// reached by the 2 entries, so no eviction policy can excuse the loss.
//
// Through TakeTwo, Take with two requests, Take with three (the general
// stack path), and a Limiter over the store (its pair path).
func TestReview2SmallCapStackEnforcesEveryLimit(t *testing.T) {
	roomy := ratelimit.PerMinute(100).Named("roomy")
	strict := ratelimit.PerMinute(1).Named("strict")
	other := ratelimit.PerMinute(100).Named("other")
	for _, l := range []*ratelimit.Limit{&roomy, &strict, &other} {
		require.NoError(t, l.Err())
	}
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	ctx := context.Background()
	type path struct {
		name string
		take func(s *memory.Store) []ratelimit.Decision
	}
	paths := []path{
		{"TakeTwo", func(s *memory.Store) []ratelimit.Decision {
			aA, rA, resA, raA, dA, atA, aB, rB, resB, raB, dB, atB, err := s.TakeTwo(ctx, "k", &roomy, 1, "k", &strict, 1)
			require.NoError(t, err)
			return []ratelimit.Decision{
				{Limit: &roomy, Allowed: aA, Remaining: rA, Reset: resA, RetryAfter: raA, Delay: dA, At: atA},
				{Limit: &strict, Allowed: aB, Remaining: rB, Reset: resB, RetryAfter: raB, Delay: dB, At: atB},
			}
		}},
		{"Take2", func(s *memory.Store) []ratelimit.Decision {
			out := make([]ratelimit.Decision, 2)
			require.NoError(t, s.Take(ctx, []ratelimit.Request{{Key: "k", Limit: &roomy, Cost: 1}, {Key: "k", Limit: &strict, Cost: 1}}, out))
			return out
		}},
		{"Take3", func(s *memory.Store) []ratelimit.Decision {
			out := make([]ratelimit.Decision, 3)
			require.NoError(t, s.Take(ctx, []ratelimit.Request{{Key: "k", Limit: &roomy, Cost: 1}, {Key: "k", Limit: &strict, Cost: 1}, {Key: "k", Limit: &other, Cost: 1}}, out))
			return out[:2]
		}},
	}
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			s, err := memory.New(memory.WithClock(clock), memory.WithMaxKeys(64))
			require.NoError(t, err)
			first := p.take(s)
			require.True(t, first[0].Allowed && first[1].Allowed)
			second := p.take(s)
			us := ratelimit.Micros(now)
			require.Equal(t, []ratelimit.Decision{
				{Limit: &roomy, Allowed: true, Remaining: 99, Reset: 600 * time.Millisecond, At: us},
				{Limit: &strict, Allowed: false, Remaining: 0, Reset: time.Minute, RetryAfter: time.Minute, At: us},
			}, second, "the strict limit's entry was dropped: Len %d of a cap of 64", s.Len())
		})
	}
	t.Run("Limiter", func(t *testing.T) {
		s, err := memory.New(memory.WithClock(clock), memory.WithMaxKeys(64))
		require.NoError(t, err)
		lim, err := ratelimit.New(s, ratelimit.WithLimits(roomy, strict))
		require.NoError(t, err)
		res, err := lim.Take(ctx, "k")
		require.NoError(t, err)
		require.True(t, res.Allowed)
		res, err = lim.Take(ctx, "k")
		require.NoError(t, err)
		require.False(t, res.Allowed, "1 per minute admitted twice at one instant (store Len %d, cap 64)", s.Len())
	})
}

// TestReview2PairPathsAgreeWithStepsBack holds TakeTwo, Take of two
// requests, and Take of the same two plus a peek on a key of its own (the
// general path) to each other, on three stores fed the same calls, with a
// clock that moves forward, and back within ClockStepTolerance, at it and
// beyond it (the existing review test only moves forward), the same key
// twice, the same limit ID twice from two distinct Limit values (equal
// strings at different addresses), and Adjusts through AdjustOne and
// Adjust. Decisions (every field) and the state afterwards (a peek of
// every entry) must agree.
func TestReview2PairPathsAgreeWithStepsBack(t *testing.T) {
	tb := ratelimit.PerMinute(5).Named("tb")
	tb2 := ratelimit.PerMinute(5).Named("tb") // the same ID, another string
	lb := ratelimit.Every(3, 2*time.Second).Named("lb").WithBurst(4).WithAlgorithm(ratelimit.LeakyBucket)
	gcra := ratelimit.PerMinute(4).Named("gcra").WithAlgorithm(ratelimit.GCRA)
	fw := ratelimit.PerMinute(4).Named("fw").WithAlgorithm(ratelimit.FixedWindow)
	sw := ratelimit.PerMinute(4).Named("sw").WithAlgorithm(ratelimit.SlidingWindow)
	log := ratelimit.PerMinute(3).Named("log").WithAlgorithm(ratelimit.SlidingLog)
	conc := ratelimit.Concurrent(2, 30*time.Second).Named("conc")
	limits := []*ratelimit.Limit{&tb, &tb2, &lb, &gcra, &fw, &sw, &log, &conc}
	for _, l := range limits {
		require.NoError(t, l.Err())
	}
	require.Equal(t, tb.ID(), tb2.ID())
	peekL := ratelimit.PerSecond(1000).Named("peek")
	tol := ratelimit.ClockStepTolerance
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	ctx := context.Background()
	newStore := func() *memory.Store {
		s, err := memory.New(memory.WithClock(clock), memory.WithShards(1)) // one shard: sweeps at the same calls in every store (see TestReview2ExpiredEntryRevivedByStepBack)
		require.NoError(t, err)
		return s
	}
	two, sl2, gen := newStore(), newStore(), newStore()
	keys := []string{"hot", "k1", "k2"}
	rng := rand.New(rand.NewPCG(7, 11))
	for step := range 20000 {
		switch rng.IntN(10) {
		case 0:
			now = now.Add(-time.Duration(1+rng.Int64N(tol.Microseconds())) * time.Microsecond)
		case 1:
			now = now.Add(-[]time.Duration{tol, tol + time.Microsecond, 5 * time.Second, 2 * time.Hour}[rng.IntN(4)])
		default:
			now = now.Add(time.Duration(rng.Int64N(int64(4 * time.Second))))
		}
		a := ratelimit.Request{Key: keys[rng.IntN(len(keys))], Limit: limits[rng.IntN(len(limits))], Cost: rng.Int64N(4)}
		b := ratelimit.Request{Key: keys[rng.IntN(len(keys))], Limit: limits[rng.IntN(len(limits))], Cost: rng.Int64N(4)}
		if rng.IntN(2) == 0 {
			b.Key = a.Key
		}
		msg := fmt.Sprintf("step %d at %d: a %s %s %d, b %s %s %d", step, ratelimit.Micros(now), a.Key, a.Limit.ID(), a.Cost, b.Key, b.Limit.ID(), b.Cost)
		if rng.IntN(6) == 0 { // an Adjust of one request
			r := a
			r.Cost = rng.Int64N(7) - 4
			r.At = ratelimit.Micros(now) - rng.Int64N(int64(90*time.Second/time.Microsecond))
			al, rem, res, ra, dl, at, err := two.AdjustOne(ctx, r)
			require.NoError(t, err, msg)
			got := ratelimit.Decision{Limit: r.Limit, Allowed: al, Remaining: rem, Reset: res, RetryAfter: ra, Delay: dl, At: at}
			for _, s := range []*memory.Store{sl2, gen} {
				out := make([]ratelimit.Decision, 1)
				require.NoError(t, s.Adjust(ctx, []ratelimit.Request{r}, out), msg)
				require.Equal(t, out[0], got, "adjust: %s", msg)
			}
			continue
		}
		aA, rA, resA, raA, dA, atA, aB, rB, resB, raB, dB, atB, err := two.TakeTwo(ctx, a.Key, a.Limit, a.Cost, b.Key, b.Limit, b.Cost)
		require.NoError(t, err, msg)
		got := []ratelimit.Decision{
			{Limit: a.Limit, Allowed: aA, Remaining: rA, Reset: resA, RetryAfter: raA, Delay: dA, At: atA},
			{Limit: b.Limit, Allowed: aB, Remaining: rB, Reset: resB, RetryAfter: raB, Delay: dB, At: atB},
		}
		out2 := make([]ratelimit.Decision, 2)
		require.NoError(t, sl2.Take(ctx, []ratelimit.Request{a, b}, out2), msg)
		require.Equal(t, out2, got, "Take of two: %s", msg)
		out3 := make([]ratelimit.Decision, 3)
		require.NoError(t, gen.Take(ctx, []ratelimit.Request{a, b, {Key: "peek", Limit: &peekL}}, out3), msg)
		require.Equal(t, out3[:2], got, "general stack: %s", msg)
		if step%97 == 0 { // every entry's state, by a peek in each store
			for _, k := range keys {
				for _, l := range limits {
					var want ratelimit.Decision
					for i, s := range []*memory.Store{two, sl2, gen} {
						al, rem, res, ra, dl, at, err := s.TakeOne(ctx, ratelimit.Request{Key: k, Limit: l})
						require.NoError(t, err)
						d := ratelimit.Decision{Allowed: al, Remaining: rem, Reset: res, RetryAfter: ra, Delay: dl, At: at}
						if i == 0 {
							want = d
						}
						require.Equal(t, want, d, "peek %s %s after %s", k, l.ID(), msg)
					}
				}
			}
		}
	}
}

// TestReview2ExpiredEntryRevivedByStepBack: an entry that has expired
// (its bucket full again) by a time the store has decided at "behaves
// exactly like an absent one" (package doc), but only until the clock
// steps back past its expiry: an expired entry not yet swept is then live
// again, and its old usage, already paid off, is charged once more. Whether
// it was swept depends on other keys: inserting a key into its shard more
// than a minute after the last sweep sweeps it. With several shards which
// keys share a shard depends on the store's random hash seed, so two
// stores fed the same calls decide differently (with WithShards(4),
// TestReview2PairPathsAgreeWithStepsBack failed at random steps, on a
// GCRA entry, until it was given one shard). A wall clock that steps back
// (WithClock(time.Now), the option the doc recommends for wall-clock
// times, and an NTP step) is enough.
//
// From first principles, tb = 4/min (scale 15e6 µs per unit, capacity 60e6):
// at T0 "k" spends all 4 (level 60e6, full again at T0+60 s). At T1 = T0+2
// min the store decides another call (on "x"), so it has seen k's bucket
// full. At T2 = T1-2 h (a step back beyond ClockStepTolerance) a Take of 1
// on "k" must find a full bucket, as a key never seen: allowed, 3 left,
// reset 15 s. Store "swept" (x inserted at T1, one shard) answers that;
// store "unswept" (x only peeked at T1, so nothing inserted) revives k's
// entry, rebases it to T2 with its level kept (60e6: four units of usage
// paid off a minute before T1), and refuses for 15 s.
func TestReview2ExpiredEntryRevivedByStepBack(t *testing.T) {
	tb := ratelimit.PerMinute(4).Named("tb")
	require.NoError(t, tb.Err())
	ctx := context.Background()
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	for _, xCost := range []int64{1, 0} {
		name := map[int64]string{1: "swept", 0: "unswept"}[xCost]
		t.Run(name, func(t *testing.T) {
			now := t0
			s, err := memory.New(memory.WithClock(func() time.Time { return now }), memory.WithShards(1))
			require.NoError(t, err)
			out := make([]ratelimit.Decision, 1)
			require.NoError(t, s.Take(ctx, []ratelimit.Request{{Key: "k", Limit: &tb, Cost: 4}}, out))
			require.True(t, out[0].Allowed)
			now = t0.Add(2 * time.Minute)
			require.NoError(t, s.Take(ctx, []ratelimit.Request{{Key: "x", Limit: &tb, Cost: xCost}}, out))
			now = now.Add(-2 * time.Hour)
			require.NoError(t, s.Take(ctx, []ratelimit.Request{{Key: "k", Limit: &tb, Cost: 1}}, out))
			require.Equal(t, ratelimit.Decision{Limit: &tb, Allowed: true, Remaining: 3, Reset: 15 * time.Second, At: ratelimit.Micros(now)}, out[0],
				"k's bucket was full again at T0+60s, before T1, which the store decided at")
		})
	}
}
