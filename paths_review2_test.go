package ratelimit_test

// Review 2 (issue 10): the Limiter's word paths (SingleTaker.TakeOne,
// PairTaker.TakeTwo, SingleAdjuster.AdjustOne on store/memory, forwarded
// by metrics/prometheus's wrapper) against its slice path on stores that
// have none (store/resilient around store/memory; store/redisstore, whose
// script is the Go math's twin), Take after Take: every Result and
// Decision field, and the response headers.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	promclient "github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/metrics/prometheus"
	"github.com/rampmeter/ratelimit/store/memory"
	"github.com/rampmeter/ratelimit/store/redisstore"
	"github.com/rampmeter/ratelimit/store/resilient"
)

// TestReview2WordPathsMatchOtherStores: Limiters over memory (word paths),
// prometheus(memory) (forwarded word paths), resilient(memory) and the
// Redis store on miniredis (slice paths), all on one fake clock, give the
// same Result
// for every Limiter.Take (costs 0, in the burst, over it), the same
// Results of Adjust, and, through the middleware (sets without leaky
// buckets, whose Delay the middleware sleeps), the same status and
// headers (IETF and X-RateLimit). Sets of one limit (TakeOne), two
// (TakeTwo), and three (the slice path everywhere, for reference), shadow
// limits included. Two passes: the four stores with a clock that only
// moves forward, and the three memory-based ones (one shard each, so that
// they sweep alike) with a clock that also steps back within and beyond
// ClockStepTolerance. (A step back revives an expired state that a store
// still holds: a memory entry not yet read or swept, a Redis key that
// miniredis never expires; the stores then differ by what they forgot,
// not by their paths: see TestReview2ExpiredEntryRevivedByStepBack in
// store/memory.)
func TestReview2WordPathsMatchOtherStores(t *testing.T) {
	m, err := prometheus.New(promclient.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	sets := [][]ratelimit.Limit{
		{ratelimit.PerSecond(5).Named("a")},
		{ratelimit.Every(3, 700*time.Millisecond).Named("a").WithBurst(4).WithAlgorithm(ratelimit.LeakyBucket)},
		{ratelimit.PerSecond(4).Named("a").WithAlgorithm(ratelimit.GCRA)},
		{ratelimit.PerSecond(3).Named("a").WithAlgorithm(ratelimit.SlidingWindow)},
		{ratelimit.PerSecond(3).Named("a").WithAlgorithm(ratelimit.SlidingLog)},
		{ratelimit.PerSecond(2).Named("a").Shadow()},
		{ratelimit.PerSecond(5).Named("a"), ratelimit.PerMinute(20).Named("b")},
		{ratelimit.PerSecond(5).Named("a"), ratelimit.PerSecond(2).Named("b").Shadow()},
		{ratelimit.PerSecond(2).Named("a").WithAlgorithm(ratelimit.FixedWindow).AlignToFirstHit(), ratelimit.Every(7, 3*time.Second).Named("b").WithAlgorithm(ratelimit.LeakyBucket)},
		{ratelimit.Concurrent(2, time.Second).Named("a"), ratelimit.PerSecond(4).Named("b").WithAlgorithm(ratelimit.GCRA)},
		{ratelimit.PerCalendarDay(9, time.UTC).Named("a"), ratelimit.PerSecond(3).Named("b")},
		{ratelimit.PerSecond(3).Named("a"), ratelimit.PerSecond(3).Named("b").WithAlgorithm(ratelimit.SlidingWindow), ratelimit.PerSecond(1).Named("c")},
	}
	for _, back := range []bool{false, true} {
		for si, set := range sets {
			t.Run(fmt.Sprintf("back=%v/%d", back, si), func(t *testing.T) {
				for _, l := range set {
					if err := l.Err(); err != nil {
						t.Fatal(err)
					}
				}
				leaky := false
				for _, l := range set {
					leaky = leaky || l.Algorithm() == ratelimit.LeakyBucket
				}
				now := time.Date(2026, 12, 3, 23, 59, 50, 0, time.UTC)
				clock := func() time.Time { return now }
				newMem := func() *memory.Store {
					s, err := memory.New(memory.WithClock(clock), memory.WithShards(1))
					if err != nil {
						t.Fatal(err)
					}
					return s
				}
				res, err := resilient.New(newMem(), resilient.WithTimeout(time.Minute)) // no timeout under a loaded -race run
				if err != nil {
					t.Fatal(err)
				}
				mr := miniredis.RunT(t)
				mr.SetTime(now)
				rc := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
				t.Cleanup(func() { _ = rc.Close() })
				rs, err := redisstore.New(rc, redisstore.WithClock(clock))
				if err != nil {
					t.Fatal(err)
				}
				stores := []struct {
					name  string
					store ratelimit.Store
				}{
					{"memory", newMem()},
					{"prometheus(memory)", m.InstrumentStore(newMem())},
					{"resilient(memory)", res},
					{"redis", rs},
				}
				if back {
					stores = stores[:3]
				}
				if _, ok := stores[1].store.(ratelimit.PairTaker); !ok {
					t.Fatal("the prometheus wrapper of memory is no PairTaker")
				}
				if _, ok := stores[2].store.(ratelimit.SingleTaker); ok {
					t.Fatal("resilient is a SingleTaker: the slice path is not compared")
				}
				var lims []*ratelimit.Limiter
				var handlers []http.Handler
				for _, s := range stores {
					lim, err := ratelimit.New(s.store, ratelimit.WithLimits(set...),
						ratelimit.WithKey(ratelimit.KeyByHeader("X-Key")),
						ratelimit.WithHeaders(ratelimit.HeadersIETF, ratelimit.HeadersXRateLimit),
						ratelimit.WithStoreTimeout(5*time.Second))
					if err != nil {
						t.Fatal(err)
					}
					lims = append(lims, lim)
					handlers = append(handlers, lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
				}
				rng := rand.New(rand.NewPCG(uint64(si), 42))
				ctx := context.Background()
				tol := ratelimit.ClockStepTolerance
				for step := range 400 {
					switch rng.IntN(10) {
					case 0:
						if back {
							now = now.Add(-time.Duration(1+rng.Int64N(tol.Microseconds())) * time.Microsecond)
						}
					case 1:
						if back {
							now = now.Add(-tol - time.Duration(rng.Int64N(int64(time.Second))))
						}
					default:
						now = now.Add(time.Duration(rng.Int64N(int64(700 * time.Millisecond))))
					}
					mr.SetTime(now)
					key := []string{"k1", "k2"}[rng.IntN(2)]
					var costs []int64
					if rng.IntN(2) == 0 {
						for _, l := range set {
							costs = append(costs, []int64{0, 1, 2, l.Burst(), l.Burst() + 1}[rng.IntN(5)])
						}
					}
					adjust := rng.IntN(6) == 0
					delta := rng.Int64N(5) - 2
					viaHTTP := !leaky && rng.IntN(3) == 0
					var want string
					for i, lim := range lims {
						var got string
						switch {
						case adjust:
							r, err := lim.Adjust(ctx, key, set[0].Name(), delta)
							got = fmt.Sprintf("%v %v", comparableOf(r), err)
						case viaHTTP:
							req := httptest.NewRequest("GET", "/", nil)
							req.Header.Set("X-Key", key)
							w := httptest.NewRecorder()
							handlers[i].ServeHTTP(w, req)
							got = fmt.Sprintf("%d %v", w.Code, w.Header())
						default:
							r, err := lim.Take(ctx, key, costs...)
							got = fmt.Sprintf("%+v %v", comparableOf(r), err)
						}
						if i == 0 {
							want = got
							continue
						}
						if got != want {
							t.Fatalf("step %d at %v (%s, costs %v, adjust %v %d, http %v): %s:\n got %s\nwant %s (memory)",
								step, now.Format(time.RFC3339Nano), key, costs, adjust, delta, viaHTTP, stores[i].name, got, want)
						}
					}
				}
			})
		}
	}
}

// comparableOf is r with each Decision's Limit replaced by its ID (each
// Limiter has its own copies of the limits).
func comparableOf(r ratelimit.Result) string {
	s := fmt.Sprintf("allowed=%v bypassed=%v retry=%v delay=%v [", r.Allowed, r.Bypassed, r.RetryAfter, r.Delay)
	for _, d := range r.Decisions {
		id := "<nil>"
		if d.Limit != nil {
			id = d.Limit.ID()
		}
		s += fmt.Sprintf("{%s %v %d %v %v %v %d}", id, d.Allowed, d.Remaining, d.Reset, d.RetryAfter, d.Delay, d.At)
	}
	return s + "]"
}
