package storetest

import (
	"context"
	"math"
	"strings"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
)

// Limits shared by the scenarios, with the arithmetic their expected values
// follow from. A unit of a limit refills in Period/Quota; Remaining is the
// whole number of units left, rounded down; Reset is the time for the whole
// level to refill; RetryAfter is the time until the level plus the cost fits
// in the burst.

// tenPerSecond refills one unit every 1s/10 = 100ms and holds 50 units, so
// an empty bucket takes 50 × 100ms = 5s to refill.
func tenPerSecond() *ratelimit.Limit {
	l := ratelimit.PerSecond(10).WithBurst(50)
	return &l
}

// perMinute60 refills one unit every 60s/60 = 1s and holds 60.
func perMinute60() *ratelimit.Limit {
	l := ratelimit.PerMinute(60).Named("rpm")
	return &l
}

// perDay1000 refills one unit every 86400s/1000 = 86.4s and holds 1000.
func perDay1000() *ratelimit.Limit {
	l := ratelimit.PerDay(1000).Named("tokens").WithUnit(ratelimit.Tokens)
	return &l
}

// twoPerSecond refills one unit every 1s/2 = 500ms and holds 2.
func twoPerSecond() *ratelimit.Limit {
	l := ratelimit.PerSecond(2).Named("rps")
	return &l
}

// units converts n units of a limit that refills one unit every per.
func units(n int64, per time.Duration) time.Duration { return time.Duration(n) * per }

const (
	unit10ps   = 100 * time.Millisecond
	unitMinute = time.Second
	unitDay    = 86400 * time.Millisecond // 86.4s
	unit2ps    = 500 * time.Millisecond
)

type scenario struct {
	name string
	run  func(e *env)
}

var scenarios = []scenario{
	{"BurstThenRefill", burstThenRefill},
	{"StackedAtomic", stackedAtomic},
	{"StackedThree", stackedThree},
	{"CostAboveBurstNever", costAboveBurst},
	{"CostEqualsBurst", costEqualsBurst},
	{"Peek", peek},
	{"AdjustRefund", adjustRefund},
	{"AdjustDebt", adjustDebt},
	{"AdjustUnknownKey", adjustUnknownKey},
	{"AdjustStack", adjustStack},
	{"AdjustExtremes", adjustExtremes},
	{"Expiry", expiry},
	{"ClockBackwards", clockBackwards},
	{"IndependentKeys", independentKeys},
	{"IndependentLimitNames", independentLimitNames},
	{"ChangedLimitStartsFresh", changedLimitStartsFresh},
	{"DuplicateRequests", duplicateRequests},
	{"InvalidInput", invalidInput},
	{"ContextDone", contextDone},
	{"EmptyCall", emptyCall},
	{"OutLongerThanRequests", outLonger},
	{"ConcurrentSingleKey", concurrentSingleKey},
	{"ConcurrentStack", concurrentStack},
	{"Model", compareWithModel},
}

func burstThenRefill(e *env) {
	l := tenPerSecond()
	// Spend the whole burst, then idle 30s: 300 units refill but the bucket
	// holds only 50, so it is exactly full again.
	e.check(ok(l, 0, units(50, unit10ps)), e.take1("k", l, 50), "spend the burst")
	e.at(30 * time.Second)
	allowed := 0
	for i := int64(1); i <= 60; i++ {
		d := e.take1("k", l, 1)
		if i <= 50 {
			// The i-th unit leaves 50-i units and a level of i units,
			// which refills in i × 100ms.
			e.check(ok(l, 50-i, units(i, unit10ps)), d, "take %d", i)
		} else {
			// The bucket is empty (level 50 units, Reset 5s); one more
			// unit fits after one unit refills: 100ms.
			e.check(refused(l, 0, 5*time.Second, 100*time.Millisecond), d, "take %d", i)
		}
		if d.Allowed {
			allowed++
		}
	}
	assert.Equal(e.t, 50, allowed, "allowed at one instant after idling")
	// 100ms later exactly one unit has refilled: one more take fits,
	// leaving the bucket empty again (Reset 5s), and the next is refused.
	e.at(30*time.Second + 100*time.Millisecond)
	e.check(ok(l, 0, 5*time.Second), e.take1("k", l, 1), "after 100ms")
	e.check(refused(l, 0, 5*time.Second, 100*time.Millisecond), e.take1("k", l, 1), "after 100ms, again")
}

