package ratelimit_test

import (
	"context"
	"net/http"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
)

// simClock is a discrete-event clock. Goroutines started with Go sleep on
// it (Sleep, installed with SetSleep); Run advances it to the earliest
// wake-up whenever every such goroutine is asleep, waking sleepers one at a
// time in (wake, sleep order) order. Simulated minutes pass in
// milliseconds, nothing really sleeps, and each wake-up runs alone, so the
// store sees the same sequence of events on every run.
type simClock struct {
	mu       sync.Mutex
	cond     *sync.Cond
	now      time.Time
	running  int // goroutines started with Go that are not asleep
	seq      int
	sleepers []*sleeper // ordered by (wake, seq)
}

type sleeper struct {
	wake time.Time
	seq  int
	ch   chan struct{}
}

func newSimClock() *simClock {
	c := &simClock{now: epoch}
	c.cond = sync.NewCond(&c.mu)
	return c
}

func (c *simClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Go runs f as a simulated goroutine.
func (c *simClock) Go(f func()) {
	c.mu.Lock()
	c.running++
	c.mu.Unlock()
	go func() {
		defer func() {
			c.mu.Lock()
			c.running--
			c.cond.Broadcast()
			c.mu.Unlock()
		}()
		f()
	}()
}

// Sleep blocks the calling simulated goroutine for d of simulated time.
func (c *simClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	c.mu.Lock()
	s := &sleeper{wake: c.now.Add(d), seq: c.seq, ch: make(chan struct{})}
	c.seq++
	i := sort.Search(len(c.sleepers), func(i int) bool { return c.sleepers[i].wake.After(s.wake) })
	c.sleepers = slices.Insert(c.sleepers, i, s)
	c.running--
	c.cond.Broadcast()
	c.mu.Unlock()
	<-s.ch
	return ctx.Err()
}

// Run advances time until every simulated goroutine has returned.
func (c *simClock) Run() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		for c.running > 0 {
			c.cond.Wait()
		}
		if len(c.sleepers) == 0 {
			return
		}
		s := c.sleepers[0]
		c.sleepers = c.sleepers[1:]
		c.now = s.wake
		c.running++
		close(s.ch)
	}
}

// leaky100 is the README's leaky-bucket limit: 100 per minute as a queue, one
// slot every 60 s / 100 = 600 ms.
func leaky100() ratelimit.Option {
	return ratelimit.WithLimits(ratelimit.PerMinute(100).WithAlgorithm(ratelimit.LeakyBucket))
}

// waitRecorder is a sleep hook that records each wait and returns at once,
// without moving any clock.
type waitRecorder struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (w *waitRecorder) sleep(ctx context.Context, d time.Duration) error {
	w.mu.Lock()
	w.waits = append(w.waits, d)
	w.mu.Unlock()
	return ctx.Err()
}

func (w *waitRecorder) get() []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.waits)
}

// advancingSleep is a sleep hook that records each wait and moves clock
// past it.
func advancingSleep(clock *fakeClock, waits *[]time.Duration) func(context.Context, time.Duration) error {
	return func(ctx context.Context, d time.Duration) error {
		*waits = append(*waits, d)
		clock.Advance(d)
		return ctx.Err()
	}
}

