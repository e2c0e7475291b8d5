package linearize

import (
	"context"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/internal/clocktest"
	"github.com/rampmeter/ratelimit/store/memory"
)

var t0 = time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)

// allLimits are the limits of serverClockScenarios, every algorithm.
var allLimits = [][]*ratelimit.Limit{{tb}, {gcra}, {sw}, {tb, sw}, {gcra, fw}, {lb}, {fw1}, {sl}, {lb, sl}, {tb, tb}}

// TestModelIsTheStore drives the memory store (which passes package
// storetest's conformance suite, so it decides as the reference model
// does) one call at a time through 4,000 random calls (1,000 under the
// race detector) on every algorithm
// and stack, the clock moving 0 to 3 ms between calls, and requires the
// model to accept each of its answers, in one state, and to refuse the
// answer with any one field changed: the model is the store, exactly, and
// nothing near it. Both ways the model reads time are covered: from
// Input.Now, and from the Decisions' At.
func TestModelIsTheStore(t *testing.T) {
	for _, serverClock := range []bool{false, true} {
		clock := clocktest.New(t0)
		store, err := memory.New(memory.WithClock(clock.Now))
		require.NoError(t, err)
		sc := scenario{keys: keys("k", 3), stacks: allLimits}
		w := newWorker(&sc, 7, 0)
		o := Options{}
		sts := map[string]state{}
		for i := range map[bool]int{false: 4000, true: 1000}[raceEnabled] {
			clock.Advance(time.Duration(w.rng.IntN(3001)) * time.Microsecond)
			kind, reqs := w.next()
			in := Input{Kind: kind, Key: reqs[0].Key, Reqs: reqs, Now: ratelimit.Micros(clock.Now())}
			if serverClock {
				in.Now = 0
			}
			out := make([]ratelimit.Decision, len(reqs))
			if kind == Take {
				err = store.Take(context.Background(), reqs, out)
			} else {
				err = store.Adjust(context.Background(), reqs, out)
			}
			require.NoError(t, err)
			w.observe(kind, reqs, out, nil)
			st := sts[in.Key]
			next := o.step(st, in, Output{Decisions: out})
			require.Len(t, next, 1, "call %d (%s): the model refuses the store's answer", i, Describe(in, Output{Decisions: out}))
			for j := range out {
				for _, bad := range perturb(out[j], serverClock) {
					wrong := append([]ratelimit.Decision(nil), out...)
					wrong[j] = bad
					assert.Empty(t, o.step(st, in, Output{Decisions: wrong}), "call %d: the model accepts %s", i, Describe(in, Output{Decisions: wrong}))
				}
			}
			sts[in.Key] = next[0]
		}
	}
}

// perturb returns d with each field changed in turn; under the server's
// clock not At, since a later At is another time the store could have
// decided at (Validate bounds it by the call).
func perturb(d ratelimit.Decision, serverClock bool) []ratelimit.Decision {
	var out []ratelimit.Decision
	add := func(f func(*ratelimit.Decision)) {
		e := d
		f(&e)
		out = append(out, e)
	}
	add(func(e *ratelimit.Decision) { e.Allowed = !e.Allowed })
	add(func(e *ratelimit.Decision) { e.Remaining++ })
	add(func(e *ratelimit.Decision) { e.Reset += time.Microsecond })
	add(func(e *ratelimit.Decision) { e.RetryAfter += time.Microsecond })
	add(func(e *ratelimit.Decision) { e.Delay += time.Microsecond })
	if !serverClock {
		add(func(e *ratelimit.Decision) { e.At++ })
	}
	add(func(e *ratelimit.Decision) { l := *e.Limit; e.Limit = &l })
	return out
}

// TestMemoryStoreHistories: the memory store (one lock per shard, the
// clock read under it) is linearizable under the load of every history,
// by its own clock and by a clock that stands still during rounds: the
// model and the checker accept a correct store, without Redis.
func TestMemoryStoreHistories(t *testing.T) {
	model := NewModel(Options{})
	for _, sc := range serverClockScenarios() {
		t.Run("own clock/"+sc.name, func(t *testing.T) {
			s, err := memory.New(memory.WithClock(time.Now))
			require.NoError(t, err)
			d := newDriver([]ratelimit.Store{s}, &sc, 1, time.Minute)
			d.free(sc.ops)
			t.Logf("%v", Check(t, sc.name, model, d.rec.Operations(), budget))
		})
	}
	for _, sc := range roundScenarios() {
		t.Run("rounds/"+sc.name, func(t *testing.T) {
			clock := clocktest.New(t0)
			s, err := memory.New(memory.WithClock(clock.Now))
			require.NoError(t, err)
			d := newDriver([]ratelimit.Store{s}, &sc, 2, time.Minute)
			for range 30 {
				clock.Advance(time.Millisecond)
				d.round(ratelimit.Micros(clock.Now()))
			}
			t.Logf("%v", Check(t, sc.name, model, d.rec.Operations(), budget))
		})
	}
}

