package hooks_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/hooks"
	"github.com/rampmeter/ratelimit/store/memory"
)

var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// textLogger logs at level and above into buf, without timestamps, so
// that tests can compare whole lines.
func textLogger(buf *bytes.Buffer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: level,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}}))
}

type errStore struct{ err error }

func (s errStore) Take(context.Context, []ratelimit.Request, []ratelimit.Decision) error {
	return s.err
}
func (s errStore) Adjust(context.Context, []ratelimit.Request, []ratelimit.Decision) error {
	return s.err
}

// withoutSlowCalls drops the "slow store call" records, which depend on
// real time (TestSlogSlowStoreCall covers them).
type withoutSlowCalls struct{ slog.Handler }

func (h withoutSlowCalls) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "ratelimit: slow store call" {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func TestSlog(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(withoutSlowCalls{textLogger(&buf, slog.LevelDebug).Handler()})
	mem, err := memory.New(memory.WithClock(func() time.Time { return epoch }))
	require.NoError(t, err)
	limits := ratelimit.WithLimits(ratelimit.PerMinute(2).Named("requests"), ratelimit.PerMinute(1).Named("strict").Shadow())
	// Several Limiters below share mem's state on purpose: one name.
	named := ratelimit.WithName("api")
	lim, err := ratelimit.New(mem, limits, named, ratelimit.WithHooks(hooks.Slog(logger)))
	require.NoError(t, err)
	ctx := context.Background()

	// The clock stands still: the first Take is admitted silently; the
	// second is admitted though strict (1 per minute) refuses: a shadow
	// refusal; the third is refused by requests (2 per minute, 30 s per
	// unit, so retry after 30 s) and strict.
	for range 3 {
		_, err := lim.Take(ctx, "sk-secret-key-0123456789")
		require.NoError(t, err)
	}
	bad, err := ratelimit.New(errStore{context.DeadlineExceeded}, limits, ratelimit.WithHooks(hooks.Slog(logger)))
	require.NoError(t, err)
	_, err = bad.Take(ctx, "sk-secret-key-0123456789")
	require.Error(t, err)

	skip, err := ratelimit.New(mem, limits, named, ratelimit.WithKey(ratelimit.KeyByAPIKey()), ratelimit.WithHooks(hooks.Slog(logger)), ratelimit.WithSkipOnKeyError())
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	skip.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))

	want := `level=DEBUG msg="ratelimit: request refused" policies=strict retry_after=0s shadow=true
level=DEBUG msg="ratelimit: request refused" policies=requests,strict retry_after=30s shadow=false
level=WARN msg="ratelimit: store call failed" kind=timeout error="ratelimit: store call timed out after 50ms: context deadline exceeded"
level=WARN msg="ratelimit: request not limited" cause=store reason="ratelimit: store call timed out after 50ms: context deadline exceeded"
level=WARN msg="ratelimit: request not limited" cause=key reason="ratelimit: no rate-limit key: send an API key as \"Authorization: Bearer <key>\" or \"X-API-Key: <key>\""
`
	assert.Equal(t, want, buf.String())
	assert.NotContains(t, buf.String(), "sk-secret")

	// At Warn, refusals are not logged (a flood of 429s cannot fill the
	// logs) and are not even formatted.
	buf.Reset()
	warnOnly, err := ratelimit.New(mem, limits, named, ratelimit.WithHooks(hooks.Slog(textLogger(&buf, slog.LevelWarn))))
	require.NoError(t, err)
	res, err := warnOnly.Take(ctx, "sk-secret-key-0123456789")
	require.NoError(t, err)
	require.False(t, res.Allowed)
	assert.Empty(t, buf.String())
	// Against a Limiter with a hook that does nothing: any OnDecision
	// costs the copy of the decisions it may keep.
	plain, err := ratelimit.New(mem, limits, named, ratelimit.WithHooks(ratelimit.Hooks{OnDecision: func(context.Context, ratelimit.Result) {}}))
	require.NoError(t, err)
	assert.Equal(t, testing.AllocsPerRun(100, func() {
		_, _ = plain.Take(ctx, "sk-secret-key-0123456789") // the same refusal without logging
	}), testing.AllocsPerRun(100, func() {
		_, _ = warnOnly.Take(ctx, "sk-secret-key-0123456789")
	}))
}

func TestErrorKind(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, hooks.KindOther},
		{context.DeadlineExceeded, hooks.KindTimeout},
		{fmt.Errorf("%w after 50ms: %w", ratelimit.ErrStoreTimeout, errors.New("i/o")), hooks.KindTimeout},
		{fmt.Errorf("ratelimit: store: %w", context.Canceled), hooks.KindCanceled},
		{errors.New("dial tcp: connection refused"), hooks.KindOther},
	} {
		assert.Equal(t, tc.want, hooks.ErrorKind(tc.err), "%v", tc.err)
	}
}