func stackedAtomic(e *env) {
	rpm, tokens := perMinute60(), perDay1000()
	// 990 tokens leave 10; the level of 990 units refills in 990 × 86.4s
	// = 85536s.
	tokReset := units(990, unitDay)
	e.check(ok(tokens, 10, tokReset), e.take1("k", tokens, 990), "tokens 990")

	// 20 more tokens exceed the remaining 10 by 10 units: RetryAfter
	// 10 × 86.4s = 864s. rpm has room but must not be charged: it reports
	// its uncharged state, 60 left and nothing to refill.
	e.checkAll("[rpm 1, tokens 20]", []ratelimit.Decision{
		ok(rpm, 60, 0),
		refused(tokens, 10, tokReset, units(10, unitDay)),
	}, e.take(req("k", rpm, 1), req("k", tokens, 20)))
	e.check(ok(rpm, 60, 0), e.peek("k", rpm), "rpm not charged")
	e.check(ok(tokens, 10, tokReset), e.peek("k", tokens), "tokens not charged")

	// The same in the reverse order.
	e.checkAll("[tokens 20, rpm 1]", []ratelimit.Decision{
		refused(tokens, 10, tokReset, units(10, unitDay)),
		ok(rpm, 60, 0),
	}, e.take(req("k", tokens, 20), req("k", rpm, 1)))
	e.check(ok(rpm, 60, 0), e.peek("k", rpm), "rpm not charged (reverse order)")
	e.check(ok(tokens, 10, tokReset), e.peek("k", tokens), "tokens not charged (reverse order)")

	// When both fit, both are charged: rpm 59 left, 1 unit = 1s to refill;
	// tokens 0 left, 1000 units = 86400s to refill.
	e.checkAll("[rpm 1, tokens 10]", []ratelimit.Decision{
		ok(rpm, 59, units(1, unitMinute)),
		ok(tokens, 0, units(1000, unitDay)),
	}, e.take(req("k", rpm, 1), req("k", tokens, 10)))
	e.check(ok(rpm, 59, time.Second), e.peek("k", rpm), "rpm charged")
}

func stackedThree(e *env) {
	rps, rpm, tokens := twoPerSecond(), perMinute60(), perDay1000()
	// Empty rpm: level 60 units, Reset 60s.
	e.check(ok(rpm, 0, 60*time.Second), e.take1("s", rpm, 60), "rpm 60")

	// The middle limit refuses: 61 units need one unit to refill, 1s. rps
	// and tokens had room and report their uncharged, full state.
	e.checkAll("[rps 1, rpm 1, tokens 1] with rpm empty", []ratelimit.Decision{
		ok(rps, 2, 0),
		refused(rpm, 0, 60*time.Second, time.Second),
		ok(tokens, 1000, 0),
	}, e.take(req("s", rps, 1), req("s", rpm, 1), req("s", tokens, 1)))
	e.check(ok(rps, 2, 0), e.peek("s", rps), "rps not charged")
	e.check(ok(tokens, 1000, 0), e.peek("s", tokens), "tokens not charged")
	e.check(ok(rpm, 0, 60*time.Second), e.peek("s", rpm), "rpm unchanged")

	// One second later rpm has refilled one unit (level 59): all three
	// fit. rps: 1 left, 1 unit = 500ms to refill. rpm: level 60, 0 left,
	// 60s. tokens: 999 left, 1 unit = 86.4s.
	e.at(time.Second)
	e.checkAll("[rps 1, rpm 1, tokens 1] after 1s", []ratelimit.Decision{
		ok(rps, 1, unit2ps),
		ok(rpm, 0, 60*time.Second),
		ok(tokens, 999, unitDay),
	}, e.take(req("s", rps, 1), req("s", rpm, 1), req("s", tokens, 1)))

	// Two limits refuse at once, each with its own RetryAfter: rps level 1
	// + 2 exceeds its burst of 2 by one unit (500ms); rpm level 60 + 1
	// exceeds 60 by one unit (1s). tokens has room and is not charged.
	e.checkAll("[rps 2, rpm 1, tokens 1], two refuse", []ratelimit.Decision{
		refused(rps, 1, unit2ps, unit2ps),
		refused(rpm, 0, 60*time.Second, time.Second),
		ok(tokens, 999, unitDay),
	}, e.take(req("s", rps, 2), req("s", rpm, 1), req("s", tokens, 1)))
	e.check(ok(tokens, 999, unitDay), e.peek("s", tokens), "tokens not charged by the two-refusal call")
}

