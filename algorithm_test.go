package ratelimit

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// t0 is 2026-01-01T00:00:00Z in µs: a multiple of every period used below,
// so epoch-aligned windows start there.
var t0 = Micros(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))

const sec = int64(1_000_000)

func TestAlgorithmValidation(t *testing.T) {
	bad := map[string]Limit{
		"GCRA with a fractional emission interval": Every(7, 3*time.Second).WithAlgorithm(GCRA),
		"sliding window with a sub-ms period":      Every(10, 1500*time.Microsecond).WithAlgorithm(SlidingWindow),
		"sliding window overflowing":               PerDay(1 << 40).WithAlgorithm(SlidingWindow),
		"sliding log over MaxLogQuota":             PerMinute(MaxLogQuota + 1).WithAlgorithm(SlidingLog),
		"fixed window with a separate burst":       PerMinute(10).WithBurst(5).WithAlgorithm(FixedWindow),
		"first-hit alignment on a token bucket":    PerMinute(10).AlignToFirstHit(),
		"window quota over 2^49":                   Every(1<<50, 1000*time.Hour).WithAlgorithm(FixedWindow),
	}
	for name, l := range bad {
		assert.ErrorIs(t, l.Err(), ErrInvalidLimit, name)
	}
	for _, l := range []Limit{
		PerSecond(10).WithAlgorithm(GCRA), PerDay(100_000).WithAlgorithm(GCRA),
		Every(7, 3*time.Second).WithAlgorithm(LeakyBucket),
		PerDay(100_000).WithAlgorithm(SlidingWindow),
		PerMinute(MaxLogQuota).WithAlgorithm(SlidingLog),
		PerMinute(10).WithBurst(10).WithAlgorithm(FixedWindow).AlignToFirstHit(),
	} {
		assert.NoError(t, l.Err(), l.String())
	}
	assert.NotEqual(t, PerMinute(10).WithAlgorithm(FixedWindow).ID(),
		PerMinute(10).WithAlgorithm(FixedWindow).AlignToFirstHit().ID())
}

// GCRA stores its TAT (and its last change) but must admit exactly what the token bucket does:
// drive both with the same random sequence and compare every decision.
func TestGCRAEqualsTokenBucket(t *testing.T) {
	for _, base := range []Limit{PerSecond(10).WithBurst(50), PerMinute(60), PerDay(100_000).WithBurst(20_000), Every(3, 3*time.Microsecond)} {
		tb, gc := base, base.WithAlgorithm(GCRA)
		require.NoError(t, gc.Err())
		rng := rand.New(rand.NewPCG(1, 2))
		var stb, sgc State
		now := t0
		for step := range 5000 {
			now += rng.Int64N(3 * base.Period().Microseconds() / base.Quota())
			if rng.IntN(10) == 0 {
				delta := rng.Int64N(2*base.Burst()) - base.Burst()
				var dtb, dgc Decision
				dtb = tb.AdjustAt(&stb, now, delta)
				dgc = gc.AdjustAt(&sgc, now, delta)
				dtb.Limit, dgc.Limit = nil, nil
				require.Equal(t, dtb, dgc, "%v step %d adjust %d", base, step, delta)
				continue
			}
			cost := rng.Int64N(base.Burst()/4 + 2)
			var dtb, dgc Decision
			dtb = tb.TakeAt(&stb, now, cost)
			dgc = gc.TakeAt(&sgc, now, cost)
			dtb.Limit, dgc.Limit = nil, nil
			require.Equal(t, dtb, dgc, "%v step %d cost %d", base, step, cost)
			// GCRA keeps its TAT and the time of its last change (now),
			// or nothing once it is full again.
			if sgc.Level == 0 {
				assert.Equal(t, State{}, sgc, "a full GCRA state is the zero State")
			} else {
				assert.Equal(t, State{Level: sgc.Level, Updated: now}, sgc, "GCRA keeps its TAT and its last change")
			}
		}
	}
}

