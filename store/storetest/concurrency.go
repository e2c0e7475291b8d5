package storetest

import (
	"sync"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
)

// goroutines is how many callers race in the concurrency scenarios: more
// than any burst they race for.
const goroutines = 64

// race runs call(i) for i in [0, goroutines) in as many goroutines, released
// together, and returns each call's decisions.
func (e *env) race(call func(i int, out []ratelimit.Decision) error, perCall int) [][]ratelimit.Decision {
	e.t.Helper()
	results := make([][]ratelimit.Decision, goroutines)
	errs := make([]error, goroutines)
	var ready, done sync.WaitGroup
	gate := make(chan struct{})
	for i := range goroutines {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			out := make([]ratelimit.Decision, perCall)
			ready.Done()
			<-gate
			errs[i] = call(i, out)
			results[i] = out
		}()
	}
	ready.Wait()
	close(gate)
	done.Wait()
	for i, err := range errs {
		require.NoError(e.t, err, "goroutine %d", i)
	}
	return results
}

func concurrentSingleKey(e *env) {
	l := tenPerSecond()
	// With the clock standing still, exactly the burst of 50 is admitted,
	// however the 64 calls interleave; each refusal waits for one unit.
	reqs := []ratelimit.Request{req("hot", l, 1)}
	results := e.race(func(_ int, out []ratelimit.Decision) error {
		return e.h.Store.Take(e.t.Context(), reqs, out)
	}, 1)
	allowed := 0
	for i, out := range results {
		if out[0].Allowed {
			allowed++
			continue
		}
		e.check(refused(l, 0, 5*time.Second, 100*time.Millisecond), out[0], "goroutine %d refused", i)
	}
	assert.Equal(e.t, 50, allowed, "admitted")
	e.check(ok(l, 0, 5*time.Second), e.peek("hot", l), "empty after the race")
}

func concurrentStack(e *env) {
	av := ratelimit.PerSecond(10).WithBurst(50).Named("a")
	bv := ratelimit.PerSecond(10).WithBurst(20).Named("b")
	a, b := &av, &bv
	// Half the callers list the limits in one order, half in the other,
	// on two keys, so that a store locking per key in request order would
	// deadlock. b admits 20; each admitted call charges a once, so a is
	// left with 50 - 20 = 30 units and a level of 20 units (2s).
	results := e.race(func(i int, out []ratelimit.Decision) error {
		reqs := []ratelimit.Request{req("tenant", a, 1), req("user", b, 1)}
		if i%2 == 1 {
			reqs[0], reqs[1] = reqs[1], reqs[0]
		}
		return e.h.Store.Take(e.t.Context(), reqs, out)
	}, 2)
	admitted := 0
	for i, out := range results {
		both := out[0].Allowed && out[1].Allowed
		if both {
			admitted++
		}
		bd := out[1] // b's decision; in reverse order it comes first
		if i%2 == 1 {
			bd = out[0]
		}
		if !both {
			assert.False(e.t, bd.Allowed, "goroutine %d: only b can refuse", i)
			assert.Equal(e.t, 100*time.Millisecond, bd.RetryAfter, "goroutine %d: b's RetryAfter", i)
		}
	}
	assert.Equal(e.t, 20, admitted, "admitted through the smaller limit")
	e.check(ok(a, 30, 2*time.Second), e.peek("tenant", a), "a charged once per admitted call")
	e.check(ok(b, 0, 2*time.Second), e.peek("user", b), "b empty")
}
