package ratelimit

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type storeCtxKey string

// deadlinePair returns a deadlineCtx and the context.WithDeadline it
// stands for, on one parent and one deadline, to hold the first to the
// second's answers.
func deadlinePair(parent context.Context, deadline time.Time) (*deadlineCtx, context.Context, context.CancelFunc) {
	want, cancel := context.WithDeadline(parent, deadline)
	return &deadlineCtx{parent: parent, deadline: deadline}, want, cancel
}

// sameAnswers asserts that got answers Deadline, Err, context.Cause and a
// value lookup as want does, and that Done is closed exactly when want's
// is.
func sameAnswers(t *testing.T, got, want context.Context) {
	t.Helper()
	gd, gok := got.Deadline()
	wd, wok := want.Deadline()
	assert.Equal(t, wok, gok, "Deadline ok")
	assert.True(t, gd.Equal(wd), "Deadline: got %v, want %v", gd, wd)
	assert.Equal(t, want.Err(), got.Err(), "Err")
	assert.Equal(t, context.Cause(want), context.Cause(got), "Cause")
	assert.Equal(t, want.Value(storeCtxKey("k")), got.Value(storeCtxKey("k")), "Value")
	assert.Equal(t, isClosed(want.Done()), isClosed(got.Done()), "Done closed")
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestDeadlineCtxAnswersAsWithDeadline(t *testing.T) {
	base := context.WithValue(context.Background(), storeCtxKey("k"), "v")
	future := time.Now().Add(time.Hour)
	past := time.Now().Add(-time.Millisecond)
	cause := errors.New("client went away")

	t.Run("running, no timer started", func(t *testing.T) {
		got, want, stop := deadlinePair(base, future)
		defer stop()
		assert.NoError(t, got.Err())
		assert.Equal(t, "v", got.Value(storeCtxKey("k")))
		d, ok := got.Deadline()
		assert.True(t, ok)
		assert.True(t, d.Equal(future))
		assert.Nil(t, got.timed.Load(), "Err, Value and Deadline start no timer")
		sameAnswers(t, got, want)
		assert.NotNil(t, got.timed.Load(), "Done starts the timer")
		got.cancel()
	})
	t.Run("deadline passed, nobody waited", func(t *testing.T) {
		got, want, stop := deadlinePair(base, past)
		defer stop()
		assert.ErrorIs(t, got.Err(), context.DeadlineExceeded)
		sameAnswers(t, got, want)
		got.cancel()
		assert.ErrorIs(t, got.Err(), context.DeadlineExceeded, "a cancel after the deadline keeps DeadlineExceeded")
	})
	// context.Cause finds the nearest cancelCtx through Value: under a
	// cancelable parent (an HTTP request's context), Value must answer
	// from the ended call's context, not the parent's.
	cancelable, stopCancelable := context.WithCancel(base)
	defer stopCancelable()
	t.Run("deadline passed, Cause asked first", func(t *testing.T) {
		got, _, stop := deadlinePair(cancelable, past)
		defer stop()
		assert.Equal(t, context.DeadlineExceeded, context.Cause(got))
		assert.True(t, isClosed(got.Done()))
	})
	t.Run("canceled, Cause asked first", func(t *testing.T) {
		got, _, stop := deadlinePair(cancelable, future)
		defer stop()
		got.cancel()
		assert.Equal(t, context.Canceled, context.Cause(got))
		assert.Equal(t, context.Canceled, got.Err())
	})
	t.Run("running under a cancelable parent", func(t *testing.T) {
		got, want, stop := deadlinePair(cancelable, future)
		defer stop()
		assert.Nil(t, context.Cause(got))
		assert.Nil(t, got.timed.Load())
		sameAnswers(t, got, want)
	})
	t.Run("canceled before the deadline", func(t *testing.T) {
		got, want, stop := deadlinePair(base, future)
		stop()
		got.cancel()
		assert.Nil(t, got.timed.Load(), "cancel starts no timer")
		sameAnswers(t, got, want)
		got.cancel() // twice is allowed
		assert.Equal(t, context.Canceled, got.Err())
	})
	t.Run("canceled while a store waits", func(t *testing.T) {
		got, want, stop := deadlinePair(base, future)
		done := got.Done()
		assert.False(t, isClosed(done))
		stop()
		got.cancel()
		<-done
		sameAnswers(t, got, want)
	})
	t.Run("parent canceled with a cause", func(t *testing.T) {
		parent, cancelParent := context.WithCancelCause(base)
		got, want, stop := deadlinePair(parent, future)
		defer stop()
		cancelParent(cause)
		assert.Equal(t, context.Canceled, got.Err())
		assert.Nil(t, got.timed.Load())
		sameAnswers(t, got, want)
		assert.Equal(t, cause, context.Cause(got))
	})
	t.Run("parent's deadline is earlier", func(t *testing.T) {
		parent, cancelParent := context.WithDeadline(base, future.Add(-time.Minute))
		defer cancelParent()
		got, want, stop := deadlinePair(parent, future)
		defer stop()
		sameAnswers(t, got, want)
		d, _ := got.Deadline()
		assert.True(t, d.Equal(future.Add(-time.Minute)))
	})
	t.Run("parent's deadline is later", func(t *testing.T) {
		parent, cancelParent := context.WithDeadline(base, future.Add(time.Minute))
		defer cancelParent()
		got, want, stop := deadlinePair(parent, future)
		defer stop()
		sameAnswers(t, got, want)
		d, _ := got.Deadline()
		assert.True(t, d.Equal(future))
	})
}

func TestDeadlineCtxTimesOutAWaitingStore(t *testing.T) {
	// A store that waits on Done is interrupted at the deadline, as by
	// context.WithTimeout: the wait ends on the timer, not on a sleep.
	ctx := newDeadlineCtx(context.Background(), time.Millisecond)
	cancel := ctx.cancel
	defer cancel()
	<-ctx.Done()
	assert.Equal(t, context.DeadlineExceeded, ctx.Err())
	assert.Equal(t, context.DeadlineExceeded, context.Cause(ctx))
	cancel()
	assert.Equal(t, context.DeadlineExceeded, ctx.Err(), "cancel after the timer fired keeps DeadlineExceeded")
}

func TestDeadlineCtxDerivedContexts(t *testing.T) {
	// Contexts a store derives from the call's (go-redis and the stores
	// do) end with it.
	ctx := newDeadlineCtx(context.Background(), time.Hour)
	cancel := ctx.cancel
	child, stopChild := context.WithCancel(ctx)
	defer stopChild()
	ran := make(chan struct{})
	stopAfter := context.AfterFunc(ctx, func() { close(ran) })
	defer stopAfter()
	cancel()
	<-child.Done()
	<-ran
	assert.Equal(t, context.Canceled, child.Err())
}

func TestDeadlineCtxConcurrentCancel(t *testing.T) {
	// Done and Err racing cancel: every Done channel closes, Err ends
	// Canceled, and (under -race) no data race. Many rounds, so that
	// cancel lands before, during and after the timer's start.
	for range 200 {
		dc := newDeadlineCtx(context.Background(), time.Hour)
		ctx, cancel := context.Context(dc), dc.cancel
		var wg sync.WaitGroup
		chans := make([]<-chan struct{}, 4)
		for i := range chans {
			wg.Go(func() {
				_ = ctx.Err()
				chans[i] = ctx.Done()
			})
		}
		wg.Go(cancel)
		wg.Wait()
		for _, ch := range chans {
			<-ch
		}
		require.Equal(t, context.Canceled, ctx.Err())
		require.NotNil(t, dc.timed.Load())
		require.Equal(t, context.Canceled, dc.timed.Load().ctx.Err())
	}
}

// ctxStore is a Store that is not NonBlocking and admits everything,
// keeping the context of its last call; with wait set, Take waits for
// that context to end, as a store waiting on a network would.
type ctxStore struct {
	mu   sync.Mutex
	last context.Context
	wait bool
}

func (s *ctxStore) Take(ctx context.Context, reqs []Request, out []Decision) error {
	s.mu.Lock()
	s.last = ctx
	s.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.wait {
		<-ctx.Done()
		return ctx.Err()
	}
	for i, r := range reqs {
		out[i] = Decision{Limit: r.Limit, Allowed: true, Remaining: 1}
	}
	return nil
}

func (s *ctxStore) Adjust(ctx context.Context, reqs []Request, out []Decision) error {
	return s.Take(ctx, reqs, out)
}

func TestStoreCallStartsNoTimerUnlessTheStoreWaits(t *testing.T) {
	store := &ctxStore{}
	lim, err := New(store, WithLimits(PerMinute(60)), WithStoreTimeout(time.Hour))
	require.NoError(t, err)
	before := time.Now()
	res, err := lim.Take(context.Background(), "k")
	require.NoError(t, err)
	require.True(t, res.Allowed)
	dc, ok := store.last.(*deadlineCtx)
	require.True(t, ok, "a store that is not NonBlocking gets a deadlineCtx, got %T", store.last)
	assert.Nil(t, dc.timed.Load(), "a store that checked only Err started no timer")
	d, ok := dc.Deadline()
	assert.True(t, ok)
	assert.False(t, d.Before(before.Add(time.Hour)), "the deadline is the store timeout after the call began")
	assert.Equal(t, context.Canceled, dc.Err(), "the call's context ends with the call")

	// A store that waits on Done is cut off by the store timeout, and
	// the Limiter reports the timeout.
	store = &ctxStore{wait: true}
	lim, err = New(store, WithLimits(PerMinute(60)), WithStoreTimeout(time.Millisecond), WithFailureMode(FailClosed))
	require.NoError(t, err)
	_, err = lim.Take(context.Background(), "k")
	assert.ErrorIs(t, err, ErrStoreTimeout)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}
