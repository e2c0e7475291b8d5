package linearize

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
)

// replyError is an error reply from Redis, as go-redis returns it.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// TestClassify: the store's errors, wrapped as it wraps them, map to the
// outcomes the model relies on.
func TestClassify(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("redisstore: take: %w", err) }
	for _, c := range []struct {
		err  error
		want Outcome
	}{
		{nil, Done},
		{wrap(&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}), NotRun},
		{wrap(replyError("TRYAGAIN Multiple keys request during rehashing of slot")), NotRun},
		{wrap(replyError("MOVED 3999 127.0.0.1:6381")), NotRun},
		{wrap(replyError("ASK 3999 127.0.0.1:6381")), NotRun},
		{wrap(replyError("CLUSTERDOWN The cluster is down")), NotRun},
		{wrap(replyError("ERR malformed rate-limit state")), Failed},
		{wrap(replyError("ASKING is not a redirect")), Failed},
		{wrap(io.EOF), Lost},
		{wrap(&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}), Lost},
		{wrap(&net.OpError{Op: "write", Net: "tcp", Err: syscall.EPIPE}), Lost},
		{wrap(fmt.Errorf("i/o timeout: %w", context.DeadlineExceeded)), TimedOut},
		{wrap(&net.OpError{Op: "read", Net: "tcp", Err: timeoutError{}}), TimedOut},
		{errors.New("redis: client is closed"), Failed},
	} {
		assert.Equal(t, c.want, Classify(c.err), "%v", c.err)
	}
}

type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// errStore is a store whose every call fails with err.
type errStore struct {
	ratelimit.Store
	err error
}

func (s errStore) Take(context.Context, []ratelimit.Request, []ratelimit.Decision) error {
	return s.err
}

// TestKilledBoundsTimedOutCalls: Killed gives a call that timed out on
// one of its keys, invoked before the kill, the kill as its response; a
// call on another key, a call invoked after the kill, a lost call and a
// call that succeeded keep theirs.
func TestKilledBoundsTimedOutCalls(t *testing.T) {
	rec := NewRecorder()
	timeout := errStore{err: fmt.Errorf("redisstore: take: %w", context.DeadlineExceeded)}
	lost := errStore{err: io.EOF}
	take := func(s ratelimit.Store, key string) {
		_, _ = rec.Take(context.Background(), s, 0, 1, []ratelimit.Request{{Key: key, Limit: tb, Cost: 1}})
	}
	take(timeout, "hit")   // 0: bounded
	take(timeout, "other") // 1: another key
	take(lost, "hit")      // 2: lost, responds at its error
	before := rec.Operations()
	time.Sleep(time.Millisecond) // the kill follows the calls by a tick of the wall clock
	at := time.Now()
	rec.Killed([]string{"hit"}, at)
	time.Sleep(time.Millisecond)
	take(timeout, "hit") // 3: invoked after the kill

	ops := rec.Operations()
	require.Len(t, ops, 4)
	assert.Equal(t, at.UnixNano(), ops[0].Return)
	assert.Equal(t, int64(Never), ops[1].Return)
	assert.Equal(t, before[2].Return, ops[2].Return)
	assert.Less(t, ops[2].Return, at.UnixNano())
	assert.Equal(t, int64(Never), ops[3].Return)
	for _, op := range ops {
		assert.True(t, op.Output.(Output).Unknown)
	}
	assert.Equal(t, int64(Never), before[0].Return, "Operations before Killed")
}
