package ratelimit

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"testing"
	"time"
)

// Review of the multiply-and-shift division (divisor, 6ddd977).
//
// The proof, for d ≥ 2 and ℓ = ⌈log2 d⌉: write m×d = 2^(63+ℓ) + e. For
// n = q×d + r with 0 ≤ r < d and 0 ≤ n < 2^63,
//
//	m×n / 2^(63+ℓ) = n/d + e×n / (d×2^(63+ℓ)) = q + (r + e×n/2^(63+ℓ)) / d,
//
// so ⌊m×n / 2^(63+ℓ)⌋ = q exactly when 0 ≤ e and r + e×n/2^(63+ℓ) < d,
// which holds for every such n (r ≤ d−1) when 0 ≤ e < 2^ℓ, since then
// e×n < 2^ℓ × 2^63. So the pair (m, ℓ) is certified for a d by checking,
// in 128-bit arithmetic, that m×d − 2^(63+ℓ) lies in [0, 2^ℓ): that is
// divisorCertified. It does not sample numerators: a certified divisor is
// exact on the whole range 0 ≤ n ≤ MaxInt64. The tests below certify every
// d that matters (every d up to 2^20, every d within 64 of a power of two,
// every d up to MaxInt64 near the top, random d of every bit length, and
// the scale and drain of a sweep of valid limits) and, independently of
// the proof, compare with the division instruction on the numerators where
// a rounding error would show first.

// divisorCertified reports whether v, newDivisor(d), divides exactly by d
// on every 0 ≤ n ≤ MaxInt64 (see above), with the reason when it does not.
func divisorCertified(d int64, v divisor) (bool, string) {
	if d == 1 {
		return v == divisor{}, "d = 1 must be the zero divisor"
	}
	l := bits.Len64(uint64(d - 1)) // ⌈log2 d⌉
	if int(v.shift) != l-1 {
		return false, "shift is not ⌈log2 d⌉ − 1"
	}
	if v.m == 0 {
		return false, "m = 0 divides by 1"
	}
	// 2^(63+ℓ) is hi:lo = 2^(ℓ−1):0; e = m×d − 2^(63+ℓ) must be in [0, 2^ℓ).
	hi, lo := bits.Mul64(v.m, uint64(d))
	if hi != uint64(1)<<(l-1) || lo >= uint64(1)<<l {
		return false, "m×d − 2^(63+ℓ) is outside [0, 2^ℓ)"
	}
	return true, ""
}

// divisorsUnderReview returns the divisors the review certifies: every d
// up to 2^20, every d within 64 of each power of two, the top of the
// range, and random d of every bit length.
func divisorsUnderReview(rng *rand.Rand) []int64 {
	var ds []int64
	for d := int64(1); d <= 1<<20; d++ {
		ds = append(ds, d)
	}
	for k := 1; k <= 63; k++ {
		for j := int64(-64); j <= 64; j++ {
			p := uint64(1)<<k + uint64(j)
			if p >= 1 && p <= math.MaxInt64 {
				ds = append(ds, int64(p))
			}
		}
	}
	for j := range int64(1 << 12) {
		ds = append(ds, math.MaxInt64-j)
	}
	for range 1 << 18 {
		k := 1 + rng.IntN(63)
		ds = append(ds, 1+rng.Int64N(int64(uint64(1)<<k-1)))
	}
	return ds
}

// TestDivisorCertifiedReview: every divisor under review carries the
// certificate of exactness on all non-negative int64 numerators.
func TestDivisorCertifiedReview(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 20))
	for _, d := range divisorsUnderReview(rng) {
		if ok, why := divisorCertified(d, newDivisor(d)); !ok {
			t.Fatalf("newDivisor(%d) = %+v: %s", d, newDivisor(d), why)
		}
	}
}

