package ratelimit

import (
	"errors"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLimitValidation(t *testing.T) {
	cost := func(*http.Request) (int64, error) { return 1, nil }
	tests := []struct {
		name  string
		limit Limit
	}{
		{"zero Limit", Limit{}},
		{"zero quota", PerMinute(0)},
		{"negative quota", PerMinute(-5)},
		{"zero period", Every(10, 0)},
		{"negative period", Every(10, -time.Second)},
		{"sub-microsecond period", Every(10, 500*time.Nanosecond)},
		{"fractional microseconds", Every(10, 1500*time.Nanosecond)},
		{"period over 100 years", Every(1, 101*365*24*time.Hour)},
		{"quota over 2^51", PerSecond(1 << 52)},
		{"zero burst", PerMinute(60).WithBurst(0)},
		{"negative burst", PerMinute(60).WithBurst(-1)},
		{"burst error sticks through later builders", PerMinute(60).WithBurst(-1).Named("x")},
		{"nil cost function", PerDay(100).CostFrom(nil)},
		{"empty name", Limit{quota: 1, period: time.Second, unit: ""}.finish()},
		{"name with space", PerMinute(60).Named("per minute")},
		{"name with quote", PerMinute(60).Named(`a"b`)},
		{"name too long", PerMinute(60).Named(string(make([]byte, 65)))},
		{"unknown algorithm", PerMinute(60).WithAlgorithm(Algorithm(200))},
		{"unit with quote", PerMinute(60).WithUnit(`to"kens`)},
		// 1 unit per 100 years has scale 3.15e15 µs per unit (gcd 1), so a
		// burst of 1000 needs 3.15e18 internal units: beyond 2^51.
		{"burst overflows exact arithmetic", Every(1, 100*365*24*time.Hour).WithBurst(1000)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.limit.Err()
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalidLimit)
			s, d, c := tt.limit.Params()
			assert.Zero(t, s+d+c, "an invalid limit exposes no parameters")
		})
	}

	valid := []Limit{
		PerSecond(10).WithBurst(50),
		PerMinute(60).Named("requests"),
		PerDay(100_000).Named("tokens").CostFrom(cost),
		Every(7, 3*time.Second),
		Every(1, time.Microsecond),
		PerSecond(1 << 51).WithBurst(1),          // gcd(10^6, 2^51) = 2^6: scale 15625, drain 2^45
		PerMinute(60).WithBurst(-1).WithBurst(5), // a later valid burst does not clear the first error
	}
	for i, l := range valid[:len(valid)-1] {
		assert.NoError(t, l.Err(), "valid[%d] %v", i, l)
	}
	assert.ErrorIs(t, valid[len(valid)-1].Err(), ErrInvalidLimit)
}

func TestLimitAccessorsAndID(t *testing.T) {
	cost := func(*http.Request) (int64, error) { return 1, nil }
	l := PerDay(100_000).Named("tokens").CostFrom(cost)
	assert.Equal(t, "tokens", l.Name())
	assert.Equal(t, int64(100_000), l.Quota())
	assert.Equal(t, 24*time.Hour, l.Period())
	assert.Equal(t, int64(100_000), l.Burst(), "burst defaults to the quota")
	assert.Equal(t, Tokens, l.Unit())
	assert.Equal(t, TokenBucket, l.Algorithm())
	assert.NotNil(t, l.Cost())
	assert.Equal(t, "tokens:tb:100000:86400000000:100000", l.ID())

	// 100,000 per 86,400,000,000 µs: gcd 100,000, so one unit takes
	// 864,000 µs (scale 864000, drain 1).
	s, d, c := l.Params()
	assert.Equal(t, [3]int64{864_000, 1, 100_000 * 864_000}, [3]int64{s, d, c})

	// 7 per 3 s: gcd(3,000,000, 7) = 1.
	s, d, c = Every(7, 3*time.Second).WithBurst(5).Params()
	assert.Equal(t, [3]int64{3_000_000, 7, 15_000_000}, [3]int64{s, d, c})

	assert.Equal(t, "requests", PerMinute(60).Name(), "the name defaults to the unit")
	assert.NotEqual(t, PerMinute(60).ID(), PerMinute(61).ID(), "changing the quota changes the storage identity")
	assert.NotEqual(t, PerMinute(60).ID(), PerMinute(60).WithBurst(10).ID())
	assert.Equal(t, `"requests" 60/1m0s burst 60 token-bucket`, PerMinute(60).String())
}

