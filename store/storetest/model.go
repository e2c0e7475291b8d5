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

// take evaluates reqs in order on a working copy; it commits the copy only
// if every request fits, and otherwise reports the stored state (a peek) in
// every Decision's Remaining and Reset.
func (m *model) take(reqs []ratelimit.Request, now int64) []ratelimit.Decision {
	work := make(map[modelKey]ratelimit.State, len(reqs))
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
		var s ratelimit.State
		s, out[i] = r.Limit.TakeAt(get(k), now, r.Cost)
		work[k] = s
		all = all && out[i].Allowed
	}
	if all {
		for k, s := range work {
			m.states[k] = s
		}
		return out
	}
	for i, r := range reqs {
		_, p := r.Limit.TakeAt(m.states[keyOf(r)], now, 0)
		out[i].Remaining, out[i].Reset = p.Remaining, p.Reset
	}
	return out
}

// adjust applies reqs in order and commits.
func (m *model) adjust(reqs []ratelimit.Request, now int64) []ratelimit.Decision {
	out := make([]ratelimit.Decision, len(reqs))
	for i, r := range reqs {
		k := keyOf(r)
		m.states[k], out[i] = r.Limit.AdjustAt(m.states[k], now, r.Cost)
	}
	return out
}

// modelSteps is the length of the pseudo-random run.
const modelSteps = 500

// compareWithModel runs a fixed pseudo-random sequence of calls against the
// store and the model and requires identical decisions. The limits have
// awkward rates: 7 per 3s refills one unit every 428571.428...µs (the
// exact ratio 3e6/7 has no integer form), and 100,000 per day refills one
// unit every 864ms with a burst far larger than any refill during the run.
func compareWithModel(e *env) {
	oddV := ratelimit.Every(7, 3*time.Second).WithBurst(5).Named("odd")
	oddCopy := oddV // same ID, another pointer: shares state, keeps its own pointer
	dailyV := ratelimit.PerDay(100_000).Named("daily").WithUnit(ratelimit.Tokens)
	odd, daily := &oddV, &dailyV
	limits := []*ratelimit.Limit{odd, &oddCopy, daily}
	keys := []string{"k0", "k1", "k2"}

	rng := rand.New(rand.NewPCG(2026, 1))
	cost := func(l *ratelimit.Limit, adjust bool) int64 {
		var c int64
		if l == daily {
			switch rng.IntN(10) {
			case 0:
				c = 0
			case 1:
				c = rng.Int64N(100_000) // a large share of the burst
			case 2:
				c = 100_000 + rng.Int64N(2) // the burst, or one above it
			default:
				c = 1 + rng.Int64N(5)
			}
		} else {
			c = rng.Int64N(7) // 0..6 against a burst of 5
		}
		if adjust && rng.IntN(2) == 0 {
			c = -c
		}
		return c
	}

	m := &model{states: make(map[modelKey]ratelimit.State)}
	now := e.now
	var stats struct{ allowed, refused, never, partial, adjusts int }
	for step := range modelSteps {
		if rng.IntN(4) > 0 { // a quarter of the steps keep the same instant
			now = now.Add(time.Duration(rng.Int64N(2_000_001)) * time.Microsecond)
		}
		e.h.SetTime(now)
		reqs := make([]ratelimit.Request, 1+rng.IntN(3))
		adjust := rng.IntN(5) == 0
		for i := range reqs {
			l := limits[rng.IntN(len(limits))]
			reqs[i] = req(keys[rng.IntN(len(keys))], l, cost(l, adjust))
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
		label := fmt.Sprintf("step %d at %v: %s%s", step, now.Sub(start), map[bool]string{true: "Adjust", false: "Take"}[adjust], describe(reqs))
		require.NoError(e.t, err, label)
		same := true
		for i := range want {
			same = checkDecision(e.t, want[i], out[i], "%s: decision %d", label, i) && same
		}
		require.True(e.t, same, "the store diverged from the model at %s", label)
		if !adjust {
			n := 0
			for _, d := range out {
				if d.Allowed {
					n++
				}
				if d.Never() {
					stats.never++
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
	e.t.Logf("model run: %d allowed, %d refused (%d with some limits allowed), %d never, %d adjusts",
		stats.allowed, stats.refused, stats.partial, stats.never, stats.adjusts)
	// The sequence is fixed; these bounds only guard against a change to it
	// that would stop exercising one of the paths.
	assert.GreaterOrEqual(e.t, stats.allowed, 50, "allowed calls")
	assert.GreaterOrEqual(e.t, stats.refused, 50, "refused calls")
	assert.GreaterOrEqual(e.t, stats.partial, 20, "refused calls with some limits allowed")
	assert.GreaterOrEqual(e.t, stats.never, 10, "never decisions")
	assert.GreaterOrEqual(e.t, stats.adjusts, 50, "adjust calls")
}
