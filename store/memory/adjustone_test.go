package memory_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/memory"
)

// adjustOne calls s's AdjustOne on r and puts its Decision back together,
// as the Limiter does (Limit r.Limit; zeros on an error).
func adjustOne(s *memory.Store, ctx context.Context, r ratelimit.Request) (d ratelimit.Decision, err error) {
	d.Allowed, d.Remaining, d.Reset, d.RetryAfter, d.Delay, d.At, err = s.AdjustOne(ctx, r)
	if err == nil {
		d.Limit = r.Limit
	}
	return d, err
}

// TestAdjustOneAgreesWithAdjust holds AdjustOne to Adjust of the one
// request: two stores on one fake clock see the same calls (Takes, and
// settlements through AdjustOne in one and through Adjust in the other,
// charges and refunds, At now, the Take's own, or an older window's),
// on keys and limits of every algorithm with the clock moving across
// windows and calendar days, and must return the same Decisions, field
// by field, call after call; a peek of every entry at the end shows the
// same state in both.
func TestAdjustOneAgreesWithAdjust(t *testing.T) {
	tb := ratelimit.PerMinute(5).Named("tb")
	gcra := ratelimit.PerMinute(4).Named("gcra").WithAlgorithm(ratelimit.GCRA)
	fw := ratelimit.PerMinute(4).Named("fw").WithAlgorithm(ratelimit.FixedWindow)
	sw := ratelimit.PerMinute(4).Named("sw").WithAlgorithm(ratelimit.SlidingWindow)
	log := ratelimit.PerMinute(3).Named("log").WithAlgorithm(ratelimit.SlidingLog)
	leaky := ratelimit.PerMinute(4).Named("leaky").WithAlgorithm(ratelimit.LeakyBucket)
	conc := ratelimit.Concurrent(2, 30*time.Second).Named("conc")
	cal := ratelimit.PerCalendarDay(6, time.UTC).Named("cal")
	limits := []*ratelimit.Limit{&tb, &gcra, &fw, &sw, &log, &leaky, &conc, &cal}
	now := time.Date(2026, 3, 4, 23, 58, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	one, err := memory.New(memory.WithClock(clock), memory.WithShards(2))
	require.NoError(t, err)
	gen, err := memory.New(memory.WithClock(clock), memory.WithShards(2))
	require.NoError(t, err)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(10, 2))
	keys := []string{"hot", "k1", "k2"}
	var ats []int64 // the At of past Takes: settlements in the windows charged
	settled := 0
	for step := range 20000 {
		now = now.Add(time.Duration(rng.IntN(4000)) * time.Millisecond)
		r := ratelimit.Request{Key: keys[rng.IntN(len(keys))], Limit: limits[rng.IntN(len(limits))], Cost: rng.Int64N(3)}
		if rng.IntN(2) == 0 {
			o1, o2 := make([]ratelimit.Decision, 1), make([]ratelimit.Decision, 1)
			require.NoError(t, one.Take(ctx, []ratelimit.Request{r}, o1))
			require.NoError(t, gen.Take(ctx, []ratelimit.Request{r}, o2))
			require.Equal(t, o2, o1, "step %d: take %+v", step, r)
			ats = append(ats, o1[0].At)
			continue
		}
		r.Cost = rng.Int64N(9) - 5 // a refund, a charge or nothing
		switch rng.IntN(3) {
		case 0: // now
		case 1:
			if len(ats) > 0 {
				r.At = ats[len(ats)-1] // the last Take's
			}
		default:
			if len(ats) > 0 {
				r.At = ats[rng.IntN(len(ats))] // an older one, maybe an earlier window
			}
		}
		d, err := adjustOne(one, ctx, r)
		require.NoError(t, err)
		out := make([]ratelimit.Decision, 1)
		require.NoError(t, gen.Adjust(ctx, []ratelimit.Request{r}, out))
		require.Equal(t, out[0], d, "step %d: adjust %+v", step, r)
		require.True(t, d.Allowed)
		settled++
	}
	require.Greater(t, settled, 9000)
	for _, k := range keys {
		for _, l := range limits {
			r := []ratelimit.Request{{Key: k, Limit: l, Cost: 0}}
			o1, o2 := make([]ratelimit.Decision, 1), make([]ratelimit.Decision, 1)
			require.NoError(t, one.Take(ctx, r, o1))
			require.NoError(t, gen.Take(ctx, r, o2))
			require.Equal(t, o2, o1, "peek %s/%s", k, l.Name())
		}
	}
}

