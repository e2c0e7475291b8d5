package storetest

import (
	"context"
	"flag"
	"fmt"
	"math"
	"net/http"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/rampmeter/ratelimit"
)

// PropertyChecksEnv names the environment variable that sets how many
// random sequences RunProperties checks per algorithm (default
// DefaultPropertyChecks). An explicit -rapid.checks flag takes precedence
// over the default but not over the variable.
const PropertyChecksEnv = "RAMPMETER_PROPERTY_CHECKS"

// DefaultPropertyChecks is the number of random sequences RunProperties
// checks per algorithm unless PropertyChecksEnv says otherwise: small
// enough for CI under -race, on every store.
const DefaultPropertyChecks = 100

// Algorithms lists every algorithm the suite covers, in the order
// RunProperties runs them. (FixedWindow covers both window alignments.)
var Algorithms = []ratelimit.Algorithm{
	ratelimit.TokenBucket, ratelimit.GCRA, ratelimit.LeakyBucket,
	ratelimit.SlidingWindow, ratelimit.SlidingLog, ratelimit.FixedWindow,
	ratelimit.Concurrency,
	ratelimit.CalendarWindow,
}

// PropertyChecks returns the number of random sequences per algorithm that
// RunProperties checks: the value of PropertyChecksEnv if it is a positive
// integer, otherwise DefaultPropertyChecks.
func PropertyChecks() int {
	if n, err := strconv.Atoi(os.Getenv(PropertyChecksEnv)); err == nil && n > 0 {
		return n
	}
	return DefaultPropertyChecks
}

// RunProperties checks with pgregory.net/rapid that the store is
// indistinguishable from the model: for each algorithm (a subtest named
// after it), PropertyChecks() random sequences of clock advances (from 0
// through microseconds to days, onto window boundaries and the instants
// earlier usage expires, ±1µs), Takes (stacks of 1-3 requests on 1-3 keys
// over 1-3 limits of that and random other algorithms with awkward rates,
// costs from 0 past the burst) and Adjusts (random deltas up to the int64
// extremes, settling usage charged at an earlier decision's At, at other
// past times, now or in the future) must produce the same decisions, every
// field, and the same IETF and X-RateLimit header fields, as the model.
// The clock only moves forward within a sequence, so a store may forget a
// state as soon as it expires. A last subtest, RetryAfter, runs
// RunRetryAfter (clocks that step back too).
//
// newHarness is called once per algorithm; every sequence uses keys of its
// own on that harness and resets its clock to the sequence's start (which
// may be earlier than the previous sequence's end). A failure reports the
// sequence in full and rapid's seed to replay it.
func RunProperties(t *testing.T, newHarness func(t *testing.T) Harness) {
	setRapidChecks(PropertyChecks())
	for _, a := range Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			h := newHarness(t)
			var seqs, calls int
			began := time.Now()
			rapid.Check(t, func(rt *rapid.T) {
				seq := drawSequence(rapidSource{rt}, a)
				seqs++
				calls += len(seq.calls)
				runSequence(rt, h, seq, "s"+strconv.Itoa(seqs))
			})
			t.Logf("%v: %d sequences, %d calls, in %v", a, seqs, calls, time.Since(began).Round(time.Millisecond))
		})
	}
	t.Run("RetryAfter", func(t *testing.T) { RunRetryAfter(t, newHarness) })
}

