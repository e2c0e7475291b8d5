package storetest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/rampmeter/ratelimit"
)

// RetryAfterChecksEnv names the environment variable that sets how many
// random histories RunRetryAfter checks (default DefaultRetryAfterChecks).
const RetryAfterChecksEnv = "RAMPMETER_RETRY_AFTER_CHECKS"

// DefaultRetryAfterChecks is the number of random histories RunRetryAfter
// checks unless RetryAfterChecksEnv says otherwise: small enough for CI
// under -race, on every store.
const DefaultRetryAfterChecks = 100

// RetryAfterChecks returns the number of random histories RunRetryAfter
// checks: the value of RetryAfterChecksEnv if it is a positive integer,
// otherwise DefaultRetryAfterChecks.
func RetryAfterChecks() int {
	if n, err := strconv.Atoi(os.Getenv(RetryAfterChecksEnv)); err == nil && n > 0 {
		return n
	}
	return DefaultRetryAfterChecks
}

// RunRetryAfter checks with pgregory.net/rapid the promise of every
// refusal, on random histories of one key under a stack of 1-3 random
// limits (every algorithm but Concurrency, whose RetryAfter is a short
// hint; awkward rates and bursts, both window alignments, calendar
// windows): Takes with costs from 0 past the burst, Adjusts (debt and
// refunds) and a clock that moves forward (microseconds to days, onto
// window boundaries) and back (within ratelimit.ClockStepTolerance, just
// beyond it, and by up to days). With no other traffic:
//
//   - a Take refused with RetryAfter r (the longest of its decisions, as
//     the Limiter tells it) is admitted when retried after exactly r, or
//     after r rounded up to whole seconds (the Retry-After field);
//   - Retry-After is tight: when r ≥ 2 s, a retry one second before the
//     rounded value is refused;
//   - a refusal whose cost can never fit says RetryNever, and only then;
//   - after waiting the longest Reset of a call, every limit is full again
//     (Remaining is the burst, Reset zero);
//   - a clock that steps back never raises a limit's Remaining.
//
// newHarness is called once; every history uses a key of its own and sets
// the clock to its own start. A failure reports the history and rapid's
// seed to replay it.
func RunRetryAfter(t *testing.T, newHarness func(t *testing.T) Harness) {
	setRapidChecksFrom(RetryAfterChecksEnv, RetryAfterChecks())
	h := newHarness(t)
	var checks, calls, refusals int
	began := time.Now()
	rapid.Check(t, func(rt *rapid.T) {
		checks++
		r := &retryRun{f: rt, h: h, src: rapidSource{rt}, key: "retry/" + strconv.Itoa(checks)}
		r.run()
		calls += r.calls
		refusals += r.refusals
	})
	t.Logf("retry-after: %d histories, %d calls, %d refusals checked, in %v", checks, calls, refusals,
		time.Since(began).Round(time.Millisecond))
}

// setRapidChecksFrom is setRapidChecks for the variable env.
func setRapidChecksFrom(env string, n int) {
	if os.Getenv(env) == "" {
		explicit := false
		flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "rapid.checks" })
		if explicit {
			return
		}
	}
	if f := flag.Lookup("rapid.checks"); f != nil {
		_ = f.Value.Set(strconv.Itoa(n))
	}
}

// retryRun is one random history.
type retryRun struct {
	f        failer
	h        Harness
	src      source
	key      string
	limits   []*ratelimit.Limit
	now      int64 // µs
	events   []string
	calls    int
	refusals int
	done     bool // the history reached horizon
}

// horizon bounds a history's clock: a debt can take 2^52 µs (142 years)
// to pay off, and times must stay below 2^53 µs (the Redis script's exact
// doubles, the year 2255) and within time.Time's UnixNano (2262).
const horizon = int64(1)<<53 - 10*day

func (r *retryRun) logf(format string, args ...any) {
	r.events = append(r.events, fmt.Sprintf("t=%d ", r.now)+fmt.Sprintf(format, args...))
}

func (r *retryRun) fatalf(format string, args ...any) {
	r.f.Helper()
	var b strings.Builder
	for i, l := range r.limits {
		fmt.Fprintf(&b, "  L%d %v first-hit=%v id=%s\n", i, l, l.AlignsToFirstHit(), l.ID())
	}
	r.f.Fatalf("%s\nlimits:\n%shistory:\n  %s", fmt.Sprintf(format, args...), b.String(), strings.Join(r.events, "\n  "))
}

// at sets the store's clock, or ends the history if now is beyond
// horizon (reporting false).
func (r *retryRun) at(now int64) bool {
	if now > horizon {
		r.done = true
		return false
	}
	r.now = now
	r.h.SetTime(time.UnixMicro(now).UTC())
	return true
}

func (r *retryRun) call(adjust bool, costs []int64) []ratelimit.Decision {
	r.f.Helper()
	reqs := make([]ratelimit.Request, len(r.limits))
	for i, l := range r.limits {
		reqs[i] = ratelimit.Request{Key: r.key, Limit: l, Cost: costs[i]}
	}
	out := make([]ratelimit.Decision, len(reqs))
	var err error
	if adjust {
		err = r.h.Store.Adjust(context.Background(), reqs, out)
	} else {
		err = r.h.Store.Take(context.Background(), reqs, out)
	}
	r.calls++
	kind := map[bool]string{false: "Take", true: "Adjust"}[adjust]
	if err != nil {
		r.fatalf("%s %v at %d: %v", kind, costs, r.now, err)
	}
	var b strings.Builder
	for _, d := range out {
		fmt.Fprintf(&b, " {%v rem %d reset %v retry %v delay %v}", d.Allowed, d.Remaining, d.Reset, d.RetryAfter, d.Delay)
	}
	r.logf("%s %v →%s", kind, costs, b.String())
	return out
}

