package ratelimit

// Adversarial review of deadlineCtx (storectx.go, commit 1d7756d): every
// answer is held to the context.WithDeadline it stands for, on the same
// parent, deadline and sequence of events; then the Limiter's
// classification of failed store calls through call, callOne and callTwo.
// No sleeps: a deadline is waited for on a real timer bounded by it, and
// every other wait is on a channel, bounded by waitClosed's 5 s.
//
// Tests named ...Bug exposed a defect found by the review; each failed
// before the fix beside it in storectx.go.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// waitClosed waits for ch to close, failing t after 5 s (a bound, not a
// sleep: a correct context closes it at once or at its deadline).
func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: Done never closed", what)
	}
}

type reviewKey string

var errCause = errors.New("client went away")

// twin is a deadlineCtx and the context.WithDeadline it stands for, on
// one parent (a value, a cancelCause, optionally a deadline) and one
// deadline, with the children derived from each.
type twin struct {
	parent       context.Context
	cancelParent context.CancelCauseFunc
	got          *deadlineCtx
	want         context.Context
	stop         context.CancelFunc
	kids         [][2]context.Context // (child of got, child of want)
	ranGot       chan struct{}        // closed by context.AfterFunc(got, ...)
	ranWant      chan struct{}
}

func newTwin(t *testing.T, callIn, parentIn time.Duration) *twin {
	base := context.WithValue(context.Background(), reviewKey("k"), "v")
	parent, cancelParent := context.WithCancelCause(base)
	t.Cleanup(func() { cancelParent(nil) })
	if parentIn > 0 {
		var stopParent context.CancelFunc
		parent, stopParent = context.WithDeadline(parent, time.Now().Add(parentIn))
		t.Cleanup(stopParent)
	}
	deadline := time.Now().Add(callIn)
	want, stop := context.WithDeadline(parent, deadline)
	t.Cleanup(stop)
	tw := &twin{parent: parent, cancelParent: cancelParent, want: want, stop: stop,
		got: &deadlineCtx{parent: parent, deadline: deadline}}
	t.Cleanup(tw.got.cancel)
	return tw
}

// The events of a scenario, applied to both contexts in order.
func (tw *twin) end()          { tw.got.cancel(); tw.stop() }
func (tw *twin) parentCause()  { tw.cancelParent(errCause) }
func (tw *twin) observeErr()   { _, _ = tw.got.Err(), tw.want.Err() }
func (tw *twin) observeDone()  { _, _ = tw.got.Done(), tw.want.Done() }
func (tw *twin) observeValue() { _, _ = tw.got.Value(reviewKey("k")), tw.want.Value(reviewKey("k")) }

// deadlinePasses waits, on a timer, until the call's deadline has passed,
// then for want's timer (which fires at or after it) unless want ended.
func (tw *twin) deadlinePasses(t *testing.T) {
	d, _ := tw.want.Deadline()
	<-time.After(time.Until(d))
	waitClosed(t, tw.want.Done(), "want at its deadline")
	if tw.got.timed.Load() != nil { // started: its own timer fires too
		waitClosed(t, tw.got.Done(), "got at its deadline")
	}
}

// parentDeadlinePasses waits for the parent's own deadline.
func (tw *twin) parentDeadlinePasses(t *testing.T) {
	waitClosed(t, tw.parent.Done(), "parent")
	// The parent closes its Done before it cancels its children: wait for
	// want to have ended too, unless it ended before (then end raced the
	// parent's cancellation of want, and want's answer would depend on
	// which came first).
	waitClosed(t, tw.want.Done(), "want after its parent")
}

