package storetest

import (
	"math"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
)

// Scenarios for every algorithm other than the token bucket (scenarios.go
// covers that one in depth). start, 2026-01-01T00:00:00Z, is a whole number
// of days after the Unix epoch, so epoch-aligned windows of a second, a
// minute or a day all begin there.

// algorithmScenarios are run by Run after the token-bucket scenarios.
var algorithmScenarios = []scenario{
	{"GCRASeed", gcraSeed},
	{"GCRAEqualsTokenBucket", gcraEqualsTokenBucket},
	{"LeakyBucketQueue", leakyBucketQueue},
	{"FixedWindowBoundaryBurst", fixedWindowBoundaryBurst},
	{"FixedWindowFirstHit", fixedWindowFirstHit},
	{"FixedWindowAdjustAt", fixedWindowAdjustAt},
	{"SlidingWindowCounter", slidingWindowCounter},
	{"SlidingWindowAdjustAt", slidingWindowAdjustAt},
	{"SlidingLog", slidingLog},
	{"CostAboveQuotaNeverEveryAlgorithm", neverEveryAlgorithm},
	{"StackedAcrossAlgorithms", stackedAcrossAlgorithms},
	{"ClockBackwardsEveryAlgorithm", clockBackwardsEveryAlgorithm},
	{"ConcurrencyCap", concurrencyCap},
	{"ConcurrencyStacked", concurrencyStacked},
	{"ConcurrencyNoLeak", concurrencyNoLeak},
}

// withAlgorithm returns a pointer to l enforced with a.
func withAlgorithm(l ratelimit.Limit, a ratelimit.Algorithm) *ratelimit.Limit {
	l = l.WithAlgorithm(a)
	return &l
}

// gcraSeed is the seed's token-bucket question asked of GCRA: 10 per
// second, capacity 50, idle 30 s, 60 requests at once. The emission
// interval is T = 1s/10 = 100ms and the tolerance τ = 50 × T = 5s; the
// only state is the theoretical arrival time TAT.
func gcraSeed(e *env) {
	l := withAlgorithm(ratelimit.PerSecond(10).WithBurst(50), ratelimit.GCRA)
	// 50 at once: TAT = now + 50 × 100ms, so 0 left and Reset 5s.
	e.check(ok(l, 0, 5*time.Second), e.take1("k", l, 50), "spend the burst")
	// 30 s later TAT (5s) is long past: the key is as good as new.
	e.at(30 * time.Second)
	allowed := 0
	for i := int64(1); i <= 60; i++ {
		d := e.take1("k", l, 1)
		if i <= 50 {
			// TAT = now + i × 100ms: 50-i left, Reset i × 100ms.
			e.check(ok(l, 50-i, units(i, unit10ps)), d, "take %d", i)
			allowed++
		} else {
			// TAT − now = 5s = τ: one more cell conforms only when
			// TAT − now + T ≤ τ, 100ms from now.
			e.check(refused(l, 0, 5*time.Second, 100*time.Millisecond), d, "take %d", i)
		}
	}
	assert.Equal(e.t, 50, allowed, "GCRA admits exactly the burst at one instant after idling")

	// The state every store keeps for this key is the TAT, now + 5s, and
	// the time of its last change, which tells a clock that stepped back
	// (ratelimit.ClockStepTolerance); Prev and Log stay zero.
	now := e.micros()
	var s ratelimit.State
	l.TakeAt(&s, now, 50)
	assert.Equal(e.t, ratelimit.State{Level: now + 5_000_000, Updated: now}, s, "GCRA's state: the TAT and its last change")
}

// gcraEqualsTokenBucket drives a GCRA limit and the token bucket of the
// same numbers through one sequence on separate keys: every decision must
// match field for field (the limit aside).
func gcraEqualsTokenBucket(e *env) {
	tb := ratelimit.Every(3, 3*time.Second).WithBurst(4).Named("x") // T = 1s
	gc := tb.WithAlgorithm(ratelimit.GCRA)
	steps := []struct {
		at   time.Duration
		cost int64
		adj  bool
	}{
		{0, 3, false}, {0, 2, false}, {400 * time.Millisecond, 1, false}, {time.Second, 2, false},
		{time.Second, -1, true}, {time.Second, 2, false}, {1500 * time.Millisecond, 0, false},
		{2 * time.Second, 5, false}, {2 * time.Second, 6, true}, {3 * time.Second, 1, false},
		{7*time.Second + 1, 1, false}, {9 * time.Second, 4, false}, {9 * time.Second, -10, true},
		{9 * time.Second, 4, false}, {9 * time.Second, 1, false},
	}
	for i, st := range steps {
		e.at(st.at)
		var dtb, dgc ratelimit.Decision
		if st.adj {
			dtb, dgc = e.adjust(req("tb", &tb, st.cost))[0], e.adjust(req("gcra", &gc, st.cost))[0]
		} else {
			dtb, dgc = e.take1("tb", &tb, st.cost), e.take1("gcra", &gc, st.cost)
		}
		// The token bucket's decision is the pure function's; GCRA's must
		// equal it.
		dtb.Limit = &gc
		e.check(dtb, dgc, "step %d (%v, cost %d, adjust %v)", i, st.at, st.cost, st.adj)
	}
}