func (r *retryRun) take(costs []int64) ratelimit.Result {
	r.f.Helper()
	return resultOf(r.call(false, costs))
}

func (r *retryRun) peek() []ratelimit.Decision {
	r.f.Helper()
	return r.call(false, make([]int64, len(r.limits)))
}

func (r *retryRun) run() {
	r.f.Helper()
	src := r.src
	names := []string{"a", "b", "c"}
	// Every rate algorithm. A Concurrency cap's RetryAfter is a hint,
	// short by design (its slots usually return sooner than their
	// maxHold), not a promise, so it is left out.
	var rates []ratelimit.Algorithm
	for _, a := range Algorithms {
		if a != ratelimit.Concurrency {
			rates = append(rates, a)
		}
	}
	for i := range src.draw(1, 3, "limits") {
		a := rates[src.draw(0, int64(len(rates)-1), "algorithm")]
		l := drawLimit(src, a, names[i])
		r.limits = append(r.limits, &l)
	}
	r.at(seqStart + src.draw(0, 400*day, "start offset"))
	for range src.draw(1, 12, "rounds") {
		if r.move(); r.done {
			return
		}
		switch src.draw(0, 5, "action") {
		case 0: // settle: a charge (possibly into debt) or a refund
			costs := make([]int64, len(r.limits))
			for i, l := range r.limits {
				costs[i] = drawDelta(src, l.Burst())
			}
			r.call(true, costs)
		case 1: // wait the longest Reset, then every limit is full
			ds := r.peek()
			var reset time.Duration
			for _, d := range ds {
				reset = max(reset, d.Reset)
			}
			if !r.at(r.now + reset.Microseconds()) {
				return
			}
			for i, d := range r.peek() {
				if d.Remaining != r.limits[i].Burst() || d.Reset != 0 {
					r.fatalf("limit %d is not full %v after the longest Reset: remaining %d of %d, reset %v",
						i, reset, d.Remaining, r.limits[i].Burst(), d.Reset)
				}
			}
		default:
			r.takeAndRetry()
		}
		if r.done {
			return
		}
	}
}

// move moves the clock: forward as the model properties do, or back, and
// checks that a step back raises no limit's Remaining.
func (r *retryRun) move() {
	src := r.src
	if src.draw(0, 2, "back?") != 0 {
		r.at(r.now + drawAdvance(src, r.now, r.limits, nil))
		return // (done if beyond horizon)
	}
	tolUS := ratelimit.ClockStepTolerance.Microseconds()
	var back int64
	switch src.draw(0, 4, "back kind") {
	case 0:
		back = src.draw(1, tolUS, "back ≤ tolerance")
	case 1:
		back = tolUS + src.draw(1, 2, "just beyond")
	case 2:
		back = src.draw(1, 10*second, "back ≤ 10s")
	case 3:
		back = src.draw(1, 3*day, "back ≤ 3 days")
	default:
		p := r.limits[src.draw(0, int64(len(r.limits)-1), "limit")].Period().Microseconds()
		back = src.draw(1, 2*p, "back ≤ 2 periods")
	}
	before := r.peek()
	r.at(r.now - back)
	r.logf("stepped back %dµs", back)
	for i, d := range r.peek() {
		if d.Remaining > before[i].Remaining {
			r.fatalf("a step back of %dµs raised limit %d's Remaining from %d to %d", back, i, before[i].Remaining, d.Remaining)
		}
	}
}

// takeAndRetry takes random costs and, if refused, checks the wait told.
func (r *retryRun) takeAndRetry() {
	src := r.src
	costs := make([]int64, len(r.limits))
	never := false
	for i, l := range r.limits {
		if src.draw(0, 7, "beyond?") == 0 {
			costs[i] = drawCost(src, l.Burst())
		} else {
			costs[i] = src.draw(0, l.Burst(), "cost")
		}
		never = never || costs[i] > l.Burst()
	}
	res := r.take(costs)
	switch {
	case res.Allowed:
		if never {
			r.fatalf("a cost above the burst was admitted")
		}
		return
	case never != (res.RetryAfter == ratelimit.RetryNever):
		r.fatalf("RetryAfter %v for a cost that can never fit: %v", res.RetryAfter, never)
	case never:
		return
	case res.RetryAfter <= 0:
		r.fatalf("refused with RetryAfter %v", res.RetryAfter)
	}
	r.refusals++
	ra := res.RetryAfter.Microseconds()
	if res.RetryAfter%time.Microsecond != 0 {
		r.fatalf("RetryAfter %v is not whole microseconds", res.RetryAfter)
	}
	// Retry-After: whole seconds, rounded up, never 0.
	told := max(1, (ra+second-1)/second) * second
	t0 := r.now
	if ra >= 2*second {
		if !r.at(t0 + told - second) {
			return
		}
		if r.take(costs).Allowed {
			r.fatalf("RetryAfter %v is not tight: admitted 1s before Retry-After %ds", res.RetryAfter, told/second)
		}
	}
	wait := ra
	if src.draw(0, 1, "wait Retry-After") == 1 {
		wait = told
	}
	if !r.at(t0 + wait) {
		return
	}
	if res := r.take(costs); !res.Allowed {
		r.fatalf("refused after waiting %dµs, as told (RetryAfter %v); now RetryAfter %v", wait, ra, res.RetryAfter)
	}
}