// reviewLimits returns valid bucket limits at the extremes a constructor
// accepts: the longest and shortest periods, the largest quotas, coprime
// quota and period (so that scale and drain are both large), the largest
// burst exact arithmetic allows, and random ones.
func reviewLimits(rng *rand.Rand) []Limit {
	maxP := int64(maxPeriod / time.Microsecond)
	type qp struct{ q, p int64 }
	cands := []qp{
		{1, 1}, {1, maxP}, {maxScaled, 1}, {maxScaled, maxP}, {maxScaled - 1, maxP},
		{maxScaled - 1, maxP - 1}, {3, maxP - 1}, {7, 1_000_000}, {1_000_003, 999_983},
		{1 << 50, 1<<50 + 1}, {maxScaled - 1, 1 << 51}, {1, 999_999}, {60, 60_000_000},
		{100, 1_000_000}, {2, 3}, {3, 2}, {1<<51 - 1, 1<<51 - 2},
	}
	for range 2000 {
		cands = append(cands, qp{1 + rng.Int64N(1<<uint(1+rng.IntN(51))), 1 + rng.Int64N(min(maxP, 1<<uint(1+rng.IntN(52))))})
	}
	var out []Limit
	for _, c := range cands {
		l := Every(c.q, time.Duration(c.p)*time.Microsecond)
		if l.Err() != nil {
			continue
		}
		maxBurst := maxScaled / l.scale
		for _, b := range []int64{0, 1, maxBurst, max(1, maxBurst-1), 1 + rng.Int64N(maxBurst)} {
			for _, a := range []Algorithm{TokenBucket, LeakyBucket} {
				lb := l.WithAlgorithm(a)
				if b != 0 {
					lb = lb.WithBurst(b)
				}
				if lb.Err() == nil {
					out = append(out, lb)
				}
			}
		}
	}
	return out
}

// TestLimitDivisorsCertifiedReview: the scale and drain of every limit
// under review (the extremes of what Every accepts) have certified
// divisors, and the ones finish stored are newDivisor's.
func TestLimitDivisorsCertifiedReview(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 21))
	for _, l := range reviewLimits(rng) {
		if l.scaleBy != newDivisor(l.scale) || l.drainBy != newDivisor(l.drain) {
			t.Fatalf("%v: stored divisors %+v %+v are not those of scale %d, drain %d", l, l.scaleBy, l.drainBy, l.scale, l.drain)
		}
		for _, d := range []int64{l.scale, l.drain} {
			if ok, why := divisorCertified(d, newDivisor(d)); !ok {
				t.Fatalf("%v: newDivisor(%d): %s", l, d, why)
			}
		}
	}
	// A calendar window's scale and drain are 1, with zero divisors.
	c := PerCalendarDay(10, time.UTC)
	if c.Err() != nil || c.scale != 1 || c.drain != 1 || c.scaleBy != (divisor{}) || c.drainBy != (divisor{}) {
		t.Fatalf("calendar limit: scale %d drain %d divisors %+v %+v", c.scale, c.drain, c.scaleBy, c.drainBy)
	}
}

// checkDivisorAt compares v = newDivisor(d) with the division instruction
// and ceilDiv at n (any int64: div only for n ≥ 0).
func checkDivisorAt(t *testing.T, d, n int64) {
	t.Helper()
	v := newDivisor(d)
	if n >= 0 {
		if got, want := v.div(n), n/d; got != want {
			t.Fatalf("⌊%d/%d⌋: got %d, want %d", n, d, got, want)
		}
	}
	if got, want := v.ceil(n), ceilDiv(n, d); got != want {
		t.Fatalf("⌈%d/%d⌉: got %d, want %d", n, d, got, want)
	}
}

// worstNumerators returns, for d, the numerators where a multiplier that
// is slightly too large shows first: the largest n ≤ MaxInt64 with
// n mod d = d−1 (e×n is largest there), its neighbours, the largest
// multiples of d, and the extremes.
func worstNumerators(d int64) []int64 {
	top := int64(math.MaxInt64) - int64(math.MaxInt64)%d // the largest multiple of d
	worst := top - 1                                     // ≡ d−1 mod d
	if int64(math.MaxInt64)%d == d-1 {
		worst = math.MaxInt64
	}
	return []int64{0, 1, d - 1, d, d + 1, 2*d - 1, worst, worst - 1, worst - d, top, top - d, top - 1,
		math.MaxInt64, math.MaxInt64 - 1, math.MinInt64, -1, 1 << 52, 1<<52 - 1, 1<<52 + 1, 1 << 51, 1<<51 - 1}
}

// TestDivisorWorstNumeratorsReview compares with the division instruction
// on the worst numerators of every divisor up to 2^14 and of those of
// divisorsUnderReview above 2^20 (within 64 of a power of two, the top of
// the range, random ones).
func TestDivisorWorstNumeratorsReview(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 22))
	for _, d := range divisorsUnderReview(rng) {
		if d > 1<<14 && d <= 1<<20 {
			continue
		}
		v := newDivisor(d)
		for _, n := range worstNumerators(d) {
			if n >= 0 && v.div(n) != n/d || v.ceil(n) != ceilDiv(n, d) {
				checkDivisorAt(t, d, n) // reports it
			}
		}
	}
}