// A burst of 100 requests through a leaky bucket of 100/min: every one is
// queued, the i-th at i × 600 ms, so no 60 s span holds more than 100.
func TestLeakyBucketSmoothsABurst(t *testing.T) {
	l := PerMinute(100).WithAlgorithm(LeakyBucket)
	var s State
	var sends []int64
	for i := range 100 {
		d := l.TakeAt(&s, t0, 1)
		require.True(t, d.Allowed, "request %d", i)
		assert.Equal(t, time.Duration(i)*600*time.Millisecond, d.Delay, "request %d", i)
		sends = append(sends, t0+d.Delay.Microseconds())
	}
	d := l.TakeAt(new(s), t0, 1)
	assert.False(t, d.Allowed, "the queue holds Burst = 100 units")
	assert.Equal(t, 600*time.Millisecond, d.RetryAfter)
	assert.Zero(t, d.Delay)
	for i := range sends {
		n := 0
		for _, u := range sends[i:] {
			if u < sends[i]+60*sec {
				n++
			}
		}
		assert.LessOrEqual(t, n, 100)
	}
	// 30 s later half the queue has drained: the next request waits for
	// the 50 still ahead of it.
	d = l.TakeAt(new(s), t0+30*sec, 1)
	assert.True(t, d.Allowed)
	assert.Equal(t, 30*time.Second, d.Delay)
}

// The fixed window's known flaw, demonstrated: 100/min admits 100 in the
// last 100 ms of one window and 100 more in the first instant of the next:
// 200 within 100 ms.
func TestFixedWindowBoundaryBurst(t *testing.T) {
	l := PerMinute(100).WithAlgorithm(FixedWindow)
	var s State
	late := t0 + 59_900_000
	admitted := 0
	for range 150 {
		d := l.TakeAt(&s, late, 1)
		if d.Allowed {
			admitted++
		} else {
			assert.Equal(t, 100*time.Millisecond, d.RetryAfter, "until the window at t0+60s")
			assert.Equal(t, 100*time.Millisecond, d.Reset)
		}
	}
	for range 150 {
		d := l.TakeAt(&s, t0+60*sec, 1)
		if d.Allowed {
			admitted++
		}
	}
	assert.Equal(t, 200, admitted, "2× the quota within 100 ms")
	d := l.TakeAt(new(s), t0+60*sec, 101)
	assert.True(t, d.Never())
}

func TestFixedWindowFirstHit(t *testing.T) {
	l := PerMinute(2).WithAlgorithm(FixedWindow).AlignToFirstHit()
	first := t0 + 17*sec
	var s State
	d := l.TakeAt(&s, first, 1)
	require.True(t, d.Allowed)
	assert.Equal(t, 60*time.Second, d.Reset, "the window opened at the first hit")
	l.TakeAt(&s, first+10*sec, 1)
	d = l.TakeAt(new(s), first+10*sec, 1)
	assert.False(t, d.Allowed)
	assert.Equal(t, 50*time.Second, d.RetryAfter)
	d = l.TakeAt(&s, first+60*sec, 1)
	assert.True(t, d.Allowed, "a new window opens at the first hit after the last one closed")
	assert.Equal(t, first+60*sec, s.Updated)
}

// The sliding-window counter: 100 counted in the previous window, 30 s
// into this one the previous window still weighs 100 × 30/60 = 50, so 50
// more fit. The 51st needs prev×(60000−e) ≤ (100−50−1)×60000, so
// e ≥ 60000 − 29400 = 30600 ms: 600 ms from now.
func TestSlidingWindowCounter(t *testing.T) {
	l := PerMinute(100).WithAlgorithm(SlidingWindow)
	var s State
	for range 100 {
		l.TakeAt(&s, t0+10*sec, 1)
	}
	now := t0 + 90*sec
	admitted := 0
	var last Decision
	for range 60 {
		d := l.TakeAt(&s, now, 1)
		if d.Allowed {
			admitted++
		} else {
			last = d
		}
	}
	assert.Equal(t, 50, admitted)
	assert.Equal(t, 600*time.Millisecond, last.RetryAfter)
	assert.Equal(t, int64(0), last.Remaining)
	assert.Equal(t, 90*time.Second, last.Reset, "the current count weighs until t0+180s")
	d := l.TakeAt(new(s), now+600_000, 1)
	assert.True(t, d.Allowed)

	// Nothing in this window fits 50 units (prev would have to weigh 0);
	// in the next one the 50 counted now weigh 50 × (60000−e)/60000 and
	// 50 + that ≤ 100 holds from e = 0: retry at t0+120s.
	d = l.TakeAt(new(s), now, 50)
	assert.False(t, d.Allowed)
	assert.Equal(t, 30*time.Second, d.RetryAfter)
}