func costAboveBurst(e *env) {
	rpm, tokens := perMinute60(), perDay1000()
	// 1001 tokens can never fit a burst of 1000: RetryNever, and rpm, which
	// had room, is not charged.
	out := e.take(req("k", rpm, 1), req("k", tokens, 1001))
	e.checkAll("[rpm 1, tokens 1001]", []ratelimit.Decision{
		ok(rpm, 60, 0),
		refused(tokens, 1000, 0, ratelimit.RetryNever),
	}, out)
	assert.True(e.t, out[1].Never(), "Decision.Never for cost > burst")
	e.check(ok(rpm, 60, 0), e.peek("k", rpm), "rpm not charged")
	e.check(ok(tokens, 1000, 0), e.peek("k", tokens), "tokens not charged")

	// On a half-used bucket (500 units, 500 × 86.4s = 43200s) the answer is
	// still never, and the state is reported unchanged.
	e.check(ok(tokens, 500, 43200*time.Second), e.take1("k", tokens, 500), "tokens 500")
	e.check(refused(tokens, 500, 43200*time.Second, ratelimit.RetryNever), e.take1("k", tokens, 1001), "tokens 1001 on half-used")
	e.check(refused(rpm, 60, 0, ratelimit.RetryNever), e.take1("k", rpm, 61), "rpm 61")
	e.check(refused(rpm, 60, 0, ratelimit.RetryNever), e.take1("k", rpm, math.MaxInt64), "rpm MaxInt64")
	e.check(ok(tokens, 500, 43200*time.Second), e.peek("k", tokens), "tokens unchanged")
}

func costEqualsBurst(e *env) {
	rpm, tokens := perMinute60(), perDay1000()
	// A cost equal to the burst fits a fresh key exactly and empties it:
	// tokens refill in 1000 × 86.4s = 24h, rpm in 60 × 1s.
	e.check(ok(tokens, 0, 24*time.Hour), e.take1("k", tokens, 1000), "tokens 1000")
	e.check(ok(rpm, 0, time.Minute), e.take1("k", rpm, 60), "rpm 60")
	e.check(refused(rpm, 0, time.Minute, time.Second), e.take1("k", rpm, 1), "rpm 1 more")
}

func peek(e *env) {
	rpm, tokens := perMinute60(), perDay1000()
	e.check(ok(rpm, 60, 0), e.peek("k", rpm), "fresh key")
	e.check(ok(rpm, 57, 3*time.Second), e.take1("k", rpm, 3), "take 3")
	e.check(ok(rpm, 57, 3*time.Second), e.peek("k", rpm), "peek after take")
	e.check(ok(rpm, 57, 3*time.Second), e.peek("k", rpm), "peek again: peeks never charge")

	// 1.5s later 1.5 units have refilled: level 1.5 units, 58.5 left,
	// reported rounded down as 58; Reset 1.5s.
	e.at(1500 * time.Millisecond)
	e.check(ok(rpm, 58, 1500*time.Millisecond), e.peek("k", rpm), "after 1.5s")
	// 57 more: level 58.5, 1.5 left → 1; Reset 58.5s.
	e.check(ok(rpm, 1, 58500*time.Millisecond), e.take1("k", rpm, 57), "take 57")
	// 1 more: level 59.5, 0.5 left → 0; Reset 59.5s.
	e.check(ok(rpm, 0, 59500*time.Millisecond), e.take1("k", rpm, 1), "take 1")
	// A peek fits a level at or below the burst, even with 0 whole units
	// left.
	e.check(ok(rpm, 0, 59500*time.Millisecond), e.peek("k", rpm), "peek at 0 left")
	// One unit needs 60.5 - 60 = 0.5 units to refill: 500ms.
	e.check(refused(rpm, 0, 59500*time.Millisecond, 500*time.Millisecond), e.take1("k", rpm, 1), "take 1 over")

	// A stack of peeks on a fresh key reports both limits full.
	e.checkAll("[rpm 0, tokens 0]", []ratelimit.Decision{ok(rpm, 60, 0), ok(tokens, 1000, 0)},
		e.take(req("p", rpm, 0), req("p", tokens, 0)))
	e.check(ok(rpm, 60, 0), e.peek("p", rpm), "stack of peeks charged nothing")
}