// TestDivisorCertificateNotVacuousReview: the certificate and the worst
// numerators are sharp: a multiplier one too small (the rounded-down
// 2^(63+ℓ)/d, the classic mistake) fails the certificate for every d ≥ 2,
// and for a d that is not a power of two it gives a wrong quotient on one
// of d's worst numerators.
func TestDivisorCertificateNotVacuousReview(t *testing.T) {
	for _, d := range []int64{3, 5, 7, 641, 1_000_003, 1<<31 - 1, 1<<51 - 1, 3 << 61, math.MaxInt64} {
		v := newDivisor(d)
		low := divisor{m: v.m - 1, shift: v.shift}
		if ok, _ := divisorCertified(d, low); ok {
			t.Fatalf("d = %d: the certificate accepts m − 1", d)
		}
		wrong := false
		for _, n := range worstNumerators(d) {
			wrong = wrong || n >= 0 && low.div(n) != n/d
		}
		if !wrong {
			t.Fatalf("d = %d: no worst numerator catches m − 1", d)
		}
	}
}

// FuzzDivisorReview: div and ceil agree with / and ceilDiv for every
// divisor 1 ≤ d ≤ MaxInt64 and numerator (div: n ≥ 0; ceil: any n). The
// seed corpus holds the edge cases; go test runs it, go test -fuzz
// explores further.
func FuzzDivisorReview(f *testing.F) {
	for _, d := range []int64{1, 2, 3, 5, 7, 641, 1 << 20, 1<<20 + 1, 1<<31 - 1, 1 << 31, 1<<32 + 1,
		1<<51 - 1, 1 << 51, 1<<52 + 1, 3 << 61, 1 << 62, 1<<62 + 1, math.MaxInt64, math.MaxInt64 - 1,
		int64(maxPeriod / time.Microsecond), int64(maxPeriod/time.Microsecond) - 1} {
		for _, n := range worstNumerators(d) {
			f.Add(d, n)
		}
	}
	f.Fuzz(func(t *testing.T, d, n int64) {
		d &= math.MaxInt64
		if d == 0 {
			d = 1
		}
		if ok, why := divisorCertified(d, newDivisor(d)); !ok {
			t.Fatalf("newDivisor(%d): %s", d, why)
		}
		checkDivisorAt(t, d, n)
		checkDivisorAt(t, d, n&math.MaxInt64)
	})
}

// ---- The bucket against the algorithm at main (before 6ddd977) ----

// refBucketTake is main's bucketTake, with the division instructions.
func refBucketTake(l *Limit, s *State, now, cost int64, d *Decision) (refill int64) {
	now, lag := bucketStep(s, now)
	l.drainTo(s, now)
	switch {
	case cost > l.burstOf():
		d.RetryAfter = RetryNever
	case s.Level+cost*l.scale > l.capacity:
		d.RetryAfter = micros(ceilDiv(s.Level+cost*l.scale-l.capacity, l.drain))
	default:
		d.Allowed = true
		if l.algorithm == LeakyBucket {
			d.Delay = micros(ceilDiv(s.Level, l.drain))
		}
		s.Level += cost * l.scale
	}
	refill = refDescribeBucket(l, s.Level, d)
	addLag(d, lag)
	return refill
}

// refDescribeBucket is main's describeBucket.
func refDescribeBucket(l *Limit, level int64, d *Decision) (refill int64) {
	if level < l.capacity {
		d.Remaining = (l.capacity - level) / l.scale
	}
	refill = ceilDiv(level, l.drain)
	d.Reset = micros(refill)
	return refill
}

// refBucketAdjust is main's bucketAdjust.
func refBucketAdjust(l *Limit, s *State, now, delta int64, d *Decision) {
	now, lag := bucketStep(s, now)
	l.drainTo(s, now)
	switch {
	case delta > 0:
		if delta > (maxLevel-s.Level)/l.scale {
			s.Level = maxLevel
		} else {
			s.Level += delta * l.scale
		}
	case delta < 0:
		if delta <= -ceilDiv(s.Level, l.scale) {
			s.Level = 0
		} else {
			s.Level += delta * l.scale
		}
	}
	refDescribeBucket(l, s.Level, d)
	addLag(d, lag)
}

// refTakeTo is main's TakeTo for a bucket (TokenBucket, LeakyBucket).
func refTakeTo(l *Limit, s *State, now, cost int64, d *Decision) (expires int64) {
	*d = Decision{}
	expires = s.Updated + refBucketTake(l, s, now, cost, d)
	d.Limit, d.At = l, now
	return expires
}

