package ratelimit_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
)

// slowStore wraps a Store whose calls take a fixed time on the test's fake
// clock: each Take advances it by take, each Adjust by adjust. The calls
// whose 1-based number (over all calls) is in fail return errStoreDown
// instead of calling the wrapped store.
type slowStore struct {
	ratelimit.Store
	clock        *fakeClock
	take, adjust time.Duration

	mu   sync.Mutex
	n    int
	fail map[int]bool
}

func (s *slowStore) failing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	return s.fail[s.n]
}

func (s *slowStore) Take(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	s.clock.Advance(s.take)
	if s.failing() {
		return errStoreDown
	}
	return s.Store.Take(ctx, reqs, out)
}

func (s *slowStore) Adjust(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	s.clock.Advance(s.adjust)
	if s.failing() {
		return errStoreDown
	}
	return s.Store.Adjust(ctx, reqs, out)
}

// hookLog records every hook call of a Limiter.
type hookLog struct {
	mu        sync.Mutex
	calls     []ratelimit.StoreCall
	storeErrs []error
	bypasses  []error
	decisions []ratelimit.Result
}

func (h *hookLog) hooks() ratelimit.Option {
	return ratelimit.WithHooks(ratelimit.Hooks{
		OnStoreCall: func(_ context.Context, c ratelimit.StoreCall) {
			h.mu.Lock()
			h.calls = append(h.calls, c)
			h.mu.Unlock()
		},
		OnStoreError: func(_ context.Context, err error) { h.mu.Lock(); h.storeErrs = append(h.storeErrs, err); h.mu.Unlock() },
		OnBypass:     func(_ context.Context, err error) { h.mu.Lock(); h.bypasses = append(h.bypasses, err); h.mu.Unlock() },
		OnDecision: func(_ context.Context, res ratelimit.Result) {
			h.mu.Lock()
			h.decisions = append(h.decisions, res)
			h.mu.Unlock()
		},
	})
}

// ops summarises the recorded store calls as "op/requests/duration/ok"
// (or "error"), and checks that each names store.
func (h *hookLog) ops(t *testing.T, store ratelimit.Store) []string {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, c := range h.calls {
		result := "ok"
		if c.Err != nil {
			result = "error"
		}
		assert.Same(t, store, c.Store)
		out = append(out, fmt.Sprintf("%s/%d/%v/%s", c.Op, c.Requests, c.Duration, result))
	}
	return out
}

// newSlowLimiter builds a Limiter on a slowStore (Take 3ms, Adjust 5ms)
// over the memory store, with the fake clock as the Limiter's clock too.
func newSlowLimiter(t *testing.T, h *hookLog, fail []int, opts ...ratelimit.Option) (*ratelimit.Limiter, *slowStore, *fakeClock) {
	t.Helper()
	clock := newClock()
	st := &slowStore{Store: newStore(t, clock.Now), clock: clock, take: 3 * time.Millisecond, adjust: 5 * time.Millisecond,
		fail: map[int]bool{}}
	for _, n := range fail {
		st.fail[n] = true
	}
	lim, err := ratelimit.New(st, append(opts, h.hooks())...)
	require.NoError(t, err)
	ratelimit.SetClock(lim, clock.Now)
	return lim, st, clock
}

func TestOnStoreCall(t *testing.T) {
	var h hookLog
	lim, st, _ := newSlowLimiter(t, &h, []int{5, 6}, aiLimits())
	ctx := context.Background()

	// A request: one Take of both limits, then the settlement of the
	// tokens limit alone (300 used of 1000 reserved).
	require.Equal(t, http.StatusOK, serve(lim.Handler(reporting(t, 300, nil)), request("POST", "/", "k", 1000)).Code)
	// Limiter.Take and Limiter.Adjust: one call each.
	_, err := lim.Take(ctx, "k", 1, 10)
	require.NoError(t, err)
	_, err = lim.Adjust(ctx, "k", "tokens", 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"take/2/3ms/ok", "adjust/1/5ms/ok", "take/2/3ms/ok", "adjust/1/5ms/ok"}, h.ops(t, st))

	// Call 5 fails: the hook gets the very error Take returns and
	// OnStoreError and OnBypass report.
	res, takeErr := lim.Take(ctx, "k")
	require.Error(t, takeErr)
	assert.Equal(t, ratelimit.Result{Allowed: true, Bypassed: true}, res)
	// Call 6 fails: Adjust's error.
	_, adjErr := lim.Adjust(ctx, "k", "requests", -1)
	require.Error(t, adjErr)
	assert.Equal(t, []string{"take/2/3ms/ok", "adjust/1/5ms/ok", "take/2/3ms/ok", "adjust/1/5ms/ok",
		"take/2/3ms/error", "adjust/1/5ms/error"}, h.ops(t, st))
	for _, err := range []error{takeErr, adjErr} {
		assert.ErrorIs(t, err, ratelimit.ErrStoreFailed)
		assert.ErrorIs(t, err, errStoreDown)
		assert.NotErrorIs(t, err, ratelimit.ErrStoreTimeout)
		assert.Equal(t, "ratelimit: store: store down", err.Error(), "the message is unchanged")
	}
	assert.True(t, h.calls[4].Err == takeErr && h.calls[5].Err == adjErr, "the hook gets the returned errors")
	assert.Equal(t, []error{takeErr, adjErr}, h.storeErrs)
	assert.Equal(t, []error{takeErr}, h.bypasses)
	assert.Equal(t, ratelimit.Stats{Allowed: 2, Bypassed: 1, StoreErrors: 2, Settled: 1}, lim.Stats())
	assert.Len(t, h.decisions, 2)
}