// derive makes children of both: WithCancel, WithValue, WithTimeout (an
// hour), WithoutCancel (values only) and an AfterFunc.
func (tw *twin) derive(t *testing.T) {
	for _, mk := range []func(context.Context) context.Context{
		func(c context.Context) context.Context {
			k, stop := context.WithCancel(c)
			t.Cleanup(stop)
			return k
		},
		func(c context.Context) context.Context { return context.WithValue(c, reviewKey("kid"), "w") },
		func(c context.Context) context.Context {
			k, stop := context.WithTimeout(c, time.Hour)
			t.Cleanup(stop)
			return k
		},
	} {
		tw.kids = append(tw.kids, [2]context.Context{mk(tw.got), mk(tw.want)})
	}
	tw.ranGot, tw.ranWant = make(chan struct{}), make(chan struct{})
	stopG := context.AfterFunc(tw.got, func() { close(tw.ranGot) })
	stopW := context.AfterFunc(tw.want, func() { close(tw.ranWant) })
	t.Cleanup(func() { stopG(); stopW() })
}

// answers is everything a context tells.
type answers struct {
	deadline   time.Time
	ok         bool
	err, cause error
	value, kid any
	closed     bool
}

func answersOf(c context.Context) answers {
	a := answers{err: c.Err(), cause: context.Cause(c), value: c.Value(reviewKey("k")), kid: c.Value(reviewKey("kid"))}
	a.deadline, a.ok = c.Deadline()
	a.closed = isClosed(c.Done())
	return a
}

func sameAs(t *testing.T, got, want answers, what string) {
	t.Helper()
	assert.Equal(t, want.ok, got.ok, "%s: Deadline ok", what)
	assert.True(t, want.deadline.Equal(got.deadline), "%s: Deadline: got %v, want %v", what, got.deadline, want.deadline)
	assert.Equal(t, want.err, got.err, "%s: Err", what)
	assert.Equal(t, want.cause, got.cause, "%s: Cause", what)
	assert.Equal(t, want.value, got.value, "%s: Value", what)
	assert.Equal(t, want.kid, got.kid, "%s: Value of a child's key", what)
	assert.Equal(t, want.closed, got.closed, "%s: Done closed", what)
	assert.Equal(t, got.err != nil, got.closed, "%s: Err non-nil iff Done closed", what)
}

// check holds got and its children to want and its children.
func (tw *twin) check(t *testing.T) {
	t.Helper()
	// A parent ending propagates to want's children synchronously, to
	// the AfterFunc on a goroutine: wait for what want's side did.
	if tw.ranWant != nil {
		if isClosed(tw.want.Done()) {
			waitClosed(t, tw.ranWant, "AfterFunc(want)")
			waitClosed(t, tw.ranGot, "AfterFunc(got)")
		} else {
			assert.False(t, isClosed(tw.ranGot), "AfterFunc(got) ran while want's did not")
		}
	}
	sameAs(t, answersOf(tw.got), answersOf(tw.want), "the call's context")
	for i, k := range tw.kids {
		sameAs(t, answersOf(k[0]), answersOf(k[1]), fmt.Sprintf("child %d", i))
	}
}

type scenario struct {
	name             string
	callIn, parentIn time.Duration // the call's deadline and the parent's (0: none), from now
	events           func(t *testing.T, tw *twin)
}

func runScenarios(t *testing.T, scs []scenario) {
	for _, sc := range scs {
		t.Run(sc.name, func(t *testing.T) {
			tw := newTwin(t, sc.callIn, sc.parentIn)
			sc.events(t, tw)
			tw.check(t)
		})
	}
}

const (
	hour  = time.Hour
	short = 2 * time.Millisecond
)