// refAdjustFrom is main's AdjustFrom for a bucket.
func refAdjustFrom(l *Limit, s *State, now, delta int64) (d Decision) {
	refBucketAdjust(l, s, now, delta, &d)
	d.Limit, d.At, d.Allowed = l, now, true
	return d
}

// bucketAgrees applies TakeTo (with cost), then ExpiresAt, and AdjustFrom
// (with delta) to copies of st at now, by the code under review and by
// main's, and reports the first difference.
func bucketAgrees(t *testing.T, l *Limit, st State, now, cost, delta int64) {
	t.Helper()
	if cost >= 0 { // TakeAt's contract: cost ≥ 0
		s1, s2 := st, st
		var d1, d2 Decision
		e1 := l.TakeTo(&s1, now, cost, &d1)
		e2 := refTakeTo(l, &s2, now, cost, &d2)
		if d1 != d2 || s1.Level != s2.Level || s1.Updated != s2.Updated || e1 != e2 {
			t.Fatalf("%v TakeTo(%+v, now %d, cost %d):\n got %+v %+v expires %d\nmain %+v %+v expires %d",
				l, st, now, cost, d1, s1, e1, d2, s2, e2)
		}
		if got, want := l.ExpiresAt(&s1), s1.Updated+ceilDiv(s1.Level, l.drain); got != want {
			t.Fatalf("%v ExpiresAt(%+v): got %d, main %d", l, s1, got, want)
		}
	}
	if got, want := l.ExpiresAt(&st), st.Updated+ceilDiv(st.Level, l.drain); got != want {
		t.Fatalf("%v ExpiresAt(%+v): got %d, main %d", l, st, got, want)
	}
	s1, s2 := st, st
	d1 := l.AdjustFrom(&s1, now, 0, delta)
	d2 := refAdjustFrom(l, &s2, now, delta)
	if d1 != d2 || s1.Level != s2.Level || s1.Updated != s2.Updated {
		t.Fatalf("%v AdjustFrom(%+v, now %d, delta %d):\n got %+v %+v\nmain %+v %+v", l, st, now, delta, d1, s1, d2, s2)
	}
}

// wideLevel bounds the levels the differential drives: a bucket's own
// states hold 0 ≤ Level ≤ maxLevel (2^52), whatever the clock does, but a
// State is the caller's (TakeAt decides on any), so the review goes on to
// every |Level| ≤ 2^62, where no sum of a level, a capacity and a cost
// overflows. Beyond that (a corrupted State) main's answers overflowed
// too: see TestDivisorNegativeNumeratorReview.
const wideLevel = int64(1) << 62

// edgeInt64 returns a value from the edges a bucket can see, or a random
// one in [lo, hi].
func edgeInt64(rng *rand.Rand, lo, hi int64, edges ...int64) int64 {
	if len(edges) > 0 && rng.IntN(2) == 0 {
		e := edges[rng.IntN(len(edges))]
		return min(max(e, lo), hi)
	}
	n := uint64(hi) - uint64(lo)
	if n == math.MaxUint64 {
		return int64(rng.Uint64())
	}
	return int64(uint64(lo) + rng.Uint64N(n+1))
}

// TestBucketMatchesMainReview drives TakeTo, ExpiresAt and AdjustFrom of
// token and leaky buckets at the extremes (every limit of reviewLimits;
// levels at 0, capacity, maxLevel and their neighbours; times far in the
// past and future, clock steps back within and beyond ClockStepTolerance;
// costs 0, 1, Burst, Burst+1, MaxInt64; deltas at the int64 extremes) and
// requires main's exact answers.
func TestBucketMatchesMainReview(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 23))
	limits := reviewLimits(rng)
	iters := 40
	if testing.Short() {
		iters = 5
	}
	const far = int64(1) << 61
	for i := range limits {
		l := &limits[i]
		b := l.burstOf()
		for range iters {
			updated := edgeInt64(rng, -far, far, 0, t0, -far, far, math.MaxInt64/2)
			level := edgeInt64(rng, 0, maxLevel, 0, 1, l.capacity-1, l.capacity, l.capacity+1,
				l.capacity-l.scale, l.capacity+l.scale, maxLevel, maxLevel-1, l.drain-1, l.drain, l.drain+1)
			if rng.IntN(8) == 0 { // a State no bucket leaves, still decided exactly as main did
				level = edgeInt64(rng, -wideLevel, wideLevel, -1, -l.scale, -l.capacity, maxLevel+1, wideLevel, -wideLevel)
			}
			step := edgeInt64(rng, -far, far, 0, 1, -1, stepTolUS, stepTolUS+1, -stepTolUS, -stepTolUS-1,
				l.scale, l.scale/max(l.drain, 1), far, -far, (level+l.drain-1)/l.drain, (level-1)/l.drain)
			now := updated + step
			if rng.IntN(16) == 0 { // any two readings of a broken clock
				updated, now = rng.Int64(), rng.Int64()
			}
			cost := edgeInt64(rng, 0, math.MaxInt64, 0, 1, 2, b-1, b, b+1, math.MaxInt64)
			delta := edgeInt64(rng, math.MinInt64, math.MaxInt64, 0, 1, -1, b, -b, maxLevel, -maxLevel,
				math.MaxInt64, math.MinInt64, math.MinInt64+1)
			bucketAgrees(t, l, State{Level: level, Updated: updated}, now, cost, delta)
		}
	}
}