func TestOnStoreCallCancel(t *testing.T) {
	// 10 per second as a queue, one slot every 100ms. Calls: 1 and 2 the
	// Reserves, 3 and 4 the second's Cancel (read, refund); 5 the third
	// Reserve, 6 its Cancel's read, 7 its refund, which fails.
	var h hookLog
	lim, st, _ := newSlowLimiter(t, &h, []int{7}, ratelimit.WithLimits(ratelimit.PerSecond(10).WithAlgorithm(ratelimit.LeakyBucket)))
	ctx := context.Background()
	_, err := lim.Reserve(ctx, "k")
	require.NoError(t, err)
	r, err := lim.Reserve(ctx, "k")
	require.NoError(t, err)
	require.True(t, r.OK())
	require.NoError(t, r.Cancel(ctx))
	r, err = lim.Reserve(ctx, "k")
	require.NoError(t, err)
	cancelErr := r.Cancel(ctx)
	require.ErrorIs(t, cancelErr, ratelimit.ErrStoreFailed)
	require.ErrorIs(t, cancelErr, errStoreDown)
	assert.Equal(t, []string{"take/1/3ms/ok", "take/1/3ms/ok", "take/1/3ms/ok", "adjust/1/5ms/ok",
		"take/1/3ms/ok", "take/1/3ms/ok", "adjust/1/5ms/error"}, h.ops(t, st))
	assert.True(t, h.calls[6].Err == cancelErr)
	assert.Equal(t, []error{cancelErr}, h.storeErrs)
	assert.Equal(t, ratelimit.Stats{Allowed: 3, StoreErrors: 1}, lim.Stats(), "Cancel's read is no decision")
}

func TestOnStoreCallShadowRetake(t *testing.T) {
	// 500 tokens exceed the shadow limit's burst, so it refuses and the
	// enforced limit is charged in a second Take (of one limit). The
	// second time, that Take (call 4) fails: a store bypass.
	var h hookLog
	lim, st, _ := newSlowLimiter(t, &h, []int{4}, ratelimit.WithLimits(ratelimit.PerMinute(60).Named("requests"),
		ratelimit.PerMinute(100).Named("tokens").CostFrom(estimateTokens).Shadow()))
	ran := 0
	handler := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran++ }))
	require.Equal(t, http.StatusOK, serve(handler, request("POST", "/", "k", 500)).Code)
	require.Equal(t, http.StatusOK, serve(handler, request("POST", "/", "k", 500)).Code)
	assert.Equal(t, 2, ran)
	assert.Equal(t, []string{"take/2/3ms/ok", "take/1/3ms/ok", "take/2/3ms/ok", "take/1/3ms/error"}, h.ops(t, st))
	require.Len(t, h.bypasses, 1)
	assert.ErrorIs(t, h.bypasses[0], ratelimit.ErrStoreFailed)
	assert.True(t, h.bypasses[0] == h.calls[3].Err)
	require.Len(t, h.decisions, 1, "the bypassed request has no decision")
	assert.True(t, h.decisions[0].Allowed && h.decisions[0].ShadowLimited())
	assert.Equal(t, ratelimit.Stats{Allowed: 1, ShadowLimited: 1, Bypassed: 1, StoreErrors: 1}, lim.Stats())
}