func TestWaitHundredCallersAtOneInstant(t *testing.T) {
	// 100 callers Wait at the same instant (the fake clock stands still)
	// on 100/min as a queue: the queue holds Burst = 100, so every one is
	// admitted, the i-th (in the store's order) with a slot i × 600 ms
	// away. The first goes at once and does not sleep.
	lim, _, _ := newLimiter(t, leaky100())
	var rec waitRecorder
	ratelimit.SetSleep(lim, rec.sleep)
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for range 100 {
		wg.Go(func() { errs <- lim.Wait(context.Background(), "vendor") })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	waits := rec.get()
	slices.Sort(waits)
	want := make([]time.Duration, 99)
	for i := range want {
		want[i] = time.Duration(i+1) * 600 * time.Millisecond
	}
	assert.Equal(t, want, waits)
	assert.Equal(t, ratelimit.Stats{Allowed: 100}, lim.Stats())
}

// maxInSpan returns the most of the sorted times that fall within any
// half-open span [t, t+span).
func maxInSpan(times []time.Time, span time.Duration) int {
	most := 0
	for i := range times {
		n := 0
		for _, u := range times[i:] {
			if u.Before(times[i].Add(span)) {
				n++
			}
		}
		most = max(most, n)
	}
	return most
}

func TestWaitSmoothsBurstsWithinQuota(t *testing.T) {
	// The question: does a leaky bucket smoothing bursts at 100/min
	// ever let more than 100 through in a 60 s span? A burst of 100 at
	// t = 0 and another of 100 at t = 30 s, every caller sending when
	// Wait returns, on simulated time. At 30 s the queue still holds the
	// 50 slots from 30 s to 59.4 s, so 50 of the second burst queue at
	// 60 s … 89.4 s; the other 50 are refused (RetryAfter 600 ms) and
	// retry, one more fitting every 600 ms. So sends happen exactly every
	// 600 ms, k × 600 ms for k = 0 … 199, and any 60 s span holds at most
	// 100 of them.
	c := newSimClock()
	lim, err := ratelimit.New(newStore(t, c.Now), leaky100())
	require.NoError(t, err)
	ratelimit.SetSleep(lim, c.Sleep)
	var mu sync.Mutex
	var sends []time.Time
	for i := range 200 {
		c.Go(func() {
			if i >= 100 {
				_ = c.Sleep(context.Background(), 30*time.Second)
			}
			if err := lim.Wait(context.Background(), "vendor"); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			sends = append(sends, c.Now())
			mu.Unlock()
		})
	}
	c.Run()
	slices.SortFunc(sends, time.Time.Compare)
	require.Len(t, sends, 200)
	for k, s := range sends {
		require.Equal(t, time.Duration(k)*600*time.Millisecond, s.Sub(epoch), "send %d", k)
	}
	assert.Equal(t, 100, maxInSpan(sends, time.Minute))
	st := lim.Stats()
	assert.Equal(t, uint64(200), st.Allowed)
	// The refused half of the second burst retried every 600 ms: 50 + 49
	// + … + 1 refusals.
	assert.Equal(t, uint64(50*51/2), st.Limited)
}

func TestReserve(t *testing.T) {
	lim, _, _ := newLimiter(t, ratelimit.WithLimits(ratelimit.Every(2, 2*time.Second).WithAlgorithm(ratelimit.LeakyBucket)))
	ctx := context.Background()
	var delays []time.Duration
	for range 2 {
		r, err := lim.Reserve(ctx, "k")
		require.NoError(t, err)
		require.True(t, r.OK())
		assert.True(t, r.Result().Allowed)
		delays = append(delays, r.Delay())
	}
	assert.Equal(t, []time.Duration{0, time.Second}, delays, "slots 1 s apart")

	// The queue is full: refused, Delay is the RetryAfter (one slot).
	r, err := lim.Reserve(ctx, "k")
	require.NoError(t, err)
	assert.False(t, r.OK())
	assert.Equal(t, time.Second, r.Delay())
	require.NoError(t, r.Cancel(ctx), "cancelling a refusal does nothing")

	// A cost above the burst: never.
	r, err = lim.Reserve(ctx, "k", 3)
	require.NoError(t, err)
	assert.False(t, r.OK())
	assert.Equal(t, ratelimit.RetryNever, r.Delay())

	// Bad arguments: no reservation.
	_, err = lim.Reserve(ctx, "")
	require.ErrorIs(t, err, ratelimit.ErrInvalidRequest)
	_, err = lim.Reserve(ctx, "k", 1, 1)
	require.ErrorIs(t, err, ratelimit.ErrInvalidRequest)
	_, err = lim.Reserve(ctx, "k", -1)
	require.ErrorIs(t, err, ratelimit.ErrInvalidRequest)
}

// reserveN makes n reservations of key and returns them.
func reserveN(t *testing.T, lim *ratelimit.Limiter, key string, n int) []*ratelimit.Reservation {
	t.Helper()
	rs := make([]*ratelimit.Reservation, n)
	for i := range rs {
		r, err := lim.Reserve(context.Background(), key)
		require.NoError(t, err)
		require.True(t, r.OK())
		rs[i] = r
	}
	return rs
}

func TestCancelReleasesTheLastSlot(t *testing.T) {
	// A, B, C hold the slots at 0, 600 ms and 1.2 s. C is the last in the
	// queue: cancelling it gives its slot to the next caller, D.
	lim, store, _ := newLimiter(t, leaky100())
	rs := reserveN(t, lim, "k", 3)
	assert.Equal(t, 1200*time.Millisecond, rs[2].Delay())
	require.NoError(t, rs[2].Cancel(context.Background()))
	adj := store.Adjusts()
	require.Len(t, adj, 1)
	assert.Equal(t, []ratelimit.Request{{Key: "k", Limit: rs[2].Result().Decisions[0].Limit, Cost: -1, At: epoch.UnixMicro()}}, adj[0].Reqs)

	d := reserveN(t, lim, "k", 1)[0]
	assert.Equal(t, 1200*time.Millisecond, d.Delay(), "D gets C's slot")

	// Cancel runs once.
	require.NoError(t, rs[2].Cancel(context.Background()))
	assert.Len(t, store.Adjusts(), 1)
}

func TestCancelKeepsASlotWithLaterReservations(t *testing.T) {
	// B (600 ms) cancels while C (1.2 s) waits behind it. Refunding B's
	// unit would give the next caller the slot at 1.2 s, C's: two sends
	// at once. So the unit stays charged, B's slot goes unused, and D is
	// scheduled after C.
	lim, store, _ := newLimiter(t, leaky100())
	rs := reserveN(t, lim, "k", 3)
	require.NoError(t, rs[1].Cancel(context.Background()))
	assert.Empty(t, store.Adjusts())
	d := reserveN(t, lim, "k", 1)[0]
	assert.Equal(t, 1800*time.Millisecond, d.Delay())
}

func TestCancelAfterTheSlotPassed(t *testing.T) {
	// A reservation whose slot has passed (the queue has drained past it)
	// has nothing left to give back.
	lim, store, clock := newLimiter(t, leaky100())
	rs := reserveN(t, lim, "k", 2)
	clock.Advance(1200 * time.Millisecond)
	require.NoError(t, rs[1].Cancel(context.Background()))
	assert.Empty(t, store.Adjusts())
}

// interleavingStore runs before once, just before its first Adjust: another
// worker's reservation landing between Cancel's read and its refund.
type interleavingStore struct {
	ratelimit.Store
	once   sync.Once
	before func()
}

func (s *interleavingStore) Adjust(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	s.once.Do(s.before)
	return s.Store.Adjust(ctx, reqs, out)
}

func TestCancelUndoesARefundRacedByAReservation(t *testing.T) {
	// C (slot 1.2 s, the last) cancels, but between Cancel's read of the
	// queue and its refund another worker, E, reserves the slot at 1.8 s.
	// The refund's answer shows the queue ending at 1.8 s instead of 1.2 s,
	// so Cancel charges the unit back and the next caller, D, is scheduled
	// at 2.4 s, after E, not into E's slot.
	clock := newClock()
	mem := newStore(t, clock.Now)
	other, err := ratelimit.New(mem, leaky100())
	require.NoError(t, err)
	var e *ratelimit.Reservation
	inter := &interleavingStore{Store: mem, before: func() {
		e, err = other.Reserve(context.Background(), "k")
	}}
	store := &recordingStore{Store: inter}
	lim, err := ratelimit.New(store, leaky100())
	require.NoError(t, err)

	rs := reserveN(t, lim, "k", 3)
	require.NoError(t, rs[2].Cancel(context.Background()))
	require.NoError(t, err)
	assert.Equal(t, 1800*time.Millisecond, e.Delay())
	adj := store.Adjusts()
	require.Len(t, adj, 2)
	assert.Equal(t, int64(-1), adj[0].Reqs[0].Cost, "the refund")
	assert.Equal(t, int64(1), adj[1].Reqs[0].Cost, "and the charge back")
	d := reserveN(t, lim, "k", 1)[0]
	assert.Equal(t, 2400*time.Millisecond, d.Delay())
}

func TestCancelRefundsMeters(t *testing.T) {
	// Token buckets and windows are meters: cancelling refunds them at
	// once, with the Take's time so that a window credits the window
	// charged. A stack of a queue and a meter refunds the meter even when
	// the queue's slot must stay charged.
	lim, store, clock := newLimiter(t, ratelimit.WithLimits(
		ratelimit.PerMinute(100).WithAlgorithm(ratelimit.LeakyBucket).Named("rpm"),
		ratelimit.PerDay(1000).WithAlgorithm(ratelimit.FixedWindow).Named("tokens"),
	))
	ctx := context.Background()
	a, err := lim.Reserve(ctx, "k", 1, 300)
	require.NoError(t, err)
	b, err := lim.Reserve(ctx, "k", 1, 300)
	require.NoError(t, err)
	clock.Advance(100 * time.Millisecond)
	require.NoError(t, a.Cancel(ctx))
	adj := store.Adjusts()
	require.Len(t, adj, 1)
	require.Len(t, adj[0].Reqs, 1, "only the meter: b is queued behind a")
	assert.Equal(t, "tokens", adj[0].Reqs[0].Limit.Name())
	assert.Equal(t, int64(-300), adj[0].Reqs[0].Cost)
	assert.Equal(t, epoch.UnixMicro(), adj[0].Reqs[0].At)

	require.NoError(t, b.Cancel(ctx))
	adj = store.Adjusts()
	require.Len(t, adj, 2)
	require.Len(t, adj[1].Reqs, 2, "b is the last in the queue: both limits")
	r, err := lim.Take(ctx, "k", 0, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(1000), r.Decisions[1].Remaining, "the day's tokens are back")
}

func TestWaitCancelledWhileQueued(t *testing.T) {
	// The third caller's context ends while it waits for its slot at
	// 1.2 s: Wait returns the context's error and gives the slot back (it
	// is the last), so the next caller gets the slot at 1.2 s.
	lim, _, _ := newLimiter(t, leaky100())
	ctx, cancel := context.WithCancel(context.Background())
	var waits []time.Duration
	ratelimit.SetSleep(lim, func(_ context.Context, d time.Duration) error {
		waits = append(waits, d)
		if d == 1200*time.Millisecond && len(waits) == 2 {
			cancel()
			return ctx.Err()
		}
		return nil
	})
	require.NoError(t, lim.Wait(context.Background(), "k"))
	require.NoError(t, lim.Wait(context.Background(), "k"))
	require.ErrorIs(t, lim.Wait(ctx, "k"), context.Canceled)
	require.NoError(t, lim.Wait(context.Background(), "k"))
	assert.Equal(t, []time.Duration{600 * time.Millisecond, 1200 * time.Millisecond, 1200 * time.Millisecond}, waits)

	// A context that has already ended charges nothing.
	require.ErrorIs(t, lim.Wait(ctx, "k"), context.Canceled)
	assert.Equal(t, uint64(4), lim.Stats().Allowed)
}

func TestWaitNeverFits(t *testing.T) {
	lim, _, _ := newLimiter(t, leaky100())
	var rec waitRecorder
	ratelimit.SetSleep(lim, rec.sleep)
	err := lim.Wait(context.Background(), "k", 101)
	require.ErrorIs(t, err, ratelimit.ErrNeverFits)
	assert.EqualError(t, err, `ratelimit: cost can never fit: a cost of 101 requests exceeds the "requests" limit's burst of 100`)
	assert.Empty(t, rec.get(), "no waiting")
	assert.Equal(t, ratelimit.Stats{TooLarge: 1}, lim.Stats())
}

func TestWaitRetriesRefusals(t *testing.T) {
	// A token bucket of 2 per second: two go at once, the third is refused
	// with RetryAfter 500 ms, waits it and is admitted.
	lim, _, clock := newLimiter(t, ratelimit.WithLimits(ratelimit.PerSecond(2)))
	var waits []time.Duration
	ratelimit.SetSleep(lim, advancingSleep(clock, &waits))
	for range 3 {
		require.NoError(t, lim.Wait(context.Background(), "k"))
	}
	assert.Equal(t, []time.Duration{500 * time.Millisecond}, waits)
	assert.Equal(t, ratelimit.Stats{Allowed: 3, Limited: 1}, lim.Stats())
}

func TestWaitDeadlineBeforeTheSlot(t *testing.T) {
	// 2 per 4 hours as a queue: the second slot is 2 h away. A caller whose
	// context ends in 1 h fails at once, without waiting, and gives the
	// slot back; so does one refused for longer than its deadline.
	lim, _, _ := newLimiter(t, ratelimit.WithLimits(ratelimit.Every(2, 4*time.Hour).WithAlgorithm(ratelimit.LeakyBucket)))
	var rec waitRecorder
	ratelimit.SetSleep(lim, rec.sleep)
	require.NoError(t, lim.Wait(context.Background(), "k"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	err := lim.Wait(ctx, "k")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Empty(t, rec.get())
	require.NoError(t, lim.Wait(context.Background(), "k"))
	require.NoError(t, lim.Wait(context.Background(), "k", 0), "a cost of 0 waits for the queue to drain")
	assert.Equal(t, []time.Duration{2 * time.Hour, 4 * time.Hour}, rec.get(), "the second slot was given back")
	require.ErrorIs(t, lim.Wait(ctx, "k"), context.DeadlineExceeded, "refused for 2 h")
}

func TestWaitStoreFailure(t *testing.T) {
	for _, mode := range []ratelimit.FailureMode{ratelimit.FailOpen, ratelimit.FailClosed} {
		t.Run(mode.String(), func(t *testing.T) {
			var bypassed []error
			lim, err := ratelimit.New(failingStore{}, leaky100(), ratelimit.WithFailureMode(mode),
				ratelimit.WithHooks(ratelimit.Hooks{OnBypass: func(_ context.Context, reason error) { bypassed = append(bypassed, reason) }}))
			require.NoError(t, err)
			var rec waitRecorder
			ratelimit.SetSleep(lim, rec.sleep)
			err = lim.Wait(context.Background(), "k")
			assert.Empty(t, rec.get())
			if mode == ratelimit.FailOpen {
				require.NoError(t, err)
				require.Len(t, bypassed, 1)
				require.ErrorIs(t, bypassed[0], errStoreDown)
				assert.Equal(t, ratelimit.Stats{Bypassed: 1, StoreErrors: 1}, lim.Stats())
				r, err := lim.Reserve(context.Background(), "k")
				require.ErrorIs(t, err, errStoreDown)
				assert.True(t, r.OK() && r.Result().Bypassed)
				require.NoError(t, r.Cancel(context.Background()), "nothing to give back")
				return
			}
			require.ErrorIs(t, err, errStoreDown)
			assert.Empty(t, bypassed)
			assert.Equal(t, ratelimit.Stats{StoreErrors: 1}, lim.Stats())
			r, err := lim.Reserve(context.Background(), "k")
			require.ErrorIs(t, err, errStoreDown)
			assert.False(t, r.OK())
			assert.Equal(t, time.Second, r.Delay())
		})
	}
}

func TestMaxWait(t *testing.T) {
	// 10 per second as a queue, holding a request for at most 250 ms: the
	// fourth request's slot is 300 ms away, so it is refused with
	// Retry-After ceil(50 ms) = 1 s and its unit refunded; so is the fifth
	// (the same slot). 100 ms later the fourth slot is 200 ms away.
	lim, store, clock := newLimiter(t, ratelimit.WithLimits(ratelimit.PerSecond(10).WithAlgorithm(ratelimit.LeakyBucket)),
		ratelimit.WithMaxWait(250*time.Millisecond))
	var rec waitRecorder
	ratelimit.SetSleep(lim, rec.sleep)
	ran := 0
	h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran++ }))
	for range 3 {
		require.Equal(t, http.StatusOK, serve(h, request("GET", "/", "k", -1)).Code)
	}
	for range 2 {
		w := serve(h, request("GET", "/", "k", -1))
		require.Equal(t, http.StatusTooManyRequests, w.Code)
		assert.Equal(t, "1", w.Header().Get("Retry-After"))
		assert.JSONEq(t, `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429,`+
			`"detail":"quota exceeded: the \"requests\" limit allows 10 requests per second; retry after 1 second",`+
			`"violated-policies":["requests"],"retry-after-seconds":1}`, w.Body.String())
		// 7 places are left in the queue after the refund, but each would
		// wait as long: r=0, and t is Retry-After.
		assert.Equal(t, `"requests";r=0;t=1`, w.Header().Get("RateLimit"))
	}
	assert.Equal(t, 3, ran)
	adj := store.Adjusts()
	require.Len(t, adj, 2)
	for _, a := range adj {
		assert.Equal(t, int64(-1), a.Reqs[0].Cost)
		assert.Equal(t, epoch.UnixMicro(), a.Reqs[0].At)
	}
	clock.Advance(100 * time.Millisecond)
	require.Equal(t, http.StatusOK, serve(h, request("GET", "/", "k", -1)).Code)
	assert.Equal(t, []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 200 * time.Millisecond}, rec.get())
	assert.Equal(t, ratelimit.Stats{Allowed: 4, Limited: 2}, lim.Stats())

	// Retry-After is the time beyond the bound, rounded up: with a bound
	// of 0 and 10 per minute, the second request's slot is 6 s away.
	lim0, _, _ := newLimiter(t, ratelimit.WithLimits(ratelimit.PerMinute(10).WithAlgorithm(ratelimit.LeakyBucket)),
		ratelimit.WithMaxWait(0))
	h = lim0.Handler(okHandler)
	require.Equal(t, http.StatusOK, serve(h, request("GET", "/", "k", -1)).Code)
	w := serve(h, request("GET", "/", "k", -1))
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "6", w.Header().Get("Retry-After"))

	_, err := ratelimit.New(store, leaky100(), ratelimit.WithMaxWait(-time.Second))
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
}
