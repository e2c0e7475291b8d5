package storetest

import (
	"fmt"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
)

// Scenarios of a clock that steps backwards (see
// ratelimit.ClockStepTolerance): behind a state's last change by at most
// the tolerance, the state stands still and the waits told are lengthened
// by the lag; behind by more, the state is rebased by the step. Either way
// no capacity is created and a client that waits exactly the RetryAfter it
// was told is admitted.

// tol is ratelimit.ClockStepTolerance.
const tol = ratelimit.ClockStepTolerance

// clockBackwards: the token bucket through a clock 100 ms behind (within
// the tolerance: two NTP-disciplined writers) and 1 s behind (a step).
// tenPerSecond refills one unit every 100ms and holds 50.
func clockBackwards(e *env) {
	l := tenPerSecond()
	e.at(time.Hour)
	e.check(ok(l, 0, 5*time.Second), e.take1("k", l, 50), "empty the bucket at 1h")

	// 100 ms behind: the bucket stands still at 1h, empty, so one unit is
	// 100ms of refill away from 1h, 200ms from this clock; the bucket
	// is full 5s after 1h, 5.1s from this clock.
	e.at(time.Hour - 100*time.Millisecond)
	e.check(refused(l, 0, 5100*time.Millisecond, 200*time.Millisecond), e.take1("k", l, 1), "1 at 1h-100ms")
	e.check(ok(l, 0, 5100*time.Millisecond), e.peek("k", l), "peek at 1h-100ms: nothing created")
	// One microsecond short of the wait told, 1µs of refill is missing
	// (the bucket was last written at 1h, when it was emptied); at the
	// wait told, one unit is admitted, which empties the bucket again.
	e.at(time.Hour + 100*time.Millisecond - time.Microsecond)
	e.check(refused(l, 0, 4900*time.Millisecond+time.Microsecond, time.Microsecond), e.take1("k", l, 1), "1µs before the wait told")
	e.at(time.Hour + 100*time.Millisecond)
	e.check(ok(l, 0, 5*time.Second), e.take1("k", l, 1), "after the wait told")

	// A charge made 100 ms behind stands still too: at 1h+300ms two units
	// have refilled and one is taken; a writer 100ms behind takes the
	// other as at 1h+300ms, which leaves the bucket empty as of 1h+300ms,
	// 5.1s from its clock.
	e.at(time.Hour + 300*time.Millisecond)
	e.check(ok(l, 1, 4900*time.Millisecond), e.take1("k", l, 1), "1 at 1h+300ms")
	e.at(time.Hour + 200*time.Millisecond)
	e.check(ok(l, 0, 5100*time.Millisecond), e.take1("k", l, 1), "the other, 100ms behind")
	e.at(time.Hour + 300*time.Millisecond)
	e.check(refused(l, 0, 5*time.Second, 100*time.Millisecond), e.take1("k", l, 1), "nothing left at 1h+300ms")

	// 1 s behind, beyond the tolerance: a step. The bucket is rebased to
	// this clock, still empty: one unit is 100ms away, as it was before
	// the step, and no more.
	e.at(time.Hour - 700*time.Millisecond)
	e.check(refused(l, 0, 5*time.Second, 100*time.Millisecond), e.take1("k", l, 1), "1 after a step of 1s")
	e.check(ok(l, 0, 5*time.Second), e.peek("k", l), "peek after the step: nothing created")
	e.at(time.Hour - 600*time.Millisecond)
	e.check(ok(l, 0, 5*time.Second), e.take1("k", l, 1), "after the wait told")
	e.check(refused(l, 0, 5*time.Second, 100*time.Millisecond), e.take1("k", l, 1), "and no more")

	// The clock that was 1 s ahead writes again (several writers whose
	// clocks disagree by more than the tolerance): to it, 1 s has passed
	// since the rebase, 10 units of refill. Each such alternation grants
	// the rate × the skew, as documented on ratelimit.ClockStepTolerance.
	e.at(time.Hour + 400*time.Millisecond)
	e.check(ok(l, 9, 4100*time.Millisecond), e.take1("k", l, 1), "the clock 1s ahead: 10 units refilled")
}

// stepWant is what a limit emptied at T answers one unit, Δ before T, and
// after the wait it told.
type stepWant struct {
	retry, reset time.Duration // at T−Δ
	after        ratelimit.Decision
}

