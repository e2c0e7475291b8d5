package memory

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
)

// pairLimits are limits of every algorithm, two of each, small enough that
// random costs are refused often.
func pairLimits(t *testing.T) []ratelimit.Limit {
	t.Helper()
	algs := []ratelimit.Algorithm{ratelimit.TokenBucket, ratelimit.LeakyBucket, ratelimit.GCRA,
		ratelimit.FixedWindow, ratelimit.SlidingWindow, ratelimit.SlidingLog}
	var limits []ratelimit.Limit
	for _, a := range algs {
		for j, p := range []time.Duration{time.Second, 8 * time.Second} {
			l := ratelimit.Every(int64(4<<j), p).WithAlgorithm(a).Named(fmt.Sprintf("%v-%d", a, j))
			require.NoError(t, l.Err())
			limits = append(limits, l)
		}
	}
	return limits
}

// randomPair draws a stack of two requests that is, about equally often,
// one key under two limits (the common stack), one entry twice (the
// duplicate rule), or two keys (one shard or two).
func randomPair(rng *rand.Rand, limits []ratelimit.Limit, now int64, take bool) []ratelimit.Request {
	keys := []string{"a", "b", "c", "d"}
	ka, kb := keys[rng.IntN(len(keys))], keys[rng.IntN(len(keys))]
	la, lb := &limits[rng.IntN(len(limits))], &limits[rng.IntN(len(limits))]
	switch rng.IntN(3) {
	case 0:
		kb = ka
	case 1:
		kb, lb = ka, la
	}
	if rng.IntN(2) == 0 {
		// A key equal in value but not the same string, so that the
		// comparisons cannot rely on the strings' addresses.
		kb = string([]byte(kb))
	}
	reqs := []ratelimit.Request{{Key: ka, Limit: la}, {Key: kb, Limit: lb}}
	for i := range reqs {
		if take {
			reqs[i].Cost = int64(rng.IntN(4))
		} else {
			reqs[i].Cost = int64(rng.IntN(7)) - 3
			if rng.IntN(2) == 0 {
				reqs[i].At = now - int64(rng.IntN(3_000_000))
			}
		}
	}
	return reqs
}

// TestStackOfTwoAgainstModel drives the store's path for stacks of two
// with random pairs (one key under two limits, one entry twice, two keys
// in one shard or two), every algorithm, Takes and Adjusts with At, and a
// clock that jumps forward past expiries (sweeps every 60s), and checks
// every Decision against the plain model of model_differential_test.go, which
// applies the algorithms in order and commits all or nothing, and the
// structure of the pair's shards after every call.
func TestStackOfTwoAgainstModel(t *testing.T) {
	limits := pairLimits(t)
	for _, shards := range []int{1, 2, 64} {
		for seed := range uint64(15) {
			rng := rand.New(rand.NewPCG(seed, 13))
			s, c := newTestStore(t, WithShards(shards))
			m := reviewModel{}
			now := t0
			for step := range 400 {
				switch rng.IntN(10) {
				case 0:
					now = now.Add(time.Duration(rng.IntN(90)) * time.Second)
				case 1, 2, 3:
					now = now.Add(time.Duration(rng.IntN(2_000_000)) * time.Microsecond)
				}
				c.Set(now)
				take := rng.IntN(4) != 0
				reqs := randomPair(rng, limits, ratelimit.Micros(now), take)
				out := make([]ratelimit.Decision, 2)
				var err error
				if take {
					err = s.Take(context.Background(), reqs, out)
				} else {
					err = s.Adjust(context.Background(), reqs, out)
				}
				require.NoError(t, err)
				want := m.do(reqs, ratelimit.Micros(now), take)
				for i := range out {
					require.Equal(t, want[i], out[i], "shards %d seed %d step %d req %d (take %v) %s/%s, %s/%s",
						shards, seed, step, i, take, reqs[0].Key, reqs[0].Limit.Name(), reqs[1].Key, reqs[1].Limit.Name())
				}
				for _, r := range reqs {
					checkShard(t, &s.shards[s.hash(r.Key)&s.mask])
				}
			}
		}
	}
}

