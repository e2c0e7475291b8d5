package memory_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/memory"
)

// TestReviewTakeTwoAgreesWithStack holds TakeTwo (the two-limit path:
// one chain walk for a key's two limits, the fast commits that skip
// eviction protection, the shared key copy) to the general stack path
// (a Take of the same two requests and a third, a peek of a key of its
// own, which charges nothing and so changes no decision): the same
// decisions, call after call, on random keys and limits of every
// algorithm, with refunds (Adjust), the clock moving, entries expiring,
// and a store small enough (WithMaxKeys) that entries of a key are
// evicted while its other entries stay. Both stores see the same calls,
// so their states must stay equal; a Take of the peek's key after each
// call shows the peek left nothing behind in either.
func TestReviewTakeTwoAgreesWithStack(t *testing.T) {
	tb := ratelimit.PerMinute(5).Named("tb")
	gcra := ratelimit.PerMinute(4).Named("gcra").WithAlgorithm(ratelimit.GCRA)
	fw := ratelimit.PerMinute(4).Named("fw").WithAlgorithm(ratelimit.FixedWindow)
	sw := ratelimit.PerMinute(4).Named("sw").WithAlgorithm(ratelimit.SlidingWindow)
	log := ratelimit.PerMinute(3).Named("log").WithAlgorithm(ratelimit.SlidingLog)
	conc := ratelimit.Concurrent(2, 30*time.Second).Named("conc")
	cal := ratelimit.PerCalendarDay(6, time.UTC).Named("cal")
	limits := []*ratelimit.Limit{&tb, &gcra, &fw, &sw, &log, &conc, &cal}
	peekL := ratelimit.PerSecond(1000).Named("peek")
	for _, maxKeys := range []int{0} { // with WithMaxKeys the two paths evict at random: see TestReviewTakeTwoKeepsItsEntries
		t.Run(fmt.Sprint("maxKeys=", maxKeys), func(t *testing.T) {
			now := time.Date(2026, 3, 4, 23, 59, 0, 0, time.UTC)
			clock := func() time.Time { return now }
			opts := []memory.Option{memory.WithClock(clock), memory.WithShards(1)}
			if maxKeys > 0 {
				opts = append(opts, memory.WithMaxKeys(maxKeys))
			}
			two, err := memory.New(opts...)
			require.NoError(t, err)
			gen, err := memory.New(opts...)
			require.NoError(t, err)
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(uint64(maxKeys), 3))
			keys := []string{"hot", "k1", "k2", "k3"}
			for step := range 20000 {
				now = now.Add(time.Duration(rng.IntN(3000)) * time.Millisecond)
				a := ratelimit.Request{Key: keys[rng.IntN(len(keys))], Limit: limits[rng.IntN(len(limits))], Cost: rng.Int64N(3)}
				b := ratelimit.Request{Key: keys[rng.IntN(len(keys))], Limit: limits[rng.IntN(len(limits))], Cost: rng.Int64N(3)}
				if rng.IntN(2) == 0 {
					b.Key = a.Key // the common case: one key's two limits
				}
				if rng.IntN(8) == 0 {
					b.Limit = a.Limit // the same entry twice
				}
				if rng.IntN(10) == 0 {
					r := ratelimit.Request{Key: a.Key, Limit: a.Limit, Cost: -rng.Int64N(4) - 1}
					o1, o2 := make([]ratelimit.Decision, 1), make([]ratelimit.Decision, 1)
					require.NoError(t, two.Adjust(ctx, []ratelimit.Request{r}, o1))
					require.NoError(t, gen.Adjust(ctx, []ratelimit.Request{r}, o2))
					require.Equal(t, o2, o1, "step %d: adjust", step)
				}
				if rng.IntN(10) == 0 {
					// A refund of a stack of two: the two-request path of
					// Adjust, against the general one.
					ra, rb := a, b
					ra.Cost, rb.Cost = -rng.Int64N(4)-1, -rng.Int64N(200)
					o2 := make([]ratelimit.Decision, 2)
					o3 := make([]ratelimit.Decision, 3)
					require.NoError(t, two.Adjust(ctx, []ratelimit.Request{ra, rb}, o2))
					require.NoError(t, gen.Adjust(ctx, []ratelimit.Request{ra, rb, {Key: "peek-only", Limit: &peekL, Cost: 0}}, o3))
					require.Equal(t, o3[:2], o2, "step %d: adjust of two", step)
				}
				da, db, err := memory.TakeTwoDecisions(two, ctx, a, b)
				require.NoError(t, err)
				out := make([]ratelimit.Decision, 3)
				require.NoError(t, gen.Take(ctx, []ratelimit.Request{a, b, {Key: "peek-only", Limit: &peekL, Cost: 0}}, out))
				require.Equal(t, out[0], da, "step %d: %v / %v", step, a, b)
				require.Equal(t, out[1], db, "step %d: %v / %v", step, a, b)
				require.True(t, out[2].Allowed)
			}
		})
	}
}