func adjustRefund(e *env) {
	l := tenPerSecond()
	e.check(ok(l, 40, time.Second), e.take1("k", l, 10), "take 10")
	// Refund 3: level 7 units → 43 left, 700ms to refill.
	e.checkAll("refund 3", []ratelimit.Decision{ok(l, 43, 700*time.Millisecond)}, e.adjust(req("k", l, -3)))
	// Refund far more than was used: the level stops at empty (0), never
	// below, so the bucket is full and not more than full.
	e.checkAll("refund 100", []ratelimit.Decision{ok(l, 50, 0)}, e.adjust(req("k", l, -100)))
	e.check(ok(l, 50, 0), e.peek("k", l), "peek after the big refund")
	e.check(ok(l, 0, 5*time.Second), e.take1("k", l, 50), "whole burst after refund")
	e.check(refused(l, 0, 5*time.Second, 100*time.Millisecond), e.take1("k", l, 1), "no capacity beyond the burst")
}

func adjustDebt(e *env) {
	l := tenPerSecond()
	// Charge 70 units on a fresh key: level 70 units, 20 beyond the burst.
	// Adjust does not refuse; 0 left; 70 × 100ms = 7s to refill.
	e.checkAll("charge 70", []ratelimit.Decision{ok(l, 0, 7*time.Second)}, e.adjust(req("k", l, 70)))
	// In debt even a peek is refused, until the 20 units of debt drain:
	// 2s.
	e.check(refused(l, 0, 7*time.Second, 2*time.Second), e.peek("k", l), "peek in debt")
	// Cost 5 needs the level down to 45: 70 - 45 = 25 units = 2.5s (time
	// to drain the debt plus the cost).
	e.check(refused(l, 0, 7*time.Second, 2500*time.Millisecond), e.take1("k", l, 5), "take 5 in debt")
	// 2.5s later the level is 45: cost 5 fits exactly, leaving 0 and a
	// level of 50 units = 5s.
	e.at(2500 * time.Millisecond)
	e.check(ok(l, 0, 5*time.Second), e.take1("k", l, 5), "take 5 after 2.5s")
	e.check(refused(l, 0, 5*time.Second, 100*time.Millisecond), e.take1("k", l, 1), "take 1 more")
}

func adjustUnknownKey(e *env) {
	l := tenPerSecond()
	// A refund on a key never seen leaves it full and creates no credit.
	e.checkAll("refund 5 on unknown key", []ratelimit.Decision{ok(l, 50, 0)}, e.adjust(req("u", l, -5)))
	e.checkAll("adjust 0 on unknown key", []ratelimit.Decision{ok(l, 50, 0)}, e.adjust(req("v", l, 0)))
	e.check(ok(l, 0, 5*time.Second), e.take1("u", l, 50), "whole burst")
	e.check(refused(l, 0, 5*time.Second, 100*time.Millisecond), e.take1("u", l, 1), "nothing beyond the burst")
}

