package storetest

import (
	"time"

	"github.com/rampmeter/ratelimit"
)

// Scenarios for the concurrency cap (ratelimit.Concurrent): slots taken at
// admission, released by an Adjust of −1 dated at the Take's At, and
// returning by themselves after the maximum hold.

// release is the Adjust that gives back the slot taken by decision d.
func release(key string, l *ratelimit.Limit, d ratelimit.Decision) ratelimit.Request {
	return ratelimit.Request{Key: key, Limit: l, Cost: -1, At: d.At}
}

// concurrencyCap: a cap of 2 with a maximum hold of 10 s.
func concurrencyCap(e *env) {
	l := ratelimit.Concurrent(2, 10*time.Second)
	// 0 s: slot A; 3 s: slot B. Reset is when the newest hold ends.
	a := e.take1("k", &l, 1)
	e.check(ok(&l, 1, 10*time.Second), a, "A")
	e.at(3 * time.Second)
	b := e.take1("k", &l, 1)
	e.check(ok(&l, 0, 10*time.Second), b, "B")
	// 4 s: full. A's hold ends at 10 s, 6 s away: the wait is capped at
	// ConcurrencyRetryAfter, 1 s. A cost of 3 never fits.
	e.at(4 * time.Second)
	e.check(refused(&l, 0, 9*time.Second, time.Second), e.take1("k", &l, 1), "full")
	e.check(refused(&l, 0, 9*time.Second, ratelimit.RetryNever), e.take1("k", &l, 3), "3 never")
	e.check(ok(&l, 0, 9*time.Second), e.peek("k", &l), "a peek fits: nothing over the cap")
	// Another key has its own slots.
	e.check(ok(&l, 1, 10*time.Second), e.take1("other", &l, 1), "other key")
	// 5 s: release B (by its At); C takes its place.
	e.at(5 * time.Second)
	e.checkAll("release B", []ratelimit.Decision{ok(&l, 1, 5*time.Second)}, e.adjust(release("k", &l, b)))
	e.checkAll("release B again", []ratelimit.Decision{ok(&l, 1, 5*time.Second)}, e.adjust(release("k", &l, b)))
	c := e.take1("k", &l, 1)
	e.check(ok(&l, 0, 10*time.Second), c, "C")
	// 9.5 s: full; A's hold ends in 500 ms, below the cap: exact.
	e.at(9500 * time.Millisecond)
	e.check(refused(&l, 0, 5500*time.Millisecond, 500*time.Millisecond), e.take1("k", &l, 1), "A ends in 500ms")
	// 10 s: A was never released (its holder died): it has returned by
	// itself, and its late release changes nothing.
	e.at(10 * time.Second)
	e.checkAll("late release of A", []ratelimit.Decision{ok(&l, 1, 5*time.Second)}, e.adjust(release("k", &l, a)))
	// Release C: nothing is held, Reset 0, as on a key never seen.
	e.checkAll("release C", []ratelimit.Decision{ok(&l, 2, 0)}, e.adjust(release("k", &l, c)))
	e.check(ok(&l, 2, 0), e.peek("k", &l), "empty")
	// 1µs before a hold ends the slot counts; at its end it does not.
	e.take1("k", &l, 2)
	e.at(20*time.Second - time.Microsecond)
	e.check(refused(&l, 0, time.Microsecond, time.Microsecond), e.take1("k", &l, 1), "1µs before")
	e.at(20 * time.Second)
	e.check(ok(&l, 1, 10*time.Second), e.take1("k", &l, 1), "at the end")
}

// concurrencyStacked: the cap is decided with the rate limits all or
// nothing. A request refused by its rate limit holds no slot; one refused
// by the cap is not charged on the rate limit.
func concurrencyStacked(e *env) {
	cap2 := ratelimit.Concurrent(2, time.Minute)
	rate := ratelimit.PerMinute(3).Named("requests")
	stack := func() []ratelimit.Request { return []ratelimit.Request{req("k", &rate, 1), req("k", &cap2, 1)} }
	// Two admitted: 1 rate unit and 0 slots left.
	d1 := e.take(stack()...)
	e.take(stack()...)
	// The cap refuses the third: no rate unit is charged (still 1 left).
	e.checkAll("refused by the cap", []ratelimit.Decision{
		ok(&rate, 1, 40*time.Second), refused(&cap2, 0, time.Minute, time.Second),
	}, e.take(stack()...))
	// Release the first slot: the third is admitted, the last rate unit.
	e.adjust(release("k", &cap2, d1[1]))
	e.checkAll("after a release", []ratelimit.Decision{
		ok(&rate, 0, time.Minute), ok(&cap2, 0, time.Minute),
	}, e.take(stack()...))
	// Release both slots; the rate limit now refuses (its first unit
	// refills in 20 s) and no slot is taken.
	e.at(time.Second)
	e.adjust(ratelimit.Request{Key: "k", Limit: &cap2, Cost: -2})
	e.checkAll("refused by the rate", []ratelimit.Decision{
		refused(&rate, 0, 59*time.Second, 19*time.Second), ok(&cap2, 2, 0),
	}, e.take(stack()...))
	e.check(ok(&cap2, 2, 0), e.peek("k", &cap2), "no slot held")
}

// concurrencyNoLeak: 1,000 take–release cycles, some slots released twice
// and some released after their hold, leave the key holding nothing.
func concurrencyNoLeak(e *env) {
	l := ratelimit.Concurrent(3, 10*time.Millisecond)
	var held []ratelimit.Decision
	for i := range 1000 {
		e.at(time.Duration(i) * time.Millisecond)
		if d := e.take1("k", &l, 1); d.Allowed {
			held = append(held, d)
		}
		if len(held) == 3 || i%7 == 0 && len(held) > 0 {
			d := held[0]
			held = held[1:]
			e.adjust(release("k", &l, d))
			if i%3 == 0 {
				e.adjust(release("k", &l, d)) // a repeated release
			}
		}
	}
	e.at(999 * time.Millisecond)
	for _, d := range held {
		e.adjust(release("k", &l, d))
	}
	e.check(ok(&l, 3, 0), e.peek("k", &l), "nothing held")
	e.check(ok(&l, 0, 10*time.Millisecond), e.take1("k", &l, 3), "the whole cap fits")
}