func TestSlidingLog(t *testing.T) {
	l := Every(3, 10*time.Second).WithAlgorithm(SlidingLog)
	var s State
	for i := range int64(3) {
		d := l.TakeAt(&s, t0+i*sec, 1)
		require.True(t, d.Allowed)
	}
	d := l.TakeAt(new(s), t0+5*sec, 1)
	assert.False(t, d.Allowed)
	assert.Equal(t, 5*time.Second, d.RetryAfter, "the entry at t0 leaves the window at t0+10s")
	assert.Equal(t, 7*time.Second, d.Reset, "the newest entry (t0+2s) leaves at t0+12s")
	d = l.TakeAt(new(s), t0+5*sec, 2)
	assert.Equal(t, 6*time.Second, d.RetryAfter, "two entries must leave: t0+1s leaves at t0+11s")
	orig := append([]int64(nil), s.Log...)
	s2 := s
	d = l.TakeAt(&s2, t0+10*sec, 1)
	assert.True(t, d.Allowed)
	assert.Equal(t, []int64{t0 + 1*sec, t0 + 2*sec, t0 + 10*sec}, s2.Log)
	assert.Equal(t, orig, s.Log, "the input state's log is never modified")

	// A refund removes only entries charged at or after the charge time.
	s3 := s2
	d = l.AdjustFrom(&s3, t0+10*sec, t0+2*sec, -5)
	assert.Equal(t, []int64{t0 + 1*sec}, s3.Log)
	assert.Equal(t, int64(2), d.Remaining)
}

// Refunds land in the window that was charged and never create capacity in
// a later one.
func TestWindowRefunds(t *testing.T) {
	fixed := PerMinute(10).WithAlgorithm(FixedWindow)
	var s State
	d := fixed.TakeAt(&s, t0+50*sec, 8)
	charged := d.At
	d = fixed.AdjustFrom(&s, t0+55*sec, charged, -5)
	assert.Equal(t, int64(7), d.Remaining, "same window: refunded")
	fixed.AdjustFrom(&s, t0+55*sec, charged, 5) // charge it back: 8 used
	d = fixed.AdjustFrom(&s, t0+65*sec, charged, -8)
	assert.Equal(t, int64(10), d.Remaining, "the charged window has closed: nothing to credit")
	d = fixed.AdjustFrom(new(s), t0+65*sec, charged, 3)
	assert.Equal(t, int64(7), d.Remaining, "an overage for a closed window is charged to the current one")

	sliding := PerMinute(10).WithAlgorithm(SlidingWindow)
	s = State{}
	sliding.TakeAt(&s, t0+50*sec, 8)
	d = sliding.AdjustFrom(&s, t0+90*sec, t0+50*sec, -6)
	// prev 2, weighted 2 × 30/60 = 1 → 9 remaining; the refund went to the
	// previous window, not the current one.
	assert.Equal(t, int64(9), d.Remaining)
	assert.Equal(t, int64(2), s.Prev)
	assert.Equal(t, int64(0), s.Level)
	d = sliding.AdjustFrom(new(s), t0+150*sec, t0+50*sec, -2)
	assert.Equal(t, int64(10), d.Remaining)
}

// Every algorithm answers a cost above its capacity with RetryNever and
// charges nothing; a cost-0 peek never charges.
func TestAllAlgorithmsNeverAndPeek(t *testing.T) {
	for _, a := range []Algorithm{TokenBucket, GCRA, LeakyBucket, SlidingWindow, SlidingLog, FixedWindow} {
		l := PerMinute(60).WithAlgorithm(a)
		require.NoError(t, l.Err(), a.String())
		var s State
		d := l.TakeAt(&s, t0, 61)
		assert.True(t, d.Never(), a.String())
		assert.Equal(t, int64(60), d.Remaining, a.String())
		d = l.TakeAt(&s, t0, 0)
		assert.True(t, d.Allowed, a.String())
		assert.Equal(t, int64(60), d.Remaining, a.String())
		assert.LessOrEqual(t, l.ExpiresAt(&s), t0, "%v: a peek leaves nothing to store", a)
		d = l.TakeAt(&s, t0, 60)
		assert.True(t, d.Allowed, a.String())
		assert.Equal(t, int64(0), d.Remaining, a.String())
		d = l.TakeAt(new(s), t0, 1)
		assert.False(t, d.Allowed, a.String())
		assert.Positive(t, d.RetryAfter, a.String())
		assert.Greater(t, l.ExpiresAt(&s), t0, a.String())
	}
}