// TestReviewDeadlineCtxEventByEvent: for each sequence of events — the
// call's end (cancel), the parent's cancellation with a cause, the
// parent's deadline, the call's deadline, and a store asking Err, Done or
// Value, or deriving contexts — the deadlineCtx and its children answer
// as context.WithDeadline and its children do.
func TestReviewDeadlineCtxEventByEvent(t *testing.T) {
	runScenarios(t, []scenario{
		{"running, unobserved", hour, 0, func(t *testing.T, tw *twin) {}},
		{"running, children derived", hour, 0, func(t *testing.T, tw *twin) { tw.derive(t) }},
		{"ended", hour, 0, func(t *testing.T, tw *twin) { tw.end() }},
		{"ended twice, children derived after", hour, 0, func(t *testing.T, tw *twin) { tw.end(); tw.end(); tw.derive(t) }},
		{"children derived, then ended", hour, 0, func(t *testing.T, tw *twin) { tw.derive(t); tw.end() }},
		{"parent canceled with a cause while running", hour, 0, func(t *testing.T, tw *twin) { tw.parentCause() }},
		{"parent canceled with a cause, children derived after", hour, 0, func(t *testing.T, tw *twin) { tw.parentCause(); tw.derive(t) }},
		{"children derived, parent canceled with a cause", hour, 0, func(t *testing.T, tw *twin) { tw.derive(t); tw.parentCause() }},
		{"parent canceled with a cause, then ended", hour, 0, func(t *testing.T, tw *twin) { tw.parentCause(); tw.end() }},
		{"parent canceled, observed, ended", hour, 0, func(t *testing.T, tw *twin) { tw.parentCause(); tw.observeErr(); tw.end() }},
		{"Err observed, ended, parent canceled with a cause", hour, 0, func(t *testing.T, tw *twin) {
			tw.end()
			tw.observeErr()
			tw.parentCause()
		}},
		{"Done asked, ended, parent canceled with a cause", hour, 0, func(t *testing.T, tw *twin) {
			tw.observeDone()
			tw.end()
			tw.parentCause()
		}},
		{"Value asked, deadline passes while running", short, 0, func(t *testing.T, tw *twin) { tw.observeValue(); tw.deadlinePasses(t) }},
		{"deadline passes, Err observed, ended", short, 0, func(t *testing.T, tw *twin) {
			tw.deadlinePasses(t)
			tw.observeErr()
			tw.end()
		}},
		{"deadline passes, Err observed, parent canceled with a cause", short, 0, func(t *testing.T, tw *twin) {
			tw.deadlinePasses(t)
			tw.observeErr()
			tw.parentCause()
		}},
		{"Done asked, deadline fires, parent canceled with a cause", short, 0, func(t *testing.T, tw *twin) {
			tw.observeDone()
			tw.deadlinePasses(t)
			tw.parentCause()
		}},
		{"children derived, deadline fires, ended", short, 0, func(t *testing.T, tw *twin) {
			tw.derive(t)
			tw.deadlinePasses(t)
			tw.end()
		}},
		{"parent's deadline earlier, running", hour, hour / 2, func(t *testing.T, tw *twin) {}},
		{"parent's deadline later, running", hour / 2, hour, func(t *testing.T, tw *twin) {}},
		{"parent's deadline earlier, passes unobserved", hour, short, func(t *testing.T, tw *twin) { tw.parentDeadlinePasses(t) }},
		{"parent's deadline earlier, children derived, passes", hour, short, func(t *testing.T, tw *twin) {
			tw.derive(t)
			tw.parentDeadlinePasses(t)
		}},
		{"parent's deadline passes, then ended", hour, short, func(t *testing.T, tw *twin) { tw.parentDeadlinePasses(t); tw.end() }},
		{"parent already canceled at the start", hour, 0, func(t *testing.T, tw *twin) {
			// Rebuild both on a parent canceled with a cause before either exists.
			tw.cancelParent(errCause)
			deadline := time.Now().Add(hour)
			tw.got = &deadlineCtx{parent: tw.parent, deadline: deadline}
			tw.want, tw.stop = context.WithDeadline(tw.parent, deadline)
			t.Cleanup(tw.stop)
			tw.derive(t)
		}},
	})
}

