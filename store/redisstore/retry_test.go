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
	"github.com/rampmeter/ratelimit/store/redisstore"
)

// These tests pin what the package documentation says about go-redis
// replaying a script whose outcome is unknown. A fake server counts the
// EVALSHA commands it receives and then either never answers (a slow or
// partitioned Redis: the client times out) or closes the connection (a
// Redis that died or killed the client after running the script). In both
// cases the script may have run, so every EVALSHA after the first is a
// possible double charge.
//
// Counting is exact whatever the scheduling: a server that closes counts
// an EVALSHA before it closes, so before the client can see the close and
// return; a server that hangs is counted after the client is closed and
// every connection handler has read to the end (settle).

// blackHole is a RESP server that answers connection set-up and swallows
// every EVALSHA/EVAL.
type blackHole struct {
	ln       net.Listener
	close    bool // close the connection on EVALSHA instead of hanging
	evals    atomic.Int32
	handlers sync.WaitGroup // one per accepted connection, done when it ends
	mu       sync.Mutex
	conns    []net.Conn
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
		b.handlers.Go(func() { b.handle(c) })
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
		case "fcall", "evalsha", "eval":
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

// settle waits until every connection's handler has returned, that is, until
// the server has read everything its (closed) clients sent: only then is
// evals final. A client that timed out may have returned before the
// server's goroutine even read its EVALSHA. The 20 s limit only turns a
// client left open by mistake into a failure rather than a hang.
func (b *blackHole) settle(t *testing.T) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		b.handlers.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("a client connection to the black hole is still open")
	}
}

// untilSent runs call against a fresh hanging black hole with a timeout of
// first, then twice as long, and so on, until the script reached the
// server at least once, and returns the EVALSHAs the server read and
// call's error. call must close its client before it returns. A timeout
// that passes before the script is written (while the client dials, or
// while a loaded machine does not run it) sends nothing and proves
// nothing about replays: only a timeout that passes after the send does.
// No fixed timeout can promise that on a shared machine; doubling up to
// 10 s can, short of a 10 s stall.
func untilSent(t *testing.T, first time.Duration, call func(b *blackHole, timeout time.Duration) error) (int32, error) {
	t.Helper()
	for timeout := first; ; timeout *= 2 {
		b := newBlackHole(t, false)
		err := call(b, timeout)
		b.settle(t)
		n := b.evals.Load()
		if n > 0 || timeout >= 10*time.Second {
			return n, err
		}
		t.Logf("the %v timeout passed before the script was sent (%v); again with twice as long", timeout, err)
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

func takeOnce(t *testing.T, opt *redis.Options, ctx context.Context, opts ...redisstore.Option) error {
	t.Helper()
	client := redis.NewClient(opt)
	defer client.Close()
	return takeWith(t, client, ctx, opts...)
}

func takeWith(t *testing.T, client redis.UniversalClient, ctx context.Context, opts ...redisstore.Option) error {
	t.Helper()
	s, err := redisstore.New(client, opts...)
	require.NoError(t, err)
	l := limitOf(t, ratelimit.PerMinute(60))
	out := make([]ratelimit.Decision, 1)
	return s.Take(ctx, []ratelimit.Request{req("k", l, 1)}, out)
}

// rawEval sends the store's script the way redis.Script.Run does, without
// the store's protection, to pin the go-redis behaviour it guards against.
func rawEval(t *testing.T, client redis.UniversalClient) error {
	t.Helper()
	return redis.NewScript(scriptSource(t)).Run(t.Context(), client, []string{"k"}, "t", "").Err()
}

// TestGoRedisReplaysScripts pins why the store needs its guard: go-redis
// itself re-sends a script after the connection closed once it was sent,
// MaxRetries times (default 3, so 4 sends), and MaxRetries -1 sends it once.
func TestGoRedisReplaysScripts(t *testing.T) {
	for _, tc := range []struct {
		maxRetries int
		want       int32
	}{{0, 4}, {2, 3}, {-1, 1}} {
		b := newBlackHole(t, true)
		client := redis.NewClient(&redis.Options{
			Addr: b.ln.Addr().String(), MaxRetries: tc.maxRetries, MinRetryBackoff: time.Millisecond, Protocol: 2,
		})
		require.Error(t, rawEval(t, client))
		_ = client.Close()
		require.Equal(t, tc.want, b.evals.Load(), "EVALSHAs sent by redis.Script.Run with MaxRetries %d", tc.maxRetries)
	}
}

// TestNoReplayAfterConnectionLoss: the store's script is sent once when the
// connection closes after it was sent, whatever MaxRetries says.
func TestNoReplayAfterConnectionLoss(t *testing.T) {
	for _, maxRetries := range []int{0, 2, -1} {
		b := newBlackHole(t, true)
		err := takeOnce(t, &redis.Options{
			Addr: b.ln.Addr().String(), MaxRetries: maxRetries, MinRetryBackoff: time.Millisecond, Protocol: 2,
			ContextTimeoutEnabled: true,
		}, t.Context())
		require.ErrorContains(t, err, "redisstore: take: ")
		require.Equal(t, int32(1), b.evals.Load(), "EVALSHAs sent with MaxRetries %d", maxRetries)
	}
}

// TestNoReplayAfterReadTimeout: a socket ReadTimeout shorter than the
// context's deadline ends the call with a network timeout, and the script
// is not sent again, whatever MaxRetries says (with or without
// ContextTimeoutEnabled).
func TestNoReplayAfterReadTimeout(t *testing.T) {
	for _, maxRetries := range []int{0, 2, -1} {
		for _, ctxTimeout := range []bool{false, true} {
			// go-redis sets the write deadline to ReadTimeout too (WriteTimeout
			// defaults to it), so a stalled client may time out before it
			// writes: untilSent retries with a longer timeout.
			evals, err := untilSent(t, 20*time.Millisecond, func(b *blackHole, timeout time.Duration) error {
				return takeOnce(t, &redis.Options{
					Addr: b.ln.Addr().String(), MaxRetries: maxRetries, MinRetryBackoff: time.Millisecond,
					ReadTimeout: timeout, Protocol: 2, ContextTimeoutEnabled: ctxTimeout,
				}, t.Context(), redisstore.AllowContextTimeoutDisabled())
			})
			var ne net.Error
			require.True(t, errors.As(err, &ne) && ne.Timeout(), "want a network timeout, got %v", err)
			require.Equal(t, int32(1), evals, "EVALSHAs sent with MaxRetries %d", maxRetries)
		}
	}
}

// TestNoReplayOnClusterAndRing: a ClusterClient (which retries on the same
// node, then on another, up to MaxRedirects times) and a Ring send the
// store's script once too; the raw script is re-sent by both.
func TestNoReplayOnClusterAndRing(t *testing.T) {
	cluster := func(addr string) redis.UniversalClient {
		return redis.NewClusterClient(&redis.ClusterOptions{
			ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) {
				return []redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: addr}}}}, nil
			},
			MaxRetries: 3, MinRetryBackoff: time.Millisecond, Protocol: 2, ContextTimeoutEnabled: true,
		})
	}
	ring := func(addr string) redis.UniversalClient {
		return redis.NewRing(&redis.RingOptions{
			Addrs:      map[string]string{"a": addr},
			MaxRetries: 3, MinRetryBackoff: time.Millisecond, Protocol: 2, ContextTimeoutEnabled: true,
		})
	}
	for name, newClient := range map[string]func(string) redis.UniversalClient{"cluster": cluster, "ring": ring} {
		t.Run(name, func(t *testing.T) {
			b := newBlackHole(t, true)
			client := newClient(b.ln.Addr().String())
			defer client.Close()
			require.Error(t, rawEval(t, client))
			raw := b.evals.Load()
			require.Greater(t, raw, int32(1), "the raw script should be replayed")

			b.evals.Store(0)
			require.ErrorContains(t, takeWith(t, client, t.Context()), "redisstore: take: ")
			require.Equal(t, int32(1), b.evals.Load())
		})
	}
}

