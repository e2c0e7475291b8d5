package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"
	"time"

	promclient "github.com/prometheus/client_golang/prometheus"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/metrics/prometheus"
	"github.com/rampmeter/ratelimit/store/memory"
)

// Review of 35b76eb and f5e5aef (SingleTaker.TakeOne and PairTaker.TakeTwo
// return a Decision's fields as words): the Limiter's word paths (callOne,
// callTwo) must answer exactly what its slice path (Store.Take) answers,
// on success and on failure.

// sliceOnly hides a store's SingleTaker and PairTaker, so that the
// Limiter decides through Store.Take; it keeps NonBlocking, so that the
// store calls get the same contexts.
type sliceOnly struct{ s ratelimit.Store }

func (s sliceOnly) Take(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	return s.s.Take(ctx, reqs, out)
}

func (s sliceOnly) Adjust(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	return s.s.Adjust(ctx, reqs, out)
}

func (s sliceOnly) NonBlocking() bool {
	nb, ok := s.s.(interface{ NonBlocking() bool })
	return ok && nb.NonBlocking()
}

// reviewClock is a fake clock shared by the stores of one comparison.
type reviewClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *reviewClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *reviewClock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// comparableResult is a Result with each Decision's Limit replaced by its
// ID (each Limiter has its own copies of the limits).
type comparableResult struct {
	Allowed, Bypassed bool
	RetryAfter, Delay time.Duration
	Decisions         []comparableDecision
}

type comparableDecision struct {
	LimitID string
	ratelimit.Decision
}

func toComparable(res ratelimit.Result) comparableResult {
	c := comparableResult{Allowed: res.Allowed, Bypassed: res.Bypassed, RetryAfter: res.RetryAfter, Delay: res.Delay}
	for _, d := range res.Decisions {
		id := "<nil>"
		if d.Limit != nil {
			id = d.Limit.ID()
		}
		d.Limit = nil
		c.Decisions = append(c.Decisions, comparableDecision{id, d})
	}
	return c
}

// reviewLimitSets are the limit sets compared: one and two limits (the
// word paths), of every algorithm the paths carry, shadow ones included.
func reviewLimitSets() [][]ratelimit.Limit {
	return [][]ratelimit.Limit{
		{ratelimit.PerSecond(5)},
		{ratelimit.Every(3, 700*time.Millisecond).WithBurst(4).WithAlgorithm(ratelimit.LeakyBucket)},
		{ratelimit.PerSecond(4).WithAlgorithm(ratelimit.GCRA)},
		{ratelimit.PerSecond(3).WithAlgorithm(ratelimit.SlidingWindow)},
		{ratelimit.PerSecond(2).Shadow()},
		{ratelimit.PerSecond(5).Named("a"), ratelimit.PerMinute(20).Named("b")},
		{ratelimit.PerSecond(5).Named("a"), ratelimit.PerSecond(2).Named("b").Shadow()},
		{ratelimit.PerSecond(2).Named("a").Shadow(), ratelimit.PerSecond(3).Named("b").WithAlgorithm(ratelimit.LeakyBucket)},
		{ratelimit.PerSecond(3).Named("a").WithAlgorithm(ratelimit.FixedWindow), ratelimit.Every(7, 3*time.Second).Named("b")},
		{ratelimit.Concurrent(2, time.Second).Named("a"), ratelimit.PerSecond(4).Named("b")},
		{ratelimit.PerSecond(3).Named("a"), ratelimit.PerSecond(3).Named("b"), ratelimit.PerSecond(1).Named("c")}, // the slice path, for reference
	}
}