// leakyBucketQueue: the leaky bucket as a queue, 100 per minute. One unit
// leaves the queue every 60s/100 = 600ms; the queue holds Burst = 100.
func leakyBucketQueue(e *env) {
	l := withAlgorithm(ratelimit.PerMinute(100), ratelimit.LeakyBucket)
	const slot = 600 * time.Millisecond
	// A burst of 100 at one instant is queued, not refused: the i-th
	// (from 0) has i units ahead of it and waits i × 600ms; after it the
	// queue holds i+1 units (99-i left, Reset (i+1) × 600ms).
	for i := int64(0); i < 100; i++ {
		e.check(queued(l, 99-i, units(i+1, slot), units(i, slot)), e.take1("q", l, 1), "request %d", i)
	}
	// The 101st does not fit the queue: one unit must leave first, 600ms.
	// A refusal has no Delay.
	e.check(refused(l, 0, time.Minute, slot), e.take1("q", l, 1), "request 100")
	// Releasing the last slot (what Wait does when its caller gives up)
	// leaves 99 units: 1 left, 59.4s to drain; the next request takes the
	// freed slot, 59.4s away.
	e.checkAll("release one slot", []ratelimit.Decision{ok(l, 1, 59400*time.Millisecond)}, e.adjust(req("q", l, -1)))
	e.check(queued(l, 0, time.Minute, 59400*time.Millisecond), e.take1("q", l, 1), "the freed slot")
	// 30 s later 50 units have left; 50 are still ahead: a new request
	// waits 30s, leaves 49 free and the queue drains in 30.6s.
	e.at(30 * time.Second)
	e.check(queued(l, 49, 30600*time.Millisecond, 30*time.Second), e.take1("q", l, 1), "after 30s")
	// More than the queue can ever hold: never.
	e.check(refused(l, 49, 30600*time.Millisecond, ratelimit.RetryNever), e.take1("q", l, 101), "cost 101")
	// In a stack that another limit refuses, the queue is not charged.
	// Each Decision's Allowed, RetryAfter and Delay come from the in-order
	// evaluation (the queue had room: it reports the slot it would have
	// given, 30.6s), Remaining and Reset from the uncharged state.
	rpm := perMinute60()
	e.check(ok(rpm, 0, time.Minute), e.take1("q", rpm, 60), "empty rpm")
	e.checkAll("[queue 1, rpm 1]", []ratelimit.Decision{
		queued(l, 49, 30600*time.Millisecond, 30600*time.Millisecond),
		refused(rpm, 0, time.Minute, time.Second),
	}, e.take(req("q", l, 1), req("q", rpm, 1)))
	// A peek reports the wait a request would have, and charges nothing.
	e.check(queued(l, 49, 30600*time.Millisecond, 30600*time.Millisecond), e.peek("q", l), "queue not charged")
	e.check(ok(l, 100, 0), e.peek("fresh", l), "peek on an empty queue: no wait")
}

// fixedWindowBoundaryBurst demonstrates the fixed window's flaw: 100 per
// minute admits 100 in the last 100ms of one window and 100 more at the
// first instant of the next, 200 within 100ms.
func fixedWindowBoundaryBurst(e *env) {
	l := withAlgorithm(ratelimit.PerMinute(100), ratelimit.FixedWindow)
	e.at(59900 * time.Millisecond)
	admitted := 0
	for i := int64(1); i <= 150; i++ {
		d := e.take1("k", l, 1)
		if i <= 100 {
			// The window [0, 60s) closes in 100ms: Reset 100ms.
			e.check(ok(l, 100-i, 100*time.Millisecond), d, "late take %d", i)
			admitted++
		} else {
			// Full until the next window opens, 100ms away.
			e.check(refused(l, 0, 100*time.Millisecond, 100*time.Millisecond), d, "late take %d", i)
		}
	}
	e.at(time.Minute)
	for i := int64(1); i <= 150; i++ {
		d := e.take1("k", l, 1)
		if i <= 100 {
			e.check(ok(l, 100-i, time.Minute), d, "early take %d", i)
			admitted++
		} else {
			e.check(refused(l, 0, time.Minute, time.Minute), d, "early take %d", i)
		}
	}
	assert.Equal(e.t, 200, admitted, "2 × quota within 100ms across the boundary")
	e.check(refused(l, 0, time.Minute, ratelimit.RetryNever), e.take1("k", l, 101), "cost 101")
	e.check(refused(l, 0, time.Minute, ratelimit.RetryNever), e.take1("k", l, math.MaxInt64), "cost MaxInt64")
}

