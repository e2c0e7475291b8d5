package ratelimit_test

// Review 2 (issue 10): settlement of reserved AI tokens through
// SingleAdjuster.AdjustOne (store/memory, and forwarded by the prometheus
// wrapper) against the slice Adjust (store/resilient around store/memory,
// and store/redisstore on miniredis).

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
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

// TestReview2SettlementPathsAgree: a middleware with a token limit whose
// cost is an estimate (X-Est) and whose usage the handler reports
// (X-Act, or nothing), beside a request limit, on four stores fed the same
// requests on one fake clock: every response (status and headers: IETF
// and X-RateLimit) and, after each, a peek of both limits of both keys
// (Limiter.Take with costs 0) must agree. The handler fails some requests
// (500: the estimate is refunded) and reports usage above, below and at
// the estimate; the token limit is in turn a token bucket, a fixed
// window, a sliding window and a calendar day, so that refunds placed by
// the reservation's At land in the window charged while the clock crosses
// window boundaries. A settlement of one limit goes through AdjustOne on
// the first two stores and through Adjust on the others.
func TestReview2SettlementPathsAgree(t *testing.T) {
	m, err := prometheus.New(promclient.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	est := func(r *http.Request) (int64, error) { return strconv.ParseInt(r.Header.Get("X-Est"), 10, 64) }
	tokenLimits := []ratelimit.Limit{
		ratelimit.PerMinute(100).Named("tokens").CostFrom(est),
		ratelimit.PerMinute(100).Named("tokens").WithAlgorithm(ratelimit.FixedWindow).CostFrom(est),
		ratelimit.PerMinute(100).Named("tokens").WithAlgorithm(ratelimit.SlidingWindow).CostFrom(est),
		ratelimit.PerCalendarDay(300, time.UTC).Named("tokens").CostFrom(est),
	}
	for ti, tok := range tokenLimits {
		t.Run(fmt.Sprint(ti), func(t *testing.T) {
			set := []ratelimit.Limit{ratelimit.PerSecond(3).Named("requests"), tok}
			for _, l := range set {
				if err := l.Err(); err != nil {
					t.Fatal(err)
				}
			}
			now := time.Date(2026, 12, 3, 23, 58, 30, 0, time.UTC)
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
			rc := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
			t.Cleanup(func() { _ = rc.Close() })
			rs, err := redisstore.New(rc, redisstore.WithClock(clock))
			if err != nil {
				t.Fatal(err)
			}
			stores := []ratelimit.Store{newMem(), m.InstrumentStore(newMem()), res, rs}
			names := []string{"memory", "prometheus(memory)", "resilient(memory)", "redis"}
			if _, ok := stores[1].(ratelimit.SingleAdjuster); !ok {
				t.Fatal("the prometheus wrapper of memory is no SingleAdjuster")
			}
			var lims []*ratelimit.Limiter
			var hs []http.Handler
			for _, s := range stores {
				lim, err := ratelimit.New(s, ratelimit.WithLimits(set...),
					ratelimit.WithKey(ratelimit.KeyByHeader("X-Key")),
					ratelimit.WithHeaders(ratelimit.HeadersIETF, ratelimit.HeadersXRateLimit),
					ratelimit.WithStoreTimeout(5*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				lims = append(lims, lim)
				hs = append(hs, lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if a := r.Header.Get("X-Act"); a != "" {
						n, _ := strconv.ParseInt(a, 10, 64)
						if err := ratelimit.ReportUsage(r.Context(), "tokens", n); err != nil {
							t.Error(err)
						}
					}
					if r.Header.Get("X-Fail") != "" {
						w.WriteHeader(http.StatusInternalServerError)
					}
				})))
			}
			rng := rand.New(rand.NewPCG(uint64(ti), 9))
			ctx := context.Background()
			for step := range 300 {
				now = now.Add(time.Duration(rng.Int64N(int64(3 * time.Second))))
				key := []string{"k1", "k2"}[rng.IntN(2)]
				e := []int64{0, 1, 5, 20, 60}[rng.IntN(5)]
				act := ""
				switch rng.IntN(4) {
				case 0:
				case 1:
					act = strconv.FormatInt(e, 10)
				default:
					act = strconv.FormatInt(rng.Int64N(3*e+5), 10)
				}
				fail := rng.IntN(5) == 0
				var want string
				for i, h := range hs {
					req := httptest.NewRequest("POST", "/", nil)
					req.Header.Set("X-Key", key)
					req.Header.Set("X-Est", strconv.FormatInt(e, 10))
					if act != "" {
						req.Header.Set("X-Act", act)
					}
					if fail {
						req.Header.Set("X-Fail", "1")
					}
					w := httptest.NewRecorder()
					h.ServeHTTP(w, req)
					got := fmt.Sprintf("%d %v |", w.Code, w.Header())
					for _, k := range []string{"k1", "k2"} {
						r, err := lims[i].Take(ctx, k, 0, 0)
						got += fmt.Sprintf(" %s %s %v", k, comparableOf(r), err)
					}
					if i == 0 {
						want = got
					} else if got != want {
						t.Fatalf("step %d at %v (%s est %d act %q fail %v): %s:\n got %s\nwant %s (memory)",
							step, now.Format(time.RFC3339Nano), key, e, act, fail, names[i], got, want)
					}
				}
			}
		})
	}
}
