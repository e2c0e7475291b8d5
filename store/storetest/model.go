package storetest

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
)

// model is the reference store: the pure functions of package ratelimit on
// a map of states, with Take's all-or-nothing commit. It is what every store
// must be indistinguishable from.
type model struct {
	states map[modelKey]ratelimit.State
}

type modelKey struct{ key, limitID string }

func keyOf(r ratelimit.Request) modelKey { return modelKey{r.Key, r.Limit.ID()} }

// take evaluates reqs in order on a working copy. If every request fits it
// commits the working state of each (key, limit) that a request charges
// (cost ≠ 0); otherwise it reports the stored state (a peek) in every
// Decision's Remaining and Reset. Either way, a state whose clock stepped
// back (Limit.ClockStepped) is committed as brought to now, as every store
// must, so that the rebase holds for the next call; the other states a
// call leaves uncharged are not written, as stores do not write them (which
// is observable only when the clock moves backwards).
func (m *model) take(reqs []ratelimit.Request, now int64) []ratelimit.Decision {
	work := make(map[modelKey]ratelimit.State, len(reqs))
	charged := make(map[modelKey]bool, len(reqs))
	get := func(k modelKey) ratelimit.State {
		if s, ok := work[k]; ok {
			return s
		}
		return m.states[k]
	}
	out := make([]ratelimit.Decision, len(reqs))
	all := true
	for i, r := range reqs {
		k := keyOf(r)
		s := get(k)
		out[i] = r.Limit.TakeAt(&s, now, r.Cost)
		work[k] = s
		charged[k] = charged[k] || r.Cost != 0
		all = all && out[i].Allowed
	}
	stepped := make(map[modelKey]ratelimit.State)
	for _, r := range reqs {
		k := keyOf(r)
		if s := m.states[k]; r.Limit.ClockStepped(&s, now) {
			r.Limit.TakeAt(&s, now, 0)
			stepped[k] = s
		}
	}
	if all {
		for k, s := range work {
			if charged[k] {
				m.states[k] = s
			} else if p, ok := stepped[k]; ok {
				m.states[k] = p
			}
		}
		return out
	}
	for i, r := range reqs {
		p := r.Limit.TakeAt(new(m.states[keyOf(r)]), now, 0)
		out[i].Remaining, out[i].Reset = p.Remaining, p.Reset
	}
	for k, s := range stepped {
		m.states[k] = s
	}
	return out
}

// adjust applies reqs in order, each settling usage charged at its At, and
// commits the states it changes (cost ≠ 0) and those whose clock stepped
// back.
func (m *model) adjust(reqs []ratelimit.Request, now int64) []ratelimit.Decision {
	out := make([]ratelimit.Decision, len(reqs))
	for i, r := range reqs {
		k := keyOf(r)
		s := m.states[k]
		stepped := r.Limit.ClockStepped(&s, now)
		out[i] = r.Limit.AdjustFrom(&s, now, r.At, r.Cost)
		if r.Cost != 0 || stepped {
			m.states[k] = s
		}
	}
	return out
}

// modelSteps is the length of each pseudo-random run.
const modelSteps = 300

// modelPool is a set of limits one pseudo-random run draws its stacks
// from.
type modelPool struct {
	name   string
	limits []ratelimit.Limit
}

