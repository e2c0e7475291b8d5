package resilient_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/memory"
	"github.com/rampmeter/ratelimit/store/resilient"
)

var t0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

// primary is a scriptable fake of the shared store. By default it admits
// everything; fail makes it return an error; hang makes every call block
// (ignoring its context) until release is closed.
type primary struct {
	mu      sync.Mutex
	calls   int
	fail    error
	hang    chan struct{} // non-nil: block until closed
	started chan struct{} // non-nil: receives a value when a call starts
	ops     []resilient.Op
}

func (p *primary) Take(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	return p.do(resilient.OpTake, reqs, out)
}

func (p *primary) Adjust(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	return p.do(resilient.OpAdjust, reqs, out)
}

func (p *primary) do(op resilient.Op, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	p.mu.Lock()
	p.calls++
	p.ops = append(p.ops, op)
	fail, hang, started := p.fail, p.hang, p.started
	p.mu.Unlock()
	if started != nil {
		started <- struct{}{}
	}
	if hang != nil {
		<-hang // ignores the context, as a client without deadlines would
	}
	if fail != nil {
		return fail
	}
	for i, r := range reqs {
		// Remaining 999 marks a decision of the primary.
		out[i] = ratelimit.Decision{Limit: r.Limit, Allowed: true, Remaining: 999}
	}
	return nil
}

func (p *primary) set(fn func(p *primary)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fn(p)
}

func (p *primary) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls
}

var errDown = errors.New("connection refused")

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// events records hook calls.
type events struct {
	mu          sync.Mutex
	kinds       []resilient.ErrorKind
	fallbacks   int
	transitions []string
	latencies   []time.Duration
}

func (e *events) hooks() resilient.Hooks {
	return resilient.Hooks{
		OnStoreError: func(_ context.Context, _ resilient.Op, k resilient.ErrorKind, _ error) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.kinds = append(e.kinds, k)
		},
		OnFallback: func(context.Context, resilient.Op, error) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.fallbacks++
		},
		OnCircuitChange: func(from, to resilient.State) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.transitions = append(e.transitions, from.String()+">"+to.String())
		},
		OnLatency: func(_ context.Context, _ resilient.Op, d time.Duration, _ error) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.latencies = append(e.latencies, d)
		},
	}
}

// newGuard is resilient.New with a deadline of a minute before opts (which
// may set another). The deadline is real time, and outside a synctest
// bubble a loaded machine can take longer than the default 50 ms to run
// the primary's goroutine: the call then times out, and a test of errors,
// panics or the breaker sees a timeout instead (TestPrimaryPanicIsAnError
// did, under go test -race ./...). The deadline's own tests run in
// synctest bubbles.
func newGuard(primary ratelimit.Store, opts ...resilient.Option) (*resilient.Store, error) {
	return resilient.New(primary, append([]resilient.Option{resilient.WithTimeout(time.Minute)}, opts...)...)
}

func take(t *testing.T, s ratelimit.Store, l *ratelimit.Limit) (ratelimit.Decision, error) {
	t.Helper()
	out := make([]ratelimit.Decision, 1)
	err := s.Take(t.Context(), []ratelimit.Request{{Key: "k", Limit: l, Cost: 1}}, out)
	return out[0], err
}

func TestNewOptions(t *testing.T) {
	p := &primary{}
	_, err := resilient.New(nil)
	require.ErrorIs(t, err, resilient.ErrInvalidOption)
	local, err := memory.New()
	require.NoError(t, err)
	for _, o := range []resilient.Option{
		nil,
		resilient.WithTimeout(0),
		resilient.WithFailureThreshold(0),
		resilient.WithBackoff(0, time.Second),
		resilient.WithBackoff(2*time.Second, time.Second),
		resilient.WithJitter(1),
		resilient.WithJitter(-0.1),
		resilient.WithMaxInFlight(0),
		resilient.WithFallback(nil, resilient.EvenShare(2)),
		resilient.WithFallback(local, resilient.EvenShare(0)),
		resilient.WithClock(nil),
		resilient.WithRand(nil),
	} {
		_, err := resilient.New(p, o)
		require.ErrorIs(t, err, resilient.ErrInvalidOption)
	}
	s, err := resilient.New(p)
	require.NoError(t, err)
	require.Equal(t, resilient.Closed, s.State())
}

