package ratelimit_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
)

// switchStore is a Store that fails while down is set, and otherwise asks
// the Store it wraps.
type switchStore struct {
	ratelimit.Store
	down atomic.Bool
}

func (s *switchStore) Take(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	if s.down.Load() {
		return errStoreDown
	}
	return s.Store.Take(ctx, reqs, out)
}

func (s *switchStore) Adjust(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	if s.down.Load() {
		return errStoreDown
	}
	return s.Store.Adjust(ctx, reqs, out)
}

// logLines is a slog handler's output without times, one record a line.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logLines) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey && len(groups) == 0 {
				return slog.Attr{}
			}
			return a
		}}))
}

// alertLimiter is a Limiter on a switchStore over the fake clock, per API
// key, 60 requests per minute, with opts; the clock is the Limiter's too.
func alertLimiter(t *testing.T, opts ...ratelimit.Option) (*ratelimit.Limiter, *switchStore, *fakeClock) {
	t.Helper()
	clock := newClock()
	store := &switchStore{Store: newStore(t, clock.Now)}
	lim, err := ratelimit.New(store, append([]ratelimit.Option{ratelimit.WithKey(ratelimit.KeyByAPIKey()),
		ratelimit.WithLimits(ratelimit.PerMinute(60)), ratelimit.WithStoreTimeout(time.Minute)}, opts...)...)
	require.NoError(t, err)
	ratelimit.SetClock(lim, clock.Now)
	return lim, store, clock
}

// TestStoreAlert: with no hooks, a failing store is reported by the
// Limiter itself at Warn, at most one line per interval (a minute here):
// the first failure at once, then a summary with counts while it keeps
// failing, then the recovery, never the key.
func TestStoreAlert(t *testing.T) {
	var out logLines
	lim, store, clock := alertLimiter(t, ratelimit.WithStoreAlert(out.logger(), time.Minute))
	h := lim.Handler(okHandler)
	hit := func() { require.Equal(t, http.StatusOK, serve(h, request("GET", "/", "sk-secret-alice", -1)).Code) }

	hit() // the store answers: nothing to say
	store.down.Store(true)
	// t = 0: the first failure is logged at once.
	hit()
	// t = 10 s … 50 s: five more, within the minute: silent.
	for range 5 {
		clock.Advance(10 * time.Second)
		hit()
	}
	// t = 60 s: a minute since the first line: the summary of the six
	// failures and six requests let through since then (t = 0 … 50 s).
	// The failure at 60 s counts in the next line.
	clock.Advance(10 * time.Second)
	hit()
	// t = 70 s: the store answers again, 10 s after the last line: silent.
	store.down.Store(false)
	clock.Advance(10 * time.Second)
	hit()
	// t = 120 s: a minute after the last line, a success ends the
	// episode: one failure (t = 60 s) since.
	clock.Advance(50 * time.Second)
	hit()
	hit() // the episode is over: silent
	// t = 130 s: a new failure starts a new episode with a first line.
	clock.Advance(10 * time.Second)
	store.down.Store(true)
	hit()

	want := `level=WARN msg="ratelimit: the rate-limit store failed; requests are let through unlimited while it fails (FailOpen)" op=take error="ratelimit: store: store down"
level=WARN msg="ratelimit: the rate-limit store is still failing" store_errors=6 bypassed=6 since=1m0s error="ratelimit: store: store down"
level=WARN msg="ratelimit: the rate-limit store answers again" store_errors=1 bypassed=1 since=1m0s
level=WARN msg="ratelimit: the rate-limit store failed; requests are let through unlimited while it fails (FailOpen)" op=take error="ratelimit: store: store down"
`
	assert.Equal(t, want, out.String())
	assert.NotContains(t, out.String(), "alice")
	assert.Equal(t, uint64(8), lim.Stats().StoreErrors)
	assert.Equal(t, uint64(8), lim.Stats().Bypassed)
}

// TestStoreAlertFailClosed: under FailClosed the lines say that requests
// are refused, and count them as refused; failed settlements (Adjust)
// count as store errors, not as requests.
func TestStoreAlertFailClosed(t *testing.T) {
	var out logLines
	lim, store, clock := alertLimiter(t, ratelimit.WithFailureMode(ratelimit.FailClosed),
		ratelimit.WithStoreAlert(out.logger(), 30*time.Second))
	store.down.Store(true)
	for range 3 {
		res, err := lim.Take(t.Context(), "k")
		require.Error(t, err)
		require.False(t, res.Allowed)
	}
	_, err := lim.Adjust(t.Context(), "k", "requests", -1)
	require.Error(t, err)
	clock.Advance(30 * time.Second)
	_, err = lim.Take(t.Context(), "k")
	require.Error(t, err)

	want := `level=WARN msg="ratelimit: the rate-limit store failed; requests are refused with 503 while it fails (FailClosed)" op=take error="ratelimit: store: store down"
level=WARN msg="ratelimit: the rate-limit store is still failing" store_errors=4 refused=3 since=30s error="ratelimit: store: store down"
`
	assert.Equal(t, want, out.String())
}

// TestStoreAlertDefault: without any option the alert logs to
// slog.Default() (as it is when it logs), with or without Hooks;
// WithoutStoreAlert turns it off.
func TestStoreAlertDefault(t *testing.T) {
	var out logLines
	prev := slog.Default()
	slog.SetDefault(out.logger())
	defer slog.SetDefault(prev)

	var hooked atomic.Int64
	for _, opts := range [][]ratelimit.Option{
		nil,
		{ratelimit.WithHooks(ratelimit.Hooks{OnStoreError: func(context.Context, error) { hooked.Add(1) }})},
	} {
		lim, store, _ := alertLimiter(t, opts...)
		store.down.Store(true)
		_, err := lim.Take(t.Context(), "k")
		require.Error(t, err)
	}
	assert.Equal(t, 2, strings.Count(out.String(), `level=WARN msg="ratelimit: the rate-limit store failed;`), out.String())
	assert.Equal(t, int64(1), hooked.Load())

	before := out.String()
	lim, store, _ := alertLimiter(t, ratelimit.WithoutStoreAlert())
	store.down.Store(true)
	_, err := lim.Take(t.Context(), "k")
	require.Error(t, err)
	assert.Equal(t, before, out.String(), "WithoutStoreAlert: no line")

	_, err = ratelimit.New(store, ratelimit.WithLimits(ratelimit.PerMinute(1)), ratelimit.WithStoreAlert(nil, 0))
	assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
}

// TestStoreAlertIgnoresAbandonedCalls: a store call abandoned because the
// caller's own context ended is no store failure: no line.
func TestStoreAlertIgnoresAbandonedCalls(t *testing.T) {
	var out logLines
	lim, store, _ := alertLimiter(t, ratelimit.WithStoreAlert(out.logger(), time.Minute))
	store.down.Store(true)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := lim.Take(ctx, "k")
	require.ErrorIs(t, err, context.Canceled)
	assert.Empty(t, out.String())
	assert.Zero(t, lim.Stats().StoreErrors)
}