func adjustStack(e *env) {
	rpm, tokens := perMinute60(), perDay1000()
	// rpm +1: 59 left, 1s. tokens +500: 500 left, 500 × 86.4s = 43200s.
	e.checkAll("[rpm +1, tokens +500]", []ratelimit.Decision{
		ok(rpm, 59, time.Second),
		ok(tokens, 500, 43200*time.Second),
	}, e.adjust(req("k", rpm, 1), req("k", tokens, 500)))
	// rpm -1: full. tokens +600: level 1100 units, 0 left,
	// 1100 × 86.4s = 95040s.
	e.checkAll("[rpm -1, tokens +600]", []ratelimit.Decision{
		ok(rpm, 60, 0),
		ok(tokens, 0, 95040*time.Second),
	}, e.adjust(req("k", rpm, -1), req("k", tokens, 600)))
	// Duplicates apply in order: +2 (58 left, 2s), then -1 (59 left, 1s).
	e.checkAll("[rpm +2, rpm -1]", []ratelimit.Decision{
		ok(rpm, 58, 2*time.Second),
		ok(rpm, 59, time.Second),
	}, e.adjust(req("k", rpm, 2), req("k", rpm, -1)))
	e.check(ok(rpm, 59, time.Second), e.peek("k", rpm), "after duplicate adjust")
}

func adjustExtremes(e *env) {
	l := tenPerSecond()
	// The largest charge saturates at the stores' internal bound on the
	// level instead of overflowing. The pure function is the reference
	// for where that bound lies.
	now := ratelimit.Micros(e.now)
	var s ratelimit.State
	want := l.AdjustAt(&s, now, math.MaxInt64)
	require.Greater(e.t, want.Reset, 10*time.Second, "the bound is at least twice the capacity")
	e.checkAll("charge MaxInt64", []ratelimit.Decision{want}, e.adjust(req("k", l, math.MaxInt64)))
	wantTake := l.TakeAt(&s, now, 1)
	e.check(wantTake, e.take1("k", l, 1), "take after the largest charge")
	// The largest refund empties the level without overflowing.
	e.checkAll("refund MinInt64", []ratelimit.Decision{ok(l, 50, 0)}, e.adjust(req("k", l, math.MinInt64)))
	e.check(ok(l, 50, 0), e.peek("k", l), "after the largest refund")
}

func expiry(e *env) {
	l := tenPerSecond()
	// 20 units refill in 2s. When exactly 2s have passed the key must
	// behave as a fresh one, step for step.
	e.check(ok(l, 30, 2*time.Second), e.take1("k", l, 20), "take 20")
	e.at(2 * time.Second)
	for _, key := range []string{"k", "fresh"} {
		e.check(ok(l, 50, 0), e.peek(key, l), "%s: peek", key)
		e.check(ok(l, 0, 5*time.Second), e.take1(key, l, 50), "%s: whole burst", key)
		e.check(refused(l, 0, 5*time.Second, 100*time.Millisecond), e.take1(key, l, 1), "%s: one more", key)
	}

	// Debt expires too: 70 units refill in 7s.
	e.checkAll("charge 70", []ratelimit.Decision{ok(l, 0, 7*time.Second)}, e.adjust(req("d", l, 70)))
	e.at(9 * time.Second)
	e.check(ok(l, 50, 0), e.peek("d", l), "debt refilled")
	e.check(ok(l, 0, 5*time.Second), e.take1("d", l, 50), "whole burst after debt")

	// One microsecond before the Reset the key is not yet full: 1µs of the
	// 100ms unit remains, so 49 whole units are left and Reset is 1µs.
	e.check(ok(l, 49, 100*time.Millisecond), e.take1("e", l, 1), "take 1")
	e.at(9*time.Second + 100*time.Millisecond - time.Microsecond)
	e.check(ok(l, 49, time.Microsecond), e.peek("e", l), "1µs before the reset")
	e.at(9*time.Second + 100*time.Millisecond)
	e.check(ok(l, 50, 0), e.peek("e", l), "at the reset")
}

func independentKeys(e *env) {
	l := tenPerSecond()
	e.check(ok(l, 0, 5*time.Second), e.take1("a", l, 50), "empty a")
	// Keys differing in case, whitespace, a NUL byte, a separator-like
	// suffix, or very long, are all distinct and start full: one unit
	// leaves 49 and refills in 100ms.
	for _, key := range []string{"b", "A", "a ", " a", "a\x00", "a:", "a:rpm", "{a}", "ключ", strings.Repeat("a", 10000)} {
		e.check(ok(l, 49, 100*time.Millisecond), e.take1(key, l, 1), "key %.20q", key)
	}
	e.check(refused(l, 0, 5*time.Second, 100*time.Millisecond), e.take1("a", l, 1), "a still empty")
}