// TestReviewDeadlineCtxDifferences pins the answers where a deadlineCtx
// knowingly differs from context.WithDeadline: a deadline that passed
// with nobody asking, before the call ended (documented: Canceled), or
// before the parent ended (not documented: the parent's error and cause,
// where WithDeadline's timer would have said DeadlineExceeded; a lazy
// context cannot tell when an unwatched parent ended, so this one is
// inherent, and the doc comment of Err should say so).
func TestReviewDeadlineCtxDifferences(t *testing.T) {
	t.Run("deadline passes unobserved, then ended", func(t *testing.T) {
		tw := newTwin(t, short, 0)
		tw.deadlinePasses(t)
		tw.end()
		tw.derive(t)
		assert.Equal(t, context.DeadlineExceeded, tw.want.Err())
		got := answersOf(tw.got)
		assert.Equal(t, context.Canceled, got.err)
		assert.Equal(t, context.Canceled, got.cause)
		assert.True(t, got.closed)
		for i, k := range tw.kids {
			assert.Equal(t, context.Canceled, k[0].Err(), "child %d", i)
			assert.Equal(t, context.Canceled, context.Cause(k[0]), "child %d", i)
		}
	})
	t.Run("deadline passes unobserved, then parent canceled with a cause", func(t *testing.T) {
		tw := newTwin(t, short, 0)
		tw.deadlinePasses(t)
		tw.parentCause()
		assert.Equal(t, context.DeadlineExceeded, context.Cause(tw.want))
		got := answersOf(tw.got)
		assert.Equal(t, context.Canceled, got.err)
		assert.Equal(t, errCause, got.cause)
		assert.True(t, got.closed)
		tw.end()
		assert.Equal(t, errCause, context.Cause(tw.got), "the call's end changes nothing")
	})
}

// TestReviewDeadlineCtxParentEndsAfterTheCallBug: once the call has
// ended (the Limiter's cancel), context.WithDeadline's answers are
// frozen at Canceled, whatever its parent does later. A deadlineCtx that
// nobody asked before its cancel still follows its parent: when the
// parent ends afterwards (an HTTP request's context is canceled when the
// handler returns; a caller's deadline passes), a goroutine the store left
// holding the context (go-redis's AutoPipeline, store/resilient's
// abandoned primary call) reads the parent's error and cause instead of
// Canceled. Err asks the parent before it looks at canceled, and
// materialize, once canceled, builds WithCancel(parent), which inherits
// an ended parent's error.
func TestReviewDeadlineCtxParentEndsAfterTheCallBug(t *testing.T) {
	runScenarios(t, []scenario{
		{"ended, parent canceled with a cause, then asked", hour, 0, func(t *testing.T, tw *twin) {
			tw.end()
			tw.parentCause()
		}},
		{"ended, parent canceled with a cause, children derived", hour, 0, func(t *testing.T, tw *twin) {
			tw.end()
			tw.parentCause()
			tw.derive(t)
		}},
		{"ended, parent's deadline passes, then asked", hour, short, func(t *testing.T, tw *twin) {
			tw.end()
			tw.parentDeadlinePasses(t)
		}},
	})
}

// gatedCtx is a parent whose next Err, once armed, signals reached and
// waits for release before it answers: it holds a store's Err call
// inside deadlineCtx.Err at a chosen point, deterministically.
type gatedCtx struct {
	context.Context
	mu      sync.Mutex
	armed   bool
	reached chan struct{}
	release chan struct{}
}

func (g *gatedCtx) Err() error {
	g.mu.Lock()
	armed := g.armed
	g.armed = false
	g.mu.Unlock()
	if armed {
		close(g.reached)
		<-g.release
	}
	return g.Context.Err()
}