// FuzzBucketMatchesMainReview is TestBucketMatchesMainReview's
// differential for fuzzed limits and states: quota, period (µs) and burst
// are folded into the ranges a constructor accepts, the level into
// [−2^62, 2^62] (see wideLevel), the times are any.
func FuzzBucketMatchesMainReview(f *testing.F) {
	maxP := int64(maxPeriod / time.Microsecond)
	f.Add(int64(1), int64(1), int64(0), false, int64(0), int64(0), int64(0), int64(1), int64(0))
	f.Add(int64(maxScaled), maxP, int64(0), true, maxLevel, t0, t0-stepTolUS-1, int64(math.MaxInt64), int64(math.MinInt64))
	f.Add(int64(maxScaled-1), maxP-1, int64(1), false, int64(maxScaled), int64(-1)<<62, int64(1)<<62, int64(1), int64(-1))
	f.Add(int64(3), maxP-1, int64(0), true, maxLevel-1, t0, t0+1, int64(3), maxLevel)
	f.Add(int64(1_000_003), int64(999_983), int64(2), false, int64(1_999_966), t0, t0, int64(2), int64(3))
	f.Fuzz(func(t *testing.T, quota, periodUS, burst int64, leaky bool, level, updated, now, cost, delta int64) {
		quota = 1 + (quota&math.MaxInt64)%maxScaled
		periodUS = 1 + (periodUS&math.MaxInt64)%maxP
		l := Every(quota, time.Duration(periodUS)*time.Microsecond)
		if leaky {
			l = l.WithAlgorithm(LeakyBucket)
		}
		if l.Err() != nil {
			return
		}
		if burst != 0 {
			l = l.WithBurst(1 + (burst&math.MaxInt64)%(maxScaled/l.scale))
		}
		if l.Err() != nil {
			t.Fatalf("%v: %v", l, l.Err())
		}
		level %= wideLevel + 1
		bucketAgrees(t, &l, State{Level: level, Updated: updated}, now, cost&math.MaxInt64, delta)
	})
}

// TestDivisorNegativeNumeratorReview documents the one place the
// rewrite's answers differ from main's: a State whose Level is so
// negative that capacity − Level overflows int64 (Level < capacity −
// 2^63, never produced by TakeAt or AdjustFrom). main's / then divided
// the wrapped, negative difference; div reads it as an unsigned number.
// Both are meaningless, so this is not a regression, but it shows that
// div's domain (0 ≤ n) is the caller's to respect.
func TestDivisorNegativeNumeratorReview(t *testing.T) {
	l := PerSecond(10)
	st := State{Level: math.MinInt64, Updated: t0}
	s1, s2 := st, st
	var d1, d2 Decision
	l.TakeTo(&s1, t0, 0, &d1)
	refTakeTo(&l, &s2, t0, 0, &d2)
	t.Logf("Level MinInt64, clock standing still: Remaining %d (main %d)", d1.Remaining, d2.Remaining)
	if d1 == d2 {
		t.Fatalf("main and the rewrite now agree at Level MinInt64 (%+v): update this test's comment", d1)
	}
	// Down to the first Level whose capacity − Level does not overflow,
	// the two agree.
	for _, lv := range []int64{-maxLevel, -1, -wideLevel, l.capacity - math.MaxInt64} {
		bucketAgrees(t, &l, State{Level: lv, Updated: t0}, t0, 0, 0)
	}
}