// modelPools has one pool per algorithm and one mixing them all. The rates
// are awkward on purpose: 7 per 3s refills one unit every 428571.428...µs
// (the ratio 3e6/7 has no integer form), 100,000 per day refills one unit
// every 864ms with a burst far larger than any refill during a run, 3 per
// 7µs refills faster than the clock moves, and windows of 3s, 7ms and a
// minute have boundaries the clock lands on and steps over.
func modelPools() []modelPool {
	odd := ratelimit.Every(7, 3*time.Second)
	algo := func(l ratelimit.Limit, a ratelimit.Algorithm) ratelimit.Limit { return l.WithAlgorithm(a) }
	return []modelPool{
		{"token-bucket", []ratelimit.Limit{
			odd.WithBurst(5).Named("odd"),
			ratelimit.PerDay(100_000).Named("daily").WithUnit(ratelimit.Tokens),
		}},
		{"gcra", []ratelimit.Limit{
			algo(ratelimit.PerSecond(10).WithBurst(50).Named("tps"), ratelimit.GCRA),
			algo(ratelimit.Every(4, 28*time.Microsecond).WithBurst(9).Named("fast"), ratelimit.GCRA), // T = 7µs
			algo(ratelimit.PerDay(100_000).Named("daily"), ratelimit.GCRA),
		}},
		{"leaky-bucket", []ratelimit.Limit{
			algo(odd.WithBurst(5).Named("odd"), ratelimit.LeakyBucket),
			algo(ratelimit.PerMinute(100).Named("rpm"), ratelimit.LeakyBucket),
		}},
		{"sliding-window", []ratelimit.Limit{
			algo(odd.Named("odd"), ratelimit.SlidingWindow),
			algo(ratelimit.PerMinute(100).Named("rpm"), ratelimit.SlidingWindow),
			algo(ratelimit.Every(5, 7*time.Millisecond).Named("ms"), ratelimit.SlidingWindow),
		}},
		{"sliding-log", []ratelimit.Limit{
			algo(ratelimit.Every(5, 3*time.Second).Named("five"), ratelimit.SlidingLog),
			algo(ratelimit.Every(3, 7*time.Microsecond).Named("fast"), ratelimit.SlidingLog),
			algo(ratelimit.PerMinute(100).Named("rpm"), ratelimit.SlidingLog),
		}},
		{"fixed-window", []ratelimit.Limit{
			algo(odd.Named("odd"), ratelimit.FixedWindow),
			algo(odd.Named("first"), ratelimit.FixedWindow).AlignToFirstHit(),
			algo(ratelimit.PerMinute(100).Named("rpm"), ratelimit.FixedWindow),
		}},
		{"concurrency", []ratelimit.Limit{
			ratelimit.Concurrent(3, 7*time.Second).Named("three"),
			ratelimit.Concurrent(2, 7*time.Microsecond).Named("fast"),
			ratelimit.Concurrent(100, time.Minute).Named("hundred"),
		}},
		{"calendar", []ratelimit.Limit{
			ratelimit.PerCalendarDay(7, calendarZones[len(calendarZones)-1]).Named("day"),
			ratelimit.PerCalendarMonth(100, calendarZones[0]).Named("month"),
		}},
		{"mixed", []ratelimit.Limit{
			odd.WithBurst(5).Named("tb"),
			algo(ratelimit.PerSecond(10).WithBurst(5).Named("gcra"), ratelimit.GCRA),
			algo(odd.WithBurst(5).Named("lb"), ratelimit.LeakyBucket),
			algo(odd.Named("sw"), ratelimit.SlidingWindow),
			algo(ratelimit.Every(5, 3*time.Second).Named("sl"), ratelimit.SlidingLog),
			algo(odd.Named("fw"), ratelimit.FixedWindow),
			algo(odd.Named("fh"), ratelimit.FixedWindow).AlignToFirstHit(),
			ratelimit.Concurrent(3, 3*time.Second).Named("cc"),
		}},
	}
}

// compareWithModel runs a fixed pseudo-random sequence of calls per pool
// against the store and the model and requires identical decisions, every
// field of them. Takes stack one to three requests (repeating a key and
// limit now and then, and using a copy of a limit, which shares its state
// but must come back as its own pointer); Adjusts settle usage charged at
// an earlier decision's At, at an arbitrary past time, now, or in the
// future (which means now). The clock only moves forward, often onto a
// window boundary or the instant an earlier decision's usage leaves a
// window, give or take 1µs.
func compareWithModel(e *env) {
	for pi, pool := range modelPools() {
		limits := make([]*ratelimit.Limit, 0, len(pool.limits)+1)
		for i := range pool.limits {
			require.NoError(e.t, pool.limits[i].Err(), "%s: %v", pool.name, pool.limits[i])
			limits = append(limits, &pool.limits[i])
		}
		twin := pool.limits[0] // same ID, another pointer
		limits = append(limits, &twin)
		keys := []string{pool.name + "/k0", pool.name + "/k1", pool.name + "/k2"}
		runModel(e, pool.name, limits, keys, rand.New(rand.NewPCG(2026, uint64(pi))))
	}
}