func TestInvalidRequestNeverReachesPrimary(t *testing.T) {
	p := &primary{}
	s, err := resilient.New(p)
	require.NoError(t, err)
	l := ratelimit.PerMinute(60)
	err = s.Take(t.Context(), []ratelimit.Request{{Key: "", Limit: &l, Cost: 1}}, make([]ratelimit.Decision, 1))
	require.ErrorIs(t, err, ratelimit.ErrInvalidRequest)
	err = s.Take(t.Context(), []ratelimit.Request{{Key: "k", Limit: &l, Cost: -1}}, make([]ratelimit.Decision, 1))
	require.ErrorIs(t, err, ratelimit.ErrInvalidRequest)
	require.NoError(t, s.Take(t.Context(), nil, nil))
	require.Equal(t, 0, p.count())
	require.Equal(t, resilient.Closed, s.State())
}

// TestBreaker walks the circuit through its states with a fake clock and
// no jitter: threshold 3, backoff 100 ms doubling to at most 300 ms.
func TestBreaker(t *testing.T) {
	p := &primary{fail: errDown}
	clk := &clock{t: t0}
	var ev events
	s, err := newGuard(p, resilient.WithFailureThreshold(3), resilient.WithBackoff(100*time.Millisecond, 300*time.Millisecond),
		resilient.WithJitter(0), resilient.WithClock(clk.Now), resilient.WithHooks(ev.hooks()))
	require.NoError(t, err)
	l := ratelimit.PerMinute(60)

	// Two failures, then a success: consecutive failures only count.
	for range 2 {
		_, err := take(t, s, &l)
		require.ErrorIs(t, err, errDown)
	}
	p.set(func(p *primary) { p.fail = nil })
	_, err = take(t, s, &l)
	require.NoError(t, err)
	p.set(func(p *primary) { p.fail = errDown })
	for range 2 {
		_, err := take(t, s, &l)
		require.ErrorIs(t, err, errDown)
	}
	require.Equal(t, resilient.Closed, s.State())
	_, err = take(t, s, &l) // the third consecutive failure opens it
	require.ErrorIs(t, err, errDown)
	require.Equal(t, resilient.Open, s.State())
	require.Equal(t, 6, p.count())

	// Open: fail fast without calling the primary, until 100 ms passed.
	clk.Add(99 * time.Millisecond)
	_, err = take(t, s, &l)
	require.ErrorIs(t, err, resilient.ErrCircuitOpen)
	require.Equal(t, 6, p.count())

	// At 100 ms the next call probes; it fails: open for 200 ms.
	clk.Add(time.Millisecond)
	_, err = take(t, s, &l)
	require.ErrorIs(t, err, errDown)
	require.Equal(t, 7, p.count())
	require.Equal(t, resilient.Open, s.State())
	clk.Add(199 * time.Millisecond)
	_, err = take(t, s, &l)
	require.ErrorIs(t, err, resilient.ErrCircuitOpen)
	clk.Add(time.Millisecond)
	_, err = take(t, s, &l) // probe fails: 400 ms capped to 300 ms
	require.ErrorIs(t, err, errDown)
	clk.Add(299 * time.Millisecond)
	_, err = take(t, s, &l)
	require.ErrorIs(t, err, resilient.ErrCircuitOpen)
	clk.Add(time.Millisecond)
	_, err = take(t, s, &l) // and stays capped
	require.ErrorIs(t, err, errDown)
	require.Equal(t, 9, p.count())

	// The primary recovers: the probe after 300 ms closes the circuit.
	p.set(func(p *primary) { p.fail = nil })
	clk.Add(300 * time.Millisecond)
	d, err := take(t, s, &l)
	require.NoError(t, err)
	require.Equal(t, int64(999), d.Remaining)
	require.Equal(t, resilient.Closed, s.State())

	// The backoff starts over at 100 ms after the next open.
	p.set(func(p *primary) { p.fail = errDown })
	for range 3 {
		_, _ = take(t, s, &l)
	}
	require.Equal(t, resilient.Open, s.State())
	clk.Add(100 * time.Millisecond)
	p.set(func(p *primary) { p.fail = nil })
	_, err = take(t, s, &l)
	require.NoError(t, err)

	require.Equal(t, []string{
		"closed>open",
		"open>half-open", "half-open>open",
		"open>half-open", "half-open>open",
		"open>half-open", "half-open>open",
		"open>half-open", "half-open>closed",
		"closed>open", "open>half-open", "half-open>closed",
	}, ev.transitions)
	// 5 opens: 2 by the threshold, 3 by failed probes; 3 fast failures;
	// 14 primary calls, of which 11 failed.
	require.Equal(t, resilient.Stats{PrimaryCalls: 14, Errors: 11, Rejected: 3, Opens: 5}, s.Stats())
	require.Equal(t, []resilient.ErrorKind{
		"error", "error", "error", "error", "error", "circuit_open", "error", "circuit_open", "error",
		"circuit_open", "error", "error", "error", "error",
	}, ev.kinds)
	require.Len(t, ev.latencies, 14)
}