// A huge adjustment saturates a window at twice its quota instead of
// overflowing int64 and emptying it.
func TestWindowAdjustSaturates(t *testing.T) {
	for _, a := range []Algorithm{FixedWindow, SlidingWindow} {
		l := PerMinute(60).WithAlgorithm(a)
		var s State
		l.TakeAt(&s, t0, 5)
		d := l.AdjustAt(&s, t0, math.MaxInt64)
		assert.Equal(t, int64(120), s.Level, a.String())
		assert.Zero(t, d.Remaining, a.String())
		l.AdjustAt(&s, t0, math.MinInt64)
		assert.Zero(t, s.Level, a.String())
	}
}

// An empty first-hit window is no window. Found by the property tests: a
// refund that empties a first-hit window left a state that ExpiresAt called
// forgettable (its Level is 0) yet kept the window open, so a store that
// forgot it (they all do) opened the next window at the next hit while the
// pure function kept the old one. Now both open it at the next hit.
func TestFixedWindowFirstHitEmptyWindow(t *testing.T) {
	l := PerMinute(2).WithAlgorithm(FixedWindow).AlignToFirstHit()
	first := t0 + 17*sec
	var s State
	d := l.TakeAt(&s, first, 1)
	require.True(t, d.Allowed)
	d = l.AdjustFrom(&s, first+10*sec, d.At, -1)
	assert.Equal(t, int64(2), d.Remaining)
	assert.LessOrEqual(t, l.ExpiresAt(&s), first+10*sec, "nothing counted: forgettable")
	// The next hit, 20 s after the first, opens a window of its own: Reset
	// is the whole period, exactly as on a key never seen.
	d = l.TakeAt(new(s), first+20*sec, 1)
	fresh := l.TakeAt(&State{}, first+20*sec, 1)
	assert.Equal(t, 60*time.Second, d.Reset)
	assert.Equal(t, fresh, d)

	// A peek after a window closed rolls to an empty window at the peek;
	// it must not open a window either.
	s = State{}
	l.TakeAt(&s, first, 2)
	d = l.TakeAt(&s, first+70*sec, 0)
	assert.True(t, d.Allowed)
	d = l.TakeAt(new(s), first+80*sec, 1)
	assert.Equal(t, 60*time.Second, d.Reset, "the window opens at the hit, not at the peek")
}

// ExpiresAt's promise, checked for every algorithm on states reached by
// random Takes and Adjusts: from ExpiresAt on, a state decides exactly like
// the zero State, so stores may forget it.
func TestExpiresAtMeansForgettable(t *testing.T) {
	limits := []Limit{
		Every(7, 3*time.Second).WithBurst(5),
		PerSecond(10).WithAlgorithm(GCRA),
		Every(7, 3*time.Second).WithAlgorithm(LeakyBucket),
		Every(7, 3*time.Second).WithAlgorithm(SlidingWindow),
		Every(7, 3*time.Second).WithAlgorithm(SlidingLog),
		Every(7, 3*time.Second).WithAlgorithm(FixedWindow),
		Every(7, 3*time.Second).WithAlgorithm(FixedWindow).AlignToFirstHit(),
	}
	for _, l := range limits {
		require.NoError(t, l.Err())
		rng := rand.New(rand.NewPCG(7, 11))
		var s State
		now := t0
		for step := range 3000 {
			now += rng.Int64N(2 * sec)
			cost := rng.Int64N(9)
			var d Decision
			switch {
			case rng.IntN(4) == 0:
				d = l.AdjustFrom(&s, now, now-rng.Int64N(4*sec), cost-4)
			default:
				d = l.TakeAt(&s, now, cost)
			}
			_ = d
			exp := l.ExpiresAt(&s)
			if exp > now+4*l.Period().Microseconds() {
				continue
			}
			for _, at := range []int64{max(exp, now), max(exp, now) + 1, max(exp, now) + l.Period().Microseconds()/3} {
				for _, c := range []int64{0, 1, 3} {
					got := l.TakeAt(new(s), at, c)
					want := l.TakeAt(&State{}, at, c)
					require.Equal(t, want, got, "%v step %d: state %+v expired at %d, take %d at %d", l, step, s, exp, c, at)
				}
			}
		}
	}
}