// fixedWindowFirstHit: windows open at a key's first hit instead of at
// multiples of the period since the epoch.
func fixedWindowFirstHit(e *env) {
	l := withAlgorithm(ratelimit.PerMinute(100), ratelimit.FixedWindow)
	*l = l.AlignToFirstHit()
	require.NoError(e.t, l.Err())
	// The first hit at 17s opens [17s, 77s).
	e.at(17 * time.Second)
	e.check(ok(l, 99, time.Minute), e.take1("k", l, 1), "first hit")
	e.at(76900 * time.Millisecond)
	e.check(ok(l, 0, 100*time.Millisecond), e.take1("k", l, 99), "the rest, 100ms before the window closes")
	e.check(refused(l, 0, 100*time.Millisecond, 100*time.Millisecond), e.take1("k", l, 1), "full")
	// The boundary burst happens at the key's own boundary, 77s: the hit
	// there opens [77s, 137s).
	e.at(77 * time.Second)
	e.check(ok(l, 0, time.Minute), e.take1("k", l, 100), "a whole quota at the boundary")
	e.check(refused(l, 0, time.Minute, time.Minute), e.take1("k", l, 1), "full again")
	// An epoch-aligned key at the same instants: its window [60s, 120s)
	// opened at the minute, so at 77s it has 43s left.
	epoch := withAlgorithm(ratelimit.PerMinute(100), ratelimit.FixedWindow)
	e.check(ok(epoch, 99, 43*time.Second), e.take1("k", epoch, 1), "epoch-aligned window")

	// Refunding everything empties the window, and an empty first-hit
	// window is no window: it is forgotten (Reset 0) and the next hit,
	// at 90s, opens [90s, 150s).
	e.at(80 * time.Second)
	e.checkAll("refund all", []ratelimit.Decision{ok(l, 100, 0)},
		e.adjust(ratelimit.Request{Key: "k", Limit: l, Cost: -100, At: ratelimit.Micros(start.Add(77 * time.Second))}))
	e.at(90 * time.Second)
	e.check(ok(l, 99, time.Minute), e.take1("k", l, 1), "the next hit opens a window")
	// A peek after that window closed opens nothing either.
	e.at(151 * time.Second)
	e.check(ok(l, 100, 0), e.peek("k", l), "peek after the window closed")
	e.at(152 * time.Second)
	e.check(ok(l, 99, time.Minute), e.take1("k", l, 1), "the window opens at the hit, not at the peek")
}

// fixedWindowAdjustAt: a settlement credits the window that was charged,
// given by Request.At, and never a later one.
func fixedWindowAdjustAt(e *env) {
	l := withAlgorithm(ratelimit.PerMinute(100), ratelimit.FixedWindow)
	e.at(time.Minute + 10*time.Second)
	d := e.take1("k", l, 90)
	e.check(ok(l, 10, 50*time.Second), d, "charge 90 in [60s, 120s)")
	charged := d.At
	// Settled in the same window: the refund is credited. 80 used.
	e.at(time.Minute + 30*time.Second)
	e.checkAll("refund 10 in the charged window", []ratelimit.Decision{ok(l, 20, 30*time.Second)},
		e.adjust(ratelimit.Request{Key: "k", Limit: l, Cost: -10, At: charged}))
	// Settled after the window closed: the usage no longer counts, so the
	// refund is dropped; the new window [120s, 180s) is empty (Reset 0).
	e.at(2*time.Minute + 5*time.Second)
	e.checkAll("refund for a closed window", []ratelimit.Decision{ok(l, 100, 0)},
		e.adjust(ratelimit.Request{Key: "k", Limit: l, Cost: -80, At: charged}))
	// An overage for a closed window is charged to the current one.
	e.checkAll("overage for a closed window", []ratelimit.Decision{ok(l, 95, 55*time.Second)},
		e.adjust(ratelimit.Request{Key: "k", Limit: l, Cost: 5, At: charged}))
	// At 0 means now; an At in the future also means now.
	e.checkAll("At 0 and At in the future", []ratelimit.Decision{ok(l, 94, 55*time.Second), ok(l, 96, 55*time.Second)},
		e.adjust(ratelimit.Request{Key: "k", Limit: l, Cost: 1}, ratelimit.Request{Key: "k", Limit: l, Cost: -2, At: e.micros() + 1_000_000}))
}

