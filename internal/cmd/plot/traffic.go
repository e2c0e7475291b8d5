package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/internal/clocktest"
	"github.com/rampmeter/ratelimit/store/memory"
)

// epoch is where every run starts: a minute boundary of the Unix epoch, so
// the fixed and sliding windows of PerMinute limits begin at t = 0.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// period is the limit's period P; the limit is PerMinute(quota).
const (
	period = time.Minute
	quota  = 100
)

// algorithms are drawn in this order, one row each.
var algorithms = []ratelimit.Algorithm{
	ratelimit.TokenBucket, ratelimit.GCRA, ratelimit.LeakyBucket,
	ratelimit.SlidingWindow, ratelimit.SlidingLog, ratelimit.FixedWindow,
}

// A scenario is the traffic of one column: the time of every request, from
// epoch, in order. One key, cost 1.
type scenario struct {
	title, subtitle string
	requests        []time.Duration
}

// scenarios are the README's comparison (TestAlgorithmTable in the root
// package), as traffic every algorithm receives alike.
func scenarios() []scenario {
	var burst, steady, boundary []time.Duration
	// (a) 2C at one instant, on an idle (full) key.
	for range 2 * quota {
		burst = append(burst, 0)
	}
	// (b) twice the rate R = Q/P: one request every 300 ms for two periods.
	for k := range 400 {
		steady = append(steady, time.Duration(k)*300*time.Millisecond)
	}
	// (c) C just before the window boundary at P, C at it, and C just before
	// the next boundary: the fixed window's worst case (C + C within 100 ms)
	// and the buckets' and the sliding-window counter's (C, then 99 as
	// refilled or weighted 59.9 s later), in one sequence.
	for _, at := range []time.Duration{period - 100*time.Millisecond, period, 2*period - 200*time.Millisecond} {
		for range quota {
			boundary = append(boundary, at)
		}
	}
	return []scenario{
		{"(a) burst after idle", "200 requests at 0 s", burst},
		{"(b) steady, twice the rate", "one every 300 ms for 120 s", steady},
		{"(c) bursts at the boundaries", "100 each at 59.9 s, 60 s, 119.8 s", boundary},
	}
}

// A run is what one algorithm did with one scenario's traffic: the times,
// from epoch, of the requests it admitted and, for the leaky bucket, of
// their sends (admission time plus Result.Delay), both sorted.
type run struct {
	admitted []time.Duration
	sent     []time.Duration
}

// measure sends sc's requests, at their times on a fake clock, through a
// Limiter with the limit PerMinute(quota) of algorithm a on a memory store
// of its own: what a user of the library gets.
func measure(a ratelimit.Algorithm, sc scenario) (run, error) {
	clock := clocktest.New(epoch)
	store, err := memory.New(memory.WithClock(clock.Now))
	if err != nil {
		return run{}, err
	}
	defer store.Close()
	lim, err := ratelimit.New(store, ratelimit.WithKey(ratelimit.KeyConst("plot")),
		ratelimit.WithLimits(ratelimit.PerMinute(quota).WithAlgorithm(a)))
	if err != nil {
		return run{}, err
	}
	var r run
	for _, at := range sc.requests {
		clock.Set(epoch.Add(at))
		res, err := lim.Take(context.Background(), "k")
		if err != nil {
			return run{}, fmt.Errorf("%s at %v: %w", a, at, err)
		}
		if res.Bypassed {
			return run{}, fmt.Errorf("%s at %v: the store failed and the request bypassed the limit", a, at)
		}
		if res.Allowed {
			r.admitted = append(r.admitted, at)
			if a == ratelimit.LeakyBucket {
				r.sent = append(r.sent, at+res.Delay)
			}
		}
	}
	slices.Sort(r.sent)
	return r, nil
}

// mostWithin returns the largest number of times that fall in one span
// [t, t+span), and the shortest time from the first to the last of such
// a largest group. times must be sorted.
func mostWithin(times []time.Duration, span time.Duration) (most int, spread time.Duration) {
	first := 0
	for last, t := range times {
		for t-times[first] >= span {
			first++
		}
		n, d := last-first+1, t-times[first]
		if n > most || n == most && d < spread {
			most, spread = n, d
		}
	}
	return most, spread
}

// countBefore returns how many of the sorted times are before t.
func countBefore(times []time.Duration, t time.Duration) int {
	n, _ := slices.BinarySearch(times, t)
	return n
}