// TestClockStepped: ClockStepped reports exactly the states TakeAt
// rebases: more than ClockStepTolerance (128 ms) behind a bucket's or
// GCRA's last change or a log's newest entry; for a window, behind its
// start by more than the tolerance and, aligned to the epoch, by at least
// a period (it moves by whole periods); an empty first-hit window is no
// window.
func TestClockStepped(t *testing.T) {
	const u = int64(1_767_225_600_000_000) // a whole minute
	tol := ClockStepTolerance.Microseconds()
	minute := PerMinute(60)
	cases := []struct {
		name string
		l    Limit
		s    State
		now  int64
		want bool
	}{
		{"bucket at its last change", minute, State{Level: 1, Updated: u}, u, false},
		{"bucket, behind by the tolerance", minute, State{Level: 1, Updated: u}, u - tol, false},
		{"bucket, behind by 1µs more", minute, State{Level: 1, Updated: u}, u - tol - 1, true},
		{"GCRA, behind by 1µs more", minute.WithAlgorithm(GCRA), State{Level: u + 1, Updated: u}, u - tol - 1, true},
		{"GCRA written without its last change", minute.WithAlgorithm(GCRA), State{Level: u + 1}, 0, false},
		{"log, behind its newest entry by more", minute.WithAlgorithm(SlidingLog), State{Log: []int64{u - 5, u}}, u - tol - 1, true},
		{"empty log", minute.WithAlgorithm(SlidingLog), State{}, 0, false},
		{"window, behind its start by less than a period", minute.WithAlgorithm(FixedWindow), State{Level: 1, Updated: u}, u - 59_999_999, false},
		{"window, behind its start by a period", minute.WithAlgorithm(FixedWindow), State{Level: 1, Updated: u}, u - 60_000_000, true},
		{"sliding window, empty but for its previous count", minute.WithAlgorithm(SlidingWindow), State{Updated: u, Prev: 3}, u - 60_000_000, true},
		{"first-hit window, behind by more", minute.WithAlgorithm(FixedWindow).AlignToFirstHit(), State{Level: 1, Updated: u}, u - tol - 1, true},
		{"first-hit window counting nothing", minute.WithAlgorithm(FixedWindow).AlignToFirstHit(), State{Updated: u}, u - tol - 1, false},
	}
	for _, c := range cases {
		s := c.s
		assert.Equal(t, c.want, c.l.ClockStepped(&s, c.now), c.name)
		// TakeAt rebases (changes the state's times) exactly then.
		before := c.s
		c.l.TakeAt(&s, c.now, 0)
		moved := s.Updated < before.Updated || (len(before.Log) > 0 && len(s.Log) > 0 && s.Log[len(s.Log)-1] < before.Log[len(before.Log)-1])
		switch {
		case c.l.Algorithm() == GCRA && s.Level == 0:
			moved = before.Updated != 0 && c.now < before.Updated-tol
		case c.l.AlignsToFirstHit() && before.Level == 0:
			moved = false // no window: a peek rolls to now, which is no rebase
		}
		assert.Equal(t, c.want, moved, "%s: TakeAt rebased", c.name)
	}
}