// slidingWindowCounter: 100 per minute as a sliding-window counter. With P
// = 60000ms, prev the previous window's count, cur the current one's and
// e the whole milliseconds elapsed in the current window, cost c fits iff
// prev × (P − e) + (cur + c) × P ≤ 100 × P.
func slidingWindowCounter(e *env) {
	l := withAlgorithm(ratelimit.PerMinute(100), ratelimit.SlidingWindow)
	// 100 at 10s into [0, 60s): the count weighs until the end of the
	// next window, 120s: Reset 110s.
	e.at(10 * time.Second)
	d := e.take1("k", l, 100)
	e.check(ok(l, 0, 110*time.Second), d, "100 at 10s")
	// One more: nothing leaves this window, and in the next the 100 weigh
	// 100 × (P − e)/P; 100 × (60000 − e) + 1 × 60000 ≤ 6,000,000 from
	// e = 600ms: 60.6s − 10s = 50.6s.
	e.check(refused(l, 0, 110*time.Second, 50600*time.Millisecond), e.take1("k", l, 1), "101st")

	// 90s is 30s into [60s, 120s): prev 100 weighs 100 × 30000/60000 = 50,
	// so 50 more fit. The i-th leaves 50 − i; Reset 180s − 90s = 90s.
	e.at(90 * time.Second)
	allowed := 0
	for i := int64(1); i <= 60; i++ {
		d := e.take1("k", l, 1)
		if i <= 50 {
			e.check(ok(l, 50-i, 90*time.Second), d, "take %d at 90s", i)
			allowed++
		} else {
			// The 51st needs 100 × (60000 − e) ≤ (100 − 50 − 1) × 60000,
			// e ≥ 30600ms: 600ms from now.
			e.check(refused(l, 0, 90*time.Second, 600*time.Millisecond), d, "take %d at 90s", i)
		}
	}
	assert.Equal(e.t, 50, allowed, "admitted at 90s")
	// 50 more could fit only once prev weighs nothing, which never happens
	// in this window; in the next, the 50 counted now weigh 50 × (P − e)/P
	// and 50 + that ≤ 100 from e = 0: 120s − 90s = 30s.
	e.check(refused(l, 0, 90*time.Second, 30*time.Second), e.take1("k", l, 50), "50 at 90s")
	e.check(refused(l, 0, 90*time.Second, ratelimit.RetryNever), e.take1("k", l, 101), "cost 101")

	// 600ms later: 100 × 29400 + 51 × 60000 = 6,000,000, exactly full.
	// Reset 180s − 90.6s = 89.4s.
	e.at(90600 * time.Millisecond)
	e.check(ok(l, 0, 89400*time.Millisecond), e.take1("k", l, 1), "the 51st at 90.6s")

	// The log's exactness, by contrast: in (30s, 90.6s] the counter has
	// admitted 51 and believes the 100 from 10s still weigh 49, though
	// all of them fell out of the span (10s + 60s ≤ 90.6s). See the
	// sliding log scenario.
}