// TestAdjustOneExact: AdjustOne's values from first principles on a fake
// clock, for a token bucket and for a fixed window whose refund is placed
// by At in the window charged.
func TestAdjustOneExact(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 30, 0, time.UTC)
	s, err := memory.New(memory.WithClock(func() time.Time { return now }))
	require.NoError(t, err)
	ctx := context.Background()
	tb := ratelimit.PerMinute(10).Named("tb") // one unit per 6 s
	out := make([]ratelimit.Decision, 1)
	require.NoError(t, s.Take(ctx, []ratelimit.Request{{Key: "k", Limit: &tb, Cost: 4}}, out))
	// 4 taken, 3 more settled: 3 left; 7 units to drain, 42 s.
	d, err := adjustOne(s, ctx, ratelimit.Request{Key: "k", Limit: &tb, Cost: 3, At: out[0].At})
	require.NoError(t, err)
	require.Equal(t, ratelimit.Decision{Limit: &tb, Allowed: true, Remaining: 3, Reset: 42 * time.Second, At: now.UnixMicro()}, d)
	// 12 s later two units drained (5 left); a charge of 9 leaves 4 of
	// debt: 0 remaining, 14 units to drain, 84 s.
	now = now.Add(12 * time.Second)
	d, err = adjustOne(s, ctx, ratelimit.Request{Key: "k", Limit: &tb, Cost: 9})
	require.NoError(t, err)
	require.Equal(t, ratelimit.Decision{Limit: &tb, Allowed: true, Remaining: 0, Reset: 84 * time.Second, At: now.UnixMicro()}, d)
	// A refund of 20 never raises it above full: 10, reset 0.
	d, err = adjustOne(s, ctx, ratelimit.Request{Key: "k", Limit: &tb, Cost: -20})
	require.NoError(t, err)
	require.Equal(t, ratelimit.Decision{Limit: &tb, Allowed: true, Remaining: 10, At: now.UnixMicro()}, d)

	// A fixed window of 4 per minute: 3 taken at 12:00:42, in the window
	// [12:00, 12:01). At 12:01:10 (the next window, 1 taken) a refund of
	// 3 placed at the first Take's At gives nothing to the current
	// window: its 1 stays, 3 remaining, reset at its end, 50 s.
	fw := ratelimit.PerMinute(4).Named("fw").WithAlgorithm(ratelimit.FixedWindow)
	require.NoError(t, s.Take(ctx, []ratelimit.Request{{Key: "w", Limit: &fw, Cost: 3}}, out))
	charged := out[0].At
	now = time.Date(2026, 12, 3, 12, 1, 10, 0, time.UTC)
	require.NoError(t, s.Take(ctx, []ratelimit.Request{{Key: "w", Limit: &fw, Cost: 1}}, out))
	d, err = adjustOne(s, ctx, ratelimit.Request{Key: "w", Limit: &fw, Cost: -3, At: charged})
	require.NoError(t, err)
	require.Equal(t, ratelimit.Decision{Limit: &fw, Allowed: true, Remaining: 3, Reset: 50 * time.Second, At: now.UnixMicro()}, d)
	// The same refund placed now (At 0) refunds the current window's 1.
	d, err = adjustOne(s, ctx, ratelimit.Request{Key: "w", Limit: &fw, Cost: -3})
	require.NoError(t, err)
	require.Equal(t, ratelimit.Decision{Limit: &fw, Allowed: true, Remaining: 4, At: now.UnixMicro()}, d)
}

// TestAdjustOneErrors: AdjustOne rejects what Adjust of the one request
// rejects, with the same error, and charges nothing; a negative cost is
// a refund, not an error.
func TestAdjustOneErrors(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	s, err := memory.New(memory.WithClock(func() time.Time { return now }))
	require.NoError(t, err)
	good := ratelimit.PerMinute(5).Named("good")
	bad := ratelimit.PerMinute(0)
	require.Error(t, bad.Err())
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []struct {
		name string
		ctx  context.Context
		r    ratelimit.Request
	}{
		{"nil context", nil, ratelimit.Request{Key: "k", Limit: &good, Cost: 1}},
		{"cancelled", cancelled, ratelimit.Request{Key: "k", Limit: &good, Cost: 1}},
		{"empty key", context.Background(), ratelimit.Request{Key: "", Limit: &good, Cost: 1}},
		{"nil limit", context.Background(), ratelimit.Request{Key: "k", Cost: 1}},
		{"invalid limit", context.Background(), ratelimit.Request{Key: "k", Limit: &bad, Cost: 1}},
		{"zero limit", context.Background(), ratelimit.Request{Key: "k", Limit: &ratelimit.Limit{}, Cost: -1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, gotErr := adjustOne(s, c.ctx, c.r)
			require.Error(t, gotErr)
			require.Equal(t, ratelimit.Decision{}, d, "zeros on an error")
			wantErr := s.Adjust(c.ctx, []ratelimit.Request{c.r}, make([]ratelimit.Decision, 1))
			require.Error(t, wantErr)
			require.Equal(t, wantErr.Error(), gotErr.Error())
			require.Equal(t, fmt.Sprintf("%T", wantErr), fmt.Sprintf("%T", gotErr))
			for _, target := range []error{ratelimit.ErrInvalidRequest, ratelimit.ErrInvalidLimit, context.Canceled} {
				require.Equal(t, errors.Is(wantErr, target), errors.Is(gotErr, target), "%v", target)
			}
		})
	}
	// Nothing was charged to k: 5 left.
	out := make([]ratelimit.Decision, 1)
	require.NoError(t, s.Take(context.Background(), []ratelimit.Request{{Key: "k", Limit: &good, Cost: 0}}, out))
	require.Equal(t, int64(5), out[0].Remaining)
}
