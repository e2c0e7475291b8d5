package resilient

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
)

func TestScaleLimit(t *testing.T) {
	cost := func(*http.Request) (int64, error) { return 1, nil }
	for _, tc := range []struct {
		name         string
		in           ratelimit.Limit
		share        Share
		quota, burst int64
		algo         ratelimit.Algorithm
	}{
		// floor(60/5) = 12 for both.
		{"even", ratelimit.PerMinute(60).Named("rpm"), EvenShare(5), 12, 12, ratelimit.TokenBucket},
		// floor(7×1/3) = 2, floor(10×1/3) = 3.
		{"odd rate", ratelimit.Every(7, 3*time.Second).WithBurst(10), EvenShare(3), 2, 3, ratelimit.TokenBucket},
		// floor(2/5) = 0, raised to 1.
		{"at least one", ratelimit.PerSecond(2), EvenShare(5), 1, 1, ratelimit.TokenBucket},
		// floor(100×2/5) = 40.
		{"two fifths", ratelimit.PerHour(100), Share{2, 5}, 40, 40, ratelimit.TokenBucket},
		// 10/s, T = 100 ms; 5/s keeps T = 200 ms whole: still GCRA.
		{"gcra whole", ratelimit.PerSecond(10).WithAlgorithm(ratelimit.GCRA), EvenShare(2), 5, 5, ratelimit.GCRA},
		// 3/s: T = 333333.3 µs is not whole: the token bucket admits the same.
		{"gcra to bucket", ratelimit.PerSecond(10).WithAlgorithm(ratelimit.GCRA), EvenShare(3), 3, 3, ratelimit.TokenBucket},
		{"leaky", ratelimit.PerSecond(100).WithBurst(20).WithAlgorithm(ratelimit.LeakyBucket), EvenShare(4), 25, 5, ratelimit.LeakyBucket},
		{"sliding window", ratelimit.PerMinute(100).WithAlgorithm(ratelimit.SlidingWindow), EvenShare(4), 25, 25, ratelimit.SlidingWindow},
		{"sliding log", ratelimit.PerMinute(100).WithAlgorithm(ratelimit.SlidingLog), EvenShare(3), 33, 33, ratelimit.SlidingLog},
		{"fixed window", ratelimit.PerMinute(10).WithAlgorithm(ratelimit.FixedWindow).AlignToFirstHit(), EvenShare(3), 3, 3, ratelimit.FixedWindow},
		// 2^51 × (2^40−1)/2^40 needs 91 bits before the division.
		{"no overflow", ratelimit.Every(1<<51, time.Microsecond), Share{1<<40 - 1, 1 << 40}, 1<<51 - 1<<11, 1<<51 - 1<<11, ratelimit.TokenBucket},
		{"whole", ratelimit.PerDay(100_000).Named("tokens").CostFrom(cost), Share{3, 3}, 100_000, 100_000, ratelimit.TokenBucket},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, tc.in.Err())
			got, err := ScaleLimit(tc.in, tc.share)
			require.NoError(t, err)
			require.Equal(t, tc.quota, got.Quota())
			require.Equal(t, tc.burst, got.Burst())
			require.Equal(t, tc.algo, got.Algorithm())
			require.Equal(t, tc.in.Period(), got.Period())
			require.Equal(t, tc.in.Name(), got.Name())
			require.Equal(t, tc.in.Unit(), got.Unit())
			require.Equal(t, tc.in.AlignsToFirstHit(), got.AlignsToFirstHit())
			require.Equal(t, tc.in.IsShadow(), got.IsShadow())
			require.Equal(t, tc.in.Cost() != nil, got.Cost() != nil)
		})
	}
}

func TestScaleLimitKeepsUnitCostAndShadow(t *testing.T) {
	cost := func(*http.Request) (int64, error) { return 7, nil }
	in := ratelimit.PerDay(1000).CostFrom(cost).WithUnit("credits").Named("credits").Shadow()
	got, err := ScaleLimit(in, EvenShare(10))
	require.NoError(t, err)
	require.Equal(t, ratelimit.Unit("credits"), got.Unit())
	require.True(t, got.IsShadow())
	n, err := got.Cost()(nil)
	require.NoError(t, err)
	require.Equal(t, int64(7), n)
	require.Equal(t, `"credits" 100/24h0m0s burst 100 token-bucket shadow`, got.String())
}

