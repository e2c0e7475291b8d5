package ratelimit

import (
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConcurrentValidation(t *testing.T) {
	bad := map[string]Limit{
		"cap 0":                 Concurrent(0, time.Minute),
		"cap over the maximum":  Concurrent(MaxConcurrent+1, time.Minute),
		"no max hold":           Concurrent(3, 0),
		"a separate burst":      Concurrent(3, time.Minute).WithBurst(4),
		"a cost function":       Concurrent(3, time.Minute).CostFrom(func(*http.Request) (int64, error) { return 1, nil }),
		"first-hit alignment":   Concurrent(3, time.Minute).AlignToFirstHit(),
		"sub-µs max hold":       Concurrent(3, time.Nanosecond),
		"max hold over 100 yrs": Concurrent(3, maxPeriod+time.Second),
	}
	for name, l := range bad {
		assert.ErrorIs(t, l.Err(), ErrInvalidLimit, name)
	}
	l := Concurrent(10, 5*time.Minute)
	require.NoError(t, l.Err())
	assert.Equal(t, "concurrent-requests", l.Name())
	assert.Equal(t, ConcurrentRequests, l.Unit())
	assert.Equal(t, int64(10), l.Burst())
	assert.Equal(t, 5*time.Minute, l.MaxHold())
	assert.Equal(t, Concurrency, l.Algorithm())
	assert.Equal(t, "concurrent-requests:cc:10:300000000:10", l.ID())
	assert.Equal(t, `"concurrent-requests" 10 in flight, max hold 5m0s, concurrency`, l.String())
	assert.NoError(t, Concurrent(MaxConcurrent, time.Hour).WithBurst(MaxConcurrent).Err())
	same := Every(3, time.Minute).WithAlgorithm(Concurrency)
	assert.NoError(t, same.Err())
	assert.Equal(t, Concurrent(3, time.Minute).ID(), same.ID(), "WithAlgorithm builds the same")
	assert.Equal(t, ConcurrentRequests, same.Unit())
}

// TestConcurrentSlots walks a cap of 2 with a max hold of 10 s through
// admission, refusal, release by At, and expiry, with exact values.
func TestConcurrentSlots(t *testing.T) {
	l := Concurrent(2, 10*time.Second)
	var s State
	// t0: slot A. Held 1, Reset = A's hold, 10 s.
	a := l.TakeAt(&s, t0, 1)
	assert.Equal(t, Decision{Limit: &l, Allowed: true, Remaining: 1, Reset: 10 * time.Second, At: t0}, a)
	// t0+3s: slot B. Reset = B's hold ends at 13 s.
	b := l.TakeAt(&s, t0+3*sec, 1)
	assert.Equal(t, Decision{Limit: &l, Allowed: true, Remaining: 0, Reset: 10 * time.Second, At: t0 + 3*sec}, b)
	// t0+4s: full. A's hold ends at 10 s, 6 s away, capped to 1 s.
	assert.Equal(t, Decision{Limit: &l, Remaining: 0, Reset: 9 * time.Second, RetryAfter: time.Second, At: t0 + 4*sec},
		l.TakeAt(&s, t0+4*sec, 1))
	// Two slots at once need both A and B to return; a cost of 3 never fits.
	assert.Equal(t, time.Second, l.TakeAt(&s, t0+4*sec, 2).RetryAfter)
	assert.Equal(t, RetryNever, l.TakeAt(&s, t0+4*sec, 3).RetryAfter)
	// 500 ms before A's hold ends, the wait is exact: 500 ms < the cap.
	assert.Equal(t, 500*time.Millisecond, l.TakeAt(&s, t0+9500*1000, 1).RetryAfter)
	// t0+5s: release B by its At. Held 1 (A), Reset until A's hold ends.
	assert.Equal(t, Decision{Limit: &l, Allowed: true, Remaining: 1, Reset: 5 * time.Second, At: t0 + 5*sec},
		l.AdjustFrom(&s, t0+5*sec, b.At, -1))
	// Releasing B again, or a slot never taken, releases nothing.
	l.AdjustFrom(&s, t0+5*sec, b.At, -1)
	assert.Equal(t, []int64{t0}, s.Log)
	l.AdjustFrom(&s, t0+5*sec, t0+1, -1)
	assert.Equal(t, []int64{t0}, s.Log)
	// t0+10s: A's hold has ended without a release: A returned by itself,
	// and its late release is a no-op; the key holds nothing.
	d := l.AdjustFrom(&s, t0+10*sec, a.At, -1)
	assert.Equal(t, Decision{Limit: &l, Allowed: true, Remaining: 2, At: t0 + 10*sec}, d)
	assert.Nil(t, s.Log)
	assert.LessOrEqual(t, l.ExpiresAt(&s), t0+10*sec, "nothing to keep")
	// A hold ends exactly maxHold after the take: 1 µs before it counts.
	s = State{}
	l.TakeAt(&s, t0, 2)
	assert.False(t, l.TakeAt(&s, t0+10*sec-1, 1).Allowed)
	assert.Equal(t, time.Microsecond, l.TakeAt(&s, t0+10*sec-1, 1).RetryAfter)
	assert.True(t, l.TakeAt(&s, t0+10*sec, 1).Allowed)
	assert.Equal(t, t0+20*sec, l.ExpiresAt(&s))
}

// TestConcurrentRelease: slots taken at the same µs are released one by
// one; At 0 releases the newest; a charge takes slots without a check,
// at most twice the cap; a peek is refused only over the cap.
func TestConcurrentRelease(t *testing.T) {
	l := Concurrent(3, time.Minute)
	var s State
	l.TakeAt(&s, t0, 1)
	l.TakeAt(&s, t0+sec, 1)
	l.TakeAt(&s, t0+sec, 1)
	assert.Equal(t, []int64{t0, t0 + sec, t0 + sec}, s.Log)
	before := s.Log
	assert.Equal(t, int64(1), l.AdjustFrom(&s, t0+2*sec, t0+sec, -1).Remaining)
	assert.Equal(t, []int64{t0, t0 + sec}, s.Log)
	assert.Equal(t, []int64{t0, t0 + sec, t0 + sec}, before, "the old log is not modified")
	// −5 at t0+1s releases the one slot left there.
	l.AdjustFrom(&s, t0+2*sec, t0+sec, -5)
	assert.Equal(t, []int64{t0}, s.Log)
	// At 0: the newest slots.
	l.TakeAt(&s, t0+3*sec, 2)
	l.AdjustFrom(&s, t0+4*sec, 0, -1)
	assert.Equal(t, []int64{t0, t0 + 3*sec}, s.Log)
	// A charge of 10 takes 6 − 2 = 4 slots: at most twice the cap.
	d := l.AdjustFrom(&s, t0+4*sec, 0, 10)
	assert.Equal(t, 6, len(s.Log))
	assert.Equal(t, int64(0), d.Remaining)
	// A peek is refused while over the cap: the oldest 3 must return; the
	// third oldest (t0+4s) ends its hold at t0+64s: capped at 1 s.
	p := l.TakeAt(&s, t0+5*sec, 0)
	assert.False(t, p.Allowed)
	assert.Equal(t, time.Second, p.RetryAfter)
	assert.Equal(t, 6, len(s.Log), "a peek charges nothing")
	// The most negative delta releases everything, at a time or at 0.
	l.AdjustFrom(&s, t0+5*sec, t0+4*sec, math.MinInt64)
	assert.Equal(t, []int64{t0, t0 + 3*sec}, s.Log)
	l.AdjustFrom(&s, t0+5*sec, 0, math.MinInt64)
	assert.Nil(t, s.Log)
}

// TestConcurrentClockBack: a slot taken after the clock stepped back keeps
// its own start time, so its release finds it; the slots taken before the
// step stay held (no capacity is created).
func TestConcurrentClockBack(t *testing.T) {
	l := Concurrent(3, time.Minute)
	var s State
	late := l.TakeAt(&s, t0+10*sec, 1)
	early := l.TakeAt(&s, t0, 1) // the clock stepped back 10 s
	assert.True(t, early.Allowed)
	assert.Equal(t, []int64{t0, t0 + 10*sec}, s.Log)
	assert.Equal(t, time.Minute+10*time.Second, early.Reset)
	l.AdjustFrom(&s, t0+sec, early.At, -1)
	assert.Equal(t, []int64{t0 + 10*sec}, s.Log)
	l.AdjustFrom(&s, t0+sec, late.At, -1)
	assert.Nil(t, s.Log)
}
