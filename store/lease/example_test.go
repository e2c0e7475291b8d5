package lease_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/lease"
	"github.com/rampmeter/ratelimit/store/redisstore"
)

// scripts counts a client's Redis round trips (the store's EVALSHA).
type scripts struct{ n atomic.Int64 }

func (h *scripts) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *scripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "evalsha" || cmd.Name() == "eval" {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h *scripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// vendorAPI stands in for the vendor: it counts the calls it receives.
type vendorAPI struct{ calls atomic.Int64 }

func (v *vendorAPI) RoundTrip(req *http.Request) (*http.Response, error) {
	v.calls.Add(1)
	return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("{}")), Request: req}, nil
}

// A workflow engine: 100 workers in 5 processes share one vendor quota of
// 10,000 calls per minute through ratelimit.Transport. Each process has
// its own Redis client, Redis store and lease.Store in front of it, so
// that its workers' calls are decided in memory from capacity leased in
// batches, and Redis sees a few calls per lease instead of one per vendor
// call. The quota is a fixed window: a lease never outlives the minute it
// was charged in, so each minute's calls stay within 10,000 exactly.
func Example_workflowEngine() {
	mr, err := miniredis.Run() // stands in for a real Redis
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	quota := ratelimit.PerMinute(10_000).WithAlgorithm(ratelimit.FixedWindow).Named("vendor")
	vendor := &vendorAPI{}
	var redisCalls []*scripts
	var wg sync.WaitGroup
	for range 5 { // processes
		client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
		defer client.Close()
		hook := &scripts{}
		client.AddHook(hook)
		redisCalls = append(redisCalls, hook)
		shared, err := redisstore.New(client)
		if err != nil {
			panic(err)
		}
		store, err := lease.New(shared) // leases of ~1 s of this process's demand
		if err != nil {
			panic(err)
		}
		defer store.Close() // gives the unused units back
		lim, err := ratelimit.New(store, ratelimit.WithLimits(quota), ratelimit.WithFailureMode(ratelimit.FailClosed),
			ratelimit.WithStoreTimeout(5*time.Second)) // for miniredis on a busy machine (and under -race); keep the 50 ms default on Redis
		if err != nil {
			panic(err)
		}
		calls := &http.Client{Transport: &ratelimit.Transport{Limiter: lim, Base: vendor,
			Key: func(*http.Request) string { return "vendor-api" }}}
		for range 20 { // workers
			wg.Go(func() {
				for range 50 { // tasks, one vendor call each
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					req, _ := http.NewRequestWithContext(ctx, "POST", "https://api.vendor.example/v1/run", nil)
					resp, err := calls.Do(req)
					cancel()
					if err != nil {
						fmt.Println("call failed:", err)
						continue
					}
					resp.Body.Close()
				}
			})
		}
	}
	wg.Wait()
	var trips int64
	for _, h := range redisCalls {
		trips += h.n.Load()
	}
	fmt.Println("vendor calls:", vendor.calls.Load())
	fmt.Println("Redis round trips under 5 % of them:", trips*20 < vendor.calls.Load())
	// Output:
	// vendor calls: 5000
	// Redis round trips under 5 % of them: true
}