func runModel(e *env, pool string, limits []*ratelimit.Limit, keys []string, rng *rand.Rand) {
	cost := func(l *ratelimit.Limit, adjust bool) int64 {
		b := l.Burst()
		var c int64
		switch rng.IntN(8) {
		case 0:
			c = 0
		case 1:
			c = b // all of it
		case 2:
			c = b + rng.Int64N(2) // all of it, or one more: never
		case 3:
			c = rng.Int64N(b + 1)
		default:
			c = 1 + rng.Int64N(min(b, 3))
		}
		if adjust && rng.IntN(2) == 0 {
			c = -c
		}
		return c
	}

	m := &model{states: make(map[modelKey]ratelimit.State)}
	now := e.now
	var ats []int64 // the At of every decision so far
	var stats struct{ allowed, refused, never, partial, adjusts, delayed int }
	for step := range modelSteps {
		now = now.Add(modelAdvance(rng, now, limits, ats))
		e.h.SetTime(now)
		reqs := make([]ratelimit.Request, 1+rng.IntN(3))
		adjust := rng.IntN(5) == 0
		for i := range reqs {
			l := limits[rng.IntN(len(limits))]
			reqs[i] = req(keys[rng.IntN(len(keys))], l, cost(l, adjust))
			if adjust {
				switch rng.IntN(5) {
				case 0: // now
				case 1:
					if len(ats) > 0 {
						reqs[i].At = ats[rng.IntN(len(ats))]
					}
				case 2:
					if len(ats) > 0 {
						reqs[i].At = ats[len(ats)-1]
					}
				case 3:
					reqs[i].At = ratelimit.Micros(now) - rng.Int64N(5_000_000)
				default:
					reqs[i].At = ratelimit.Micros(now) + 1 + rng.Int64N(1000) // future: now
				}
			}
		}
		out := make([]ratelimit.Decision, len(reqs))
		var want []ratelimit.Decision
		var err error
		at := ratelimit.Micros(now)
		if adjust {
			stats.adjusts++
			want = m.adjust(reqs, at)
			err = e.h.Store.Adjust(e.t.Context(), reqs, out)
		} else {
			want = m.take(reqs, at)
			err = e.h.Store.Take(e.t.Context(), reqs, out)
		}
		label := fmt.Sprintf("%s step %d at %v: %s%s", pool, step, now.Sub(start),
			map[bool]string{true: "Adjust", false: "Take"}[adjust], describe(reqs))
		require.NoError(e.t, err, label)
		same := true
		for i := range want {
			same = checkDecision(e.t, want[i], out[i], "%s: decision %d", label, i) && same
		}
		require.True(e.t, same, "the store diverged from the model at %s", label)
		ats = append(ats, at)
		if !adjust {
			n := 0
			for _, d := range out {
				if d.Allowed {
					n++
				}
				if d.Never() {
					stats.never++
				}
				if d.Delay > 0 {
					stats.delayed++
				}
			}
			switch {
			case n == len(out):
				stats.allowed++
			case n > 0:
				stats.partial++
				stats.refused++
			default:
				stats.refused++
			}
		}
	}
	e.t.Logf("model run %s: %d allowed, %d refused (%d with some limits allowed), %d never, %d adjusts, %d delayed",
		pool, stats.allowed, stats.refused, stats.partial, stats.never, stats.adjusts, stats.delayed)
	// The sequences are fixed; these bounds only guard against a change to
	// them that would stop exercising one of the paths.
	assert.GreaterOrEqual(e.t, stats.allowed, 30, "%s: allowed calls", pool)
	assert.GreaterOrEqual(e.t, stats.refused, 30, "%s: refused calls", pool)
	assert.GreaterOrEqual(e.t, stats.partial, 10, "%s: refused calls with some limits allowed", pool)
	assert.GreaterOrEqual(e.t, stats.never, 10, "%s: never decisions", pool)
	assert.GreaterOrEqual(e.t, stats.adjusts, 30, "%s: adjust calls", pool)
	if pool == "leaky-bucket" {
		assert.GreaterOrEqual(e.t, stats.delayed, 30, "%s: decisions with a Delay", pool)
	}
}

// modelAdvance picks how far the clock moves before the next call: not at
// all, by microseconds, by up to two seconds, or onto a boundary (the next
// epoch-aligned window of one of the limits, or the instant an earlier
// decision's usage leaves one of the limits' periods), give or take 1µs.
func modelAdvance(rng *rand.Rand, now time.Time, limits []*ratelimit.Limit, ats []int64) time.Duration {
	us := ratelimit.Micros(now)
	p := limits[rng.IntN(len(limits))].Period().Microseconds()
	var target int64
	switch rng.IntN(8) {
	case 0, 1:
		return 0
	case 2:
		return time.Duration(rng.Int64N(1000)) * time.Microsecond
	case 3:
		target = us - us%p + p + rng.Int64N(3) - 1
	case 4:
		if len(ats) == 0 {
			return 0
		}
		target = ats[rng.IntN(len(ats))] + p + rng.Int64N(3) - 1
	default:
		return time.Duration(rng.Int64N(2_000_001)) * time.Microsecond
	}
	return time.Duration(max(0, target-us)) * time.Microsecond
}
