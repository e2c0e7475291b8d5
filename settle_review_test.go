package ratelimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/internal/redistest"
	"github.com/rampmeter/ratelimit/store/redisstore"
)

// TestReviewConcurrentSettlementExact runs many concurrent AI requests
// (a request limit and a token limit with a cost function: the two-limit
// path and the per-request state of two limits) through the middleware on
// the memory store and on the pipelined Redis store (batches of Takes and
// of settling Adjusts on one hot key, the key view), of which some
// handlers panic after reporting their usage and some lose their client
// (the request's context is cancelled) before returning: every request is
// settled to exactly what it reported, so the tokens in use at the end are
// the sum of the reports, and the requests in use the number of requests.
func TestReviewConcurrentSettlementExact(t *testing.T) {
	factories := map[string]func(t *testing.T, now func() time.Time) ratelimit.Store{
		"memory": func(t *testing.T, now func() time.Time) ratelimit.Store { return newStore(t, now) },
		"miniredis-pipelined": func(t *testing.T, now func() time.Time) ratelimit.Store {
			mr := miniredis.RunT(t)
			c := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = c.Close() })
			s, err := redisstore.New(c, redisstore.WithClock(now), redisstore.WithPipelining())
			require.NoError(t, err)
			return s
		},
		"redis-pipelined": func(t *testing.T, now func() time.Time) ratelimit.Store {
			c := redistest.Client(t)
			// The fake clock stands still while the real server counts the
			// keys' PX down on its wall clock: the first request's state
			// (one unit, 86.4 ms) must outlast any stall before the next
			// write, so the keys get an hour's margin (no decision changes).
			s, err := redisstore.New(c, redisstore.WithPrefix(redistest.Prefix(t)), redisstore.WithClock(now), redisstore.WithPipelining(),
				redisstore.WithExpiryMargin(time.Hour))
			require.NoError(t, err)
			return s
		},
	}
	for name, mk := range factories {
		t.Run(name, func(t *testing.T) {
			clock := newClock()
			store := mk(t, clock.Now)
			reqLimit := ratelimit.PerDay(1_000_000).Named("requests")
			tokLimit := ratelimit.PerDay(100_000_000).Named("tokens")
			lim, err := ratelimit.New(store, ratelimit.WithKey(ratelimit.KeyByAPIKey()), ratelimit.WithStoreTimeout(time.Minute),
				ratelimit.WithLimits(reqLimit, tokLimit.CostFrom(estimateTokens)))
			require.NoError(t, err)
			var mu sync.Mutex
			var reported int64
			h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				u := int64(len(r.URL.Path)) * 37 % 5000
				if err := ratelimit.ReportUsage(r.Context(), "tokens", u); err != nil {
					panic(err)
				}
				mu.Lock()
				reported += u
				mu.Unlock()
				switch len(r.URL.Path) % 3 {
				case 0:
					panic("review: handler panics after its report")
				case 1:
					r.Context().Value(cancelKey{}).(context.CancelFunc)() // the client goes away
				}
			}))
			var wg sync.WaitGroup
			const workers, each = 8, 60
			for g := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range each {
						path := "/" + string(make([]byte, g*each+i)) // distinct lengths: distinct usage
						r := request("POST", "/x", "k", 1000+int64(i))
						r.URL.Path = path
						ctx, cancel := context.WithCancel(context.WithValue(r.Context(), cancelKey{}, context.CancelFunc(nil)))
						ctx = context.WithValue(ctx, cancelKey{}, cancel)
						func() {
							defer func() { _ = recover() }()
							h.ServeHTTP(httptest.NewRecorder(), r.WithContext(ctx))
						}()
						cancel()
					}
				}()
			}
			wg.Wait()
			out := make([]ratelimit.Decision, 2)
			require.NoError(t, store.Take(context.Background(), []ratelimit.Request{
				{Key: "k", Limit: &reqLimit, Cost: 0}, {Key: "k", Limit: &tokLimit, Cost: 0}}, out))
			require.Equal(t, int64(1_000_000-workers*each), out[0].Remaining, "requests in use")
			require.Equal(t, 100_000_000-reported, out[1].Remaining, "tokens in use: the sum of the reports")
			st := lim.Stats()
			require.Equal(t, int64(workers*each), int64(st.Allowed))
		})
	}
}

type cancelKey struct{}
