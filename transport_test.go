package ratelimit_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/internal/redistest"
	"github.com/rampmeter/ratelimit/store/memory"
	"github.com/rampmeter/ratelimit/store/redisstore"
)

// vendor is an httptest server whose answers a test scripts: answer(n, w,
// r) writes the response to the n-th request (from 1).
type vendor struct {
	*httptest.Server
	hits atomic.Int64
}

func newVendor(t *testing.T, answer func(n int64, w http.ResponseWriter, r *http.Request)) *vendor {
	t.Helper()
	v := &vendor{}
	v.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		answer(v.hits.Add(1), w, r)
	}))
	t.Cleanup(v.Close)
	return v
}

// tooMany answers 429 with the given header fields.
func tooMany(w http.ResponseWriter, fields ...string) {
	for i := 0; i+1 < len(fields); i += 2 {
		w.Header().Set(fields[i], fields[i+1])
	}
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = io.WriteString(w, "slow down")
}

// worker is one process calling the vendor: its own Limiter on the shared
// store, a Transport, and a record of its waits on the fake clock.
type worker struct {
	lim   *ratelimit.Limiter
	tr    *ratelimit.Transport
	waits []time.Duration
}

func newWorker(t *testing.T, store ratelimit.Store, clock *fakeClock, limits ...ratelimit.Limit) *worker {
	t.Helper()
	// One name for all workers: they are the processes of one deployment
	// and share the state on purpose (see WithName).
	lim, err := ratelimit.New(store, ratelimit.WithName("vendor"), ratelimit.WithLimits(limits...))
	require.NoError(t, err)
	w := &worker{lim: lim, tr: &ratelimit.Transport{Limiter: lim}}
	ratelimit.SetSleep(lim, advancingSleep(clock, &w.waits))
	return w
}

// get sends a GET through w's Transport and returns the status and body.
func (w *worker) get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := (&http.Client{Transport: w.tr}).Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// leaky60 is a vendor quota of 60 per minute, sent as a queue: one slot a
// second.
func leaky60() ratelimit.Limit { return ratelimit.PerMinute(60).WithAlgorithm(ratelimit.LeakyBucket) }