// TestJoin checks, by reflection over ratelimit.Hooks, that Join calls
// every callback of every argument in order, so that a callback added to
// Hooks later cannot be dropped silently.
func TestJoin(t *testing.T) {
	var calls []string
	hs := make([]ratelimit.Hooks, 3)
	typ := reflect.TypeFor[ratelimit.Hooks]()
	for i := range hs {
		if i == 1 {
			continue // an empty Hooks in the middle is skipped
		}
		v := reflect.ValueOf(&hs[i]).Elem()
		for f := range typ.NumField() {
			field := typ.Field(f)
			require.Equal(t, reflect.Func, field.Type.Kind(), "Hooks.%s", field.Name)
			name := fmt.Sprintf("%s#%d", field.Name, i)
			v.Field(f).Set(reflect.MakeFunc(field.Type, func([]reflect.Value) []reflect.Value {
				calls = append(calls, name)
				return nil
			}))
		}
	}
	joined := reflect.ValueOf(hooks.Join(hs...))
	for f := range typ.NumField() {
		field := typ.Field(f)
		fn := joined.Field(f)
		require.False(t, fn.IsNil(), "Join drops Hooks.%s", field.Name)
		args := make([]reflect.Value, field.Type.NumIn())
		for a := range args {
			args[a] = reflect.Zero(field.Type.In(a))
		}
		calls = nil
		fn.Call(args)
		assert.Equal(t, []string{field.Name + "#0", field.Name + "#2"}, calls)
	}
	empty := reflect.ValueOf(hooks.Join(ratelimit.Hooks{}, ratelimit.Hooks{}))
	for f := range typ.NumField() {
		assert.True(t, empty.Field(f).IsNil(), "Join of empty Hooks sets %s", typ.Field(f).Name)
	}
}

// recordHandler keeps every record it handles.
type recordHandler struct {
	mu      sync.Mutex
	level   slog.Level
	records []slog.Record
}

func (h *recordHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h *recordHandler) WithGroup(string) slog.Handler                { return h }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r)
	return nil
}

// sleepyStore takes d (real time) for every call, then answers err (or
// lets the wrapped store answer when err is nil).
type sleepyStore struct {
	ratelimit.Store
	d   time.Duration
	err error
}

func (s sleepyStore) Take(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	time.Sleep(s.d)
	if s.err != nil {
		return s.err
	}
	return s.Store.Take(ctx, reqs, out)
}

func TestSlogSlowStoreCall(t *testing.T) {
	// The store sleeps 2×SlowStoreCall, so each call takes at least that
	// long however loaded the machine is; the store timeout (10 s) is far
	// away. Only lower bounds on real time are asserted.
	mem, err := memory.New()
	require.NoError(t, err)
	h := &recordHandler{level: slog.LevelDebug}
	limits := ratelimit.WithLimits(ratelimit.PerMinute(2).Named("requests"), ratelimit.PerMinute(1).Named("strict"))
	for _, failing := range []bool{false, true} {
		store := sleepyStore{Store: mem, d: 2 * hooks.SlowStoreCall}
		if failing {
			store.err = errors.New("connection reset")
		}
		lim, err := ratelimit.New(store, limits, ratelimit.WithStoreTimeout(10*time.Second),
			ratelimit.WithHooks(hooks.Slog(slog.New(h))))
		require.NoError(t, err)
		_, err = lim.Take(context.Background(), "sk-secret-key-0123456789")
		assert.Equal(t, failing, err != nil)
	}
	var slow []map[string]string
	for _, r := range h.records {
		if r.Message != "ratelimit: slow store call" {
			continue
		}
		assert.Equal(t, slog.LevelDebug, r.Level)
		attrs := map[string]string{}
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "duration" {
				assert.GreaterOrEqual(t, a.Value.Duration(), 2*hooks.SlowStoreCall)
				return true
			}
			attrs[a.Key] = a.Value.String()
			return true
		})
		slow = append(slow, attrs)
	}
	assert.Equal(t, []map[string]string{
		{"op": "take", "requests": "2"},
		{"op": "take", "requests": "2", "error": "ratelimit: store: connection reset"},
	}, slow)

	// Below Debug nothing is logged (nor formatted).
	info := &recordHandler{level: slog.LevelInfo}
	hs := hooks.Slog(slog.New(info))
	hs.OnStoreCall(context.Background(), ratelimit.StoreCall{Op: ratelimit.OpTake, Requests: 1, Duration: time.Hour})
	assert.Empty(t, info.records)
}

func TestBypassCause(t *testing.T) {
	assert.Equal(t, hooks.CauseStore, hooks.BypassCause(fmt.Errorf("x: %w", ratelimit.ErrStoreFailed)))
	assert.Equal(t, hooks.CauseKey, hooks.BypassCause(ratelimit.ErrMissingKey))
	assert.Equal(t, hooks.CauseKey, hooks.BypassCause(nil))
	// A real store failure under FailOpen, and a real key error.
	var reasons []string
	lim, err := ratelimit.New(errStore{errors.New("down")}, ratelimit.WithLimits(ratelimit.PerMinute(1)), ratelimit.WithKey(ratelimit.KeyByAPIKey()),
		ratelimit.WithSkipOnKeyError(), ratelimit.WithHooks(ratelimit.Hooks{OnBypass: func(_ context.Context, reason error) {
			reasons = append(reasons, hooks.BypassCause(reason))
		}}))
	require.NoError(t, err)
	h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	r := httptest.NewRequest("GET", "/", nil)
	h.ServeHTTP(httptest.NewRecorder(), r)
	r.Header.Set("X-API-Key", "k")
	h.ServeHTTP(httptest.NewRecorder(), r)
	assert.Equal(t, []string{hooks.CauseKey, hooks.CauseStore}, reasons)
}
