package memory

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
)

// Staleness is monotonic in a shard: once the shard has decided at a time
// at or past an entry's expiry, the entry stays expired when WithClock's
// clock steps back (shard.observe). The limit is 4/min: one unit per 15 s,
// so k's 4 units at T0 leave an empty bucket that is full again, and its
// entry expired, at e = T0+60 s exactly. A fresh key's Take of 1 leaves
// 3 units and a Reset of 15 s.

var stepT0 = time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)

type stepStore struct {
	t   *testing.T
	s   *Store
	now time.Time
	l   ratelimit.Limit
}

func newStepStore(t *testing.T, opts ...Option) *stepStore {
	st := &stepStore{t: t, now: stepT0, l: ratelimit.PerMinute(4).Named("tb")}
	s, err := New(append([]Option{WithClock(func() time.Time { return st.now })}, opts...)...)
	require.NoError(t, err)
	st.s = s
	return st
}

func (st *stepStore) take(key string, cost int64) ratelimit.Decision {
	st.t.Helper()
	out := make([]ratelimit.Decision, 1)
	require.NoError(st.t, st.s.Take(context.Background(), []ratelimit.Request{{Key: key, Limit: &st.l, Cost: cost}}, out))
	return out[0]
}

func (st *stepStore) want(allowed bool, remaining int64, reset, retryAfter time.Duration) ratelimit.Decision {
	return ratelimit.Decision{Limit: &st.l, Allowed: allowed, Remaining: remaining, Reset: reset, RetryAfter: retryAfter, At: ratelimit.Micros(st.now)}
}

func TestStepBackAfterExpiry(t *testing.T) {
	e := stepT0.Add(time.Minute)
	fresh := func(st *stepStore) ratelimit.Decision { return st.want(true, 3, 15*time.Second, 0) }
	for _, tc := range []struct {
		name     string
		seen     time.Time // the shard's latest decision (a peek of another key)
		back     time.Time // where the clock steps back to, for k's Take of 1
		expired  bool
		fallback func(st *stepStore) ratelimit.Decision // k's decision when not expired
	}{
		// The shard decided exactly at the expiry: k is expired for good.
		{"seen at e, back to e-1µs", e, e.Add(-time.Microsecond), true, nil},
		{"seen at e, back 2h", e, e.Add(-2 * time.Hour), true, nil},
		// A step back exactly to the expiry instant: expired by now itself.
		{"seen at e+1min, back to e", e.Add(time.Minute), e, true, nil},
		{"seen at e+1min, back to e-1µs", e.Add(time.Minute), e.Add(-time.Microsecond), true, nil},
		// The shard never reached e: k is live, 2 µs short of full. At
		// e-2µs (not a step for the bucket, whose last change is T0) it
		// holds 2 µs of drain: a Take of 1 leaves 3 units less 2 µs of
		// drain, so 2 whole units, and a Reset of 15 s + 2 µs.
		{"seen at e-1µs, back to e-2µs", e.Add(-time.Microsecond), e.Add(-2 * time.Microsecond), false,
			func(st *stepStore) ratelimit.Decision { return st.want(true, 2, 15*time.Second+2*time.Microsecond, 0) }},
		// The shard never reached e, and the clock steps back 2 h, beyond
		// ClockStepTolerance: k is live, and the bucket is rebased as the
		// algorithms rebase a step (ClockStepTolerance): its last change,
		// T0, moves to now with its level, 4 of 4 units, since the time
		// between T0 and the step counts as not having passed. A Take of
		// 1 is refused for 15 s (one unit), Reset 60 s.
		{"seen at e-1µs, back 2h", e.Add(-time.Microsecond), e.Add(-time.Microsecond - 2*time.Hour), false,
			func(st *stepStore) ratelimit.Decision { return st.want(false, 0, time.Minute, 15*time.Second) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newStepStore(t, WithShards(1))
			require.Equal(t, st.want(true, 0, time.Minute, 0), st.take("k", 4))
			st.now = tc.seen
			st.take("x", 0) // a peek of another key: nothing inserted, no sweep due
			require.Equal(t, 1, st.s.Len())
			st.now = tc.back
			got := st.take("k", 1)
			if tc.expired {
				require.Equal(t, fresh(st), got)
			} else {
				require.Equal(t, tc.fallback(st), got)
			}
		})
	}
}

