package ratelimit_test

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/memory"
)

// localStore is a LocalTaker over a store/memory (seen only through the
// Store interface, so not NonBlocking): its TryTake and TryTakeOne decide
// with the memory store's Take when decide is set, and otherwise decide
// nothing. It counts every call, and whether each Take's context had a
// deadline (the Limiter's store timeout).
type localStore struct {
	mem      *memory.Store
	decide   bool
	fixed    *ratelimit.Decision  // if set, TryTakeOne decides it
	fixedTwo []ratelimit.Decision // if set, TryTakeTwo decides them

	mu                                                          sync.Mutex
	tries, tryOnes, tryTwos, takes, takeOnes, takeTwos, adjusts int
	deadlines                                                   []bool
}

func (s *localStore) count(n *int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	*n++
}

func (s *localStore) Take(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	s.count(&s.takes)
	_, ok := ctx.Deadline()
	s.mu.Lock()
	s.deadlines = append(s.deadlines, ok)
	s.mu.Unlock()
	return s.mem.Take(ctx, reqs, out)
}

func (s *localStore) Adjust(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	s.count(&s.adjusts)
	return s.mem.Adjust(ctx, reqs, out)
}

func (s *localStore) TryTake(reqs []ratelimit.Request, out []ratelimit.Decision) bool {
	s.count(&s.tries)
	return s.decide && s.mem.Take(context.Background(), reqs, out) == nil
}

func (s *localStore) TryTakeOne(r ratelimit.Request) (decided, allowed bool, remaining int64, reset, retryAfter, delay time.Duration, at int64) {
	s.count(&s.tryOnes)
	if d := s.fixed; d != nil {
		return true, d.Allowed, d.Remaining, d.Reset, d.RetryAfter, d.Delay, d.At
	}
	out := make([]ratelimit.Decision, 1)
	if !s.decide || s.mem.Take(context.Background(), []ratelimit.Request{r}, out) != nil {
		return
	}
	d := out[0]
	return true, d.Allowed, d.Remaining, d.Reset, d.RetryAfter, d.Delay, d.At
}

func (s *localStore) TryTakeTwo(keyA string, limitA *ratelimit.Limit, costA int64, keyB string, limitB *ratelimit.Limit, costB int64) (decided, allowedA bool, remainingA int64, resetA, retryAfterA, delayA time.Duration, atA int64, allowedB bool, remainingB int64, resetB, retryAfterB, delayB time.Duration, atB int64) {
	s.count(&s.tryTwos)
	out := make([]ratelimit.Decision, 2)
	if s.fixedTwo != nil {
		copy(out, s.fixedTwo)
	} else if !s.decide || s.mem.Take(context.Background(), []ratelimit.Request{{Key: keyA, Limit: limitA, Cost: costA}, {Key: keyB, Limit: limitB, Cost: costB}}, out) != nil {
		return
	}
	a, b := out[0], out[1]
	return true, a.Allowed, a.Remaining, a.Reset, a.RetryAfter, a.Delay, a.At, b.Allowed, b.Remaining, b.Reset, b.RetryAfter, b.Delay, b.At
}

// localOneStore is a localStore that is also a SingleTaker.
type localOneStore struct{ *localStore }

func (s localOneStore) TakeOne(ctx context.Context, r ratelimit.Request) (allowed bool, remaining int64, reset, retryAfter, delay time.Duration, at int64, err error) {
	s.count(&s.takeOnes)
	_, ok := ctx.Deadline()
	s.mu.Lock()
	s.deadlines = append(s.deadlines, ok)
	s.mu.Unlock()
	return s.mem.TakeOne(ctx, r)
}

// localPairStore is a localStore that is also a PairTaker.
type localPairStore struct{ *localStore }

func (s localPairStore) TakeTwo(ctx context.Context, keyA string, limitA *ratelimit.Limit, costA int64, keyB string, limitB *ratelimit.Limit, costB int64) (allowedA bool, remainingA int64, resetA, retryAfterA, delayA time.Duration, atA int64, allowedB bool, remainingB int64, resetB, retryAfterB, delayB time.Duration, atB int64, err error) {
	s.count(&s.takeTwos)
	_, ok := ctx.Deadline()
	s.mu.Lock()
	s.deadlines = append(s.deadlines, ok)
	s.mu.Unlock()
	return s.mem.TakeTwo(ctx, keyA, limitA, costA, keyB, limitB, costB)
}