func TestScaleLimitErrors(t *testing.T) {
	for _, s := range []Share{{0, 1}, {1, 0}, {2, 1}, {-1, 5}} {
		_, err := ScaleLimit(ratelimit.PerMinute(60), s)
		require.ErrorIs(t, err, ErrInvalidOption, "%v", s)
	}
	_, err := ScaleLimit(ratelimit.Limit{}, EvenShare(2))
	require.ErrorIs(t, err, ratelimit.ErrInvalidLimit)
	_, err = ScaleLimit(ratelimit.PerMinute(0), EvenShare(2))
	require.ErrorIs(t, err, ratelimit.ErrInvalidLimit)
}

func TestScalerCachesPerIdentity(t *testing.T) {
	sc := newScaler(EvenShare(2))
	a, b := ratelimit.PerMinute(60), ratelimit.PerMinute(60)
	sa1, err := sc.scaled(&a)
	require.NoError(t, err)
	sa2, err := sc.scaled(&a)
	require.NoError(t, err)
	require.Same(t, sa1, sa2)
	// Equal limits behind different pointers share one entry.
	sb, err := sc.scaled(&b)
	require.NoError(t, err)
	require.Same(t, sa1, sb)
	require.Equal(t, int64(30), sb.Quota())
	require.Equal(t, 1, sc.len())

	// A limit changed behind its pointer is scaled afresh.
	a = ratelimit.PerMinute(10)
	sa3, err := sc.scaled(&a)
	require.NoError(t, err)
	require.Equal(t, int64(5), sa3.Quota())
	require.Equal(t, int64(5), sa3.Burst())
	// So is one that differs only in its shadow flag.
	a = ratelimit.PerMinute(10).Shadow()
	sa4, err := sc.scaled(&a)
	require.NoError(t, err)
	require.True(t, sa4.IsShadow())
	require.False(t, sa3.IsShadow())
	require.Equal(t, 3, sc.len())

	// An invalid limit is an error and is not cached.
	a = ratelimit.PerMinute(0)
	_, err = sc.scaled(&a)
	require.ErrorIs(t, err, ratelimit.ErrInvalidLimit)
	require.Equal(t, 3, sc.len())

	// Limits with ever new parameters cannot grow the cache past
	// maxScaled: it is cleared when full.
	for i := range maxScaled {
		l := ratelimit.PerMinute(int64(100 + i))
		_, err := sc.scaled(&l)
		require.NoError(t, err)
	}
	require.LessOrEqual(t, sc.len(), maxScaled)
	require.Greater(t, sc.len(), 0)
}

// A concurrency cap scales to its share of the cap, with its maximum hold.
func TestScaleLimitConcurrency(t *testing.T) {
	l := ratelimit.Concurrent(10, time.Minute).Named("inflight")
	sl, err := ScaleLimit(l, Share{Num: 1, Den: 3})
	if err != nil {
		t.Fatal(err)
	}
	if sl.Algorithm() != ratelimit.Concurrency || sl.Quota() != 3 || sl.MaxHold() != time.Minute ||
		sl.Unit() != ratelimit.ConcurrentRequests || sl.Name() != "inflight" {
		t.Fatalf("scaled %v to %v", l, sl)
	}
}

// TestScaleLimitCalendar: a calendar budget keeps its period, zone and
// refusal status; only its quota is shared.
func TestScaleLimitCalendar(t *testing.T) {
	in := ratelimit.PerCalendarMonth(50_000_000, time.UTC).Named("budget").WithUnit("usd-micros").WithRefusalStatus(http.StatusPaymentRequired)
	got, err := ScaleLimit(in, EvenShare(4))
	require.NoError(t, err)
	require.Equal(t, `"budget" 12500000/calendar month UTC calendar-window`, got.String())
	require.Equal(t, ratelimit.CalendarMonth, got.CalendarPeriod())
	require.Equal(t, time.UTC, got.Location())
	require.Equal(t, http.StatusPaymentRequired, got.RefusalStatus())
	require.Equal(t, ratelimit.Unit("usd-micros"), got.Unit())
	day, err := ScaleLimit(ratelimit.PerCalendarDay(10, time.UTC), EvenShare(3))
	require.NoError(t, err)
	require.Equal(t, `"requests" 3/calendar day UTC calendar-window`, day.String())
}