// slidingWindowAdjustAt: a settlement credits the window its usage was
// charged in: the current one, or the previous one (still weighed), and is
// dropped once that window no longer counts.
func slidingWindowAdjustAt(e *env) {
	l := withAlgorithm(ratelimit.PerMinute(100), ratelimit.SlidingWindow)
	e.at(10 * time.Second)
	d := e.take1("k", l, 100)
	charged := d.At // in [0, 60s)
	e.at(90 * time.Second)
	for range 50 {
		e.take1("k", l, 1) // 50 admitted, as in SlidingWindowCounter
	}
	// At 90s, refund 40 of the 100 charged at 10s: they belong to the
	// previous window, now prev 60: 60 × 30000 + 50 × 60000 = 4,800,000,
	// so (6,000,000 − 4,800,000)/60000 = 20 left; Reset 90s.
	e.checkAll("refund to the previous window", []ratelimit.Decision{ok(l, 20, 90*time.Second)},
		e.adjust(ratelimit.Request{Key: "k", Limit: l, Cost: -40, At: charged}))
	// A refund charged now goes to the current window: cur 45 →
	// 1,800,000 + 2,700,000 = 4,500,000: 25 left.
	e.checkAll("refund to the current window", []ratelimit.Decision{ok(l, 25, 90*time.Second)},
		e.adjust(ratelimit.Request{Key: "k", Limit: l, Cost: -5, At: e.micros()}))
	// At 130s the window [0, 60s) weighs nothing: a refund for it is
	// dropped. [60s, 120s) is now the previous window with 45, weighing
	// 45 × (60000 − 10000) = 2,250,000: (6,000,000 − 2,250,000)/60000 =
	// 62.5 → 62 left; the count expires with the window, 180s − 130s.
	e.at(130 * time.Second)
	e.checkAll("refund for a window that no longer counts", []ratelimit.Decision{ok(l, 62, 50*time.Second)},
		e.adjust(ratelimit.Request{Key: "k", Limit: l, Cost: -40, At: charged}))
	// An overage for it is charged to the current window instead: cur 10,
	// 2,250,000 + 600,000 = 2,850,000: 52 left; cur weighs until 240s.
	e.checkAll("overage for a window that no longer counts", []ratelimit.Decision{ok(l, 52, 110*time.Second)},
		e.adjust(ratelimit.Request{Key: "k", Limit: l, Cost: 10, At: charged}))
}

// slidingLog: at most 3 in any 10 s span, exactly, one entry per unit.
func slidingLog(e *env) {
	l := withAlgorithm(ratelimit.Every(3, 10*time.Second), ratelimit.SlidingLog)
	var first ratelimit.Decision
	for i := range int64(3) {
		e.at(time.Duration(i) * time.Second)
		// The newest entry leaves the span 10s after it was admitted.
		d := e.take1("k", l, 1)
		e.check(ok(l, 2-i, 10*time.Second), d, "take at %ds", i)
		if i == 0 {
			first = d
		}
	}
	// At 5s the span (−5s, 5s] holds 3: the entry of 0s leaves at 10s;
	// Reset is when the newest (2s) leaves, 12s.
	e.at(5 * time.Second)
	e.check(refused(l, 0, 7*time.Second, 5*time.Second), e.take1("k", l, 1), "full at 5s")
	// Two units need two entries to leave: the one of 1s leaves at 11s.
	e.check(refused(l, 0, 7*time.Second, 6*time.Second), e.take1("k", l, 2), "2 at 5s")
	e.check(refused(l, 0, 7*time.Second, ratelimit.RetryNever), e.take1("k", l, 4), "cost 4")
	// Exactness at the edge: 1µs before 10s the entry of 0s still counts.
	e.at(10*time.Second - time.Microsecond)
	e.check(refused(l, 0, 2*time.Second+time.Microsecond, time.Microsecond), e.take1("k", l, 1), "1µs before 10s")
	e.at(10 * time.Second)
	d := e.take1("k", l, 1)
	e.check(ok(l, 0, 10*time.Second), d, "at 10s")
	// Refund 5 charged at or after 2s: the entries of 2s and 10s go, the
	// entry of 1s (other usage) stays: 2 left, Reset 11s − 10s.
	e.checkAll("refund from 2s", []ratelimit.Decision{ok(l, 2, time.Second)},
		e.adjust(ratelimit.Request{Key: "k", Limit: l, Cost: -5, At: first.At + 2_000_000}))
	// A refund for usage whose entries have left the span is dropped.
	e.at(12 * time.Second)
	e.checkAll("refund for expired entries", []ratelimit.Decision{ok(l, 3, 0)},
		e.adjust(ratelimit.Request{Key: "k", Limit: l, Cost: -1, At: first.At}))
	// A charge appends entries at now.
	e.checkAll("charge 2", []ratelimit.Decision{ok(l, 1, 10*time.Second)}, e.adjust(req("k", l, 2)))
	e.check(ok(l, 0, 10*time.Second), e.take1("k", l, 1), "one more fits")
}