// TestContextDeadlineNotReplayed: with ContextTimeoutEnabled the context's
// deadline becomes the socket deadline and ends the call with the
// context's error; the script is sent once.
//
// The client dials (PING) before the deadline starts, and untilSent
// lengthens a deadline that passed before the script was written.
func TestContextDeadlineNotReplayed(t *testing.T) {
	evals, err := untilSent(t, 50*time.Millisecond, func(b *blackHole, timeout time.Duration) error {
		client := redis.NewClient(&redis.Options{
			Addr: b.ln.Addr().String(), ContextTimeoutEnabled: true, ReadTimeout: time.Minute, Protocol: 2,
		})
		defer client.Close()
		require.NoError(t, client.Ping(t.Context()).Err())
		ctx, cancel := context.WithTimeout(t.Context(), timeout)
		defer cancel()
		return takeWith(t, client, ctx)
	})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "redisstore: take: ")
	require.Equal(t, int32(1), evals)
}

// wrapped is a UniversalClient whose options New cannot read.
type wrapped struct{ redis.UniversalClient }

// TestNewRequiresContextTimeout: a client that would let a hung Redis
// outlast the caller's deadline is refused, with a message that says what
// to set, unless AllowContextTimeoutDisabled acknowledges it.
func TestNewRequiresContextTimeout(t *testing.T) {
	const addr = "127.0.0.1:1"
	for name, tc := range map[string]struct {
		client redis.UniversalClient
		ok     bool
	}{
		"client":          {redis.NewClient(&redis.Options{Addr: addr}), false},
		"client enabled":  {redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true}), true},
		"cluster":         {redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}}), false},
		"cluster enabled": {redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}, ContextTimeoutEnabled: true}), true},
		"ring":            {redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": addr}}), false},
		"ring enabled":    {redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": addr}, ContextTimeoutEnabled: true}), true},
		"sentinel":        {redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{addr}}), false},
		"sentinel enabled": {redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{addr},
			ContextTimeoutEnabled: true}), true},
		"universal enabled": {redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{addr}, ContextTimeoutEnabled: true}), true},
		"unknown type":      {wrapped{redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})}, false},
	} {
		t.Run(name, func(t *testing.T) {
			defer tc.client.Close()
			_, err := redisstore.New(tc.client)
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, redisstore.ErrInvalidOption)
				require.ErrorContains(t, err, "AllowContextTimeoutDisabled")
			}
			_, err = redisstore.New(tc.client, redisstore.AllowContextTimeoutDisabled())
			require.NoError(t, err)
		})
	}
}
