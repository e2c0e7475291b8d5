package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/internal/redistest"
)

// TestBucketOneMatchesGeneric holds the script's inlined Takes of token-
// or leaky-bucket requests (bucket_one, and bucket_stack for stacks of
// buckets) to its generic path (decode, take, store), which a stack with a
// window takes: from random stored
// states (none, empty, partly and over full, updated in the past, within
// ClockStepTolerance ahead of the clock and beyond it, an empty state
// ahead of the clock, which the rebase deletes, and a malformed one), a
// Take of one request on the key, the same request stacked first or second
// with a roomy bucket on another key, and stacked with a roomy window
// (generic) must report the same decision and
// leave the same value and the same expiry (PTTL, rounded up to the
// millisecond, on miniredis; on a real server both an expiry or neither),
// alone and in a batch (whose view keeps the state decoded).
func TestBucketOneMatchesGeneric(t *testing.T) {
	tb := ratelimit.PerMinute(5).Named("tb")
	lb := ratelimit.PerMinute(6).Named("lb").WithAlgorithm(ratelimit.LeakyBucket)
	roomy := ratelimit.PerSecond(1_000_000).Named("roomy")
	// A fixed window keeps a stack on the generic path.
	roomyWin := ratelimit.PerSecond(1_000_000).Named("roomy-win").WithAlgorithm(ratelimit.FixedWindow)
	for _, l := range []*ratelimit.Limit{&tb, &lb, &roomy, &roomyWin} {
		require.NoError(t, l.Err())
	}
	now := time.Date(2026, 3, 4, 5, 6, 7, 891011000, time.UTC)
	run := func(t *testing.T, c *redis.Client, tol int64) {
		base := fmt.Sprintf("bucketone:%s:%x:", t.Name(), rand.Uint64())
		newStore := func(name string) *Store {
			s, err := New(c, WithClock(func() time.Time { return now }), WithPrefix(base+name+":"))
			require.NoError(t, err)
			t.Cleanup(func() {
				for _, l := range []*ratelimit.Limit{&tb, &lb, &roomy, &roomyWin} {
					c.Del(context.Background(), s.Key("k", l), s.Key("other", l))
				}
			})
			return s
		}
		one, gen, bat, stk := newStore("one"), newStore("gen"), newStore("bat"), newStore("stk")
		rng := rand.New(rand.NewPCG(1, 2))
		us := ratelimit.Micros(now)
		for i := range 300 {
			l := &tb
			if rng.IntN(2) == 1 {
				l = &lb
			}
			scale, drain, _ := l.Params()
			capacity := l.Burst() * scale
			var state string
			switch rng.IntN(8) {
			case 0: // no key
			case 1:
				state = "garbage"
			case 2: // empty, ahead beyond the tolerance: rebased, deleted
				state = fmt.Sprintf("0:%d", us+ratelimit.ClockStepTolerance.Microseconds()+1+rng.Int64N(1e7))
			default:
				level := rng.Int64N(capacity + 2*scale + 1)
				updated := us - rng.Int64N(capacity/drain+3)
				switch rng.IntN(3) {
				case 0: // ahead within the tolerance
					updated = us + rng.Int64N(ratelimit.ClockStepTolerance.Microseconds()+1)
				case 1: // ahead beyond it
					updated = us + ratelimit.ClockStepTolerance.Microseconds() + 1 + rng.Int64N(1e7)
				}
				state = fmt.Sprintf("%d:%d", level, updated)
			}
			cost := rng.Int64N(l.Burst() + 2)
			if rng.IntN(4) == 0 {
				cost = 0
			}
			for _, s := range []*Store{one, gen, bat, stk} {
				k := s.Key("k", l)
				if state == "" {
					require.NoError(t, c.Del(t.Context(), k).Err())
				} else {
					require.NoError(t, c.Set(t.Context(), k, state, time.Minute).Err())
				}
			}
			r := ratelimit.Request{Key: "k", Limit: l, Cost: cost}
			stack := []ratelimit.Request{r, {Key: "other", Limit: &roomyWin, Cost: 1}}
			// Two buckets: the inlined stack (bucket_stack), the request
			// first or second.
			stacks := [][]ratelimit.Request{{r, {Key: "other", Limit: &roomy, Cost: 1}}, {{Key: "other", Limit: &roomy, Cost: 1}, r}}
			pos := rng.IntN(2)

			oneD := make([]ratelimit.Decision, 1)
			oneErr := one.Take(t.Context(), []ratelimit.Request{r}, oneD)
			genD := make([]ratelimit.Decision, 2)
			genErr := gen.Take(t.Context(), stack, genD)
			stkD := make([]ratelimit.Decision, 2)
			stkErr := stk.Take(t.Context(), stacks[pos], stkD)
			msg := fmt.Sprintf("case %d: %s state %q cost %d", i, l.Name(), state, cost)
			if state != "garbage" {
				requireSameKeyState(t, c, one.Key("k", l), gen.Key("k", l), tol, msg)
				requireSameKeyState(t, c, stk.Key("k", l), gen.Key("k", l), tol, msg)
			}
			// In a batch: the request twice (the second call reads the
			// first one's state from the view), then once more alone.
			args, err := bat.command([]ratelimit.Request{r}, "t")
			require.NoError(t, err)
			calls := []*batchCall{
				{ctx: t.Context(), args: args, n: 1, done: make(chan struct{}, 1)},
				{ctx: t.Context(), args: args, n: 1, done: make(chan struct{}, 1)},
			}
			(&batcher{s: bat}).flush(calls)
			for _, bc := range calls {
				<-bc.done
			}
			secondD := make([]ratelimit.Decision, 2)
			secondErr := gen.Take(t.Context(), stack, secondD)

			if state == "garbage" {
				require.ErrorContains(t, oneErr, "malformed rate-limit state", msg)
				require.ErrorContains(t, genErr, "malformed rate-limit state", msg)
				require.ErrorContains(t, stkErr, "malformed rate-limit state", msg)
				require.ErrorContains(t, calls[0].err, "malformed rate-limit state", msg)
				continue
			}
			require.NoError(t, oneErr, msg)
			require.NoError(t, genErr, msg)
			require.NoError(t, stkErr, msg)
			require.Equal(t, genD[0], oneD[0], msg)
			require.Equal(t, genD[0], stkD[pos], msg)
			require.Equal(t, genD[1].Allowed, stkD[1-pos].Allowed, msg)
			for j, bc := range calls {
				require.NoError(t, bc.err, msg)
				got := make([]ratelimit.Decision, 1)
				require.NoError(t, parseReply(bc.reply, bc.at, []ratelimit.Request{r}, got), msg)
				want := genD[0]
				if j == 1 {
					require.NoError(t, secondErr, msg)
					want = secondD[0]
				}
				require.Equal(t, want, got[0], "%s: batch call %d", msg, j)
			}
			requireSameKeyState(t, c, bat.Key("k", l), gen.Key("k", l), tol, msg)
		}
	}
	t.Run("miniredis", func(t *testing.T) {
		m := miniredis.RunT(t)
		m.SetTime(now)
		c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		run(t, c, 0)
	})
	t.Run("redis", func(t *testing.T) {
		c := redis.NewClient(&redis.Options{Addr: redistest.Addr(t), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		run(t, c, -1) // expiries by the wall clock: compared as present or not
	})
}

// requireSameKeyState checks that keys a and b hold the same value and
// PTTLs within tol ms (0 on miniredis, whose clock stands still), or with
// tol < 0 (a real server, whose expiries run by the wall clock while the
// keys are written moments apart) both an expiry or neither.
func requireSameKeyState(t *testing.T, c *redis.Client, a, b string, tol int64, msg string) {
	t.Helper()
	av, aerr := c.Get(t.Context(), a).Result()
	bv, berr := c.Get(t.Context(), b).Result()
	require.Equal(t, berr, aerr, msg)
	require.Equal(t, bv, av, msg)
	at, err := c.PTTL(t.Context(), a).Result()
	require.NoError(t, err)
	bt, err := c.PTTL(t.Context(), b).Result()
	require.NoError(t, err)
	if tol < 0 {
		require.Equal(t, bt > 0, at > 0, "%s: PTTL %v, %v", msg, at, bt)
		return
	}
	require.InDelta(t, bt.Milliseconds(), at.Milliseconds(), float64(tol), "%s: PTTL %v, %v", msg, at, bt)
}
