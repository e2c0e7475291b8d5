package redisstore_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	redisstore "github.com/rampmeter/ratelimit/store/redis"
)

// These tests pin what the package documentation says about go-redis
// replaying a script whose outcome is unknown. A fake server counts the
// EVALSHA commands it receives and then either never answers (a slow or
// partitioned Redis: the client times out) or closes the connection (a
// Redis that died or killed the client after running the script). In both
// cases the script may have run, so every EVALSHA after the first is a
// possible double charge.

// blackHole is a RESP server that answers connection set-up and swallows
// every EVALSHA/EVAL.
type blackHole struct {
	ln    net.Listener
	close bool // close the connection on EVALSHA instead of hanging
	evals atomic.Int32
	mu    sync.Mutex
	conns []net.Conn
}

func newBlackHole(t *testing.T, closeOnEval bool) *blackHole {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	b := &blackHole{ln: ln, close: closeOnEval}
	go b.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, c := range b.conns {
			_ = c.Close()
		}
	})
	return b
}

func (b *blackHole) serve() {
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		b.mu.Lock()
		b.conns = append(b.conns, c)
		b.mu.Unlock()
		go b.handle(c)
	}
}

func (b *blackHole) handle(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		args, err := readCommand(r)
		if err != nil {
			return
		}
		switch strings.ToLower(args[0]) {
		case "evalsha", "eval":
			b.evals.Add(1)
			if b.close {
				return
			}
			// Hang: read on (and swallow) until the client gives up.
		case "hello":
			_, _ = io.WriteString(c, "-ERR unknown command 'HELLO'\r\n")
		case "ping":
			_, _ = io.WriteString(c, "+PONG\r\n")
		default:
			_, _ = io.WriteString(c, "+OK\r\n")
		}
	}
}

// readCommand reads one RESP array of bulk strings.
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || line[0] != '*' {
		return nil, errors.New("not an array")
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil {
		return nil, err
	}
	args := make([]string, n)
	for i := range args {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(line[1:]))
		if err != nil {
			return nil, err
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		args[i] = string(buf[:size])
	}
	return args, nil
}

func takeOnce(t *testing.T, opt *redis.Options, ctx context.Context) error {
	t.Helper()
	client := redis.NewClient(opt)
	defer client.Close()
	s, err := redisstore.New(client)
	require.NoError(t, err)
	l := limitOf(t, ratelimit.PerMinute(60))
	out := make([]ratelimit.Decision, 1)
	return s.Take(ctx, []ratelimit.Request{req("k", l, 1)}, out)
}

// TestGoRedisReplaysAfterConnectionLoss: a connection closed after the
// script was sent is retried MaxRetries times (default 3); MaxRetries -1
// sends the script once.
func TestGoRedisReplaysAfterConnectionLoss(t *testing.T) {
	for _, tc := range []struct {
		maxRetries int
		want       int32
	}{{0, 4}, {2, 3}, {-1, 1}} {
		b := newBlackHole(t, true)
		err := takeOnce(t, &redis.Options{
			Addr: b.ln.Addr().String(), MaxRetries: tc.maxRetries, MinRetryBackoff: time.Millisecond, Protocol: 2,
		}, t.Context())
		require.ErrorContains(t, err, "redisstore: take: ")
		require.Equal(t, tc.want, b.evals.Load(), "EVALSHAs sent with MaxRetries %d", tc.maxRetries)
	}
}

// TestGoRedisReplaysAfterReadTimeout: a socket ReadTimeout (shorter than the
// context's deadline) is retried, sending the script again; MaxRetries -1
// sends it once.
func TestGoRedisReplaysAfterReadTimeout(t *testing.T) {
	for _, tc := range []struct {
		maxRetries int
		want       int32
	}{{2, 3}, {-1, 1}} {
		b := newBlackHole(t, false)
		err := takeOnce(t, &redis.Options{
			Addr: b.ln.Addr().String(), MaxRetries: tc.maxRetries, MinRetryBackoff: time.Millisecond,
			ReadTimeout: 20 * time.Millisecond, Protocol: 2,
		}, t.Context())
		var ne net.Error
		require.True(t, errors.As(err, &ne) && ne.Timeout(), "want a network timeout, got %v", err)
		require.Equal(t, tc.want, b.evals.Load(), "EVALSHAs sent with MaxRetries %d", tc.maxRetries)
	}
}

// TestGoRedisContextDeadlineNotReplayed: with ContextTimeoutEnabled the
// context's deadline becomes the socket deadline; when it expires the
// retry loop's backoff sleep sees the done context and gives up, so even
// the default MaxRetries sends the script once, and the error is the
// context's.
func TestGoRedisContextDeadlineNotReplayed(t *testing.T) {
	b := newBlackHole(t, false)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	err := takeOnce(t, &redis.Options{
		Addr: b.ln.Addr().String(), ContextTimeoutEnabled: true, ReadTimeout: time.Minute, Protocol: 2,
	}, ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "redisstore: take: ")
	require.Equal(t, int32(1), b.evals.Load())
}