// TestBackoffJitter: with jitter 0.5 and draws 0.5 then 0.25, backoffs of
// 100 ms and 200 ms become 100×(1−0.5×0.5) = 75 ms and 200×(1−0.5×0.25) =
// 175 ms.
func TestBackoffJitter(t *testing.T) {
	p := &primary{fail: errDown}
	clk := &clock{t: t0}
	draws := []float64{0.5, 0.25}
	s, err := newGuard(p, resilient.WithFailureThreshold(1), resilient.WithJitter(0.5),
		resilient.WithClock(clk.Now), resilient.WithRand(func() float64 { d := draws[0]; draws = draws[1:]; return d }))
	require.NoError(t, err)
	l := ratelimit.PerMinute(60)
	_, _ = take(t, s, &l) // opens: 75 ms
	clk.Add(74 * time.Millisecond)
	_, err = take(t, s, &l)
	require.ErrorIs(t, err, resilient.ErrCircuitOpen)
	clk.Add(time.Millisecond)
	_, err = take(t, s, &l) // probe fails: 175 ms
	require.ErrorIs(t, err, errDown)
	clk.Add(174 * time.Millisecond)
	_, err = take(t, s, &l)
	require.ErrorIs(t, err, resilient.ErrCircuitOpen)
	clk.Add(time.Millisecond)
	p.set(func(p *primary) { p.fail = nil })
	_, err = take(t, s, &l)
	require.NoError(t, err)
	require.Equal(t, resilient.Closed, s.State())
}

// TestOneProbeAtATime: while the probe is in flight the circuit is
// half-open and every other call fails fast.
func TestOneProbeAtATime(t *testing.T) {
	p := &primary{fail: errDown}
	clk := &clock{t: t0}
	s, err := newGuard(p, resilient.WithFailureThreshold(1), resilient.WithJitter(0),
		resilient.WithClock(clk.Now), resilient.WithTimeout(time.Hour))
	require.NoError(t, err)
	l := ratelimit.PerMinute(60)
	_, _ = take(t, s, &l)
	require.Equal(t, resilient.Open, s.State())
	clk.Add(time.Second)
	hang, started := make(chan struct{}), make(chan struct{})
	p.set(func(p *primary) { p.fail, p.hang, p.started = nil, hang, started })
	probeErr := make(chan error)
	go func() { _, err := take(t, s, &l); probeErr <- err }()
	<-started
	require.Equal(t, resilient.HalfOpen, s.State())
	for range 3 {
		_, err := take(t, s, &l)
		require.ErrorIs(t, err, resilient.ErrCircuitOpen)
	}
	close(hang)
	require.NoError(t, <-probeErr)
	require.Equal(t, resilient.Closed, s.State())
	require.Equal(t, 2, p.count())
}