// setRapidChecks makes rapid.Check run n checks, unless -rapid.checks was
// given and PropertyChecksEnv was not.
func setRapidChecks(n int) {
	if os.Getenv(PropertyChecksEnv) == "" {
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

// ---- Sequences ----

// source is where a sequence's choices come from: rapid (property tests,
// with shrinking) or raw bytes (the fuzz target).
type source interface {
	// draw returns a value in [lo, hi].
	draw(lo, hi int64, label string) int64
}

type rapidSource struct{ t *rapid.T }

func (s rapidSource) draw(lo, hi int64, label string) int64 {
	return rapid.Int64Range(lo, hi).Draw(s.t, label)
}

// byteSource decodes choices from bytes: as few bytes as the range needs,
// little-endian, reduced modulo the range's size. Exhausted input reads as
// zeros, so every input is a valid sequence and a longer one a longer
// sequence.
type byteSource struct{ data []byte }

func (s *byteSource) draw(lo, hi int64, _ string) int64 {
	span := uint64(hi) - uint64(lo)
	var v uint64
	for shift := uint(0); shift < 64 && span>>shift != 0; shift += 8 {
		if len(s.data) > 0 {
			v |= uint64(s.data[0]) << shift
			s.data = s.data[1:]
		}
	}
	if span != math.MaxUint64 {
		v %= span + 1
	}
	return int64(uint64(lo) + v)
}

// pick returns one of the choices.
func pick[E any](src source, label string, choices ...E) E {
	return choices[src.draw(0, int64(len(choices)-1), label)]
}

// sequence is one generated run: concrete times and costs, so that it
// prints (String) as a complete reproduction.
type sequence struct {
	algo   ratelimit.Algorithm
	start  int64              // µs since the Unix epoch
	limits []*ratelimit.Limit // the drawn limits, then a twin of the first (same ID, own pointer)
	nkeys  int
	calls  []call
}

type call struct {
	advance int64 // µs the clock moves forward before the call
	adjust  bool
	reqs    []callReq
}

type callReq struct {
	key, limit int   // indexes into the sequence's keys and limits
	cost       int64 // Take: ≥ 0; Adjust: any
	at         int64 // Adjust: Request.At (0 = now)
}

const (
	second = int64(1_000_000)
	day    = 86_400 * second
)

// seqStart is the earliest start of a sequence, 2026-01-01T00:00:00Z.
var seqStart = ratelimit.Micros(start)

func drawSequence(src source, algo ratelimit.Algorithm) *sequence {
	seq := &sequence{algo: algo}
	switch src.draw(0, 2, "start kind") {
	case 0: // aligned to every period that divides a day
		seq.start = seqStart
	case 1:
		seq.start = seqStart + src.draw(0, day-1, "start offset")
	default:
		seq.start = seqStart + src.draw(0, 400*day, "start offset")
	}
	n := int(src.draw(1, 3, "limits"))
	names := []string{"a", "b", "c"}
	for i := range n {
		a := algo
		if i > 0 && src.draw(0, 1, "other algorithm") == 1 {
			a = Algorithms[src.draw(0, int64(len(Algorithms)-1), "algorithm")]
		}
		l := drawLimit(src, a, names[i])
		seq.limits = append(seq.limits, &l)
	}
	twin := *seq.limits[0]
	seq.limits = append(seq.limits, &twin)
	seq.nkeys = int(src.draw(1, 3, "keys"))

	now := seq.start
	var times []int64 // the time of every call so far: its decisions' At
	for range src.draw(1, 40, "calls") {
		var c call
		c.advance = drawAdvance(src, now, seq.limits, times)
		now += c.advance
		c.adjust = src.draw(0, 4, "adjust") == 0
		for range src.draw(1, 3, "stack") {
			r := callReq{
				key:   int(src.draw(0, int64(seq.nkeys-1), "key")),
				limit: int(src.draw(0, int64(len(seq.limits)-1), "limit")),
			}
			b := seq.limits[r.limit].Burst()
			if c.adjust {
				r.cost = drawDelta(src, b)
				r.at = drawAt(src, now, times)
			} else {
				r.cost = drawCost(src, b)
			}
			c.reqs = append(c.reqs, r)
		}
		seq.calls = append(seq.calls, c)
		times = append(times, now)
	}
	return seq
}

// drawLimit returns a valid limit of algorithm a with an awkward rate.
func drawLimit(src source, a ratelimit.Algorithm, name string) ratelimit.Limit {
	us := time.Microsecond
	anyPeriod := func() time.Duration {
		return pick(src, "period", us, 7*us, time.Millisecond, 7*time.Millisecond, 100*time.Millisecond,
			time.Second, 3*time.Second, time.Minute, time.Hour, 24*time.Hour, 7*24*time.Hour,
			time.Duration(src.draw(1, 100_000_000_000, "period µs"))*us)
	}
	anyQuota := func() int64 {
		return pick(src, "quota", 1, 2, 3, 7, 10, 60, 100, 1000, 100_000, 1_000_003, src.draw(1, 1_000_000, "quota n"))
	}
	var l ratelimit.Limit
	switch a {
	case ratelimit.GCRA:
		// The emission interval must be whole microseconds: period = T × q.
		t := pick(src, "emission µs", 1, 3, 7, 1000, 100_000, 864_000, 1_000_000, 3_000_000, src.draw(1, 100_000_000, "emission n"))
		q := pick(src, "quota", 1, 2, 3, 7, 10, 60, 100, src.draw(1, 1000, "quota n"))
		l = ratelimit.Every(q, time.Duration(t*q)*us)
	case ratelimit.SlidingWindow:
		ms := pick(src, "period ms", 1, 7, 100, 1000, 3000, 60_000, 3_600_000, 86_400_000, src.draw(1, 10_000_000, "period ms n"))
		l = ratelimit.Every(anyQuota(), time.Duration(ms)*time.Millisecond)
	case ratelimit.SlidingLog:
		q := pick(src, "log quota", 1, 2, 3, 5, 7, 10, 100, src.draw(1, 50, "log quota n"), 1000, ratelimit.MaxLogQuota)
		l = ratelimit.Every(q, anyPeriod())
	case ratelimit.Concurrency:
		n := pick(src, "cap", 1, 2, 3, 5, 10, 100, src.draw(1, 50, "cap n"), ratelimit.MaxConcurrent)
		l = ratelimit.Concurrent(n, anyPeriod())
	case ratelimit.CalendarWindow:
		return drawCalendarLimit(src, anyQuota(), name)
	default:
		l = ratelimit.Every(anyQuota(), anyPeriod())
	}
	l = l.WithAlgorithm(a).Named(name)
	switch a {
	case ratelimit.TokenBucket, ratelimit.GCRA, ratelimit.LeakyBucket:
		if src.draw(0, 1, "burst?") == 1 {
			l = l.WithBurst(src.draw(1, 3*l.Quota()+3, "burst"))
		}
	case ratelimit.FixedWindow:
		if src.draw(0, 1, "first hit") == 1 {
			l = l.AlignToFirstHit()
		}
	}
	if l.Err() != nil { // a draw beyond exact arithmetic: fall back
		l = ratelimit.Every(7, 3*time.Second).WithAlgorithm(a).Named(name)
	}
	return l
}

// drawAdvance returns how far the clock moves: not at all, by a
// microsecond, by microseconds, seconds or days, or onto a boundary ±1µs:
// the next epoch-aligned window of a limit, or the instant an earlier
// call's usage leaves a limit's period. Never backwards.
func drawAdvance(src source, now int64, limits []*ratelimit.Limit, times []int64) int64 {
	p := func() int64 {
		return limits[src.draw(0, int64(len(limits)-1), "limit")].Period().Microseconds()
	}
	var target int64
	switch src.draw(0, 8, "advance kind") {
	case 0:
		return 0
	case 1:
		return 1
	case 2:
		return src.draw(2, 1000, "advance µs")
	case 3:
		return src.draw(0, 10*second, "advance ≤ 10s")
	case 4:
		return src.draw(0, 3*day, "advance ≤ 3 days")
	case 5:
		period := p()
		return src.draw(0, 2*period, "advance ≤ 2 periods")
	case 6, 7:
		period := p()
		target = now - now%period + period + src.draw(-1, 1, "±1µs")
	default:
		if len(times) == 0 {
			return 0
		}
		period := p()
		target = times[src.draw(0, int64(len(times)-1), "earlier call")] + period + src.draw(-1, 1, "±1µs")
	}
	return max(0, target-now)
}

// drawCost returns a Take cost against a limit of burst b: 0 (a peek),
// small, up to the burst, the burst, just above it, far above it.
func drawCost(src source, b int64) int64 {
	switch src.draw(0, 7, "cost kind") {
	case 0:
		return 0
	case 1:
		return 1
	case 2:
		return src.draw(1, 3, "cost")
	case 3:
		return src.draw(0, b, "cost")
	case 4:
		return b
	case 5:
		return b + 1
	case 6:
		return src.draw(b+1, 2*b+2, "cost")
	default:
		return math.MaxInt64
	}
}

// drawDelta returns an Adjust delta against a limit of burst b.
func drawDelta(src source, b int64) int64 {
	var d int64
	switch src.draw(0, 6, "delta kind") {
	case 0:
		return 0
	case 1:
		d = 1
	case 2:
		d = src.draw(1, 3, "delta")
	case 3:
		d = src.draw(0, 2*b, "delta")
	case 4:
		d = b
	case 5:
		d = 1 << 52
	default:
		if src.draw(0, 1, "extreme sign") == 0 {
			return math.MaxInt64
		}
		return math.MinInt64
	}
	if src.draw(0, 1, "refund") == 1 {
		d = -d
	}
	return d
}

// drawAt returns an Adjust's Request.At: 0 (now), an earlier call's time
// (an earlier decision's At) give or take 1µs, an arbitrary past time, or
// a time in the future (which means now).
func drawAt(src source, now int64, times []int64) int64 {
	switch src.draw(0, 4, "at kind") {
	case 0:
		return 0
	case 1, 2:
		if len(times) == 0 {
			return 0
		}
		at := times[src.draw(0, int64(len(times)-1), "earlier call")]
		if src.draw(0, 2, "exact") > 0 {
			return at
		}
		return at + src.draw(-1, 1, "±1µs")
	case 3:
		return now - src.draw(0, 3*day, "before now")
	default:
		return now + src.draw(1, 10*second, "after now")
	}
}

func (s *sequence) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sequence (%v) from %s (%d µs), %d keys, limits:\n", s.algo,
		time.UnixMicro(s.start).UTC().Format(time.RFC3339Nano), s.start, s.nkeys)
	for i, l := range s.limits {
		fmt.Fprintf(&b, "  L%d %v first-hit=%v id=%s\n", i, l, l.AlignsToFirstHit(), l.ID())
	}
	now := s.start
	for i, c := range s.calls {
		now += c.advance
		kind := "Take"
		if c.adjust {
			kind = "Adjust"
		}
		fmt.Fprintf(&b, "  %3d +%dµs (t=%d) %s", i, c.advance, now, kind)
		for _, r := range c.reqs {
			fmt.Fprintf(&b, " [k%d L%d %d", r.key, r.limit, r.cost)
			if c.adjust && r.at != 0 {
				fmt.Fprintf(&b, " at %d", r.at)
			}
			b.WriteString("]")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// ---- Running a sequence ----

// failer is what runSequence needs of a *testing.T or a *rapid.T.
type failer interface {
	Helper()
	Fatalf(format string, args ...any)
}

// runSequence drives seq through the model and through h's store, with
// keys named after id, and fails f at the first call where a decision
// (any field, or the Limit pointer) or a rendered header differs.
func runSequence(f failer, h Harness, seq *sequence, id string) {
	f.Helper()
	m := &model{states: make(map[modelKey]ratelimit.State)}
	keys := make([]string, seq.nkeys)
	for i := range keys {
		keys[i] = id + "/k" + strconv.Itoa(i)
	}
	ctx := context.Background()
	now := seq.start
	for ci, c := range seq.calls {
		now += c.advance
		h.SetTime(time.UnixMicro(now).UTC())
		reqs := make([]ratelimit.Request, len(c.reqs))
		for i, r := range c.reqs {
			reqs[i] = ratelimit.Request{Key: keys[r.key], Limit: seq.limits[r.limit], Cost: r.cost, At: r.at}
		}
		got := make([]ratelimit.Decision, len(reqs))
		var want []ratelimit.Decision
		var err error
		if c.adjust {
			want = m.adjust(reqs, now)
			err = h.Store.Adjust(ctx, reqs, got)
		} else {
			want = m.take(reqs, now)
			err = h.Store.Take(ctx, reqs, got)
		}
		if err != nil {
			f.Fatalf("call %d: %v\n%v", ci, err, seq)
		}
		for i := range want {
			if view(want[i]) != view(got[i]) || want[i].Limit != got[i].Limit {
				f.Fatalf("call %d, decision %d: the store diverged from the model\nwant %+v (limit %p)\n got %+v (limit %p)\n%v",
					ci, i, view(want[i]), want[i].Limit, view(got[i]), got[i].Limit, seq)
			}
		}
		if hw, hg := renderHeaders(want, c.adjust), renderHeaders(got, c.adjust); !reflect.DeepEqual(hw, hg) {
			f.Fatalf("call %d: headers differ\nwant %v\n got %v\n%v", ci, hw, hg, seq)
		}
	}
}

// renderHeaders writes the IETF and X-RateLimit fields of one call's
// decisions, as a Limiter would.
func renderHeaders(ds []ratelimit.Decision, adjust bool) http.Header {
	h := http.Header{}
	res := ratelimit.Result{Allowed: true, Decisions: ds}
	if !adjust {
		res = resultOf(ds)
	}
	(ratelimit.HeadersIETF | ratelimit.HeadersXRateLimit).WriteHeaders(h, res)
	return h
}

// resultOf combines a Take's decisions into a Result as the Limiter does:
// allowed if all are, the longest RetryAfter (RetryNever wins), and the
// longest Delay of an admission.
func resultOf(ds []ratelimit.Decision) ratelimit.Result {
	res := ratelimit.Result{Allowed: true, Decisions: ds}
	for _, d := range ds {
		if d.Allowed {
			res.Delay = max(res.Delay, d.Delay)
			continue
		}
		res.Allowed = false
		switch {
		case d.Never():
			res.RetryAfter = ratelimit.RetryNever
		case res.RetryAfter != ratelimit.RetryNever && d.RetryAfter > res.RetryAfter:
			res.RetryAfter = d.RetryAfter
		}
	}
	if !res.Allowed {
		res.Delay = 0
	}
	return res
}