// TestStepBackKeepsLaterEntries: the deletion at a step back is bounded by
// the shard's latest time before that step, not the latest time ever: an
// entry written after a step back, expiring before the time the clock
// stepped back from, is deleted at a later step only if the shard reached
// its expiry in between. x is charged at T0+10 min (the shard's high
// mark), the clock steps back to T0 and k spends 4 there (expires T0+60 s, before the high mark); the
// clock moves to T0+10 s and steps back to T0+5 s: the shard never
// reached T0+60 s since k was written, so k is live and full (refused
// for 15 s less the 5 s drained since T0: 10 s, Remaining 0, Reset 55 s),
// and Len counts x and k.
func TestStepBackKeepsLaterEntries(t *testing.T) {
	st := newStepStore(t, WithShards(1))
	st.now = stepT0.Add(10 * time.Minute)
	st.take("x", 1)
	st.now = stepT0
	require.Equal(t, st.want(true, 0, time.Minute, 0), st.take("k", 4))
	st.now = stepT0.Add(10 * time.Second)
	st.take("y", 0)
	st.now = stepT0.Add(5 * time.Second)
	require.Equal(t, st.want(false, 0, 55*time.Second, 10*time.Second), st.take("k", 1))
	require.Equal(t, 2, st.s.Len(), "x and k")
}

// TestStepBackDeletesWhatTheShardSawExpire: the entries expired by the
// shard's latest time are deleted at the step back itself, whichever key
// the call is for (Len drops at once), and then behave as absent even
// when the clock is back before their expiry: k (expired at T0+60 s,
// seen at T0+2 min) and j (1/h, charged 1 at T0: expires T0+1 h) are in
// the shard; the clock steps back to T0+30 s for a peek of x: k goes, j
// stays.
func TestStepBackDeletesWhatTheShardSawExpire(t *testing.T) {
	st := newStepStore(t, WithShards(1))
	st.take("k", 4) // expires T0+60 s
	j := ratelimit.PerHour(1).Named("j")
	out := make([]ratelimit.Decision, 1)
	require.NoError(t, st.s.Take(context.Background(), []ratelimit.Request{{Key: "j", Limit: &j, Cost: 1}}, out))
	st.now = stepT0.Add(2 * time.Minute)
	st.take("x", 0)
	require.Equal(t, 2, st.s.Len())
	st.now = stepT0.Add(30 * time.Second)
	st.take("x", 0)
	require.Equal(t, 1, st.s.Len(), "k deleted at the step back, j kept")
	require.Equal(t, st.want(true, 3, 15*time.Second, 0), st.take("k", 1))
}

// TestStepBackStackPaths: the paths that lock two or more shards (TakeTwo
// on keys of two shards, Take of three) observe the clock in every shard
// they lock. k's entry is in shard A; the shard's only decision at or
// after k's expiry is made by a stack on a key of A and a key of B; after
// the step back, every path finds k expired: a Take of 1 leaves 3.
func TestStepBackStackPaths(t *testing.T) {
	for _, path := range []string{"TakeTwo", "Take3"} {
		t.Run(path, func(t *testing.T) {
			st := newStepStore(t, WithShards(2))
			// Keys of both shards, found by the store's own hash.
			byShard := map[uint64][]string{}
			for i := 0; len(byShard[0]) < 2 || len(byShard[1]) < 2; i++ {
				k := fmt.Sprint("key", i)
				byShard[st.s.hash(k)&st.s.mask] = append(byShard[st.s.hash(k)&st.s.mask], k)
			}
			k, a, b := byShard[0][0], byShard[0][1], byShard[1][0]
			st.take(k, 4)
			st.now = stepT0.Add(2 * time.Minute)
			ctx := context.Background()
			switch path {
			case "TakeTwo":
				_, _, err := takeTwo(st.s, ctx, ratelimit.Request{Key: a, Limit: &st.l}, ratelimit.Request{Key: b, Limit: &st.l})
				require.NoError(t, err)
			default:
				out := make([]ratelimit.Decision, 3)
				require.NoError(t, st.s.Take(ctx, []ratelimit.Request{{Key: a, Limit: &st.l}, {Key: b, Limit: &st.l}, {Key: byShard[1][1], Limit: &st.l}}, out))
			}
			st.now = stepT0.Add(-time.Hour)
			require.Equal(t, st.want(true, 3, 15*time.Second, 0), st.take(k, 1))
		})
	}
}