// TestReviewDeadlineCtxErrChangesBug: one goroutine's Err starts while
// the context is unstarted, past its deadline, and reads the parent; in
// the meantime another goroutine asks Done (the context ends with
// DeadlineExceeded, and says so) and then the parent is canceled. The
// first Err then returns the parent's Canceled, and its next call
// DeadlineExceeded: the context's error changed after it was reported,
// and the two goroutines saw different errors, which no
// context.WithDeadline does (its error is set once). Err's parent branch
// answers from the parent without going through materialize.
func TestReviewDeadlineCtxErrChangesBug(t *testing.T) {
	inner, cancelInner := context.WithCancelCause(context.Background())
	defer cancelInner(nil)
	parent := &gatedCtx{Context: inner, reached: make(chan struct{}), release: make(chan struct{})}
	dc := newDeadlineCtx(parent, short)
	defer dc.cancel()
	d, _ := dc.Deadline()
	<-time.After(time.Until(d))

	parent.mu.Lock()
	parent.armed = true
	parent.mu.Unlock()
	first := make(chan error, 1)
	go func() { first <- dc.Err() }()
	waitClosed(t, parent.reached, "the first Err reaching the parent")
	waitClosed(t, dc.Done(), "the call's context") // ends with DeadlineExceeded, from now on
	require.Equal(t, context.DeadlineExceeded, dc.Err())
	cancelInner(errCause)
	close(parent.release)
	assert.Equal(t, context.DeadlineExceeded, <-first, "the error reported first must not change")
	assert.Equal(t, context.DeadlineExceeded, dc.Err())
}

// TestReviewDeadlineCtxStringBug: String's doc comment says it describes
// the context as context.WithDeadline's does, which is
// contextName(parent) + ".WithDeadline(" + deadline + " [" + remaining +
// "])"; a child's String (context.WithValue(ctx, ...).String()) embeds
// it. deadlineCtx's drops the parent and says "ratelimit.storeContext(".
func TestReviewDeadlineCtxStringBug(t *testing.T) {
	parent := context.WithValue(context.Background(), reviewKey("k"), "v")
	deadline := time.Now().Add(hour)
	got := &deadlineCtx{parent: parent, deadline: deadline}
	want, stop := context.WithDeadline(parent, deadline)
	defer stop()
	// Up to the remaining time, which each reads from the clock.
	prefix := func(s string) string { p, _, _ := strings.Cut(s, " ["); return p }
	assert.Equal(t, prefix(fmt.Sprint(want)), prefix(got.String()))
}

// TestReviewDeadlineCtxRaces: cancel racing Done, Err, Value, Cause, a
// derived child and the deadline itself, many rounds (run with -race).
// Each observer sees Err nil and then one error for good, and Done closed
// once Err is non-nil; every Done channel and child closes; at the end the
// error is Canceled or DeadlineExceeded, with the same cause, the timer is
// released (the started context has ended), and every observer's last
// error is the final one.
func TestReviewDeadlineCtxRaces(t *testing.T) {
	timeouts := []time.Duration{time.Nanosecond, 20 * time.Microsecond, 100 * time.Microsecond, time.Hour}
	for round := range 1200 {
		d := timeouts[round%len(timeouts)]
		dc := newDeadlineCtx(context.Background(), d)
		var wg sync.WaitGroup
		const observers = 3
		last := make([]error, observers)
		bad := make(chan string, 16)
		for i := range observers {
			wg.Go(func() {
				var seen error
				for range 20 {
					var err error
					switch i {
					case 0:
						err = dc.Err()
					case 1:
						err = context.Cause(dc)
					default:
						_ = dc.Value(reviewKey("k"))
						err = dc.Err()
					}
					if seen != nil && err != seen {
						bad <- fmt.Sprintf("observer %d: error %v after %v", i, err, seen)
						return
					}
					if err != nil && !isClosed(dc.Done()) {
						bad <- fmt.Sprintf("observer %d: Err %v with Done open", i, err)
						return
					}
					seen = err
				}
				last[i] = seen
			})
		}
		var waiterDone, kidDone <-chan struct{}
		wg.Go(func() { waiterDone = dc.Done() })
		wg.Go(func() {
			kid, stop := context.WithCancel(dc)
			_ = stop // released by dc's end: kidDone must close without it
			kidDone = kid.Done()
		})
		wg.Go(dc.cancel)
		wg.Wait()
		close(bad)
		for msg := range bad {
			t.Fatalf("round %d (timeout %v): %s", round, d, msg)
		}
		waitClosed(t, waiterDone, "a waiter's Done")
		waitClosed(t, kidDone, "a child of the call's context")
		final := dc.Err()
		require.True(t, final == context.Canceled || final == context.DeadlineExceeded, "round %d: final error %v", round, final)
		require.Equal(t, final, context.Cause(dc))
		tc := dc.timed.Load()
		require.NotNil(t, tc, "Done was asked")
		require.Equal(t, final, tc.ctx.Err(), "the started context ended: its timer is released")
		for i, e := range last {
			if e != nil {
				require.Equal(t, final, e, "round %d: observer %d", round, i)
			}
		}
		if d == time.Hour {
			require.Equal(t, context.Canceled, final, "round %d: an hour's deadline cannot pass", round)
		}
	}
}