func TestStoreCallClockReadOnlyWithTheHook(t *testing.T) {
	clock := newClock()
	reads := 0
	count := func() time.Time { reads++; return clock.Now() }
	lim, err := ratelimit.New(newStore(t, clock.Now), aiLimits(),
		ratelimit.WithHooks(ratelimit.Hooks{OnDecision: func(context.Context, ratelimit.Result) {}}))
	require.NoError(t, err)
	ratelimit.SetClock(lim, count)
	require.Equal(t, http.StatusOK, serve(lim.Handler(reporting(t, 10, nil)), request("POST", "/", "k", 100)).Code)
	assert.Zero(t, reads)

	var calls []ratelimit.StoreCall
	lim, err = ratelimit.New(newStore(t, clock.Now), aiLimits(),
		ratelimit.WithHooks(ratelimit.Hooks{OnStoreCall: func(_ context.Context, c ratelimit.StoreCall) { calls = append(calls, c) }}))
	require.NoError(t, err)
	ratelimit.SetClock(lim, count)
	require.Equal(t, http.StatusOK, serve(lim.Handler(reporting(t, 10, nil)), request("POST", "/", "k", 100)).Code)
	assert.Equal(t, 4, reads, "two reads around each of the two calls")
	assert.Len(t, calls, 2)
}

func TestErrStoreFailedTellsBypassesApart(t *testing.T) {
	t.Run("store", func(t *testing.T) {
		var h hookLog
		lim, err := ratelimit.New(failingStore{}, aiLimits(), h.hooks())
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, serve(lim.Handler(okHandler), request("POST", "/", "k", 1)).Code)
		require.Len(t, h.bypasses, 1)
		assert.ErrorIs(t, h.bypasses[0], ratelimit.ErrStoreFailed)
		assert.ErrorIs(t, h.bypasses[0], errStoreDown)
	})
	t.Run("key", func(t *testing.T) {
		var h hookLog
		lim, err := ratelimit.New(failingStore{}, aiLimits(), h.hooks(), ratelimit.WithKey(ratelimit.KeyByAPIKey()), ratelimit.WithSkipOnKeyError())
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, serve(lim.Handler(okHandler), request("POST", "/", "", 1)).Code)
		require.Len(t, h.bypasses, 1)
		assert.ErrorIs(t, h.bypasses[0], ratelimit.ErrMissingKey)
		assert.NotErrorIs(t, h.bypasses[0], ratelimit.ErrStoreFailed)
		assert.Empty(t, h.calls, "no store call")
		assert.Equal(t, ratelimit.Stats{Bypassed: 1, KeyErrors: 1}, lim.Stats())
	})
	t.Run("timeout", func(t *testing.T) {
		// The store never answers; the 1ms store timeout ends the call.
		// The fake clock does not move, so the duration is 0 exactly.
		var h hookLog
		lim, err := ratelimit.New(&blockingStore{}, aiLimits(), h.hooks(), ratelimit.WithStoreTimeout(time.Millisecond),
			ratelimit.WithFailureMode(ratelimit.FailClosed))
		require.NoError(t, err)
		ratelimit.SetClock(lim, newClock().Now)
		_, err = lim.Take(context.Background(), "k")
		assert.ErrorIs(t, err, ratelimit.ErrStoreFailed)
		assert.ErrorIs(t, err, ratelimit.ErrStoreTimeout)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, "ratelimit: store call timed out after 1ms: context deadline exceeded", err.Error(), "the message is unchanged")
		require.Len(t, h.calls, 1)
		assert.Equal(t, ratelimit.StoreCall{Op: ratelimit.OpTake, Requests: 2, Err: err, Store: h.calls[0].Store}, h.calls[0])
		assert.Equal(t, []error{err}, h.storeErrs)
	})
	t.Run("FailClosed rejection", func(t *testing.T) {
		var got error
		lim, err := ratelimit.New(failingStore{}, aiLimits(), ratelimit.WithFailureMode(ratelimit.FailClosed),
			ratelimit.WithRejectHandler(func(w http.ResponseWriter, r *http.Request, rej ratelimit.Rejection) {
				got = rej.Err
				ratelimit.DefaultRejectHandler(w, r, rej)
			}))
		require.NoError(t, err)
		require.Equal(t, http.StatusServiceUnavailable, serve(lim.Handler(okHandler), request("POST", "/", "k", 1)).Code)
		assert.ErrorIs(t, got, ratelimit.ErrStoreFailed)
	})
	t.Run("settlement", func(t *testing.T) {
		// Call 1 (the Take) succeeds, call 2 (the settlement) fails.
		var h hookLog
		lim, st, _ := newSlowLimiter(t, &h, []int{2}, aiLimits())
		require.Equal(t, http.StatusOK, serve(lim.Handler(reporting(t, 300, nil)), request("POST", "/", "k", 1000)).Code)
		assert.Equal(t, []string{"take/2/3ms/ok", "adjust/1/5ms/error"}, h.ops(t, st))
		require.Len(t, h.storeErrs, 1)
		assert.ErrorIs(t, h.storeErrs[0], ratelimit.ErrStoreFailed)
		assert.True(t, h.storeErrs[0] == h.calls[1].Err)
		assert.Empty(t, h.bypasses)
		assert.Equal(t, ratelimit.Stats{Allowed: 1, StoreErrors: 1}, lim.Stats())
	})
	t.Run("abandoned", func(t *testing.T) {
		// The caller's context ended: no store failure, whatever the
		// store answers; the error wraps the context's.
		var h hookLog
		lim, err := ratelimit.New(failingStore{}, aiLimits(), h.hooks())
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		res, err := lim.Take(ctx, "k")
		assert.Equal(t, ratelimit.Result{}, res)
		assert.ErrorIs(t, err, context.Canceled)
		assert.ErrorIs(t, err, errStoreDown)
		assert.NotErrorIs(t, err, ratelimit.ErrStoreFailed)
		require.Len(t, h.calls, 1)
		assert.True(t, h.calls[0].Err == err)
		assert.Empty(t, h.storeErrs)
		assert.Empty(t, h.bypasses)
		assert.Equal(t, ratelimit.Stats{}, lim.Stats())
	})
}