func independentLimitNames(e *env) {
	x := ratelimit.PerSecond(10).WithBurst(50).Named("x")
	y := ratelimit.PerSecond(10).WithBurst(50).Named("y")
	e.check(ok(&x, 0, 5*time.Second), e.take1("k", &x, 50), "empty x")
	e.check(ok(&y, 50, 0), e.peek("k", &y), "y on the same key is untouched")
	e.check(ok(&y, 49, 100*time.Millisecond), e.take1("k", &y, 1), "take from y")
}

func changedLimitStartsFresh(e *env) {
	rpm := perMinute60()
	e.check(ok(rpm, 0, time.Minute), e.take1("k", rpm, 60), "empty rpm")
	// The same name with a different quota or burst has a different ID,
	// so its state starts afresh instead of misreading the old one.
	more := ratelimit.PerMinute(120).Named("rpm")
	e.check(ok(&more, 120, 0), e.peek("k", &more), "quota changed")
	smaller := ratelimit.PerMinute(60).Named("rpm").WithBurst(10)
	e.check(ok(&smaller, 10, 0), e.peek("k", &smaller), "burst changed")
	// A copy of the limit has the same ID and shares the state; decisions
	// point to the limit of the request.
	same := *rpm
	e.check(ok(&same, 0, time.Minute), e.peek("k", &same), "same ID through another pointer")
}

func duplicateRequests(e *env) {
	// burst 3, one unit per second.
	b3v := ratelimit.Every(3, 3*time.Second)
	b3, rpm := &b3v, perMinute60()
	// 2 then 2 more in one call: the second sees the first's charge,
	// 2 + 2 = 4 > 3 by one unit: RetryAfter 1s. Nothing is charged, so
	// both report the uncharged, full state.
	e.checkAll("[2, 2]", []ratelimit.Decision{
		ok(b3, 3, 0),
		refused(b3, 3, 0, time.Second),
	}, e.take(req("k", b3, 2), req("k", b3, 2)))
	e.check(ok(b3, 3, 0), e.peek("k", b3), "nothing charged")
	// 1 then 2: 2 left (1s), then 0 left (3s).
	e.checkAll("[1, 2]", []ratelimit.Decision{
		ok(b3, 2, time.Second),
		ok(b3, 0, 3*time.Second),
	}, e.take(req("k", b3, 1), req("k", b3, 2)))
	e.check(ok(b3, 0, 3*time.Second), e.peek("k", b3), "both charged")

	// A duplicate around another limit.
	e.checkAll("[b3 1, rpm 1, b3 1]", []ratelimit.Decision{
		ok(b3, 2, time.Second),
		ok(rpm, 59, time.Second),
		ok(b3, 1, 2*time.Second),
	}, e.take(req("m", b3, 1), req("m", rpm, 1), req("m", b3, 1)))
	// Level 2: the first fits (level 3), the second needs one more unit
	// (1s). Nothing is charged: both report level 2, 1 left, 2s.
	e.checkAll("[b3 1, b3 1] at level 2", []ratelimit.Decision{
		ok(b3, 1, 2*time.Second),
		refused(b3, 1, 2*time.Second, time.Second),
	}, e.take(req("m", b3, 1), req("m", b3, 1)))
	e.check(ok(b3, 1, 2*time.Second), e.peek("m", b3), "nothing charged at level 2")
}