// TestDeadlineHoldsWhenPrimaryIgnoresContext runs in a synctest bubble, so
// its clock is fake and exact: a primary that ignores its context is
// abandoned at the deadline (30 ms), not when it returns.
func TestDeadlineHoldsWhenPrimaryIgnoresContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hang := make(chan struct{})
		p := &primary{hang: hang}
		var ev events
		s, err := resilient.New(p, resilient.WithTimeout(30*time.Millisecond), resilient.WithHooks(ev.hooks()))
		require.NoError(t, err)
		l := ratelimit.PerMinute(60)
		out := []ratelimit.Decision{{Remaining: -7}}
		start := time.Now()
		err = s.Take(t.Context(), []ratelimit.Request{{Key: "k", Limit: &l, Cost: 1}}, out)
		require.Equal(t, 30*time.Millisecond, time.Since(start))
		require.ErrorIs(t, err, resilient.ErrTimeout)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Equal(t, []resilient.ErrorKind{resilient.KindTimeout}, ev.kinds)
		require.Equal(t, []time.Duration{30 * time.Millisecond}, ev.latencies)

		// The caller's earlier deadline wins.
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
		defer cancel()
		start = time.Now()
		err = s.Take(ctx, []ratelimit.Request{{Key: "k", Limit: &l, Cost: 1}}, out)
		require.Equal(t, 10*time.Millisecond, time.Since(start))
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Equal(t, int64(2), s.Stats().InFlight)

		// The abandoned calls finish later, into buffers of their own.
		close(hang)
		require.NoError(t, s.Drain(t.Context()))
		synctest.Wait()
		require.Equal(t, int64(-7), out[0].Remaining)
		require.Equal(t, resilient.Stats{PrimaryCalls: 2, Timeouts: 2, Abandoned: 2}, s.Stats())
	})
}

// TestInFlightBound: with at most 2 primary calls in flight, two hung
// calls leave no room, and the third is not sent (ErrSaturated); it does
// not count towards opening the circuit.
func TestInFlightBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hang := make(chan struct{})
		p := &primary{hang: hang}
		var ev events
		s, err := resilient.New(p, resilient.WithTimeout(30*time.Millisecond), resilient.WithMaxInFlight(2),
			resilient.WithFailureThreshold(3), resilient.WithHooks(ev.hooks()))
		require.NoError(t, err)
		l := ratelimit.PerMinute(60)
		for range 2 {
			_, err := take(t, s, &l)
			require.ErrorIs(t, err, resilient.ErrTimeout)
		}
		for range 5 {
			_, err := take(t, s, &l)
			require.ErrorIs(t, err, resilient.ErrSaturated)
		}
		require.Equal(t, 2, p.count())
		require.Equal(t, resilient.Closed, s.State())
		require.Equal(t, int64(2), s.Stats().InFlight)
		close(hang)
		require.NoError(t, s.Drain(t.Context()))
		_, err = take(t, s, &l)
		require.NoError(t, err)
		require.Equal(t, uint64(5), s.Stats().Saturated)
		require.Equal(t, []resilient.ErrorKind{"timeout", "timeout", "saturated", "saturated", "saturated", "saturated", "saturated"}, ev.kinds)
	})
}

// TestCallerCancellationTeachesNothing: a call whose own context is
// canceled returns the cancellation, is not a failure, and gives up the
// probe without reopening the circuit.
func TestCallerCancellationTeachesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hang, started := make(chan struct{}), make(chan struct{}, 10)
		p := &primary{hang: hang, started: started}
		local, err := memory.New()
		require.NoError(t, err)
		var ev events
		s, err := resilient.New(p, resilient.WithFailureThreshold(1), resilient.WithFallback(local, resilient.EvenShare(2)),
			resilient.WithHooks(ev.hooks()))
		require.NoError(t, err)
		l := ratelimit.PerMinute(60)
		ctx, cancel := context.WithCancel(t.Context())
		go func() { <-started; cancel() }()
		err = s.Take(ctx, []ratelimit.Request{{Key: "k", Limit: &l, Cost: 1}}, make([]ratelimit.Decision, 1))
		require.ErrorIs(t, err, context.Canceled)
		require.Equal(t, resilient.Closed, s.State())
		require.Empty(t, ev.kinds)
		require.Zero(t, ev.fallbacks)
		// Already canceled: not even sent.
		err = s.Take(ctx, []ratelimit.Request{{Key: "k", Limit: &l, Cost: 1}}, make([]ratelimit.Decision, 1))
		require.ErrorIs(t, err, context.Canceled)
		require.Equal(t, 1, p.count())
		close(hang)
		require.NoError(t, s.Drain(t.Context()))
	})
}

