package ratelimit

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type ctxTestKey string

// TestDetachedContextIsWithoutCancel holds the reqState's detached
// context (the context of settle's store calls) to what it replaces,
// context.WithoutCancel of the request's context: the same values, never
// done, no deadline, no cause, the same name, and children that its
// parent's cancellation does not reach.
func TestDetachedContextIsWithoutCancel(t *testing.T) {
	parent, cancel := context.WithDeadline(context.WithValue(context.Background(), ctxTestKey("k"), "v"), time.Now().Add(time.Hour))
	l := &Limiter{}
	s := l.newState(parent, "key", nil)
	want, got := context.WithoutCancel(parent), context.Context(s.detached())
	cancel()
	require.Error(t, parent.Err())

	assert.Nil(t, got.Done())
	assert.NoError(t, got.Err())
	assert.NoError(t, context.Cause(got))
	_, ok := got.Deadline()
	assert.False(t, ok)
	assert.Equal(t, want.Value(ctxTestKey("k")), got.Value(ctxTestKey("k")))
	assert.Nil(t, got.Value(ctxTestKey("other")))
	assert.Nil(t, got.Value(stateKey{}), "the detached context is not the request's state")
	// The name (a deadline's shows the time left: a cancelCtx's does not).
	named, stopNamed := context.WithCancel(context.WithValue(context.Background(), ctxTestKey("k"), "v"))
	defer stopNamed()
	assert.Equal(t, fmt.Sprint(context.WithoutCancel(named)), fmt.Sprint(l.newState(named, "key", nil).detached()))

	child, stop := context.WithTimeout(got, time.Hour)
	defer stop()
	assert.NoError(t, child.Err(), "the parent's cancellation does not reach a child")
	assert.Equal(t, "v", child.Value(ctxTestKey("k")))

	// A context that is no Stringer is named by its type, as by the
	// context package.
	plain := plainContext{context.Background()}
	s = l.newState(plain, "key", nil)
	assert.Equal(t, "ratelimit.plainContext.WithoutCancel", fmt.Sprint(s.detached()))
	assert.Equal(t, fmt.Sprint(context.WithoutCancel(plain)), fmt.Sprint(s.detached()))
}

// plainContext is a context without a String method.
type plainContext struct{ context.Context }

// TestHandlerRequestIsACopy checks the handler's request (held in the
// state, withRequest): a copy of the request with the state as its
// context, which leaves the caller's request as it was.
func TestHandlerRequestIsACopy(t *testing.T) {
	l := &Limiter{}
	r := httptest.NewRequest("POST", "/v1/chat?x=1", nil)
	r.Header.Set("Authorization", "Bearer k")
	s := l.newState(r.Context(), "key", nil)
	got := s.withRequest(r)
	assert.NotSame(t, r, got)
	assert.Same(t, s, got.Context())
	assert.Equal(t, r.Context(), s.Context)
	assert.NotEqual(t, context.Context(s), r.Context(), "the caller's request keeps its context")
	want := r.WithContext(s)
	assert.Equal(t, want, got)
	assert.Equal(t, http.Header(r.Header), got.Header)
}