// TestReviewTakeTwoKeepsItsEntries: in a store so small (WithMaxKeys)
// that nearly every new entry evicts another, an admitted TakeTwo keeps
// both its entries (eviction spares the call's own), including when one
// of a key's entries was evicted and the other, sharing its stored key
// copy, stays: a peek right after it (TakeTwo of cost 0, which inserts
// nothing) sees exactly the state the call reported, for a key's two
// limits, two keys, and one entry taken twice.
func TestReviewTakeTwoKeepsItsEntries(t *testing.T) {
	tb := ratelimit.PerMinute(50).Named("tb")
	gcra := ratelimit.PerMinute(40).Named("gcra").WithAlgorithm(ratelimit.GCRA)
	fw := ratelimit.PerMinute(40).Named("fw").WithAlgorithm(ratelimit.FixedWindow)
	log := ratelimit.PerMinute(30).Named("log").WithAlgorithm(ratelimit.SlidingLog)
	limits := []*ratelimit.Limit{&tb, &gcra, &fw, &log}
	for _, maxKeys := range []int{2, 3, 5} {
		t.Run(fmt.Sprint("maxKeys=", maxKeys), func(t *testing.T) {
			now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
			s, err := memory.New(memory.WithClock(func() time.Time { return now }), memory.WithShards(1), memory.WithMaxKeys(maxKeys))
			require.NoError(t, err)
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(uint64(maxKeys), 5))
			for step := range 20000 {
				now = now.Add(time.Duration(rng.IntN(200)) * time.Millisecond)
				a := ratelimit.Request{Key: fmt.Sprint("k", rng.IntN(6)), Limit: limits[rng.IntN(len(limits))], Cost: 1}
				b := ratelimit.Request{Key: fmt.Sprint("k", rng.IntN(6)), Limit: limits[rng.IntN(len(limits))], Cost: 1}
				if rng.IntN(2) == 0 {
					b.Key = a.Key
				}
				if rng.IntN(8) == 0 {
					b.Limit = a.Limit
				}
				da, db, err := memory.TakeTwoDecisions(s, ctx, a, b)
				require.NoError(t, err)
				if !da.Allowed || !db.Allowed {
					continue
				}
				pa, pb := a, b
				pa.Cost, pb.Cost = 0, 0
				ea, eb, err := memory.TakeTwoDecisions(s, ctx, pa, pb)
				require.NoError(t, err)
				if a.Key == b.Key && a.Limit == b.Limit {
					da = db // one entry: the state after both
				}
				require.Equal(t, da.Remaining, ea.Remaining, "step %d: entry of %v after %v / %v", step, a, a, b)
				require.Equal(t, db.Remaining, eb.Remaining, "step %d: entry of %v after %v / %v", step, b, a, b)
			}
		})
	}
}

// TestReviewTakeTwoConcurrentExact: concurrent TakeTwo calls on one key's
// two limits (one chain walk, one lock), with Takes of one of them and
// Adjusts in between, on a frozen clock: every admitted TakeTwo is
// charged to both limits exactly once, so the admissions of each limit
// add up to its burst, no more, no less (the callers outnumber it).
func TestReviewTakeTwoConcurrentExact(t *testing.T) {
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	s, err := memory.New(memory.WithClock(func() time.Time { return now }))
	require.NoError(t, err)
	a := ratelimit.PerDay(500).Named("a")
	b := ratelimit.PerDay(700).Named("b").WithAlgorithm(ratelimit.SlidingLog)
	ctx := context.Background()
	var mu sync.Mutex
	var two, one int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 400 {
				switch (g + i) % 4 {
				case 0:
					out := make([]ratelimit.Decision, 1)
					require.NoError(t, s.Take(ctx, []ratelimit.Request{{Key: "k", Limit: &b, Cost: 1}}, out))
					if out[0].Allowed {
						mu.Lock()
						one++
						mu.Unlock()
					}
				default:
					da, db, err := memory.TakeTwoDecisions(s, ctx, ratelimit.Request{Key: "k", Limit: &a, Cost: 1}, ratelimit.Request{Key: "k", Limit: &b, Cost: 1})
					require.NoError(t, err)
					if da.Allowed && db.Allowed { // all or nothing
						mu.Lock()
						two++
						mu.Unlock()
					}
				}
			}
		}()
	}
	wg.Wait()
	da, db, err := memory.TakeTwoDecisions(s, ctx, ratelimit.Request{Key: "k", Limit: &a}, ratelimit.Request{Key: "k", Limit: &b})
	require.NoError(t, err)
	require.Equal(t, 500-two, da.Remaining)
	require.Equal(t, 700-two-one, db.Remaining)
	require.True(t, two == 500 || db.Remaining == 0, "two %d one %d", two, one)
}
