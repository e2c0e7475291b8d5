package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
)

// Harness is one store under test and control of the clock it decides by.
type Harness struct {
	// Store is the store under test.
	Store ratelimit.Store
	// SetTime sets the store's clock for all following calls.
	SetTime func(t time.Time)
}

// Run runs every conformance scenario as a subtest; newHarness must return a
// fresh, empty store (or one namespaced so it sees no other test's keys) for
// each subtest. Subtests run one after another; a store's own tests may run
// Run in parallel with other tests.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	all := append(scenarios[:len(scenarios):len(scenarios)], algorithmScenarios...)
	for _, sc := range append(all, calendarScenarios...) {
		t.Run(sc.name, func(t *testing.T) {
			h := newHarness(t)
			require.NotNil(t, h.Store, "Harness.Store")
			require.NotNil(t, h.SetTime, "Harness.SetTime")
			e := &env{t: t, h: h}
			e.at(0)
			sc.run(e)
		})
	}
}

// start is the fixed instant every scenario begins at.
var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// env is one scenario's view of a harness.
type env struct {
	t   *testing.T
	h   Harness
	now time.Time
}

// at sets the store's clock to start+d.
func (e *env) at(d time.Duration) {
	e.now = start.Add(d)
	e.h.SetTime(e.now)
}

// req builds a Request.
func req(key string, l *ratelimit.Limit, cost int64) ratelimit.Request {
	return ratelimit.Request{Key: key, Limit: l, Cost: cost}
}

// take calls Take and requires it to succeed.
func (e *env) take(reqs ...ratelimit.Request) []ratelimit.Decision {
	e.t.Helper()
	out := make([]ratelimit.Decision, len(reqs))
	require.NoError(e.t, e.h.Store.Take(e.t.Context(), reqs, out), "Take(%v)", describe(reqs))
	return out
}

// adjust calls Adjust and requires it to succeed.
func (e *env) adjust(reqs ...ratelimit.Request) []ratelimit.Decision {
	e.t.Helper()
	out := make([]ratelimit.Decision, len(reqs))
	require.NoError(e.t, e.h.Store.Adjust(e.t.Context(), reqs, out), "Adjust(%v)", describe(reqs))
	return out
}

// take1 is take for a single request.
func (e *env) take1(key string, l *ratelimit.Limit, cost int64) ratelimit.Decision {
	e.t.Helper()
	return e.take(req(key, l, cost))[0]
}

// peek takes cost 0, which must never charge.
func (e *env) peek(key string, l *ratelimit.Limit) ratelimit.Decision {
	e.t.Helper()
	return e.take1(key, l, 0)
}

// ok is the Decision of an allowed request. (check fills in At, the
// store's clock.)
func ok(l *ratelimit.Limit, remaining int64, reset time.Duration) ratelimit.Decision {
	return ratelimit.Decision{Limit: l, Allowed: true, Remaining: remaining, Reset: reset}
}

// queued is the Decision of a request a LeakyBucket admits into its queue:
// the caller must wait delay before acting on it.
func queued(l *ratelimit.Limit, remaining int64, reset, delay time.Duration) ratelimit.Decision {
	return ratelimit.Decision{Limit: l, Allowed: true, Remaining: remaining, Reset: reset, Delay: delay}
}

// refused is the Decision of a refused request.
func refused(l *ratelimit.Limit, remaining int64, reset, retryAfter time.Duration) ratelimit.Decision {
	return ratelimit.Decision{Limit: l, Remaining: remaining, Reset: reset, RetryAfter: retryAfter}
}

// decisionView is a Decision with its Limit named, for readable diffs.
// It has every field of a Decision.
type decisionView struct {
	Limit      string
	Allowed    bool
	Remaining  int64
	Reset      time.Duration
	RetryAfter time.Duration
	Delay      time.Duration
	At         int64
}

func view(d ratelimit.Decision) decisionView {
	name := "<nil>"
	if d.Limit != nil {
		name = d.Limit.ID()
	}
	return decisionView{name, d.Allowed, d.Remaining, d.Reset, d.RetryAfter, d.Delay, d.At}
}

// micros is the scenario's current time in µs since the Unix epoch: the
// At of every decision made now.
func (e *env) micros() int64 { return ratelimit.Micros(e.now) }

// check asserts that got equals want field by field, with want.At set to
// the store's clock (every decision is made at the time SetTime last set),
// and that got.Limit is the very pointer of want.Limit (the request's).
func (e *env) check(want, got ratelimit.Decision, msgAndArgs ...any) bool {
	e.t.Helper()
	want.At = e.micros()
	return checkDecision(e.t, want, got, msgAndArgs...)
}

func checkDecision(t *testing.T, want, got ratelimit.Decision, msgAndArgs ...any) bool {
	t.Helper()
	okFields := assert.Equal(t, view(want), view(got), msgAndArgs...)
	okPtr := assert.Same(t, want.Limit, got.Limit, append([]any{"Decision.Limit must be the Request's pointer: "}, msgAndArgs...)...)
	return okFields && okPtr
}

// checkAll asserts a whole call's decisions.
func (e *env) checkAll(label string, want, got []ratelimit.Decision) {
	e.t.Helper()
	require.Len(e.t, got, len(want))
	for i := range want {
		e.check(want[i], got[i], "%s: decision %d", label, i)
	}
}

func describe(reqs []ratelimit.Request) string {
	s := "["
	for i, r := range reqs {
		if i > 0 {
			s += ", "
		}
		name := "<nil>"
		if r.Limit != nil {
			name = r.Limit.Name()
		}
		s += fmt.Sprintf("%q %s %d", r.Key, name, r.Cost)
	}
	return s + "]"
}