func newLocalStore(t *testing.T, decide bool) *localStore {
	t.Helper()
	mem, err := memory.New(memory.WithClock(standing))
	require.NoError(t, err)
	t.Cleanup(func() { _ = mem.Close() })
	return &localStore{mem: mem, decide: decide}
}

// localShapes are the Limiter's store-call paths a LocalTaker meets: one
// limit on a SingleTaker (callOne: TryTakeOne, then TakeOne), one limit
// on a store that is not (decide's slices: TryTake, then Take), two
// limits on a PairTaker (callTwo: TryTakeTwo, then TakeTwo) and on a
// store that is not (the slices), and three (the slices).
var localShapes = []struct {
	name   string
	words  bool // the store is also a SingleTaker (one limit) or PairTaker (two)
	limits int
}{{"one/SingleTaker", true, 1}, {"one", false, 1}, {"two/PairTaker", true, 2}, {"two", false, 2}, {"three", false, 3}}

// localStoreOf returns ls as the shape's store, and the counters of its
// attempts and of its Takes for that shape.
func localStoreOf(ls *localStore, words bool, limits int) (ratelimit.Store, *int, *int) {
	switch {
	case words && limits == 1:
		return localOneStore{ls}, &ls.tryOnes, &ls.takeOnes
	case words && limits == 2:
		return localPairStore{ls}, &ls.tryTwos, &ls.takeTwos
	}
	return ls, &ls.tries, &ls.takes
}

func localLimits(n int) []ratelimit.Limit {
	return []ratelimit.Limit{ratelimit.PerMinute(10).Named("a"), ratelimit.PerMinute(20).Named("b"), ratelimit.PerMinute(30).Named("c")}[:n]
}

// TestLocalTakerDecided: a Take the store's LocalTaker decides is its
// decision, with no Take, no TakeOne and no store-timeout context, one
// successful store call for the hooks and one admission in Stats. And a
// Take it does not decide is made once, as without it: one Take (or
// TakeOne) with the store timeout's deadline, which charges once.
//
// PerMinute(10), (20), (30) on the standing clock: a Take of 1 leaves 9,
// 19 and 29, Reset 6, 3 and 2 s (a unit's refill).
func TestLocalTakerDecided(t *testing.T) {
	for _, decide := range []bool{true, false} {
		for _, shape := range localShapes {
			t.Run(map[bool]string{true: "decided", false: "undecided"}[decide]+"/"+shape.name, func(t *testing.T) {
				ls := newLocalStore(t, decide)
				store, triedP, takenP := localStoreOf(ls, shape.words, shape.limits)
				var calls []ratelimit.StoreCall
				lim, err := ratelimit.New(store, ratelimit.WithLimits(localLimits(shape.limits)...),
					ratelimit.WithHooks(ratelimit.Hooks{OnStoreCall: func(_ context.Context, c ratelimit.StoreCall) {
						c.Duration = 0
						calls = append(calls, c)
					}}))
				require.NoError(t, err)
				for i := range int64(2) {
					res, err := lim.Take(context.Background(), "k")
					require.NoError(t, err)
					require.True(t, res.Allowed)
					require.Len(t, res.Decisions, shape.limits)
					for j, d := range res.Decisions {
						// Limit j allows 10(j+1) a minute: 6/(j+1) s per unit.
						require.Equal(t, lim.Limits()[j].ID(), d.Limit.ID())
						require.Equal(t, 10*int64(j+1)-1-i, d.Remaining, "Take %d limit %d", i, j)
						require.Equal(t, time.Duration(i+1)*6*time.Second/time.Duration(j+1), d.Reset, "Take %d limit %d", i, j)
					}
				}
				tried, taken := *triedP, *takenP
				all := ls.tries + ls.tryOnes + ls.tryTwos + ls.takes + ls.takeOnes + ls.takeTwos
				require.Equal(t, tried+taken, all, "no other path")
				require.Equal(t, 2, tried, "tried each Take")
				call := ratelimit.StoreCall{Op: ratelimit.OpTake, Requests: shape.limits, Store: store}
				require.Equal(t, []ratelimit.StoreCall{call, call}, calls, "one store call each")
				require.Equal(t, uint64(2), lim.Stats().Allowed)
				if decide {
					require.Zero(t, taken)
					require.Empty(t, ls.deadlines)
				} else {
					require.Equal(t, 2, taken)
					require.Equal(t, []bool{true, true}, ls.deadlines, "the store timeout")
				}
			})
		}
	}
}