// TestFallback: while the primary fails, a memory store decides against
// each limit scaled to a third: PerMinute(10) becomes 3 per minute, so
// exactly 3 of 5 requests pass; decisions point to the caller's limit.
func TestFallback(t *testing.T) {
	p := &primary{fail: errDown}
	clk := &clock{t: t0}
	local, err := memory.New(memory.WithClock(clk.Now))
	require.NoError(t, err)
	var ev events
	s, err := newGuard(p, resilient.WithFailureThreshold(2), resilient.WithJitter(0), resilient.WithClock(clk.Now),
		resilient.WithFallback(local, resilient.EvenShare(3)), resilient.WithHooks(ev.hooks()))
	require.NoError(t, err)
	l := ratelimit.PerMinute(10).Named("rpm")
	var allowed []bool
	for range 5 {
		d, err := take(t, s, &l)
		require.NoError(t, err)
		require.Same(t, &l, d.Limit)
		allowed = append(allowed, d.Allowed)
	}
	require.Equal(t, []bool{true, true, true, false, false}, allowed)
	// Two calls failed on the primary, then the circuit opened and three
	// were not sent; all five were decided by the fallback.
	require.Equal(t, 2, p.count())
	require.Equal(t, resilient.Open, s.State())
	require.Equal(t, 5, ev.fallbacks)
	require.Equal(t, []resilient.ErrorKind{"error", "error", "circuit_open", "circuit_open", "circuit_open"}, ev.kinds)

	// A refund during the outage goes to the fallback: one more passes.
	out := make([]ratelimit.Decision, 1)
	require.NoError(t, s.Adjust(t.Context(), []ratelimit.Request{{Key: "k", Limit: &l, Cost: -1}}, out))
	require.Same(t, &l, out[0].Limit)
	require.Equal(t, int64(1), out[0].Remaining)
	d, err := take(t, s, &l)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.Equal(t, int64(0), d.Remaining)

	// Recovery: the probe closes the circuit and the primary decides.
	p.set(func(p *primary) { p.fail = nil })
	clk.Add(100 * time.Millisecond)
	d, err = take(t, s, &l)
	require.NoError(t, err)
	require.Equal(t, int64(999), d.Remaining)
	require.Equal(t, resilient.Closed, s.State())
	require.Equal(t, []resilient.Op{"take", "take", "take"}, p.ops) // the Adjust was never sent
	require.Equal(t, uint64(7), s.Stats().Fallbacks)
}

// TestFallbackKeepsNamedLimitersApart: the scaled copies of two limits
// that differ only by their Limiter's name (ratelimit.WithName) keep
// separate states in the fallback, as their IDs do in the primary.
func TestFallbackKeepsNamedLimitersApart(t *testing.T) {
	p := &primary{fail: errDown}
	clk := &clock{t: t0}
	local, err := memory.New(memory.WithClock(clk.Now))
	require.NoError(t, err)
	s, err := newGuard(p, resilient.WithClock(clk.Now), resilient.WithFallback(local, resilient.EvenShare(1)))
	require.NoError(t, err)
	limit := func(name string) ratelimit.Limit {
		lim, err := ratelimit.New(s, ratelimit.WithName(name), ratelimit.WithLimits(ratelimit.PerMinute(2).Named("rpm")))
		require.NoError(t, err)
		return lim.Limits()[0]
	}
	a, b := limit("a"), limit("b")
	for _, want := range []bool{true, true, false} {
		d, err := take(t, s, &a)
		require.NoError(t, err)
		require.Equal(t, want, d.Allowed)
	}
	d, err := take(t, s, &b) // the same key, another Limiter: its own 2
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.Equal(t, int64(1), d.Remaining)
}