// Limiter-level: a fake store whose Take runs f, through the three paths
// that make store calls (call, callOne, callTwo).

type reviewFnStore struct {
	f    func(ctx context.Context) error
	mu   sync.Mutex
	last context.Context
}

func (s *reviewFnStore) run(ctx context.Context) error {
	s.mu.Lock()
	s.last = ctx
	s.mu.Unlock()
	return s.f(ctx)
}

func (s *reviewFnStore) Take(ctx context.Context, reqs []Request, out []Decision) error {
	if err := s.run(ctx); err != nil {
		return err
	}
	for i, r := range reqs {
		out[i] = Decision{Limit: r.Limit, Allowed: true, Remaining: 1}
	}
	return nil
}

func (s *reviewFnStore) Adjust(ctx context.Context, reqs []Request, out []Decision) error {
	return s.Take(ctx, reqs, out)
}

func (s *reviewFnStore) context() context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

type reviewOneStore struct{ *reviewFnStore }

func (s reviewOneStore) TakeOne(ctx context.Context, r Request) (bool, int64, time.Duration, time.Duration, time.Duration, int64, error) {
	if err := s.run(ctx); err != nil {
		return false, 0, 0, 0, 0, 0, err
	}
	return true, 1, 0, 0, 0, 0, nil
}

type reviewPairStore struct{ *reviewFnStore }

func (s reviewPairStore) TakeTwo(ctx context.Context, _ string, _ *Limit, _ int64, _ string, _ *Limit, _ int64) (bool, int64, time.Duration, time.Duration, time.Duration, int64, bool, int64, time.Duration, time.Duration, time.Duration, int64, error) {
	if err := s.run(ctx); err != nil {
		return false, 0, 0, 0, 0, 0, false, 0, 0, 0, 0, 0, err
	}
	return true, 1, 0, 0, 0, 0, true, 1, 0, 0, 0, 0, nil
}

// reviewPaths returns a Limiter on s for each store-call path.
func reviewPaths(t *testing.T, s *reviewFnStore, timeout time.Duration) map[string]*Limiter {
	t.Helper()
	one, two := PerMinute(60).Named("a"), PerHour(1000).Named("b")
	mk := func(st Store, limits ...Limit) *Limiter {
		l, err := New(st, WithLimits(limits...), WithStoreTimeout(timeout), WithFailureMode(FailClosed))
		require.NoError(t, err)
		return l
	}
	ls := map[string]*Limiter{
		"call":    mk(s, one),
		"callOne": mk(reviewOneStore{s}, one),
		"callTwo": mk(reviewPairStore{s}, one, two),
	}
	require.NotNil(t, ls["callOne"].one)
	require.Nil(t, ls["call"].one)
	require.NotNil(t, ls["callTwo"].pair)
	return ls
}

// pastDeadline waits, on a timer, until ctx's deadline has passed, as a
// store busy until then without asking for Done would.
func pastDeadline(ctx context.Context) {
	d, _ := ctx.Deadline()
	<-time.After(time.Until(d))
}

var errBoom = errors.New("boom")

