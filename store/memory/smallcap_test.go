package memory

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
)

// TestStackAtShardCapacity: WithMaxKeys(64) makes 4 shards of 16 entries
// (64/MinShardKeys = 4). A stack of 16 limits on one key (all in its
// shard) is exactly a shard's capacity: it is stored whole, so its
// strictest limit, 1/min, refuses the second call at the same instant
// (RetryAfter 60 s: one unit refills in 60 s) and the call charges none of
// the 15 others (each still 99 of 100 after the first call). A 17th limit
// makes the call fail with ErrStackTooLarge before anything is charged:
// the 16 stored entries are as they were. The same 16 limits named twice
// (32 requests, 16 distinct entries) fit.
func TestStackAtShardCapacity(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	s, err := New(WithClock(func() time.Time { return now }), WithMaxKeys(64))
	require.NoError(t, err)
	require.Len(t, s.shards, 4)
	ctx := context.Background()
	limits := make([]ratelimit.Limit, MinShardKeys+1)
	for i := range limits {
		limits[i] = ratelimit.PerMinute(100).Named(fmt.Sprint("l", i))
	}
	limits[MinShardKeys-1] = ratelimit.PerMinute(1).Named("strict") // the last of the 16
	reqs := func(n, cost int) []ratelimit.Request {
		r := make([]ratelimit.Request, n)
		for i := range r {
			r[i] = ratelimit.Request{Key: "k", Limit: &limits[i], Cost: int64(cost)}
		}
		return r
	}
	out := make([]ratelimit.Decision, MinShardKeys+1)
	require.NoError(t, s.Take(ctx, reqs(MinShardKeys, 1), out))
	for i := range MinShardKeys {
		require.True(t, out[i].Allowed, "limit %d", i)
	}
	require.Equal(t, MinShardKeys, s.Len())

	require.NoError(t, s.Take(ctx, reqs(MinShardKeys, 1), out))
	us := ratelimit.Micros(now)
	for i := range MinShardKeys - 1 {
		require.Equal(t, ratelimit.Decision{Limit: &limits[i], Allowed: true, Remaining: 99, Reset: 600 * time.Millisecond, At: us}, out[i], "limit %d: uncharged", i)
	}
	require.Equal(t, ratelimit.Decision{Limit: &limits[MinShardKeys-1], Remaining: 0, Reset: time.Minute, RetryAfter: time.Minute, At: us}, out[MinShardKeys-1])

	// One limit more than the shard holds: refused whole, for Take and Adjust.
	clear(out)
	err = s.Take(ctx, reqs(MinShardKeys+1, 1), out)
	require.ErrorIs(t, err, ErrStackTooLarge)
	require.ErrorIs(t, err, ratelimit.ErrInvalidRequest)
	require.Equal(t, make([]ratelimit.Decision, MinShardKeys+1), out)
	require.ErrorIs(t, s.Adjust(ctx, reqs(MinShardKeys+1, 5), out), ErrStackTooLarge)
	require.Equal(t, MinShardKeys, s.Len())
	for i := range MinShardKeys - 1 {
		require.Equal(t, int64(99), remaining(t, s, "k", &limits[i]), "limit %d untouched by the failed calls", i)
	}
	require.Equal(t, int64(0), remaining(t, s, "k", &limits[MinShardKeys-1]))

	// 32 requests naming the 16 entries twice: 16 distinct, they fit.
	dup := append(reqs(MinShardKeys, 0), reqs(MinShardKeys, 0)...)
	out = make([]ratelimit.Decision, len(dup))
	require.NoError(t, s.Take(ctx, dup, out))
	require.Equal(t, int64(99), out[MinShardKeys].Remaining)
}

// TestStackSmallerCapThanMinShardKeys: below MinShardKeys the store has
// one shard of MaxKeys entries. WithMaxKeys(1): a pair of two entries
// fails with ErrStackTooLarge through Take, Adjust and TakeTwo (nothing
// charged, nothing stored), while one entry named twice fits (it is one
// entry) and a single request always fits.
func TestStackSmallerCapThanMinShardKeys(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	s, err := New(WithClock(func() time.Time { return now }), WithMaxKeys(1), WithShards(64))
	require.NoError(t, err)
	require.Len(t, s.shards, 1)
	ctx := context.Background()
	a := ratelimit.PerMinute(10).Named("a")
	b := ratelimit.PerMinute(10).Named("b")
	out := make([]ratelimit.Decision, 2)
	require.ErrorIs(t, s.Take(ctx, []ratelimit.Request{{Key: "k", Limit: &a, Cost: 1}, {Key: "k", Limit: &b, Cost: 1}}, out), ErrStackTooLarge)
	require.ErrorIs(t, s.Adjust(ctx, []ratelimit.Request{{Key: "k", Limit: &a, Cost: 1}, {Key: "j", Limit: &a, Cost: 1}}, out), ErrStackTooLarge)
	_, _, err = TakeTwoDecisions(s, ctx, ratelimit.Request{Key: "k", Limit: &a, Cost: 1}, ratelimit.Request{Key: "k", Limit: &b, Cost: 1})
	require.ErrorIs(t, err, ErrStackTooLarge)
	require.ErrorIs(t, err, ratelimit.ErrInvalidRequest)
	require.Equal(t, 0, s.Len())

	da, db, err := TakeTwoDecisions(s, ctx, ratelimit.Request{Key: "k", Limit: &a, Cost: 3}, ratelimit.Request{Key: "k", Limit: &a, Cost: 4})
	require.NoError(t, err)
	require.Equal(t, []int64{7, 3}, []int64{da.Remaining, db.Remaining})
	require.Equal(t, int64(3), remaining(t, s, "k", &a))
}

// TestStackCheckAllocatesNothing: a stack of up to 8 requests on existing
// entries allocates nothing even where it is longer than a shard's cap
// and has to be checked (fits): WithMaxKeys(4), one key under 4 limits
// named twice (8 requests, 4 distinct entries).
func TestStackCheckAllocatesNothing(t *testing.T) {
	s, err := New(WithClock(func() time.Time { return stepT0 }), WithMaxKeys(4))
	require.NoError(t, err)
	limits := make([]ratelimit.Limit, 4)
	reqs := make([]ratelimit.Request, 8)
	for i := range limits {
		limits[i] = ratelimit.PerMinute(1000).Named(fmt.Sprint("l", i))
		reqs[i] = ratelimit.Request{Key: "k", Limit: &limits[i], Cost: 1}
		reqs[i+4] = reqs[i]
	}
	out := make([]ratelimit.Decision, 8)
	ctx := context.Background()
	require.NoError(t, s.Take(ctx, reqs, out))
	allocs := testing.AllocsPerRun(100, func() {
		if err := s.Take(ctx, reqs, out); err != nil {
			t.Fatal(err)
		}
	})
	require.Zero(t, allocs)
	require.Equal(t, int64(1000-2*102), out[7].Remaining) // 2 per call, 102 calls (AllocsPerRun's warm-up + 100, and the first)
}