// clockBackwardsEveryAlgorithm: every algorithm, 60 per minute (one unit a
// second), emptied at T = 2h (a minute boundary, so every window starts
// there), then asked for one unit at T−Δ for steps Δ of 50ms, 128ms
// (within the tolerance), 129ms, 10s and 1h (steps). The answer must
// create nothing (no unit is left), the wait told must be exact (1µs short
// of it is refused, at it the unit is admitted), and what the key waits
// must be what it would have waited at T, plus Δ within the tolerance,
// plus what an epoch-aligned window keeps of Δ to stay aligned.
func clockBackwardsEveryAlgorithm(e *env) {
	base := ratelimit.PerMinute(60)
	first := base.WithAlgorithm(ratelimit.FixedWindow).AlignToFirstHit()
	tb := withAlgorithm(base, ratelimit.TokenBucket)
	gcra := withAlgorithm(base, ratelimit.GCRA)
	lb := withAlgorithm(base, ratelimit.LeakyBucket)
	log := withAlgorithm(base, ratelimit.SlidingLog)
	fw := withAlgorithm(base, ratelimit.FixedWindow)
	fh := &first
	sw := withAlgorithm(base, ratelimit.SlidingWindow)
	const T = 2 * time.Hour
	// lag is what stands still (Δ within the tolerance); kept is what an
	// epoch-aligned window keeps of a step: it moves back by whole
	// minutes only, so a step shorter than a minute moves it not at all.
	lag := func(d time.Duration) time.Duration {
		if d <= tol {
			return d
		}
		return 0
	}
	kept := func(d time.Duration) time.Duration {
		if d <= tol {
			return d
		}
		return d % time.Minute
	}
	cases := []struct {
		l    *ratelimit.Limit
		want func(d time.Duration) stepWant
	}{
		// Buckets and GCRA: empty at T (level 60 units, full again in
		// 60s); one unit refills in 1s. After it the bucket is empty
		// again; the leaky bucket queues the unit behind the 59 ahead.
		{tb, func(d time.Duration) stepWant {
			return stepWant{time.Second + lag(d), time.Minute + lag(d), ok(tb, 0, time.Minute)}
		}},
		{gcra, func(d time.Duration) stepWant {
			return stepWant{time.Second + lag(d), time.Minute + lag(d), ok(gcra, 0, time.Minute)}
		}},
		{lb, func(d time.Duration) stepWant {
			return stepWant{time.Second + lag(d), time.Minute + lag(d), queued(lb, 0, time.Minute, 59*time.Second)}
		}},
		// The log's 60 entries of T leave at T+60s: the wait is absolute,
		// 60s + Δ by this clock, or 60s once the entries are rebased. Then
		// the unit is the only entry: 59 left, Reset 60s.
		{log, func(d time.Duration) stepWant {
			return stepWant{time.Minute + lag(d), time.Minute + lag(d), ok(log, 59, time.Minute)}
		}},
		// The fixed window [T, T+60s) ends 60s after T; aligned to the
		// epoch, it moves back by whole minutes; aligned to the first
		// hit, it opens at the clock. The unit opens the next window.
		{fw, func(d time.Duration) stepWant {
			return stepWant{time.Minute + kept(d), time.Minute + kept(d), ok(fw, 59, time.Minute)}
		}},
		{fh, func(d time.Duration) stepWant {
			return stepWant{time.Minute + lag(d), time.Minute + lag(d), ok(fh, 59, time.Minute)}
		}},
		// The sliding counter's 60 weigh until T+120s; one more fits in
		// the next window once 60 × (60000 − e)/60000 + 1 ≤ 60, e ≥
		// 1000ms: at T+61s. Then the window is exactly full (0 left) and
		// the previous count weighs until T+180s, 119s later.
		{sw, func(d time.Duration) stepWant {
			return stepWant{61*time.Second + kept(d), 2*time.Minute + kept(d), ok(sw, 0, 119*time.Second)}
		}},
	}
	steps := []time.Duration{50 * time.Millisecond, tol, tol + time.Millisecond, 10 * time.Second, time.Hour}
	for _, c := range cases {
		for _, d := range steps {
			name := fmt.Sprintf("%v, step %v", c.l, d)
			key := fmt.Sprintf("step/%s/%v", c.l.ID(), d)
			w := c.want(d)
			e.at(T)
			require.True(e.t, e.take1(key, c.l, 60).Allowed, "%s: 60 at T", name)
			e.at(T - d)
			e.check(refused(c.l, 0, w.reset, w.retry), e.take1(key, c.l, 1), "%s: 1 at T−Δ", name)
			assert.Equal(e.t, int64(0), e.peek(key, c.l).Remaining, "%s: peek at T−Δ", name)
			e.at(T - d + w.retry - time.Microsecond)
			assert.False(e.t, e.take1(key, c.l, 1).Allowed, "%s: 1µs before the wait told", name)
			e.at(T - d + w.retry)
			e.check(w.after, e.take1(key, c.l, 1), "%s: after the wait told", name)
		}
	}
}