func invalidInput(e *env) {
	rpm := perMinute60()
	zero := ratelimit.Limit{}
	badQuota := ratelimit.PerSecond(0)
	good := req("k", rpm, 1)
	cases := []struct {
		name   string
		adjust bool
		reqs   []ratelimit.Request
		outLen int
	}{
		{"Take empty key", false, []ratelimit.Request{good, req("", rpm, 1)}, 2},
		{"Take nil limit", false, []ratelimit.Request{good, req("k", nil, 1)}, 2},
		{"Take zero Limit", false, []ratelimit.Request{good, req("k", &zero, 1)}, 2},
		{"Take invalid Limit", false, []ratelimit.Request{good, req("k", &badQuota, 1)}, 2},
		{"Take negative cost", false, []ratelimit.Request{good, req("k", rpm, -1)}, 2},
		{"Take short out", false, []ratelimit.Request{good, good}, 1},
		{"Take nil out", false, []ratelimit.Request{good}, 0},
		{"Adjust empty key", true, []ratelimit.Request{good, req("", rpm, 1)}, 2},
		{"Adjust nil limit", true, []ratelimit.Request{good, req("k", nil, 1)}, 2},
		{"Adjust zero Limit", true, []ratelimit.Request{good, req("k", &zero, 1)}, 2},
		{"Adjust invalid Limit", true, []ratelimit.Request{good, req("k", &badQuota, -1)}, 2},
		{"Adjust short out", true, []ratelimit.Request{good, good}, 1},
	}
	for _, c := range cases {
		var out []ratelimit.Decision
		if c.outLen > 0 {
			out = make([]ratelimit.Decision, c.outLen)
		}
		var err error
		if c.adjust {
			err = e.h.Store.Adjust(e.t.Context(), c.reqs, out)
		} else {
			err = e.h.Store.Take(e.t.Context(), c.reqs, out)
		}
		assert.ErrorIs(e.t, err, ratelimit.ErrInvalidRequest, c.name)
		// The valid request before the bad one was not charged.
		e.check(ok(rpm, 60, 0), e.peek("k", rpm), "%s: nothing charged", c.name)
	}
}

func contextDone(e *env) {
	rpm := perMinute60()
	canceled, cancel := context.WithCancel(e.t.Context())
	cancel()
	expired, cancel2 := context.WithDeadline(e.t.Context(), time.Unix(0, 0))
	defer cancel2()
	reqs := []ratelimit.Request{req("k", rpm, 1)}
	out := make([]ratelimit.Decision, 1)
	assert.ErrorIs(e.t, e.h.Store.Take(canceled, reqs, out), context.Canceled, "Take, canceled")
	assert.ErrorIs(e.t, e.h.Store.Adjust(canceled, reqs, out), context.Canceled, "Adjust, canceled")
	assert.ErrorIs(e.t, e.h.Store.Take(expired, reqs, out), context.DeadlineExceeded, "Take, past deadline")
	assert.ErrorIs(e.t, e.h.Store.Adjust(expired, reqs, out), context.DeadlineExceeded, "Adjust, past deadline")
	e.check(ok(rpm, 60, 0), e.peek("k", rpm), "nothing charged")
}

func emptyCall(e *env) {
	assert.NoError(e.t, e.h.Store.Take(e.t.Context(), nil, nil), "Take with no requests")
	assert.NoError(e.t, e.h.Store.Adjust(e.t.Context(), nil, nil), "Adjust with no requests")
	assert.NoError(e.t, e.h.Store.Take(e.t.Context(), []ratelimit.Request{}, make([]ratelimit.Decision, 2)), "Take with an empty slice")
}

func outLonger(e *env) {
	rpm, tokens := perMinute60(), perDay1000()
	sentinel := ratelimit.Decision{Remaining: -42}
	out := []ratelimit.Decision{{}, {}, sentinel}
	require.NoError(e.t, e.h.Store.Take(e.t.Context(), []ratelimit.Request{req("k", rpm, 1), req("k", tokens, 1)}, out))
	e.check(ok(rpm, 59, time.Second), out[0], "rpm")
	e.check(ok(tokens, 999, unitDay), out[1], "tokens")
	assert.Equal(e.t, sentinel, out[2], "Take wrote past len(reqs)")
	require.NoError(e.t, e.h.Store.Adjust(e.t.Context(), []ratelimit.Request{req("k", rpm, -1)}, out[:2]))
	e.check(ok(rpm, 60, 0), out[0], "adjust rpm")
	e.check(ok(tokens, 999, unitDay), out[1], "Adjust wrote past len(reqs)")
}