// TestTakeToIsTakeAt: TakeTo writes TakeAt's Decision over whatever *d
// held and returns ExpiresAt of the state it leaves, for every algorithm,
// on states reached by random Takes and Adjusts with a clock that jumps
// forward (up to 1000 periods) and steps back (within the tolerance and
// beyond it).
func TestTakeToIsTakeAt(t *testing.T) {
	limits := []Limit{
		Every(7, 3*time.Second).WithBurst(5),
		PerMinute(1_000_000_000), // drain 50, scale 3
		PerSecond(1 << 30),       // drain 2^24, scale 15625
		PerSecond(10).WithAlgorithm(GCRA),
		Every(7, 3*time.Second).WithAlgorithm(LeakyBucket),
		Every(7, 3*time.Second).WithAlgorithm(SlidingWindow),
		Every(7, 3*time.Second).WithAlgorithm(SlidingLog),
		Every(7, 3*time.Second).WithAlgorithm(FixedWindow),
		Concurrent(3, time.Minute),
		PerCalendarDay(100, time.UTC),
	}
	for _, l := range limits {
		require.NoError(t, l.Err())
		rng := rand.New(rand.NewPCG(3, 5))
		var s State
		now := t0
		period := l.Period().Microseconds()
		for step := range 3000 {
			switch rng.IntN(10) {
			case 0:
				now -= rng.Int64N(2 * stepTolUS) // a step back, either side of the tolerance
			case 1:
				now += rng.Int64N(1000 * period)
			default:
				now += rng.Int64N(period / 2)
			}
			cost := rng.Int64N(l.burstOf() + 2)
			if rng.IntN(4) == 0 {
				l.AdjustFrom(&s, now, 0, cost)
				continue
			}
			want := s
			wantD := l.TakeAt(&want, now, cost)
			got := s
			gotD := Decision{Allowed: true, Remaining: -1, Reset: -1, RetryAfter: -1, Delay: -1, At: -1}
			exp := l.TakeTo(&got, now, cost, &gotD)
			require.Equal(t, wantD, gotD, "%v step %d", l, step)
			require.Equal(t, want, got, "%v step %d", l, step)
			require.Equal(t, l.ExpiresAt(&want), exp, "%v step %d", l, step)
			s = got
		}
	}
}

// TestDrainToMatchesDivision: drainTo's product comparison drains exactly
// when elapsed ≥ ⌈Level/drain⌉, the rule it replaced, including products
// that overflow int64.
func TestDrainToMatchesDivision(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 200_000 {
		l := Limit{drain: 1 + rng.Int64N(1<<uint(rng.IntN(62)))}
		level := rng.Int64N(maxLevel + 1)
		if i%7 == 0 {
			level = -rng.Int64N(1 << 40) // a level below 0 drains to 0
		}
		elapsed := 1 + rng.Int64N(1<<uint(rng.IntN(62)))
		want := level - elapsed*l.drain
		if elapsed >= level || elapsed >= ceilDiv(level, l.drain) {
			want = 0
		}
		s := State{Level: level, Updated: 1}
		l.drainTo(&s, 1+elapsed)
		require.Equal(t, want, s.Level, "level %d drain %d elapsed %d", level, l.drain, elapsed)
		require.Equal(t, 1+elapsed, s.Updated)
	}
}

// TestDivisorMatchesDivision: divisor's multiply-and-shift quotient is the
// division's for every divisor from 1 to 4096 and random ones up to
// 2^63−1, on the numerators next to multiples of the divisor (where a
// rounding error would show first), the extremes and random ones.
func TestDivisorMatchesDivision(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	check := func(d, n int64) {
		t.Helper()
		v := newDivisor(d)
		if got, want := v.div(n), n/d; got != want {
			t.Fatalf("⌊%d/%d⌋: got %d, want %d", n, d, got, want)
		}
		if got, want := v.ceil(n), ceilDiv(n, d); got != want {
			t.Fatalf("⌈%d/%d⌉: got %d, want %d", n, d, got, want)
		}
	}
	const maxN = math.MaxInt64
	ds := make([]int64, 0, 4096+20_000)
	for d := int64(1); d <= 4096; d++ {
		ds = append(ds, d)
	}
	for range 20_000 {
		ds = append(ds, 1+rng.Int64N(1<<uint(rng.IntN(63))))
	}
	ds = append(ds, maxN, maxN-1, 1<<62, 1<<62+1, 3<<61)
	for _, d := range ds {
		for _, n := range []int64{0, 1, d - 1, d, d + 1, maxN, maxN - 1, maxN - maxN%d, maxN - maxN%d - 1, 1 << 52, 1<<52 - 1} {
			if n >= 0 {
				check(d, n)
			}
		}
		for range 20 {
			q := 1 + rng.Int64N(maxN/d) // a multiple of d, and its neighbours
			for _, n := range []int64{q * d, q*d - 1, q*d + 1, rng.Int64N(maxN)} {
				if n >= 0 {
					check(d, n)
				}
			}
		}
	}
	if got := newDivisor(5).ceil(-3); got != 0 { // as ceilDiv's
		t.Fatalf("⌈-3/5⌉: got %d, want 0", got)
	}
}