// TestStackOfTwoUnderEviction runs random pairs through shards of 1 to 4
// entries, so that nearly every insert sweeps or evicts, with a clock that
// moves forward and back: the structure of
// every shard stays intact, the cap holds, and an admitted charge of two
// entries of one shard that holds two keeps both (eviction spares the
// call's own entries).
func TestStackOfTwoUnderEviction(t *testing.T) {
	limits := pairLimits(t)
	for seed := range uint64(30) {
		rng := rand.New(rand.NewPCG(seed, 17))
		maxKeys := 1 + rng.IntN(4)
		s, c := newTestStore(t, WithShards(1), WithMaxKeys(maxKeys))
		now := t0
		for step := range 500 {
			now = now.Add(time.Duration(rng.IntN(3_000_000)-500_000) * time.Microsecond)
			c.Set(now)
			take := rng.IntN(3) != 0
			reqs := randomPair(rng, limits, ratelimit.Micros(now), take)
			out := make([]ratelimit.Decision, 2)
			var err error
			if take {
				err = s.Take(context.Background(), reqs, out)
			} else {
				err = s.Adjust(context.Background(), reqs, out)
			}
			if overfull(s, reqs) { // two entries, a shard of one: the call fails whole
				require.ErrorIs(t, err, ErrStackTooLarge)
				require.Equal(t, 1, maxKeys)
				continue
			}
			require.NoError(t, err)
			checkShard(t, &s.shards[0])
			require.LessOrEqual(t, s.Len(), maxKeys)
			sh := &s.shards[0]
			if take && maxKeys >= 2 && out[0].Allowed && out[1].Allowed && reqs[0].Cost > 0 && reqs[1].Cost > 0 {
				for i, r := range reqs {
					h := s.hash(r.Key)
					require.NotEqual(t, int32(none), sh.find(h, r.Key, r.Limit.ID()),
						"seed %d step %d: request %d's entry %s/%s was not kept", seed, step, i, r.Key, r.Limit.Name())
				}
			}
		}
	}
}

// TestTakeTwoAgainstModel drives TakeTwo (ratelimit.PairTaker, the
// Limiter's path for two limits) with the random pairs of
// TestStackOfTwoAgainstModel and checks every Decision against the plain
// model, as Take's are.
func TestTakeTwoAgainstModel(t *testing.T) {
	limits := pairLimits(t)
	for _, shards := range []int{1, 64} {
		for seed := range uint64(10) {
			rng := rand.New(rand.NewPCG(seed, 19))
			s, c := newTestStore(t, WithShards(shards))
			m := reviewModel{}
			now := t0
			for step := range 300 {
				if rng.IntN(4) == 0 {
					now = now.Add(time.Duration(rng.IntN(20_000_000)) * time.Microsecond)
				}
				c.Set(now)
				reqs := randomPair(rng, limits, ratelimit.Micros(now), true)
				da, db, err := takeTwo(s, context.Background(), reqs[0], reqs[1])
				require.NoError(t, err)
				want := m.do(reqs, ratelimit.Micros(now), true)
				require.Equal(t, want, []ratelimit.Decision{da, db}, "shards %d seed %d step %d", shards, seed, step)
				for _, r := range reqs {
					checkShard(t, &s.shards[s.hash(r.Key)&s.mask])
				}
			}
		}
	}
}

// TestTakeTwoErrorsAsTake checks that TakeTwo refuses what Take refuses,
// with the same errors, and charges nothing then.
func TestTakeTwoErrorsAsTake(t *testing.T) {
	s, _ := newTestStore(t)
	l := ratelimit.PerMinute(5)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		a, b ratelimit.Request
	}{
		{"cancelled", cancelled, ratelimit.Request{Key: "k", Limit: &l, Cost: 1}, ratelimit.Request{Key: "k", Limit: &l, Cost: 1}},
		{"empty key", context.Background(), ratelimit.Request{Key: "k", Limit: &l, Cost: 1}, ratelimit.Request{Limit: &l, Cost: 1}},
		{"nil limit", context.Background(), ratelimit.Request{Key: "k", Cost: 1}, ratelimit.Request{Key: "k", Limit: &l, Cost: 1}},
		{"negative cost", context.Background(), ratelimit.Request{Key: "k", Limit: &l, Cost: -1}, ratelimit.Request{Key: "k", Limit: &l, Cost: 1}},
	} {
		want := s.Take(tc.ctx, []ratelimit.Request{tc.a, tc.b}, make([]ratelimit.Decision, 2))
		require.Error(t, want, tc.name)
		da, db, err := takeTwo(s, tc.ctx, tc.a, tc.b)
		require.Equal(t, want, err, tc.name)
		require.Equal(t, ratelimit.Decision{}, da, tc.name)
		require.Equal(t, ratelimit.Decision{}, db, tc.name)
	}
	require.Equal(t, 0, s.Len(), "nothing is charged")
}