// TestFallbackAfterTimeout: a call abandoned at its deadline is still
// decided, by the fallback, although its context is done by then.
func TestFallbackAfterTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hang := make(chan struct{})
		p := &primary{hang: hang}
		local, err := memory.New()
		require.NoError(t, err)
		s, err := resilient.New(p, resilient.WithTimeout(time.Hour), resilient.WithFallback(local, resilient.EvenShare(2)))
		require.NoError(t, err)
		l := ratelimit.PerMinute(4)
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
		defer cancel()
		out := make([]ratelimit.Decision, 1)
		require.NoError(t, s.Take(ctx, []ratelimit.Request{{Key: "k", Limit: &l, Cost: 1}}, out))
		require.True(t, out[0].Allowed)
		require.Equal(t, int64(1), out[0].Remaining) // 2 per minute, one spent
		close(hang)
		require.NoError(t, s.Drain(t.Context()))
	})
}

// TestLimiterFailureModes drives a Limiter through httptest on a primary
// that is down: FailOpen lets requests through and counts bypasses,
// FailClosed answers 503, and a fallback decides (here: 2 of PerMinute(6)
// split three ways, then 429).
func TestLimiterFailureModes(t *testing.T) {
	l := ratelimit.PerMinute(6).Named("rpm")
	serve := func(t *testing.T, store ratelimit.Store, opts ...ratelimit.Option) ([]int, ratelimit.Stats) {
		lim, err := ratelimit.New(store, append([]ratelimit.Option{ratelimit.WithLimits(l),
			ratelimit.WithKey(ratelimit.KeyConst("all")), ratelimit.WithStoreTimeout(time.Minute)}, opts...)...)
		require.NoError(t, err)
		h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		var codes []int
		for range 4 {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
			codes = append(codes, rec.Code)
		}
		return codes, lim.Stats()
	}
	newStore := func(t *testing.T, opts ...resilient.Option) *resilient.Store {
		s, err := newGuard(&primary{fail: errDown}, opts...)
		require.NoError(t, err)
		return s
	}
	t.Run("FailOpen", func(t *testing.T) {
		codes, st := serve(t, newStore(t))
		require.Equal(t, []int{200, 200, 200, 200}, codes)
		require.Equal(t, uint64(4), st.Bypassed)
		require.Equal(t, uint64(4), st.StoreErrors)
	})
	t.Run("FailClosed", func(t *testing.T) {
		codes, st := serve(t, newStore(t), ratelimit.WithFailureMode(ratelimit.FailClosed))
		require.Equal(t, []int{503, 503, 503, 503}, codes)
		require.Equal(t, uint64(4), st.StoreErrors)
	})
	t.Run("Fallback", func(t *testing.T) {
		local, err := memory.New()
		require.NoError(t, err)
		s := newStore(t, resilient.WithFallback(local, resilient.EvenShare(3)))
		codes, st := serve(t, s, ratelimit.WithFailureMode(ratelimit.FailClosed))
		require.Equal(t, []int{200, 200, 429, 429}, codes)
		require.Equal(t, uint64(0), st.StoreErrors)
		require.Equal(t, uint64(4), s.Stats().Fallbacks)
	})
}

type panicking struct{ primary }

func (*panicking) Take(context.Context, []ratelimit.Request, []ratelimit.Decision) error {
	panic("boom")
}

// TestPrimaryPanicIsAnError: a panic on the guard's goroutine would end
// the process; it becomes a failure of the call instead.
func TestPrimaryPanicIsAnError(t *testing.T) {
	s, err := newGuard(&panicking{})
	require.NoError(t, err)
	l := ratelimit.PerMinute(60)
	_, err = take(t, s, &l)
	require.ErrorContains(t, err, "primary store panicked: boom")
	require.Equal(t, uint64(1), s.Stats().Errors)
}