// TestWordPathsMatchSlicePathReview: Limiters over store/memory directly
// (its SingleTaker and PairTaker), over it hidden behind sliceOnly
// (Store.Take), and over metrics/prometheus's InstrumentStore of it (the
// forwarded word paths) give the same Results, Take after Take, on one
// fake clock that also steps back, with costs 0, in the burst, and over
// it; and the same responses through the middleware.
func TestWordPathsMatchSlicePathReview(t *testing.T) {
	m, err := prometheus.New(promclient.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	for si, set := range reviewLimitSets() {
		t.Run(fmt.Sprint(si), func(t *testing.T) {
			for _, l := range set {
				if l.Err() != nil {
					t.Fatal(l.Err())
				}
			}
			clock := &reviewClock{t: time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)}
			newStore := func() *memory.Store {
				// One shard: after a step back of the clock, a shard
				// deletes the entries expired by the latest time it
				// decided at (store/memory's doc: expiry is final per
				// shard), so with several shards which entries that
				// reaches depends on which keys share a shard, chosen
				// by each store's random hash seed.
				s, err := memory.New(memory.WithClock(clock.now), memory.WithShards(1))
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
			stores := []ratelimit.Store{newStore(), sliceOnly{newStore()}, m.InstrumentStore(newStore())}
			if _, ok := stores[2].(ratelimit.SingleTaker); !ok {
				t.Fatal("the instrumented memory store is no SingleTaker")
			}
			var lims []*ratelimit.Limiter
			for _, s := range stores {
				l, err := ratelimit.New(s, ratelimit.WithLimits(set...))
				if err != nil {
					t.Fatal(err)
				}
				lims = append(lims, l)
			}
			handlers := make([]http.Handler, len(lims))
			for i, l := range lims {
				handlers[i] = l.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) }))
			}
			rng := rand.New(rand.NewPCG(uint64(si), 99))
			keys := []string{"k1", "k2", "k3"}
			for step := range 3000 {
				switch rng.IntN(10) {
				case 0:
					clock.add(-time.Duration(rng.IntN(300)) * time.Millisecond) // within and beyond ClockStepTolerance
				case 1, 2, 3:
					clock.add(time.Duration(rng.IntN(400_000)) * time.Microsecond)
				}
				key := keys[rng.IntN(len(keys))]
				if rng.IntN(4) == 0 { // the middleware
					var codes []int
					var hdrs []http.Header
					for _, h := range handlers {
						rec := httptest.NewRecorder()
						req := httptest.NewRequest("GET", "/", nil)
						req.RemoteAddr = key + ":1"
						h.ServeHTTP(rec, req)
						codes = append(codes, rec.Code)
						hdrs = append(hdrs, rec.Header())
					}
					for i := 1; i < len(codes); i++ {
						if codes[i] != codes[0] || !reflect.DeepEqual(hdrs[i], hdrs[0]) {
							t.Fatalf("step %d: store %d answers %d %v, store 0 %d %v", step, i, codes[i], hdrs[i], codes[0], hdrs[0])
						}
					}
					continue
				}
				var costs []int64
				if rng.IntN(2) == 0 {
					for range set {
						costs = append(costs, []int64{0, 1, 1, 2, 3, 5, 100}[rng.IntN(7)])
					}
				}
				var got []comparableResult
				for i, l := range lims {
					res, err := l.Take(context.Background(), key, costs...)
					if err != nil {
						t.Fatalf("step %d: store %d: %v", step, i, err)
					}
					got = append(got, toComparable(res))
				}
				for i := 1; i < len(got); i++ {
					if !reflect.DeepEqual(got[i], got[0]) {
						t.Fatalf("step %d, key %s, costs %v:\nstore %d: %+v\nstore 0: %+v", step, key, costs, i, got[i], got[0])
					}
				}
			}
			for i, l := range lims {
				if st, st0 := l.Stats(), lims[0].Stats(); !reflect.DeepEqual(st, st0) {
					t.Fatalf("store %d: stats %+v, store 0 %+v", i, st, st0)
				}
			}
		})
	}
}

// TestTakeTwoFieldsNotCrossedReview: TakeTwo's twelve words reach the
// right Decision, including Allowed, which TestTakeTwoDecisionsCopiedWhole
// sets to true in both (so a swap of allowedA and allowedB would pass it):
// here one limit admits and the other refuses, both ways round.
func TestTakeTwoFieldsNotCrossedReview(t *testing.T) {
	mem, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	la, lb := ratelimit.PerMinute(60).Named("a"), ratelimit.PerMinute(70).Named("b")
	for refusing := range 2 {
		want := []ratelimit.Decision{distinctDecision(t, &la, 1), distinctDecision(t, &lb, 2)}
		want[refusing].Allowed = false
		want[1-refusing].RetryAfter = 0
		l, err := ratelimit.New(fixedPair{Store: mem, a: want[0], b: want[1]}, ratelimit.WithLimits(la, lb))
		if err != nil {
			t.Fatal(err)
		}
		res, err := l.Take(context.Background(), "k")
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed || len(res.Decisions) != 2 {
			t.Fatalf("refusing %d: %+v", refusing, res)
		}
		for i, got := range res.Decisions {
			if got.Limit == nil || got.Limit.ID() != want[i].Limit.ID() {
				t.Fatalf("refusing %d, decision %d: Limit %v", refusing, i, got.Limit)
			}
			got.Limit = want[i].Limit
			if got != want[i] {
				t.Fatalf("refusing %d, decision %d: %+v, want %+v", refusing, i, got, want[i])
			}
		}
		if res.RetryAfter != want[refusing].RetryAfter {
			t.Fatalf("refusing %d: RetryAfter %v, want the refusing limit's %v", refusing, res.RetryAfter, want[refusing].RetryAfter)
		}
	}
}