// TestLimiterPairPath checks the Limiter's path for two limits through
// TakeTwo: one store call of two requests reported to Hooks.OnStoreCall,
// both limits charged, and a cancelled context refused with its error.
func TestLimiterPairPath(t *testing.T) {
	s, _ := newTestStore(t)
	var calls []ratelimit.StoreCall
	lim, err := ratelimit.New(s, ratelimit.WithLimits(ratelimit.PerMinute(3).Named("a"), ratelimit.PerMinute(5).Named("b")),
		ratelimit.WithHooks(ratelimit.Hooks{OnStoreCall: func(_ context.Context, c ratelimit.StoreCall) { calls = append(calls, c) }}))
	require.NoError(t, err)
	res, err := lim.Take(context.Background(), "k")
	require.NoError(t, err)
	require.True(t, res.Allowed)
	require.Len(t, res.Decisions, 2)
	require.Equal(t, int64(2), res.Decisions[0].Remaining)
	require.Equal(t, int64(4), res.Decisions[1].Remaining)
	require.Len(t, calls, 1)
	require.Equal(t, ratelimit.OpTake, calls[0].Op)
	require.Equal(t, 2, calls[0].Requests)
	require.NoError(t, calls[0].Err)

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	res, err = lim.Take(cancelled, "k")
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, ratelimit.Result{}, res)
	require.Equal(t, uint64(1), lim.Stats().Allowed)
	require.Equal(t, uint64(0), lim.Stats().StoreErrors)
}

// valid, TakeTwo's check without CheckRequests, accepts nothing that
// CheckRequests refuses: in particular an invalid Limit has no ID.
func TestValidAgreesWithCheckRequests(t *testing.T) {
	good := ratelimit.PerMinute(5)
	invalid := []ratelimit.Limit{
		{}, ratelimit.PerMinute(0), ratelimit.PerMinute(-1), ratelimit.Every(5, 0),
		ratelimit.PerMinute(5).WithBurst(-1), ratelimit.PerMinute(5).Named("bad name!"),
		ratelimit.PerMinute(7).WithAlgorithm(ratelimit.GCRA), ratelimit.PerMinute(5).WithAlgorithm(99),
		ratelimit.PerSecond(5).AlignToFirstHit(), ratelimit.PerCalendarDay(5, nil),
		ratelimit.PerMinute(1 << 60).WithBurst(1 << 60),
	}
	var reqs []ratelimit.Request
	for i := range invalid {
		require.Error(t, invalid[i].Err(), "case %d", i)
		reqs = append(reqs, ratelimit.Request{Key: "k", Limit: &invalid[i], Cost: 1})
	}
	reqs = append(reqs, ratelimit.Request{Limit: &good, Cost: 1}, ratelimit.Request{Key: "k", Cost: 1},
		ratelimit.Request{Key: "k", Limit: &good, Cost: -1})
	for i := range reqs {
		require.False(t, valid(&reqs[i], true), "case %d", i)
		require.Error(t, ratelimit.CheckRequests(reqs[i:i+1], make([]ratelimit.Decision, 1), true), "case %d", i)
	}
	ok := ratelimit.Request{Key: "k", Limit: &good}
	require.True(t, valid(&ok, true))
	refund := ratelimit.Request{Key: "k", Limit: &good, Cost: -1}
	require.True(t, valid(&refund, false), "a refund in Adjust")
	require.NoError(t, ratelimit.CheckRequests([]ratelimit.Request{refund}, make([]ratelimit.Decision, 1), false))
	require.NoError(t, ratelimit.CheckRequests([]ratelimit.Request{ok}, make([]ratelimit.Decision, 1), true))
}

// takeTwo calls p's TakeTwo on the requests a and b and puts their
// Decisions back together, as the Limiter does (zeros on an error).
func takeTwo(p ratelimit.PairTaker, ctx context.Context, a, b ratelimit.Request) (da, db ratelimit.Decision, err error) {
	da.Allowed, da.Remaining, da.Reset, da.RetryAfter, da.Delay, da.At,
		db.Allowed, db.Remaining, db.Reset, db.RetryAfter, db.Delay, db.At, err = p.TakeTwo(ctx, a.Key, a.Limit, a.Cost, b.Key, b.Limit, b.Cost)
	if err == nil {
		da.Limit, db.Limit = a.Limit, b.Limit
	}
	return da, db, err
}

// TakeTwoDecisions is takeTwo, for the external tests.
var TakeTwoDecisions = takeTwo