// TestReviewLimiterClassifiesStoreCalls: the Limiter's error for a failed
// store call, on each path, with stores that wait on Done, that look only
// at Err or at nothing, and callers that give up: the store timeout is
// ErrStoreTimeout (and ErrStoreFailed and DeadlineExceeded), counted in
// StoreErrors; a store error without a timeout is ErrStoreFailed alone; a
// caller's cancellation or earlier deadline is the caller's, not a store
// failure, and not counted. The error texts are exact.
func TestReviewLimiterClassifiesStoreCalls(t *testing.T) {
	const timeout = 3 * time.Millisecond
	timeoutMsg := ErrStoreTimeout.Error() + " after " + timeout.String() + ": "
	cases := []struct {
		name     string
		timeout  time.Duration
		caller   func(t *testing.T, started <-chan struct{}) context.Context // nil: Background
		store    func(ctx context.Context) error
		is, isnt []error
		msg      string
		counted  bool
	}{
		{"waits on Done past the timeout", timeout, nil,
			func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() },
			[]error{ErrStoreTimeout, ErrStoreFailed, context.DeadlineExceeded}, []error{context.Canceled},
			timeoutMsg + "context deadline exceeded", true},
		{"busy past the timeout, then returns ctx.Err without Done", timeout, nil,
			func(ctx context.Context) error { pastDeadline(ctx); return ctx.Err() },
			[]error{ErrStoreTimeout, ErrStoreFailed, context.DeadlineExceeded}, []error{context.Canceled},
			timeoutMsg + "context deadline exceeded", true},
		{"busy past the timeout, then fails on its own", timeout, nil,
			func(ctx context.Context) error { pastDeadline(ctx); return errBoom },
			[]error{ErrStoreTimeout, ErrStoreFailed, context.DeadlineExceeded, errBoom}, []error{context.Canceled},
			timeoutMsg + "boom: context deadline exceeded", true},
		{"fails before the timeout", hour, nil,
			func(ctx context.Context) error { return errBoom },
			[]error{ErrStoreFailed, errBoom}, []error{ErrStoreTimeout, context.DeadlineExceeded, context.Canceled},
			"ratelimit: store: boom", true},
		{"caller canceled with a cause while the store waits on Done", hour,
			func(t *testing.T, started <-chan struct{}) context.Context {
				ctx, cancel := context.WithCancelCause(context.Background())
				go func() { <-started; cancel(errCause) }()
				t.Cleanup(func() { cancel(nil) })
				return ctx
			},
			func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() },
			[]error{context.Canceled}, []error{ErrStoreFailed, ErrStoreTimeout, context.DeadlineExceeded},
			"ratelimit: store call abandoned: context canceled", false},
		{"caller canceled before the call, store checks Err only", hour,
			func(t *testing.T, _ <-chan struct{}) context.Context {
				ctx, cancel := context.WithCancelCause(context.Background())
				cancel(errCause)
				return ctx
			},
			func(ctx context.Context) error { return ctx.Err() },
			[]error{context.Canceled}, []error{ErrStoreFailed, ErrStoreTimeout, context.DeadlineExceeded},
			"ratelimit: store call abandoned: context canceled", false},
		{"caller's earlier deadline while the store waits on Done", hour,
			func(t *testing.T, _ <-chan struct{}) context.Context {
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				t.Cleanup(cancel)
				return ctx
			},
			func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() },
			[]error{context.DeadlineExceeded}, []error{ErrStoreFailed, ErrStoreTimeout, context.Canceled},
			"ratelimit: store call abandoned: context deadline exceeded", false},
		{"caller's earlier deadline passes, store fails on its own", hour,
			func(t *testing.T, _ <-chan struct{}) context.Context {
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				t.Cleanup(cancel)
				return ctx
			},
			func(ctx context.Context) error { <-ctx.Done(); return errBoom },
			[]error{context.DeadlineExceeded, errBoom}, []error{ErrStoreFailed, ErrStoreTimeout, context.Canceled},
			"ratelimit: store call abandoned: boom: context deadline exceeded", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var started chan struct{}
			store := &reviewFnStore{}
			store.f = func(ctx context.Context) error {
				close(started)
				return tc.store(ctx)
			}
			for path, lim := range reviewPaths(t, store, tc.timeout) {
				started = make(chan struct{})
				ctx := context.Background()
				if tc.caller != nil {
					ctx = tc.caller(t, started)
				}
				before := time.Now()
				_, err := lim.Take(ctx, "k")
				require.Error(t, err, path)
				for _, e := range tc.is {
					assert.ErrorIs(t, err, e, path)
				}
				for _, e := range tc.isnt {
					assert.NotErrorIs(t, err, e, path)
				}
				assert.Equal(t, tc.msg, err.Error(), path)
				want := uint64(0)
				if tc.counted {
					want = 1
				}
				assert.Equal(t, want, lim.Stats().StoreErrors, path)
				sc := store.context()
				dc, ok := sc.(*deadlineCtx)
				require.True(t, ok, "%s: store context %T", path, sc)
				d, _ := dc.Deadline()
				if pd, ok := ctx.Deadline(); ok {
					assert.True(t, d.Equal(pd), "%s: the caller's earlier deadline", path)
				} else {
					assert.False(t, d.Before(before.Add(tc.timeout)), "%s: the deadline is the store timeout after the call", path)
				}
				require.Error(t, dc.Err(), "%s: the call's context has ended", path)
				waitClosed(t, dc.Done(), path)
			}
		})
	}
}