// TestLocalTakerNotTried: a Take on a context that has ended is not tried
// (the store's Take reports the context's error, as without the
// attempt), nor is an Adjust.
func TestLocalTakerNotTried(t *testing.T) {
	for _, shape := range localShapes {
		t.Run(shape.name, func(t *testing.T) {
			ls := newLocalStore(t, true)
			store, _, _ := localStoreOf(ls, shape.words, shape.limits)
			lim, err := ratelimit.New(store, ratelimit.WithLimits(localLimits(shape.limits)...))
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			res, err := lim.Take(ctx, "k")
			require.ErrorIs(t, err, context.Canceled)
			require.False(t, errors.Is(err, ratelimit.ErrStoreFailed))
			require.Equal(t, ratelimit.Result{}, res)
			require.Zero(t, ls.tries+ls.tryOnes+ls.tryTwos)
			require.Equal(t, 1, ls.takes+ls.takeOnes+ls.takeTwos)
			res, err = lim.Adjust(context.Background(), "k", "a", 2)
			require.NoError(t, err)
			require.Equal(t, int64(8), res.Decisions[0].Remaining)
			require.Equal(t, 1, ls.adjusts)
			require.Zero(t, ls.tries+ls.tryOnes+ls.tryTwos)
		})
	}
}

// TestTryTakeOneDecisionCopiedWhole: TryTakeOne returns a Decision's
// fields one by one and the Limiter puts them back together, as for
// TakeOne (TestTakeOneDecisionCopiedWhole): a field added to Decision
// must be added to LocalTaker and to the Limiter's tryOne.
func TestTryTakeOneDecisionCopiedWhole(t *testing.T) {
	ls := newLocalStore(t, true)
	lim := ratelimit.PerMinute(60)
	want := distinctDecision(t, &lim, 1)
	ls.fixed = &want
	l, err := ratelimit.New(localOneStore{ls}, ratelimit.WithLimits(lim))
	require.NoError(t, err)
	res, err := l.Take(context.Background(), "k")
	require.NoError(t, err)
	require.Len(t, res.Decisions, 1)
	got := res.Decisions[0]
	require.Equal(t, l.Limits()[0].ID(), got.Limit.ID())
	got.Limit = want.Limit
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Decision %+v, want %+v: TryTakeOne or the Limiter's tryOne drops a field", got, want)
	}
	require.Equal(t, 1, ls.tryOnes)
	require.Zero(t, ls.takeOnes)
}

// TestTryTakeTwoDecisionsCopiedWhole: TryTakeTwo returns two Decisions'
// fields one by one and the Limiter puts them back together, as for
// TakeTwo (TestTakeTwoDecisionsCopiedWhole): a field added to Decision
// must be added to LocalTaker and to the Limiter's tryTwo.
func TestTryTakeTwoDecisionsCopiedWhole(t *testing.T) {
	ls := newLocalStore(t, true)
	la, lb := ratelimit.PerMinute(60).Named("a"), ratelimit.PerMinute(70).Named("b")
	want := []ratelimit.Decision{distinctDecision(t, &la, 1), distinctDecision(t, &lb, 2)}
	ls.fixedTwo = want
	l, err := ratelimit.New(localPairStore{ls}, ratelimit.WithLimits(la, lb))
	require.NoError(t, err)
	res, err := l.Take(context.Background(), "k")
	require.NoError(t, err)
	require.Len(t, res.Decisions, 2)
	for i, got := range res.Decisions {
		require.Equal(t, want[i].Limit.ID(), got.Limit.ID())
		got.Limit = want[i].Limit
		if !reflect.DeepEqual(got, want[i]) {
			t.Fatalf("Decision %d %+v, want %+v: TryTakeTwo or the Limiter's tryTwo drops a field", i, got, want[i])
		}
	}
	require.Equal(t, 1, ls.tryTwos)
	require.Zero(t, ls.takeTwos)
}
