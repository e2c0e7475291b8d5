package linearize

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
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