// TestReviewLimiterStoreDecidingWithoutWaiting: a store that answers from
// ctx.Err (store/lease serving a lease) starts no timer on any path, and
// its context reads Canceled once the Limiter has returned.
func TestReviewLimiterStoreDecidingWithoutWaiting(t *testing.T) {
	store := &reviewFnStore{f: func(ctx context.Context) error { return ctx.Err() }}
	for path, lim := range reviewPaths(t, store, hour) {
		res, err := lim.Take(context.Background(), "k")
		require.NoError(t, err, path)
		require.True(t, res.Allowed, path)
		dc := store.context().(*deadlineCtx)
		assert.Nil(t, dc.timed.Load(), "%s: no timer", path)
		assert.Equal(t, context.Canceled, dc.Err(), path)
		assert.Equal(t, context.Canceled, context.Cause(dc), path)
	}
}

// TestReviewLimiterLingeringGoroutine: a store that returns at once and
// leaves a goroutine holding the context (go-redis's AutoPipeline, a
// resilient primary call), which asks Done before or after the Limiter
// returns, racing its cancel: the goroutine is released when the Limiter
// returns (long before the hour's store timeout), and reads Canceled.
func TestReviewLimiterLingeringGoroutine(t *testing.T) {
	for round := range 300 {
		released := make(chan error, 1)
		store := &reviewFnStore{f: func(ctx context.Context) error {
			go func() {
				<-ctx.Done()
				released <- context.Cause(ctx)
			}()
			return nil
		}}
		for path, lim := range reviewPaths(t, store, hour) {
			_, err := lim.Take(context.Background(), "k")
			require.NoError(t, err, path)
			select {
			case cause := <-released:
				require.Equal(t, context.Canceled, cause, "round %d, %s", round, path)
			case <-time.After(5 * time.Second):
				t.Fatalf("round %d, %s: the store's goroutine was never released", round, path)
			}
		}
	}
}

// TestReviewLimiterLingeringGoroutineParentEndsBug: as above, but the
// caller's context (an HTTP request's, canceled with a cause when its
// handler returns) ends after the Limiter returned and before the
// store's goroutine looks: with context.WithTimeout the goroutine reads
// Canceled (the call's end); here it reads the caller's cause.
func TestReviewLimiterLingeringGoroutineParentEndsBug(t *testing.T) {
	look := make(chan struct{})
	seen := make(chan error, 1)
	store := &reviewFnStore{f: func(ctx context.Context) error {
		go func() {
			<-look
			seen <- context.Cause(ctx)
		}()
		return nil
	}}
	for path, lim := range reviewPaths(t, store, hour) {
		ctx, cancel := context.WithCancelCause(context.Background())
		_, err := lim.Take(ctx, "k")
		require.NoError(t, err, path)
		cancel(errCause)
		look <- struct{}{}
		assert.Equal(t, context.Canceled, <-seen, path)
	}
}