// The README's token-bucket example: rate 10/s, capacity 50, idle 30 s, then 60
// requests at one instant. Idle time refills the bucket to its capacity
// (never beyond), so exactly 50 pass; each of the other 10 lacks one unit,
// which refills in 1/10 s = 100 ms.
func TestTakeAtBurstThenRefill(t *testing.T) {
	l := PerSecond(10).WithBurst(50)
	start := Micros(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var s State
	l.TakeAt(&s, start, 1)
	now := start + 30_000_000
	allowed := 0
	for i := range 60 {
		d := l.TakeAt(&s, now, 1)
		if d.Allowed {
			allowed++
			assert.Equal(t, int64(49-i), d.Remaining)
			assert.Zero(t, d.RetryAfter)
			continue
		}
		assert.Equal(t, 100*time.Millisecond, d.RetryAfter)
		assert.Equal(t, int64(0), d.Remaining)
		assert.Equal(t, 5*time.Second, d.Reset, "50 units at 10/s take 5 s to refill")
	}
	assert.Equal(t, 50, allowed)

	// 100 ms later exactly one unit has refilled.
	d := l.TakeAt(&s, now+100_000, 1)
	assert.True(t, d.Allowed)
	d = l.TakeAt(new(s), now+100_000, 1)
	assert.False(t, d.Allowed)
}

func TestTakeAtNeverAndPeek(t *testing.T) {
	l := PerMinute(60)
	now := int64(1_000_000_000)
	var s State
	d := l.TakeAt(&s, now, 61)
	assert.False(t, d.Allowed)
	assert.True(t, d.Never())
	assert.Equal(t, RetryNever, d.RetryAfter)
	assert.Equal(t, State{Level: 0, Updated: now}, s, "a refused request charges nothing")
	assert.Equal(t, int64(60), d.Remaining)

	d = l.TakeAt(&s, now, 60)
	assert.True(t, d.Allowed)
	assert.Equal(t, int64(0), d.Remaining)
	assert.Equal(t, time.Minute, d.Reset)

	// A peek reports without charging.
	s2 := s
	d = l.TakeAt(&s2, now+1_500_000, 0)
	assert.True(t, d.Allowed)
	assert.Equal(t, int64(1), d.Remaining, "1.5 s refills 1.5 units; remaining rounds down")
	assert.Equal(t, 58500*time.Millisecond, d.Reset)
	assert.Equal(t, s.Level-1_500_000, s2.Level)
}

func TestAdjustAt(t *testing.T) {
	l := PerMinute(60) // one unit per second: scale 1,000,000, drain 1
	now := int64(5_000_000_000)
	var s State
	l.TakeAt(&s, now, 10)

	// A refund larger than the usage empties the bucket, never below zero.
	d := l.AdjustAt(&s, now, -25)
	assert.Equal(t, int64(0), s.Level)
	assert.Equal(t, int64(60), d.Remaining)
	assert.Zero(t, d.Reset)

	// A charge beyond capacity is debt: 100 units used of 60, so a
	// 1-unit request waits until 59 are used: 41 s.
	d = l.AdjustAt(&s, now, 100)
	assert.Equal(t, int64(0), d.Remaining)
	assert.Equal(t, 100*time.Second, d.Reset)
	d = l.TakeAt(new(s), now, 1)
	assert.False(t, d.Allowed)
	assert.Equal(t, 41*time.Second, d.RetryAfter)

	// Extreme adjustments saturate instead of overflowing.
	l.AdjustAt(&s, now, math.MaxInt64)
	assert.Equal(t, maxLevel, s.Level)
	l.AdjustAt(&s, now, math.MinInt64)
	assert.Equal(t, int64(0), s.Level)
}

func TestClockBackwardsCreatesNothing(t *testing.T) {
	l := PerSecond(1)
	var s State
	l.TakeAt(&s, 10_000_000, 1)
	d := l.TakeAt(&s, 5_000_000, 1) // the clock jumped 5 s back
	// A step beyond ClockStepTolerance: the bucket, empty at 10 s, is
	// rebased to 5 s, still empty, so the next unit is 1 s away.
	assert.False(t, d.Allowed)
	assert.Equal(t, time.Second, d.RetryAfter)
	assert.Equal(t, int64(5_000_000), s.Updated)
	assert.Equal(t, int64(6_000_000), l.ExpiresAt(&s))
}

func TestCheckRequests(t *testing.T) {
	l := PerMinute(60)
	bad := Limit{}
	out := make([]Decision, 1)
	cases := map[string]error{
		"empty key":     CheckRequests([]Request{{Key: "", Limit: &l, Cost: 1}}, out, true),
		"nil limit":     CheckRequests([]Request{{Key: "k", Cost: 1}}, out, true),
		"invalid limit": CheckRequests([]Request{{Key: "k", Limit: &bad, Cost: 1}}, out, true),
		"negative cost": CheckRequests([]Request{{Key: "k", Limit: &l, Cost: -1}}, out, true),
		"short out":     CheckRequests([]Request{{Key: "k", Limit: &l}, {Key: "k", Limit: &l}}, out, true),
	}
	for name, err := range cases {
		assert.True(t, errors.Is(err, ErrInvalidRequest), "%s: %v", name, err)
	}
	assert.NoError(t, CheckRequests([]Request{{Key: "k", Limit: &l, Cost: -1}}, out, false), "Adjust may refund")
}
