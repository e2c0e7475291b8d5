package lease_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/lease"
)

// vendor is a fake vendor API that counts the calls it receives per minute
// (by the clock, which in a synctest bubble is the bubble's) and answers
// each after latency.
type vendor struct {
	latency  time.Duration
	quota    int
	mu       sync.Mutex
	perMin   map[int64]int
	rejected int
}

func (v *vendor) RoundTrip(req *http.Request) (*http.Response, error) {
	minute := time.Now().Unix() / 60
	v.mu.Lock()
	v.perMin[minute]++
	over := v.perMin[minute] > v.quota
	if over {
		v.rejected++
	}
	v.mu.Unlock()
	time.Sleep(v.latency)
	status := http.StatusOK
	if over {
		status = http.StatusTooManyRequests // (never, the test asserts)
	}
	return &http.Response{StatusCode: status, Body: io.NopCloser(strings.NewReader("{}")), Header: http.Header{}, Request: req}, nil
}

// TestWorkflowEngine is the seed's workflow engine on a real redis-server:
// 100 goroutine workers in 5 simulated processes (20 each, every process
// with its own Redis client, Redis store, lease.Store and Limiter) call
// one vendor whose quota is 10,000 calls per minute, through
// ratelimit.Transport, for 3 minutes. The vendor answers in 100 ms, so the
// workers would make 60,000 calls a minute unthrottled. The limit is a
// fixed window of 10,000 per minute (the vendor's minutes); its leases end
// with each minute, so each minute's calls stay within the quota exactly,
// and the fleet uses nearly all of it (the leases idle at a minute's end
// are lost to that minute: at most 5 × a lease). Redis sees a few calls
// per lease and per refused process-second instead of one per vendor
// call: ≤ 5 %.
//
// The test runs in a synctest bubble: time is fake (the Limiter's waits,
// the vendor's latency, the leases' lifetimes, the Redis store's clock),
// the Redis round trips are real.
func TestWorkflowEngine(t *testing.T) {
	addr, prefix := redisAddr(t, true)
	synctest.Test(t, func(t *testing.T) {
		const (
			processes = 5
			workers   = 20 // per process
			minutes   = 3
		)
		v := &vendor{latency: 100 * time.Millisecond, quota: 10_000, perMin: map[int64]int{}}
		quota := ratelimit.PerMinute(10_000).WithAlgorithm(ratelimit.FixedWindow).Named("vendor")
		start := time.Now() // 2000-01-01 00:00:00 UTC in a bubble: a whole minute
		ctx, cancel := context.WithDeadline(context.Background(), start.Add(minutes*time.Minute))
		defer cancel()
		var procs []*process
		var wg sync.WaitGroup
		var failures []error
		var mu sync.Mutex
		for range processes {
			p := newBubbleProcess(t, addr, prefix)
			procs = append(procs, p)
			lim, err := ratelimit.New(p.lease, ratelimit.WithLimits(quota), ratelimit.WithFailureMode(ratelimit.FailClosed))
			require.NoError(t, err)
			client := &http.Client{Transport: &ratelimit.Transport{Limiter: lim, Base: v,
				Key: func(*http.Request) string { return "vendor-api" }}}
			for range workers {
				wg.Go(func() {
					for {
						req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "https://api.vendor.example/v1/run", nil)
						resp, err := client.Do(req)
						if err != nil {
							if ctx.Err() == nil {
								mu.Lock()
								failures = append(failures, err)
								mu.Unlock()
							}
							return
						}
						_, _ = io.Copy(io.Discard, resp.Body)
						_ = resp.Body.Close()
					}
				})
			}
		}
		wg.Wait()
		for _, p := range procs {
			require.NoError(t, p.lease.Close())
		}
		require.Empty(t, failures)
		require.Zero(t, v.rejected, "the vendor never saw more than its quota in a minute")
		var calls int
		for m := range int64(minutes) {
			n := v.perMin[start.Unix()/60+m]
			t.Logf("minute %d: %d vendor calls", m, n)
			require.LessOrEqual(t, n, 10_000)
			require.GreaterOrEqual(t, n, 9_000, "the fleet used at least 90 % of the quota")
			calls += n
		}
		var redisCalls, commands int64
		var st lease.Stats
		for _, p := range procs {
			redisCalls += p.cmds.scripts.Load()
			commands += p.cmds.all.Load()
			ps := p.lease.Stats()
			st.Local += ps.Local
			st.Passed += ps.Passed
			st.Refills += ps.Refills
			st.BackingTakes += ps.BackingTakes
			st.Returns += ps.Returns
			st.Leased += ps.Leased
			st.Returned += ps.Returned
			st.Dropped += ps.Dropped
		}
		t.Logf("lease.Stats summed: %+v", st)
		t.Logf("%d vendor calls, %d Redis calls (%.2f %%; %d commands with the connections' handshakes)",
			calls, redisCalls, 100*float64(redisCalls)/float64(calls), commands)
		require.LessOrEqual(t, float64(redisCalls), 0.05*float64(calls))
	})
}