// TestFallbackCostAboveScaledBurst: PerDay(100_000) split five ways is a
// fallback burst of 20,000. A cost of 30,000 fits the real burst, so the
// fallback's Never becomes a retryable refusal: RetryAfter is the time
// until the circuit's probe (the 1 s backoff, then what is left of it),
// or the initial backoff while the circuit is closed. A cost of 100,001
// exceeds the real burst and stays Never. Nothing is charged by refusals.
func TestFallbackCostAboveScaledBurst(t *testing.T) {
	p := &primary{fail: errDown}
	clk := &clock{t: t0}
	local, err := memory.New(memory.WithClock(clk.Now))
	require.NoError(t, err)
	s, err := newGuard(p, resilient.WithFailureThreshold(2), resilient.WithJitter(0), resilient.WithClock(clk.Now),
		resilient.WithBackoff(time.Second, 8*time.Second), resilient.WithFallback(local, resilient.EvenShare(5)))
	require.NoError(t, err)
	l := ratelimit.PerDay(100_000).Named("tokens")
	takeCost := func(cost int64) ratelimit.Decision {
		t.Helper()
		out := make([]ratelimit.Decision, 1)
		require.NoError(t, s.Take(t.Context(), []ratelimit.Request{{Key: "k", Limit: &l, Cost: cost}}, out))
		require.Same(t, &l, out[0].Limit)
		return out[0]
	}

	// First failure: the circuit stays closed; retry after the backoff.
	d := takeCost(30_000)
	require.False(t, d.Allowed)
	require.False(t, d.Never())
	require.Equal(t, time.Second, d.RetryAfter)
	require.Equal(t, resilient.Closed, s.State())

	// Second failure opens the circuit until t0 + 1 s.
	d = takeCost(30_000)
	require.False(t, d.Never())
	require.Equal(t, time.Second, d.RetryAfter)
	require.Equal(t, resilient.Open, s.State())

	clk.Add(300 * time.Millisecond)
	d = takeCost(30_000)
	require.False(t, d.Allowed)
	require.Equal(t, 700*time.Millisecond, d.RetryAfter)

	// Above the real burst: never.
	d = takeCost(100_001)
	require.False(t, d.Allowed)
	require.True(t, d.Never())
	require.Equal(t, ratelimit.RetryNever, d.RetryAfter)

	// The whole scaled burst is still there: nothing was charged.
	d = takeCost(20_000)
	require.True(t, d.Allowed)
	require.Equal(t, int64(0), d.Remaining)
	require.Equal(t, 2, p.count())
}

// TestFallbackSeesLimitChangedInPlace: the fallback scales the limit
// behind the pointer as it is now, not as it was at the first call.
// PerDay(1) split five ways is max(1, 0) = 1 per day: the second take on
// a fresh key is refused (the stale PerDay(100_000) would admit 20,000).
func TestFallbackSeesLimitChangedInPlace(t *testing.T) {
	clk := &clock{t: t0}
	local, err := memory.New(memory.WithClock(clk.Now))
	require.NoError(t, err)
	s, err := newGuard(&primary{fail: errDown}, resilient.WithJitter(0), resilient.WithClock(clk.Now),
		resilient.WithFallback(local, resilient.EvenShare(5)))
	require.NoError(t, err)
	lim := ratelimit.PerDay(100_000).Named("tokens")
	d, err := take(t, s, &lim)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.Equal(t, int64(19_999), d.Remaining)

	lim = ratelimit.PerDay(1).Named("tokens2")
	out := make([]ratelimit.Decision, 1)
	req := []ratelimit.Request{{Key: "fresh", Limit: &lim, Cost: 1}}
	require.NoError(t, s.Take(t.Context(), req, out))
	require.True(t, out[0].Allowed)
	require.Equal(t, int64(0), out[0].Remaining)
	require.NoError(t, s.Take(t.Context(), req, out))
	require.False(t, out[0].Allowed)
	require.Equal(t, 24*time.Hour, out[0].RetryAfter)
}

func TestUnwrapReturnsThePrimary(t *testing.T) {
	primary, err := memory.New()
	require.NoError(t, err)
	s, err := resilient.New(primary)
	require.NoError(t, err)
	require.Same(t, primary, s.Unwrap().(*memory.Store))
}