// op builds an operation for the synthetic histories below: times in µs.
func op(client int, call, ret int64, in Input, out Output) porcupine.Operation {
	r := ret * 1000
	if ret == Never {
		r = Never
	}
	return porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call * 1000, Return: r}
}

// call is a Take at a time, µs.
type call struct {
	at   int64
	reqs []ratelimit.Request
}

// decided returns what a fresh sequential store (the memory store)
// decides for last, after the Takes before.
func decided(t *testing.T, before []call, last call) Output {
	t.Helper()
	clock := clocktest.New(time.UnixMicro(last.at))
	s, err := memory.New(memory.WithClock(clock.Now))
	require.NoError(t, err)
	for _, b := range before {
		clock.Set(time.UnixMicro(b.at))
		require.NoError(t, s.Take(context.Background(), b.reqs, make([]ratelimit.Decision, len(b.reqs))))
	}
	clock.Set(time.UnixMicro(last.at))
	out := make([]ratelimit.Decision, len(last.reqs))
	require.NoError(t, s.Take(context.Background(), last.reqs, out))
	return Output{Decisions: out}
}

// TestFaults: the fault transitions are allowed exactly where the history
// says they happened. One key, a token bucket of 8 per minute (no refill
// worth a unit within these microseconds), the clock standing at now.
func TestFaults(t *testing.T) {
	slow := limit(ratelimit.PerMinute(8).Named("slow"))
	now := ratelimit.Micros(t0)
	take := func(cost int64) []ratelimit.Request {
		return []ratelimit.Request{{Key: "k", Limit: slow, Cost: cost}}
	}
	in := func(cost int64, at int64) Input { return Input{Kind: Take, Key: "k", Reqs: take(cost), Now: at} }
	check := func(o Options, ops ...porcupine.Operation) porcupine.CheckResult {
		t.Helper()
		require.NoError(t, Validate(ops))
		res, _ := Verdict(NewModel(o), ops, budget)
		return res
	}
	all8 := op(0, 0, 10, in(8, now), decided(t, nil, call{now, take(8)}))
	reset := func(from, to int64) porcupine.Operation {
		return op(-1, from, to, Input{Kind: Reset}, Output{})
	}

	t.Run("reset", func(t *testing.T) {
		fresh := op(1, 40, 50, in(1, now), decided(t, nil, call{now, take(1)}))
		drained := op(1, 40, 50, in(1, now), decided(t, []call{{now, take(8)}}, call{now, take(1)}))
		assert.Equal(t, porcupine.Ok, check(Options{}, all8, reset(20, 30), fresh), "a reset before the fresh answer")
		assert.Equal(t, porcupine.Ok, check(Options{}, all8, reset(20, 45), fresh), "a reset overlapping it")
		assert.Equal(t, porcupine.Ok, check(Options{}, all8, reset(20, 45), drained), "a reset overlapping a drained answer")
		assert.Equal(t, porcupine.Illegal, check(Options{}, all8, fresh), "a fresh answer without a reset")
		assert.Equal(t, porcupine.Illegal, check(Options{}, all8, fresh, reset(60, 70)), "a reset only after it")
		assert.Equal(t, porcupine.Illegal, check(Options{}, all8, reset(20, 30), drained), "a reset that lost nothing")
	})

	t.Run("rollback", func(t *testing.T) {
		later, peekAt := now+1000, now+2000
		one := op(0, 0, 10, in(1, now), decided(t, nil, call{now, take(1)}))                         // 7 left
		two := op(0, 20, 30, in(2, later), decided(t, []call{{now, take(1)}}, call{later, take(2)})) // 5 left
		rollback := op(-1, 40, 50, Input{Kind: Rollback, Keys: []string{"k"}}, Output{})
		peek := func(before ...call) porcupine.Operation {
			return op(1, 60, 70, in(0, peekAt), decided(t, before, call{peekAt, take(0)}))
		}
		window := Options{LossFrom: later}
		assert.Equal(t, porcupine.Ok, check(window, one, two, rollback, peek(call{now, take(1)}, call{later, take(2)})), "nothing lost")
		assert.Equal(t, porcupine.Ok, check(window, one, two, rollback, peek(call{now, take(1)})), "the charge in the window lost")
		assert.Equal(t, porcupine.Illegal, check(window, one, two, rollback, peek()), "a charge older than the window lost")
		assert.Equal(t, porcupine.Illegal, check(Options{LossFrom: later + 1}, one, two, rollback, peek(call{now, take(1)})), "the window opens after the lost charge")
		assert.Equal(t, porcupine.Illegal, check(Options{}, one, two, rollback, peek(call{now, take(1)})), "no window: no rollback")
		assert.Equal(t, porcupine.Illegal, check(window, one, two, peek(call{now, take(1)})), "a loss without a failover")
		other := op(-1, 40, 50, Input{Kind: Rollback, Keys: []string{"elsewhere"}}, Output{})
		assert.Equal(t, porcupine.Illegal, check(window, one, two, other, peek(call{now, take(1)})), "a failover of another key's master")
	})

	t.Run("unknown", func(t *testing.T) {
		timedOut := op(0, 0, Never, in(3, now), Output{Unknown: true})
		lost := op(0, 0, 10, in(3, now), Output{Unknown: true})
		peekAt := func(at int64, before ...call) porcupine.Operation {
			return op(1, at, at+10, in(0, now), decided(t, before, call{now, take(0)}))
		}
		three := call{now, take(3)}
		assert.Equal(t, porcupine.Ok, check(Options{}, timedOut, peekAt(20, three)), "applied")
		assert.Equal(t, porcupine.Ok, check(Options{}, timedOut, peekAt(20)), "not applied")
		assert.Equal(t, porcupine.Illegal, check(Options{}, timedOut, peekAt(20, three, three)), "applied twice")
		assert.Equal(t, porcupine.Ok, check(Options{}, timedOut, peekAt(20), peekAt(40, three)), "a timed-out call applied late")
		assert.Equal(t, porcupine.Illegal, check(Options{}, lost, peekAt(20), peekAt(40, three)), "a call on a lost connection applied after the error")
	})

	t.Run("server clock", func(t *testing.T) {
		// The two calls overlap; the 8 was decided 5µs after the refusal
		// of 1 it explains: time would have to go back.
		at := now + 100
		first := op(0, now, at+50, Input{Kind: Take, Key: "k", Reqs: take(8)}, decided(t, nil, call{at, take(8)}))
		second := op(1, now, at+50, Input{Kind: Take, Key: "k", Reqs: take(1)}, decided(t, []call{{at, take(8)}}, call{at - 5, take(1)}))
		require.NoError(t, Validate([]porcupine.Operation{first, second}))
		res, _ := Verdict(NewModel(Options{}), []porcupine.Operation{first, second}, budget)
		assert.Equal(t, porcupine.Illegal, res)
		second = op(1, now, at+50, Input{Kind: Take, Key: "k", Reqs: take(1)}, decided(t, []call{{at, take(8)}}, call{at + 5, take(1)}))
		res, _ = Verdict(NewModel(Options{}), []porcupine.Operation{first, second}, budget)
		assert.Equal(t, porcupine.Ok, res)

		// A decision outside its call, by this host's clock, is refused
		// before any checking.
		early := op(0, at+1, at+50, Input{Kind: Take, Key: "k", Reqs: take(8)}, decided(t, nil, call{at, take(8)}))
		assert.ErrorContains(t, Validate([]porcupine.Operation{early}), "outside its call")
		assert.ErrorContains(t, Validate([]porcupine.Operation{op(0, at, Never, Input{Kind: Take, Key: "k", Reqs: take(1)}, Output{Unknown: true})}),
			"unknown outcome under the server's clock")
		mixed := append(take(1), ratelimit.Request{Key: "other", Limit: slow, Cost: 1})
		assert.ErrorContains(t, Validate([]porcupine.Operation{op(0, at, at+1, Input{Kind: Take, Key: "k", Reqs: mixed, Now: now}, Output{})}),
			"stacks caller keys")
	})
}

// TestWorkloadCoverage is a guard on the workload generator: the calls it makes
// cover every kind the model distinguishes (admitted, refused, never,
// peeks, refunds, charges, settlements of an earlier charge).
func TestWorkloadCoverage(t *testing.T) {
	sc := scenario{keys: keys("k", 2), stacks: [][]*ratelimit.Limit{{tb, sw}}}
	w := newWorker(&sc, 1, 0)
	w.last["k-00"], w.last["k-01"] = 1, 1
	seen := map[string]bool{}
	for range 2000 {
		kind, reqs := w.next()
		for _, r := range reqs {
			switch {
			case kind == Adjust && r.Cost < 0 && r.At != 0:
				seen["settled refund"] = true
			case kind == Adjust && r.Cost > 0:
				seen["charge"] = true
			case kind == Take && r.Cost == 0:
				seen["peek"] = true
			case kind == Take && r.Cost > r.Limit.Burst():
				seen["never"] = true
			case kind == Take && r.Cost == r.Limit.Burst():
				seen["all"] = true
			}
		}
		if len(reqs) == 1 {
			seen["one limit of the stack"] = true
		}
	}
	assert.Len(t, seen, 6, "%v", seen)
}