// neverEveryAlgorithm: a cost above a limit's capacity is refused with
// RetryNever by every algorithm, on a fresh and on a used key, and
// nothing is charged. Each limit is 60 per minute; after one unit the
// buckets (token, GCRA, leaky) refill it in 1s; the log's entry leaves in
// 60s; the fixed window closes in 60s; the sliding window's count weighs
// until the end of the next window, 120s.
func neverEveryAlgorithm(e *env) {
	base := ratelimit.PerMinute(60)
	first := base.WithAlgorithm(ratelimit.FixedWindow).AlignToFirstHit()
	cases := []struct {
		l     *ratelimit.Limit
		reset time.Duration
	}{
		{withAlgorithm(base, ratelimit.TokenBucket), time.Second},
		{withAlgorithm(base, ratelimit.GCRA), time.Second},
		{withAlgorithm(base, ratelimit.LeakyBucket), time.Second},
		{withAlgorithm(base, ratelimit.SlidingWindow), 2 * time.Minute},
		{withAlgorithm(base, ratelimit.SlidingLog), time.Minute},
		{withAlgorithm(base, ratelimit.FixedWindow), time.Minute},
		{&first, time.Minute},
	}
	for _, c := range cases {
		name := c.l.Algorithm().String()
		if c.l.AlignsToFirstHit() {
			name += " first hit"
		}
		e.check(refused(c.l, 60, 0, ratelimit.RetryNever), e.take1("k", c.l, 61), "%s: 61 on a fresh key", name)
		e.check(ok(c.l, 59, c.reset), e.take1("k", c.l, 1), "%s: 1", name)
		e.check(refused(c.l, 59, c.reset, ratelimit.RetryNever), e.take1("k", c.l, 61), "%s: 61", name)
		e.check(refused(c.l, 59, c.reset, ratelimit.RetryNever), e.take1("k", c.l, math.MaxInt64), "%s: MaxInt64", name)
		// 60 − 1 = 59 fit exactly: nothing was charged by the refusals.
		d := e.take1("k", c.l, 59)
		assert.True(e.t, d.Allowed, "%s: 59 after the refusals", name)
		assert.Equal(e.t, int64(0), d.Remaining, "%s: 59 after the refusals", name)
	}
}

// stackedAcrossAlgorithms: one Take over a limit of each algorithm is all
// or nothing like any other stack.
func stackedAcrossAlgorithms(e *env) {
	base := ratelimit.PerMinute(60)
	names := []string{"tb", "gcra", "lb", "sw", "sl", "fw"}
	algos := []ratelimit.Algorithm{ratelimit.TokenBucket, ratelimit.GCRA, ratelimit.LeakyBucket,
		ratelimit.SlidingWindow, ratelimit.SlidingLog, ratelimit.FixedWindow}
	ls := make([]*ratelimit.Limit, len(algos))
	for i, a := range algos {
		ls[i] = withAlgorithm(base.Named(names[i]), a)
	}
	stack := func(costs ...int64) []ratelimit.Request {
		reqs := make([]ratelimit.Request, len(ls))
		for i := range ls {
			reqs[i] = req("k", ls[i], costs[i])
		}
		return reqs
	}
	// Fill the fixed window alone: 60 used until 60s.
	e.check(ok(ls[5], 0, time.Minute), e.take1("k", ls[5], 60), "fill fw")
	// The stack of 10 each: only fw refuses (60 + 10 > 60, until the
	// window closes, 60s), and nobody is charged: everyone else reports
	// full.
	e.checkAll("stack refused by fw", []ratelimit.Decision{
		ok(ls[0], 60, 0), ok(ls[1], 60, 0), ok(ls[2], 60, 0), ok(ls[3], 60, 0), ok(ls[4], 60, 0),
		refused(ls[5], 0, time.Minute, time.Minute),
	}, e.take(stack(10, 10, 10, 10, 10, 10)...))
	for i := range 5 {
		e.check(ok(ls[i], 60, 0), e.peek("k", ls[i]), "%s not charged", names[i])
	}
	// With fw's cost 0 all are charged: 10 units refill in 10s for the
	// buckets (the leaky bucket's first request waits for nothing), the
	// sliding count weighs until 120s, the log's entries leave at 60s.
	e.checkAll("stack allowed", []ratelimit.Decision{
		ok(ls[0], 50, 10*time.Second), ok(ls[1], 50, 10*time.Second), ok(ls[2], 50, 10*time.Second),
		ok(ls[3], 50, 2*time.Minute), ok(ls[4], 50, time.Minute), ok(ls[5], 0, time.Minute),
	}, e.take(stack(10, 10, 10, 10, 10, 0)...))
	// Now the leaky bucket queues behind the 10 units: 10s.
	e.check(queued(ls[2], 49, 11*time.Second, 10*time.Second), e.take1("k", ls[2], 1), "lb queued")
}