// failing is a store whose every call fails with err, after writing
// garbage to the decisions (as a store may on its way to failing); its
// word methods return garbage words with the error. failingSlices is the
// same store without them.
type failing struct{ err error }

var garbage = ratelimit.Decision{Allowed: true, Remaining: 7, Reset: 7, RetryAfter: 7, Delay: 7, At: 7}

func (f failing) Take(_ context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	for i := range out {
		out[i] = garbage
		out[i].Limit = reqs[i].Limit
	}
	return f.err
}

func (f failing) Adjust(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	return f.Take(ctx, reqs, out)
}

func (f failing) NonBlocking() bool { return true }

func (f failing) TakeOne(context.Context, ratelimit.Request) (bool, int64, time.Duration, time.Duration, time.Duration, int64, error) {
	g := garbage
	return g.Allowed, g.Remaining, g.Reset, g.RetryAfter, g.Delay, g.At, f.err
}

func (f failing) TakeTwo(context.Context, string, *ratelimit.Limit, int64, string, *ratelimit.Limit, int64) (bool, int64, time.Duration, time.Duration, time.Duration, int64, bool, int64, time.Duration, time.Duration, time.Duration, int64, error) {
	g := garbage
	return g.Allowed, g.Remaining, g.Reset, g.RetryAfter, g.Delay, g.At, g.Allowed, g.Remaining, g.Reset, g.RetryAfter, g.Delay, g.At, f.err
}

type failingSlices struct{ f failing }

func (f failingSlices) Take(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	return f.f.Take(ctx, reqs, out)
}

func (f failingSlices) Adjust(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	return f.f.Adjust(ctx, reqs, out)
}

func (f failingSlices) NonBlocking() bool { return true }

// TestWordPathErrorsMatchSlicePathReview: when the store fails, the word
// paths answer what the slice path answers (Result, error text and
// classes, hook calls, Stats, the middleware's response), in both failure
// modes, for one and two limits, whatever words came back with the error.
func TestWordPathErrorsMatchSlicePathReview(t *testing.T) {
	var _ ratelimit.SingleTaker = failing{}
	var _ ratelimit.PairTaker = failing{}
	storeErr := errors.New("review: the store is down")
	for _, mode := range []ratelimit.FailureMode{ratelimit.FailOpen, ratelimit.FailClosed} {
		for _, set := range [][]ratelimit.Limit{
			{ratelimit.PerSecond(5)},
			{ratelimit.PerSecond(5).Named("a"), ratelimit.PerMinute(9).Named("b")},
		} {
			type outcome struct {
				res    comparableResult
				err    string
				failed bool
				calls  []string
				stats  ratelimit.Stats
				code   int
				header http.Header
			}
			var outs []outcome
			for _, s := range []ratelimit.Store{failing{storeErr}, failingSlices{failing{storeErr}}} {
				var o outcome
				hooks := ratelimit.Hooks{OnStoreCall: func(_ context.Context, c ratelimit.StoreCall) {
					o.calls = append(o.calls, fmt.Sprintf("%v %d %v", c.Op, c.Requests, c.Err))
				}}
				l, err := ratelimit.New(s, ratelimit.WithLimits(set...), ratelimit.WithFailureMode(mode), ratelimit.WithHooks(hooks))
				if err != nil {
					t.Fatal(err)
				}
				res, err := l.Take(context.Background(), "k")
				o.res, o.failed = toComparable(res), errors.Is(err, ratelimit.ErrStoreFailed)
				if err != nil {
					o.err = err.Error()
				}
				rec := httptest.NewRecorder()
				l.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) })).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
				o.code, o.header = rec.Code, rec.Header()
				o.stats = l.Stats()
				outs = append(outs, o)
			}
			if !outs[0].failed || len(outs[0].res.Decisions) != 0 {
				t.Fatalf("%v, %d limits: the word path's failure: %+v", mode, len(set), outs[0])
			}
			if !reflect.DeepEqual(outs[0], outs[1]) {
				t.Fatalf("%v, %d limits:\nword path  %+v\nslice path %+v", mode, len(set), outs[0], outs[1])
			}
		}
	}
}