func TestTransportPausesTheSharedKey(t *testing.T) {
	// Worker A's call takes the slot at 0 s, so the queue ends at 1 s. The
	// vendor still answers 429 with Retry-After: 7. A gets the 429, and
	// the key is paused for every worker: 6 more units make the queue end
	// at 7 s. Worker B, another Limiter on the same store, gets the slot
	// at 7 s; A's next call, the slot at 8 s.
	clock := newClock()
	store := newStore(t, clock.Now)
	v := newVendor(t, func(n int64, w http.ResponseWriter, _ *http.Request) {
		if n == 1 {
			tooMany(w, "Retry-After", "7")
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
	a, b := newWorker(t, store, clock, leaky60()), newWorker(t, store, clock, leaky60())

	code, body := a.get(t, v.URL)
	assert.Equal(t, http.StatusTooManyRequests, code, "the 429 is returned")
	assert.Equal(t, "slow down", body)
	code, _ = b.get(t, v.URL)
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, []time.Duration{7 * time.Second}, b.waits)
	code, _ = a.get(t, v.URL)
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, []time.Duration{time.Second}, a.waits, "at 7 s, the slot at 8 s")
	assert.Equal(t, int64(3), v.hits.Load())
}

func TestTransportPausesUntilTheExhaustedReset(t *testing.T) {
	// OpenAI's fields: the requests are exhausted and reset in 1m30s; the
	// tokens are not (their reset, 6m0s, does not bind). The key is
	// paused for 90 s: the queue is charged to end at 90 s, beyond its
	// burst of 60 s, so the next call is refused for 31 s (until its unit
	// fits) and then queued for the remaining 59 s.
	clock := newClock()
	store := newStore(t, clock.Now)
	v := newVendor(t, func(n int64, w http.ResponseWriter, _ *http.Request) {
		if n == 1 {
			tooMany(w, "X-Ratelimit-Remaining-Requests", "0", "X-Ratelimit-Reset-Requests", "1m30s",
				"X-Ratelimit-Remaining-Tokens", "1000", "X-Ratelimit-Reset-Tokens", "6m0s")
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
	a := newWorker(t, store, clock, leaky60())
	code, _ := a.get(t, v.URL)
	require.Equal(t, http.StatusTooManyRequests, code)
	code, _ = a.get(t, v.URL)
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, []time.Duration{31 * time.Second, 59 * time.Second}, a.waits)
}

func TestTransportPausesATokenBucket(t *testing.T) {
	// The pause is charged to the limit whose burst refills soonest (60 a
	// minute, not 10,000 a day, whose budget it would waste). A token
	// bucket admits nothing for the 7 s: it is left one unit short of
	// empty plus 7 s of refill, so B is refused for 7 s, then admitted.
	clock := newClock()
	store := newStore(t, clock.Now)
	v := newVendor(t, func(n int64, w http.ResponseWriter, _ *http.Request) {
		if n == 1 {
			tooMany(w, "Retry-After", "7")
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
	limits := []ratelimit.Limit{ratelimit.PerDay(10_000).Named("daily"), ratelimit.PerMinute(60).Named("rpm")}
	a, b := newWorker(t, store, clock, limits...), newWorker(t, store, clock, limits...)
	code, _ := a.get(t, v.URL)
	require.Equal(t, http.StatusTooManyRequests, code)
	code, _ = b.get(t, v.URL)
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, []time.Duration{7 * time.Second}, b.waits)
	res, err := b.lim.Take(context.Background(), strings.TrimPrefix(v.URL, "http://"), 0, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(10_000-2), res.Decisions[0].Remaining, "the daily budget paid for two calls only")

	// PauseLimit overrides the choice.
	v2 := newVendor(t, func(_ int64, w http.ResponseWriter, _ *http.Request) { tooMany(w, "Retry-After", "7") })
	c := newWorker(t, store, clock, limits...)
	c.tr.PauseLimit = "daily"
	code, _ = c.get(t, v2.URL)
	require.Equal(t, http.StatusTooManyRequests, code)
	res, err = c.lim.Take(context.Background(), strings.TrimPrefix(v2.URL, "http://"), 0, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(0), res.Decisions[0].Remaining, "a paused token bucket is empty")
	assert.Equal(t, int64(59), res.Decisions[1].Remaining)
}

func TestTransportClampsTheVendorWait(t *testing.T) {
	// A vendor asks for 99999999999 s (about 3,170 years). A token bucket
	// of 60 a minute with a burst of 600 is paused for the clamped wait
	// w: it is left holding 599 units + w of refill, so B is refused
	// until w has passed. By default w is DefaultMaxPause, an hour (the
	// limit's period, a minute, is shorter; unclamped, the pause would
	// last 100 years, the longest wait VendorWait reads); MaxPause sets
	// it, and a daily limit's period raises the default to a day.
	for _, tc := range []struct {
		name     string
		limit    ratelimit.Limit
		maxPause time.Duration
		want     time.Duration
	}{
		{"default", ratelimit.PerMinute(60).WithBurst(600).Named("rpm"), 0, ratelimit.DefaultMaxPause},
		{"explicit", ratelimit.PerMinute(60).WithBurst(600).Named("rpm"), 10 * time.Second, 10 * time.Second},
		{"explicit, longer", ratelimit.PerMinute(60).WithBurst(600).Named("rpm"), 5 * time.Hour, 5 * time.Hour},
		{"default, daily limit", ratelimit.PerDay(86_400).WithBurst(600).Named("rpd"), 0, 24 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newClock()
			store := newStore(t, clock.Now)
			v := newVendor(t, func(n int64, w http.ResponseWriter, _ *http.Request) {
				if n == 1 {
					tooMany(w, "Retry-After", "99999999999")
					return
				}
				_, _ = io.WriteString(w, "ok")
			})
			a, b := newWorker(t, store, clock, tc.limit), newWorker(t, store, clock, tc.limit)
			a.tr.MaxPause = tc.maxPause
			code, _ := a.get(t, v.URL)
			require.Equal(t, http.StatusTooManyRequests, code)
			code, _ = b.get(t, v.URL)
			require.Equal(t, http.StatusOK, code)
			assert.Equal(t, []time.Duration{tc.want}, b.waits)
		})
	}
}

func TestTransportRetryOn429(t *testing.T) {
	// The vendor refuses twice with Retry-After: 2, then answers. Each
	// retry waits for a slot after the pause, 2 s, and sends the same body.
	clock := newClock()
	store := newStore(t, clock.Now)
	var bodies []string
	var mu sync.Mutex
	v := newVendor(t, func(n int64, w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
		if n <= 2 {
			tooMany(w, "Retry-After", "2")
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
	a := newWorker(t, store, clock, leaky60())
	a.tr.RetryOn429 = 2
	req, err := http.NewRequest(http.MethodPost, v.URL, strings.NewReader("hello"))
	require.NoError(t, err)
	resp, err := (&http.Client{Transport: a.tr}).Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, []string{"hello", "hello", "hello"}, bodies)
	assert.Equal(t, []time.Duration{2 * time.Second, 2 * time.Second}, a.waits)

	// A body that cannot be replayed is not retried: the 429 is returned.
	v.hits.Store(0)
	req, err = http.NewRequest(http.MethodPost, v.URL, nil)
	require.NoError(t, err)
	req.Body = io.NopCloser(strings.NewReader("once"))
	resp, err = (&http.Client{Transport: a.tr}).Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, int64(1), v.hits.Load())
}

func TestTransport503(t *testing.T) {
	// 503 with Retry-After pauses the key but is not retried.
	clock := newClock()
	store := newStore(t, clock.Now)
	v := newVendor(t, func(n int64, w http.ResponseWriter, _ *http.Request) {
		if n == 1 {
			w.Header().Set("Retry-After", "3")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		if n == 2 {
			w.WriteHeader(http.StatusServiceUnavailable) // no wait named: no pause
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
	a := newWorker(t, store, clock, leaky60())
	a.tr.RetryOn429 = 5
	code, _ := a.get(t, v.URL)
	assert.Equal(t, http.StatusServiceUnavailable, code)
	code, _ = a.get(t, v.URL)
	assert.Equal(t, http.StatusServiceUnavailable, code)
	code, _ = a.get(t, v.URL)
	assert.Equal(t, http.StatusOK, code)
	// The pause made the queue end at 3 s: the second call's slot. The
	// third's is one slot later.
	assert.Equal(t, []time.Duration{3 * time.Second, time.Second}, a.waits)
}

// closeBody records whether it was closed.
type closeBody struct {
	io.Reader
	closed atomic.Bool
}

func (b *closeBody) Close() error { b.closed.Store(true); return nil }

func TestTransportErrors(t *testing.T) {
	clock := newClock()
	store := newStore(t, clock.Now)
	v := newVendor(t, func(int64, http.ResponseWriter, *http.Request) {})
	lim, err := ratelimit.New(store, ratelimit.WithLimits(leaky60()))
	require.NoError(t, err)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		tr   *ratelimit.Transport
		ctx  context.Context
		want error
	}{
		{"nil Limiter", &ratelimit.Transport{}, nil, ratelimit.ErrInvalidConfig},
		{"negative RetryOn429", &ratelimit.Transport{Limiter: lim, RetryOn429: -1}, nil, ratelimit.ErrInvalidConfig},
		{"negative MaxPause", &ratelimit.Transport{Limiter: lim, MaxPause: -time.Second}, nil, ratelimit.ErrInvalidConfig},
		{"unknown PauseLimit", &ratelimit.Transport{Limiter: lim, PauseLimit: "nope"}, nil, ratelimit.ErrUnknownLimit},
		{"empty key", &ratelimit.Transport{Limiter: lim, Key: func(*http.Request) string { return "" }}, nil, ratelimit.ErrInvalidRequest},
		{"cost error", &ratelimit.Transport{Limiter: lim, Cost: func(*http.Request) ([]int64, error) { return nil, errStoreDown }}, nil, errStoreDown},
		{"costs not aligned", &ratelimit.Transport{Limiter: lim, Cost: func(*http.Request) ([]int64, error) { return []int64{1, 1}, nil }}, nil, ratelimit.ErrInvalidRequest},
		{"never fits", &ratelimit.Transport{Limiter: lim, Cost: func(*http.Request) ([]int64, error) { return []int64{61}, nil }}, nil, ratelimit.ErrNeverFits},
		{"context ended", &ratelimit.Transport{Limiter: lim}, cancelled, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := tc.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			body := &closeBody{Reader: strings.NewReader("x")}
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, v.URL, body)
			require.NoError(t, err)
			resp, err := tc.tr.RoundTrip(req)
			require.ErrorIs(t, err, tc.want)
			assert.Nil(t, resp)
			assert.True(t, body.closed.Load(), "RoundTrip closes the body on errors")
		})
	}
	assert.Zero(t, v.hits.Load(), "nothing was sent")
}

func TestVendorWait(t *testing.T) {
	now := epoch // Fri, 02 Jan 2026 03:04:05 GMT
	for _, tc := range []struct {
		name   string
		status int
		fields []string
		want   time.Duration
		ok     bool
	}{
		{"delta-seconds", 429, []string{"Retry-After", "7"}, 7 * time.Second, true},
		{"delta-seconds with spaces", 429, []string{"Retry-After", " 7 "}, 7 * time.Second, true},
		{"zero", 429, []string{"Retry-After", "0"}, 0, true},
		{"too large", 429, []string{"Retry-After", "99999999999999999999"}, 100 * 365 * 24 * time.Hour, true},
		{"IMF-fixdate from Date", 429, []string{"Retry-After", "Fri, 02 Jan 2026 10:00:07 GMT", "Date", "Fri, 02 Jan 2026 10:00:00 GMT"}, 7 * time.Second, true},
		{"IMF-fixdate from the clock", 429, []string{"Retry-After", "Fri, 02 Jan 2026 03:04:35 GMT"}, 30 * time.Second, true},
		{"RFC 850 date", 503, []string{"Retry-After", "Friday, 02-Jan-26 03:04:12 GMT"}, 7 * time.Second, true},
		{"asctime date", 503, []string{"Retry-After", "Fri Jan  2 03:04:12 2026"}, 7 * time.Second, true},
		{"date in the past", 429, []string{"Retry-After", "Fri, 02 Jan 2026 03:00:00 GMT"}, 0, true},
		{"retry-after-ms first", 429, []string{"Retry-After", "7", "Retry-After-Ms", "1500.5"}, 1500*time.Millisecond + 500*time.Microsecond, true},
		{"unparsable Retry-After", 429, []string{"Retry-After", "soon"}, 0, false},
		{"none", 429, nil, 0, false},
		{"reset-requests 1m30s", 429, []string{"X-Ratelimit-Reset-Requests", "1m30s"}, 90 * time.Second, true},
		{"reset-tokens 1.5s", 429, []string{"X-Ratelimit-Reset-Tokens", "1.5s"}, 1500 * time.Millisecond, true},
		{"reset 12ms", 429, []string{"X-Ratelimit-Reset-Requests", "12ms"}, 12 * time.Millisecond, true},
		{"reset 6m0s", 429, []string{"X-Ratelimit-Reset-Tokens", "6m0s"}, 6 * time.Minute, true},
		{"reset in plain seconds", 429, []string{"X-Ratelimit-Reset-Requests", "20"}, 20 * time.Second, true},
		{"negative reset", 429, []string{"X-Ratelimit-Reset-Requests", "-1"}, 0, false},
		{"the exhausted resource binds", 429, []string{
			"X-Ratelimit-Reset-Requests", "1s", "X-Ratelimit-Remaining-Requests", "3",
			"X-Ratelimit-Reset-Tokens", "12s", "X-Ratelimit-Remaining-Tokens", "0"}, 12 * time.Second, true},
		{"the exhausted resource binds, however short", 429, []string{
			"X-Ratelimit-Reset-Requests", "1s", "X-Ratelimit-Remaining-Requests", "0",
			"X-Ratelimit-Reset-Tokens", "12s", "X-Ratelimit-Remaining-Tokens", "500"}, time.Second, true},
		{"none exhausted: the longest", 429, []string{
			"X-Ratelimit-Reset-Requests", "1s", "X-Ratelimit-Remaining-Requests", "2",
			"X-Ratelimit-Reset-Tokens", "12s", "X-Ratelimit-Remaining-Tokens", "500"}, 12 * time.Second, true},
		{"Retry-After beats the resets", 429, []string{"Retry-After", "3", "X-Ratelimit-Reset-Requests", "1m"}, 3 * time.Second, true},
		{"503 ignores the resets", 503, []string{"X-Ratelimit-Reset-Requests", "1m"}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for i := 0; i+1 < len(tc.fields); i += 2 {
				h.Set(tc.fields[i], tc.fields[i+1])
			}
			got, ok := ratelimit.VendorWait(tc.status, h, now)
			assert.Equal(t, tc.ok, ok)
			assert.Equal(t, tc.want, got)
		})
	}
}

// fiveWorkers runs five workers, each its own Limiter and Transport on its
// own store from newStore (all sharing state), calling one vendor in a
// loop for three periods of simulated time. The limit is R = 100 per
// minute as a queue. It returns the vendor's count of calls received in
// each minute [k min, k+1 min), k = 0, 1, 2, and each worker's calls.
//
// The counts are exact only if every call was scheduled, so the Limiters
// fail closed (a store failure is a RoundTrip error, reported) with a store
// timeout of a minute: with the default 50 ms, a Redis round trip on a
// loaded machine timed out now and then, and FailOpen sent that call
// unscheduled (101 to 111 calls in a minute), while the timed-out script
// had still reserved a slot. A minute bounds a local round trip with a
// margin no load reaches.
func fiveWorkers(t *testing.T, newStore func(now func() time.Time) ratelimit.Store) (perPeriod [3]int, perWorker [5]int) {
	c := newSimClock()
	var mu sync.Mutex
	v := newVendor(t, func(_ int64, w http.ResponseWriter, _ *http.Request) {
		if k := int(c.Now().Sub(epoch) / time.Minute); k < len(perPeriod) {
			mu.Lock()
			perPeriod[k]++
			mu.Unlock()
		}
		_, _ = io.WriteString(w, "ok")
	})
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	end := epoch.Add(3 * time.Minute)
	for i := range perWorker {
		lim, err := ratelimit.New(newStore(c.Now), leaky100(), ratelimit.WithName("vendor"),
			ratelimit.WithStoreTimeout(time.Minute), ratelimit.WithFailureMode(ratelimit.FailClosed))
		require.NoError(t, err)
		ratelimit.SetSleep(lim, c.Sleep)
		client := &http.Client{Transport: &ratelimit.Transport{Base: base, Limiter: lim}}
		c.Go(func() {
			for c.Now().Before(end) {
				resp, err := client.Get(v.URL + "/v1/chat/completions")
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				if c.Now().Before(end) {
					perWorker[i]++
				}
				mu.Unlock()
			}
		})
	}
	c.Run()
	return perPeriod, perWorker
}

func TestTransportFiveWorkersShareOneQuota(t *testing.T) {
	// Five workers with five Limiters on one store send exactly 100 calls
	// in each minute: the queue hands out one slot every 600 ms, whoever
	// asks, and each worker, holding one slot at a time, gets every fifth.
	var store ratelimit.Store
	perPeriod, perWorker := fiveWorkers(t, func(now func() time.Time) ratelimit.Store {
		if store == nil {
			store = newStore(t, now)
		}
		return store
	})
	t.Logf("memory store: calls per minute %v, per worker over 3 minutes %v", perPeriod, perWorker)
	assert.Equal(t, [3]int{100, 100, 100}, perPeriod)
	assertRoundRobin(t, perWorker)
}

// assertRoundRobin checks how fiveWorkers' 300 calls (slot k at k × 600 ms,
// k = 0 … 299) were shared out. After time 0 the simulated clock wakes one
// worker at a time: the owner of slot k calls the vendor and reserves the
// queue's next free slot, k + 5, before time moves again, so every worker
// keeps one residue of k mod 5. At time 0 the clock waits for all five:
// exactly six Takes reserve slots 0 … 5, one per worker plus a second one
// by the worker A that got slot 0 (the only one without a wait). Which
// slot j in 1 … 5 A's second Take gets depends on how its HTTP and store
// round trips race the others' first Takes, and that alone varies:
//
//   - j = 5 (A asked again after everyone else, as usually on the
//     in-process memory store): A gets slot 0 and the 59 slots 5, 10,
//     … 295; each other worker one residue in 1 … 4, 60 slots: 60 each;
//   - j in 1 … 4: A gets slot 0 and 60 slots of residue j, 61; the owner
//     of slot 5 gets 59; the other three 60.
//
// So the counts, sorted, are exactly [60 60 60 60 60] or [59 60 60 60 61].
func assertRoundRobin(t *testing.T, perWorker [5]int) {
	t.Helper()
	sorted := slices.Clone(perWorker[:])
	slices.Sort(sorted)
	assert.Contains(t, [][]int{{60, 60, 60, 60, 60}, {59, 60, 60, 60, 61}}, sorted, "calls per worker %v", perWorker)
}

func TestTransportFiveWorkersShareOneQuotaRedis(t *testing.T) {
	// The same with five processes' worth of Redis stores (five clients)
	// on one real Redis, deciding by the simulated clock.
	//
	// The server expires keys by its own clock, after the time until the
	// queue is empty on the simulated one (up to 3 s here), and that clock
	// stands still at time 0 while the first six Takes race: a loaded
	// machine could let the key expire in between, and a forgotten queue
	// admits at once. The expiry margin (which changes no decision, see
	// redisstore.WithExpiryMargin) outlasts any test run; the keys are
	// deleted at the end.
	prefix := redistest.Prefix(t)
	client := redistest.Client(t)
	t.Cleanup(func() {
		ctx := context.WithoutCancel(t.Context())
		iter := client.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			assert.NoError(t, client.Del(ctx, iter.Val()).Err())
		}
		assert.NoError(t, iter.Err(), "deleting the test's keys")
	})
	perPeriod, perWorker := fiveWorkers(t, func(now func() time.Time) ratelimit.Store {
		s, err := redisstore.New(redistest.Client(t), redisstore.WithClock(now), redisstore.WithPrefix(prefix),
			redisstore.WithExpiryMargin(time.Hour))
		require.NoError(t, err)
		return s
	})
	t.Logf("redis store: calls per minute %v, per worker over 3 minutes %v", perPeriod, perWorker)
	assert.Equal(t, [3]int{100, 100, 100}, perPeriod)
	assertRoundRobin(t, perWorker)
}

func ExampleTransport() {
	// A stand-in for a vendor API.
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"object":"list"}`)
	}))
	defer api.Close()

	// The vendor allows 60 calls a minute per account. Send them one a
	// second; with a store/redisstore store every process shares the schedule,
	// and a 429 from the vendor pauses them all.
	store, err := memory.New()
	if err != nil {
		log.Fatal(err)
	}
	lim, err := ratelimit.New(store, ratelimit.WithLimits(
		ratelimit.PerMinute(60).WithAlgorithm(ratelimit.LeakyBucket)))
	if err != nil {
		log.Fatal(err)
	}
	client := &http.Client{Transport: &ratelimit.Transport{
		Limiter: lim,
		// One account for every host of the vendor.
		Key: func(*http.Request) string { return "vendor-account" },
	}}

	resp, err := client.Get(api.URL + "/v1/models")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(resp.Status, string(body))
	// Output: 200 OK {"object":"list"}
}