func TestMaxWaitReportsTheRefusalOnce(t *testing.T) {
	// 10 per second as a queue, at most 250ms of waiting, and a shadow
	// limit of 1 per second: requests 2 and 3 are shadow-limited (a second
	// Take charges the queue alone) and wait 100 and 200ms; request 4's
	// slot is 300ms away, so it is refused and refunded (call 8, which
	// fails in the second run). The store's clock stands still (Take and
	// Adjust take 0 on it) so the slots are exact.
	for _, refundFails := range []bool{false, true} {
		t.Run(fmt.Sprintf("refundFails=%v", refundFails), func(t *testing.T) {
			var h hookLog
			var fail []int
			if refundFails {
				fail = []int{8}
			}
			lim, st, _ := newSlowLimiter(t, &h, fail, ratelimit.WithMaxWait(250*time.Millisecond),
				ratelimit.WithLimits(ratelimit.PerSecond(10).WithAlgorithm(ratelimit.LeakyBucket),
					ratelimit.PerSecond(1).Named("shadow").Shadow()))
			st.take, st.adjust = 0, 0
			var rec waitRecorder
			ratelimit.SetSleep(lim, rec.sleep)
			handler := lim.Handler(okHandler)
			want := []ratelimit.Stats{
				{Allowed: 1},
				{Allowed: 2, ShadowLimited: 1},
				{Allowed: 3, ShadowLimited: 2},
				{Allowed: 3, ShadowLimited: 2, Limited: 1},
			}
			for i, w := range want {
				code := serve(handler, request("GET", "/", "k", -1)).Code
				if i < 3 {
					require.Equal(t, http.StatusOK, code)
				} else {
					require.Equal(t, http.StatusTooManyRequests, code)
				}
				if refundFails && i == 3 {
					w.StoreErrors = 1
				}
				assert.Equal(t, w, lim.Stats(), "after request %d", i+1)
				require.Len(t, h.decisions, i+1, "one decision per request")
			}
			assert.Equal(t, []time.Duration{100 * time.Millisecond, 200 * time.Millisecond}, rec.get())
			result := "ok"
			if refundFails {
				result = "error"
			}
			assert.Equal(t, []string{"take/2/0s/ok", "take/2/0s/ok", "take/1/0s/ok", "take/2/0s/ok", "take/1/0s/ok",
				"take/2/0s/ok", "take/1/0s/ok", "adjust/1/0s/" + result}, h.ops(t, st))

			// The decision reported is the 429 the client got.
			res := h.decisions[3]
			assert.False(t, res.Allowed)
			assert.Equal(t, 50*time.Millisecond, res.RetryAfter)
			assert.Zero(t, res.Delay)
			require.Len(t, res.Decisions, 2)
			q, sh := res.Decisions[0], res.Decisions[1]
			assert.False(t, q.Allowed)
			assert.Equal(t, 50*time.Millisecond, q.RetryAfter)
			assert.Zero(t, q.Delay)
			if refundFails {
				assert.Equal(t, int64(6), q.Remaining, "the state before the failed refund")
				require.Len(t, h.storeErrs, 1)
				assert.ErrorIs(t, h.storeErrs[0], ratelimit.ErrStoreFailed)
			} else {
				assert.Equal(t, int64(7), q.Remaining, "the state after the refund")
				assert.Empty(t, h.storeErrs)
			}
			assert.False(t, sh.Allowed, "the shadow limit refused, uncharged")
			assert.True(t, res.ShadowLimited())
			assert.Empty(t, h.bypasses)
		})
	}
}
