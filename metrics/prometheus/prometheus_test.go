package prometheus

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/internal/clocktest"
	"github.com/rampmeter/ratelimit/store/memory"
)

var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// clock is a manual clock.
type clock = clocktest.Clock

// slowStore advances a clock by d during every call to s (or returns err
// instead of calling s when err is set): a store whose latency is d by
// that clock.
type slowStore struct {
	s   ratelimit.Store
	c   *clock
	d   time.Duration
	err error
}

func (s *slowStore) Take(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	s.c.Advance(s.d)
	if s.err != nil {
		return s.err
	}
	return s.s.Take(ctx, reqs, out)
}

func (s *slowStore) Adjust(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	s.c.Advance(s.d)
	if s.err != nil {
		return s.err
	}
	return s.s.Adjust(ctx, reqs, out)
}

// Latencies that are exact binary fractions of a second, so the
// histogram sums print exactly.
const (
	fast = time.Second / 256 // 3.90625 ms: bucket le=0.005
	slow = time.Second / 16  // 62.5 ms: bucket le=0.075
)

// TestScriptedSequence drives a Limiter through every outcome and checks
// every counter, the latency histogram and the circuit gauge exactly.
func TestScriptedSequence(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := New(reg)
	require.NoError(t, err)
	latencyClock := clocktest.New(epoch)
	m.now = latencyClock.Now

	storeClock := clocktest.New(epoch)
	mem, err := memory.New(memory.WithClock(storeClock.Now))
	require.NoError(t, err)
	limits := ratelimit.WithLimits(
		ratelimit.PerMinute(2).Named("requests"),
		ratelimit.PerMinute(10).Named("tokens"),
		ratelimit.PerMinute(1).Named("strict").Shadow(),
	)
	lim, err := ratelimit.New(m.InstrumentStore(&slowStore{s: mem, c: latencyClock, d: fast}),
		limits, ratelimit.WithHooks(m.Hooks()))
	require.NoError(t, err)
	ctx := context.Background()

	// The store's clock stands still, so nothing refills.
	// 1. requests 2→1, tokens 10→6, strict 1→0: admitted.
	res, err := lim.Take(ctx, "k", 1, 4, 1)
	require.NoError(t, err)
	require.True(t, res.Allowed)
	// 2. strict has 0 < 1 and refuses (shadow); the enforced limits are
	//    retaken and charged: requests 1→0, tokens 6→2. Two store Takes.
	res, err = lim.Take(ctx, "k", 1, 4, 1)
	require.NoError(t, err)
	require.True(t, res.Allowed)
	require.True(t, res.ShadowLimited())
	// 3. requests has 0 < 1: limited; tokens (2 ≥ 1) had room but is not
	//    charged; strict refuses again.
	res, err = lim.Take(ctx, "k", 1, 1, 1)
	require.NoError(t, err)
	require.False(t, res.Allowed)
	// 4. A fresh key asking 11 tokens of a burst of 10: too large; the
	//    others had room (strict is asked 0).
	res, err = lim.Take(ctx, "k2", 1, 11, 0)
	require.NoError(t, err)
	require.Equal(t, ratelimit.RetryNever, res.RetryAfter)
	// 5. A refund of 2 tokens: one store Adjust, no decision counted.
	_, err = lim.Adjust(ctx, "k", "tokens", -2)
	require.NoError(t, err)

	// 6-8. The same metrics on three failing stores under FailOpen: a
	// timeout, a cancellation, another error. Each is a store error and a
	// bypass.
	for _, e := range []error{context.DeadlineExceeded, context.Canceled, errors.New("connection refused")} {
		bad, err := ratelimit.New(m.InstrumentStore(&slowStore{c: latencyClock, d: slow, err: e}),
			limits, ratelimit.WithHooks(m.Hooks()))
		require.NoError(t, err)
		res, err := bad.Take(ctx, "k", 1, 1, 1)
		require.Error(t, err)
		require.True(t, res.Bypassed)
	}

	// 9. A request without a key under WithSkipOnKeyError: a bypass
	// without a store call.
	skip, err := ratelimit.New(mem, limits, ratelimit.WithKey(ratelimit.KeyByAPIKey()), ratelimit.WithSkipOnKeyError(), ratelimit.WithHooks(m.Hooks()))
	require.NoError(t, err)
	skip.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).
		ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))

	m.SetCircuitState("redis", true)
	m.SetCircuitState("redis", false)
	m.SetCircuitState("replica", true)

	// Derivation: store Takes succeeded 5 times (steps 1, 2 twice, 3, 4),
	// each 1/256 s; one Adjust, 1/256 s; 3 failed Takes of 1/16 s each.
	// The Limiters' stores are InstrumentStore wrappers of m, so the Hooks
	// leave the histogram to them: each call is counted once.
	const want = `
# HELP rampmeter_bypasses_total Requests let through without a decision, by cause: store (the store failed, FailOpen), key (the key function failed, WithSkipOnKeyError).
# TYPE rampmeter_bypasses_total counter
rampmeter_bypasses_total{cause="key"} 1
rampmeter_bypasses_total{cause="store"} 3
# HELP rampmeter_circuit_open 1 while the named circuit breaker is open (the store is not called), 0 otherwise.
# TYPE rampmeter_circuit_open gauge
rampmeter_circuit_open{circuit="redis"} 0
rampmeter_circuit_open{circuit="replica"} 1
# HELP rampmeter_decisions_total Verdicts of each limit (policy) on decided requests: allowed, limited, too_large, shadow, uncharged.
# TYPE rampmeter_decisions_total counter
rampmeter_decisions_total{outcome="allowed",policy="requests"} 2
rampmeter_decisions_total{outcome="allowed",policy="strict"} 1
rampmeter_decisions_total{outcome="allowed",policy="tokens"} 2
rampmeter_decisions_total{outcome="limited",policy="requests"} 1
rampmeter_decisions_total{outcome="limited",policy="strict"} 0
rampmeter_decisions_total{outcome="limited",policy="tokens"} 0
rampmeter_decisions_total{outcome="shadow",policy="requests"} 0
rampmeter_decisions_total{outcome="shadow",policy="strict"} 2
rampmeter_decisions_total{outcome="shadow",policy="tokens"} 0
rampmeter_decisions_total{outcome="too_large",policy="requests"} 0
rampmeter_decisions_total{outcome="too_large",policy="strict"} 0
rampmeter_decisions_total{outcome="too_large",policy="tokens"} 1
rampmeter_decisions_total{outcome="uncharged",policy="requests"} 1
rampmeter_decisions_total{outcome="uncharged",policy="strict"} 1
rampmeter_decisions_total{outcome="uncharged",policy="tokens"} 1
# HELP rampmeter_requests_total Requests (and Limiter.Take calls) by outcome: allowed, limited, too_large, bypassed.
# TYPE rampmeter_requests_total counter
rampmeter_requests_total{outcome="allowed"} 2
rampmeter_requests_total{outcome="bypassed"} 4
rampmeter_requests_total{outcome="limited"} 1
rampmeter_requests_total{outcome="too_large"} 1
# HELP rampmeter_store_errors_total Failed store calls by kind: timeout, canceled, other.
# TYPE rampmeter_store_errors_total counter
rampmeter_store_errors_total{kind="canceled"} 1
rampmeter_store_errors_total{kind="other"} 1
rampmeter_store_errors_total{kind="timeout"} 1
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want),
		"rampmeter_bypasses_total", "rampmeter_circuit_open", "rampmeter_decisions_total", "rampmeter_requests_total", "rampmeter_store_errors_total"))

	hist := func(op, result string, n int, bucket int, sum string) string {
		var b strings.Builder
		for i, le := range []string{"0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.04", "0.05", "0.075", "0.1", "0.25", "0.5", "1", "+Inf"} {
			c := 0
			if i >= bucket {
				c = n
			}
			b.WriteString(`rampmeter_store_duration_seconds_bucket{op="` + op + `",result="` + result + `",le="` + le + `"} ` + itoa(c) + "\n")
		}
		b.WriteString(`rampmeter_store_duration_seconds_sum{op="` + op + `",result="` + result + `"} ` + sum + "\n")
		b.WriteString(`rampmeter_store_duration_seconds_count{op="` + op + `",result="` + result + `"} ` + itoa(n) + "\n")
		return b.String()
	}
	wantHist := "# HELP rampmeter_store_duration_seconds Duration of store calls (Take, Adjust), successful or not.\n" +
		"# TYPE rampmeter_store_duration_seconds histogram\n" +
		hist("adjust", "error", 0, 0, "0") +
		hist("adjust", "ok", 1, 5, "0.00390625") + // 1/256
		hist("take", "error", 3, 10, "0.1875") + // 3/16
		hist("take", "ok", 5, 5, "0.01953125") // 5/256
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(wantHist), "rampmeter_store_duration_seconds"))

	// The Limiter's own counters agree with the metrics.
	st := lim.Stats()
	assert.Equal(t, uint64(2), st.Allowed)
	assert.Equal(t, uint64(1), st.Limited)
	assert.Equal(t, uint64(1), st.TooLarge)
	assert.Equal(t, uint64(1), st.ShadowLimited)

	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	assert.Empty(t, problems)
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

func TestRegistration(t *testing.T) {
	reg := prometheus.NewRegistry()
	_, err := New(reg)
	require.NoError(t, err)
	_, err = New(reg)
	var are prometheus.AlreadyRegisteredError
	require.ErrorAs(t, err, &are, "the same names twice")

	m, err := New(reg, WithSubsystem("public"), WithConstLabels(prometheus.Labels{"limiter": "a"}))
	require.NoError(t, err, "a subsystem tells them apart")
	m.Hooks().OnBypass(context.Background(), errors.New("x"))
	assert.Equal(t, 1.0, testutil.ToFloat64(m.reqBypassed))
	n, err := testutil.GatherAndCount(reg, "rampmeter_public_requests_total")
	require.NoError(t, err)
	assert.Equal(t, 4, n, "four outcomes, pre-created")
	n, err = testutil.GatherAndCount(reg, "rampmeter_public_bypasses_total")
	require.NoError(t, err)
	assert.Equal(t, 2, n, "two causes, pre-created")
	assert.Equal(t, 1.0, testutil.ToFloat64(m.bypassKey), "an error that is no store failure")

	unregistered, err := New(nil)
	require.NoError(t, err)
	require.NoError(t, prometheus.NewRegistry().Register(unregistered), "nil registers nothing; the Metrics is a Collector")
}

func TestOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  Option
	}{
		{"namespace", WithNamespace("1bad")},
		{"namespace dash", WithNamespace("a-b")},
		{"subsystem", WithSubsystem("a b")},
		{"no buckets", WithLatencyBuckets()},
		{"unsorted", WithLatencyBuckets(0.1, 0.05)},
		{"zero", WithLatencyBuckets(0, 1)},
		{"label collision", WithConstLabels(prometheus.Labels{"policy": "x"})},
		{"cause collision", WithConstLabels(prometheus.Labels{"cause": "x"})},
		{"label name", WithConstLabels(prometheus.Labels{"a-b": "x"})},
		{"nil", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(nil, tc.opt)
			require.ErrorIs(t, err, ErrInvalidOption)
		})
	}
	reg := prometheus.NewPedanticRegistry()
	m, err := New(reg, WithNamespace(""), WithLatencyBuckets(0.5, 1))
	require.NoError(t, err)
	c := clocktest.New(epoch)
	m.now = c.Now
	err = m.InstrumentStore(&slowStore{c: c, d: 3 * time.Second / 4, err: errors.New("x")}).Take(context.Background(), nil, nil)
	require.Error(t, err)
	// One failed Take of 0.75 s: above 0.5, within 1.
	const want = `
# HELP store_duration_seconds Duration of store calls (Take, Adjust), successful or not.
# TYPE store_duration_seconds histogram
store_duration_seconds_bucket{op="adjust",result="error",le="0.5"} 0
store_duration_seconds_bucket{op="adjust",result="error",le="1"} 0
store_duration_seconds_bucket{op="adjust",result="error",le="+Inf"} 0
store_duration_seconds_sum{op="adjust",result="error"} 0
store_duration_seconds_count{op="adjust",result="error"} 0
store_duration_seconds_bucket{op="adjust",result="ok",le="0.5"} 0
store_duration_seconds_bucket{op="adjust",result="ok",le="1"} 0
store_duration_seconds_bucket{op="adjust",result="ok",le="+Inf"} 0
store_duration_seconds_sum{op="adjust",result="ok"} 0
store_duration_seconds_count{op="adjust",result="ok"} 0
store_duration_seconds_bucket{op="take",result="error",le="0.5"} 0
store_duration_seconds_bucket{op="take",result="error",le="1"} 1
store_duration_seconds_bucket{op="take",result="error",le="+Inf"} 1
store_duration_seconds_sum{op="take",result="error"} 0.75
store_duration_seconds_count{op="take",result="error"} 1
store_duration_seconds_bucket{op="take",result="ok",le="0.5"} 0
store_duration_seconds_bucket{op="take",result="ok",le="1"} 0
store_duration_seconds_bucket{op="take",result="ok",le="+Inf"} 0
store_duration_seconds_sum{op="take",result="ok"} 0
store_duration_seconds_count{op="take",result="ok"} 0
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "store_duration_seconds"))
}

// durationCounts returns the sample counts of the store_duration_seconds
// histogram of reg, by "op/result".
func durationCounts(t *testing.T, reg prometheus.Gatherer, name string) map[string]uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mt := range mf.GetMetric() {
			var op, result string
			for _, lp := range mt.GetLabel() {
				switch lp.GetName() {
				case "op":
					op = lp.GetValue()
				case "result":
					result = lp.GetValue()
				}
			}
			out[op+"/"+result] = mt.GetHistogram().GetSampleCount()
		}
	}
	return out
}

// TestStoreDurationFromHooks runs a Limiter on a plain store: the Hooks
// alone feed store_duration_seconds, one sample per store call. The
// Limiter measures with the real clock, so only the counts are exact here;
// TestStoreDurationBuckets checks the values.
func TestStoreDurationFromHooks(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := New(reg)
	require.NoError(t, err)
	c := clocktest.New(epoch)
	mem, err := memory.New(memory.WithClock(c.Now))
	require.NoError(t, err)
	store := &slowStore{s: mem, c: c}
	lim, err := ratelimit.New(store, ratelimit.WithHooks(m.Hooks()), ratelimit.WithLimits(
		ratelimit.PerMinute(60).Named("requests"),
		ratelimit.PerMinute(100).Named("tokens").CostFrom(func(*http.Request) (int64, error) { return 500, nil }).Shadow()))
	require.NoError(t, err)
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = ratelimit.ReportUsage(r.Context(), "requests", 3)
	}))
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-API-Key", "k")
	// The shadow limit refuses 500 tokens: two Takes; then the settlement
	// of 3 requests for 1: one Adjust.
	h.ServeHTTP(httptest.NewRecorder(), r)
	_, err = lim.Adjust(context.Background(), "k", "requests", -1)
	require.NoError(t, err)
	store.err = errors.New("connection refused")
	_, err = lim.Take(context.Background(), "k", 1, 1)
	require.ErrorIs(t, err, ratelimit.ErrStoreFailed)
	assert.Equal(t, map[string]uint64{"take/ok": 2, "take/error": 1, "adjust/ok": 2, "adjust/error": 0},
		durationCounts(t, reg, "rampmeter_store_duration_seconds"))
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	assert.Empty(t, problems)
}

// TestStoreDurationBuckets feeds the Hooks' OnStoreCall directly, with
// exact durations.
func TestStoreDurationBuckets(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := New(reg, WithNamespace(""), WithLatencyBuckets(0.005, 0.1))
	require.NoError(t, err)
	hk := m.Hooks()
	ctx := context.Background()
	mem, err := memory.New()
	require.NoError(t, err)
	for _, call := range []ratelimit.StoreCall{
		{Op: ratelimit.OpTake, Requests: 2, Duration: fast, Store: mem},
		{Op: ratelimit.OpTake, Requests: 2, Duration: slow, Err: ratelimit.ErrStoreFailed, Store: mem},
		{Op: ratelimit.OpAdjust, Requests: 1, Duration: slow, Store: mem},
		{Op: "other", Requests: 1, Duration: slow, Store: mem},                             // not a Store method: ignored
		{Op: ratelimit.OpTake, Requests: 1, Duration: slow, Store: m.InstrumentStore(mem)}, // the wrapper's
	} {
		hk.OnStoreCall(ctx, call)
	}
	const want = `
# HELP store_duration_seconds Duration of store calls (Take, Adjust), successful or not.
# TYPE store_duration_seconds histogram
store_duration_seconds_bucket{op="adjust",result="error",le="0.005"} 0
store_duration_seconds_bucket{op="adjust",result="error",le="0.1"} 0
store_duration_seconds_bucket{op="adjust",result="error",le="+Inf"} 0
store_duration_seconds_sum{op="adjust",result="error"} 0
store_duration_seconds_count{op="adjust",result="error"} 0
store_duration_seconds_bucket{op="adjust",result="ok",le="0.005"} 0
store_duration_seconds_bucket{op="adjust",result="ok",le="0.1"} 1
store_duration_seconds_bucket{op="adjust",result="ok",le="+Inf"} 1
store_duration_seconds_sum{op="adjust",result="ok"} 0.0625
store_duration_seconds_count{op="adjust",result="ok"} 1
store_duration_seconds_bucket{op="take",result="error",le="0.005"} 0
store_duration_seconds_bucket{op="take",result="error",le="0.1"} 1
store_duration_seconds_bucket{op="take",result="error",le="+Inf"} 1
store_duration_seconds_sum{op="take",result="error"} 0.0625
store_duration_seconds_count{op="take",result="error"} 1
store_duration_seconds_bucket{op="take",result="ok",le="0.005"} 1
store_duration_seconds_bucket{op="take",result="ok",le="0.1"} 1
store_duration_seconds_bucket{op="take",result="ok",le="+Inf"} 1
store_duration_seconds_sum{op="take",result="ok"} 0.00390625
store_duration_seconds_count{op="take",result="ok"} 1
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "store_duration_seconds"))
}

// TestInstrumentStoreOfAnotherMetrics: the Hooks of m skip only m's own
// wrappers. A Limiter reporting to m on a store wrapped by m2 is counted
// once in each.
func TestInstrumentStoreOfAnotherMetrics(t *testing.T) {
	reg, reg2 := prometheus.NewPedanticRegistry(), prometheus.NewPedanticRegistry()
	m, err := New(reg)
	require.NoError(t, err)
	m2, err := New(reg2)
	require.NoError(t, err)
	mem, err := memory.New()
	require.NoError(t, err)
	lim, err := ratelimit.New(m2.InstrumentStore(mem), ratelimit.WithLimits(ratelimit.PerMinute(1)), ratelimit.WithHooks(m.Hooks()))
	require.NoError(t, err)
	_, err = lim.Take(context.Background(), "k")
	require.NoError(t, err)
	want := map[string]uint64{"take/ok": 1, "take/error": 0, "adjust/ok": 0, "adjust/error": 0}
	assert.Equal(t, want, durationCounts(t, reg, "rampmeter_store_duration_seconds"))
	assert.Equal(t, want, durationCounts(t, reg2, "rampmeter_store_duration_seconds"))
}

// BenchmarkHooksOnDecision measures the hooks' cost per decided request
// with three stacked limits.
func BenchmarkHooksOnDecision(b *testing.B) {
	m, err := New(nil)
	if err != nil {
		b.Fatal(err)
	}
	ls := []ratelimit.Limit{ratelimit.PerMinute(60).Named("requests"), ratelimit.PerDay(100_000).Named("tokens"),
		ratelimit.PerHour(1000).Named("hourly")}
	res := ratelimit.Result{Allowed: true, Decisions: []ratelimit.Decision{
		{Limit: &ls[0], Allowed: true}, {Limit: &ls[1], Allowed: true}, {Limit: &ls[2], Allowed: true}}}
	h := m.Hooks()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		h.OnDecision(ctx, res)
	}
}

// BenchmarkInstrumentStore measures the wrapper's overhead on a memory
// store Take over 10,000 keys.
func BenchmarkInstrumentStore(b *testing.B) {
	m, err := New(nil)
	if err != nil {
		b.Fatal(err)
	}
	mem, err := memory.New()
	if err != nil {
		b.Fatal(err)
	}
	s := m.InstrumentStore(mem)
	l := ratelimit.PerSecond(1_000_000)
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = "key-" + itoa(i+1)
	}
	reqs := []ratelimit.Request{{Limit: &l, Cost: 1}}
	out := make([]ratelimit.Decision, 1)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		reqs[0].Key = keys[i%len(keys)]
		i++
		if err := s.Take(ctx, reqs, out); err != nil {
			b.Fatal(err)
		}
	}
}

// InstrumentStore forwards the optional interfaces of the hot path: a
// SingleTaker store gives a SingleTaker wrapper whose TakeOne is measured
// like a Take, a PairTaker store a PairTaker wrapper whose TakeTwo is, any
// other store a wrapper that is neither; NonBlocking is the measured
// store's answer.
func TestInstrumentStoreForwardsOptionalInterfaces(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	require.NoError(t, err)
	mem, err := memory.New()
	require.NoError(t, err)

	w := m.InstrumentStore(mem)
	one, ok := w.(ratelimit.SingleTaker)
	require.True(t, ok, "memory is a SingleTaker, so is its wrapper")
	assert.True(t, w.(ratelimit.NonBlocking).NonBlocking())
	l := ratelimit.PerMinute(2)
	allowed, remaining, _, _, _, _, err := one.TakeOne(context.Background(), ratelimit.Request{Key: "k", Limit: &l, Cost: 1})
	require.NoError(t, err)
	assert.True(t, allowed)
	assert.Equal(t, int64(1), remaining)
	assert.Equal(t, uint64(1), durationCounts(t, reg, "rampmeter_store_duration_seconds")["take/ok"], "TakeOne measured as a Take")
	assert.True(t, m.wraps(w))

	// TakeTwo: memory is a PairTaker, so is its wrapper, and a stack of
	// two through it is all or nothing and measured as one Take.
	pair, ok := w.(ratelimit.PairTaker)
	require.True(t, ok, "memory is a PairTaker, so is its wrapper")
	tokens := ratelimit.PerMinute(10)
	da, db, err := takeTwo(pair, context.Background(),
		ratelimit.Request{Key: "k", Limit: &l, Cost: 1},
		ratelimit.Request{Key: "k", Limit: &tokens, Cost: 4})
	require.NoError(t, err)
	assert.True(t, da.Allowed && db.Allowed)
	assert.Equal(t, int64(0), da.Remaining, "the second of l's 2")
	assert.Equal(t, int64(6), db.Remaining, "10 - 4")
	da, db, err = takeTwo(pair, context.Background(),
		ratelimit.Request{Key: "k2", Limit: &l, Cost: 1},
		ratelimit.Request{Key: "k2", Limit: &tokens, Cost: 11})
	require.NoError(t, err)
	assert.False(t, db.Allowed, "11 > 10")
	assert.True(t, da.Allowed, "l had room; the stack's refusal is db's")
	_, remaining, _, _, _, _, err = one.TakeOne(context.Background(), ratelimit.Request{Key: "k2", Limit: &l, Cost: 1})
	require.NoError(t, err)
	assert.Equal(t, int64(1), remaining, "the refused stack charged nothing")
	assert.Equal(t, uint64(4), durationCounts(t, reg, "rampmeter_store_duration_seconds")["take/ok"], "each TakeTwo measured as one Take")

	// A store that is only one of the two gives a wrapper that is only
	// that one.
	onlyOne := m.InstrumentStore(struct {
		ratelimit.Store
		ratelimit.SingleTaker
	}{mem, mem})
	_, ok = onlyOne.(ratelimit.SingleTaker)
	assert.True(t, ok)
	_, ok = onlyOne.(ratelimit.PairTaker)
	assert.False(t, ok, "no PairTaker wrapped, none forwarded")
	assert.True(t, m.wraps(onlyOne))
	onlyPair := m.InstrumentStore(struct {
		ratelimit.Store
		ratelimit.PairTaker
	}{mem, mem})
	_, ok = onlyPair.(ratelimit.SingleTaker)
	assert.False(t, ok, "no SingleTaker wrapped, none forwarded")
	pair, ok = onlyPair.(ratelimit.PairTaker)
	require.True(t, ok)
	_, db, err = takeTwo(pair, context.Background(),
		ratelimit.Request{Key: "k3", Limit: &l, Cost: 1},
		ratelimit.Request{Key: "k3", Limit: &tokens, Cost: 3})
	require.NoError(t, err)
	assert.Equal(t, int64(7), db.Remaining)
	assert.Equal(t, uint64(5), durationCounts(t, reg, "rampmeter_store_duration_seconds")["take/ok"])
	assert.True(t, m.wraps(onlyPair))

	slow := m.InstrumentStore(&slowStore{s: mem, c: &clock{}})
	_, ok = slow.(ratelimit.SingleTaker)
	assert.False(t, ok, "a store that is no SingleTaker gives a wrapper that is none")
	_, ok = slow.(ratelimit.PairTaker)
	assert.False(t, ok, "a store that is no PairTaker gives a wrapper that is none")
	assert.False(t, slow.(ratelimit.NonBlocking).NonBlocking(), "a store that does not say may block")
	assert.True(t, m.wraps(slow))
}

// takeTwo calls p's TakeTwo on the requests a and b and puts their
// Decisions back together, as the Limiter does (zeros on an error).
func takeTwo(p ratelimit.PairTaker, ctx context.Context, a, b ratelimit.Request) (da, db ratelimit.Decision, err error) {
	da.Allowed, da.Remaining, da.Reset, da.RetryAfter, da.Delay, da.At,
		db.Allowed, db.Remaining, db.Reset, db.RetryAfter, db.Delay, db.At, err = p.TakeTwo(ctx, a.Key, a.Limit, a.Cost, b.Key, b.Limit, b.Cost)
	if err == nil {
		da.Limit, db.Limit = a.Limit, b.Limit
	}
	return da, db, err
}

// InstrumentStore forwards SingleAdjuster as it does SingleTaker and
// PairTaker: memory's wrapper is one, its AdjustOne settles exactly what
// the store's Adjust of the one request would and is measured as one
// Adjust (an error as a failed one); and every combination of the three
// optional interfaces gives a wrapper with exactly that combination.
func TestInstrumentStoreForwardsSingleAdjuster(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	require.NoError(t, err)
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	mem, err := memory.New(memory.WithClock(func() time.Time { return now }))
	require.NoError(t, err)
	w := m.InstrumentStore(mem)
	adj, ok := w.(ratelimit.SingleAdjuster)
	require.True(t, ok, "memory is a SingleAdjuster, so is its wrapper")
	l := ratelimit.PerMinute(10)
	ctx := context.Background()
	// Take 4 of 10, then settle +3: 10 - 4 - 3 = 3 left, full again in
	// 7 × 6 s = 42 s (one unit per 6 s).
	out := make([]ratelimit.Decision, 1)
	require.NoError(t, w.Take(ctx, []ratelimit.Request{{Key: "k", Limit: &l, Cost: 4}}, out))
	allowed, remaining, reset, retryAfter, delay, at, err := adj.AdjustOne(ctx, ratelimit.Request{Key: "k", Limit: &l, Cost: 3, At: out[0].At})
	require.NoError(t, err)
	assert.True(t, allowed)
	assert.Equal(t, int64(3), remaining)
	assert.Equal(t, 42*time.Second, reset)
	assert.Equal(t, time.Duration(0), retryAfter)
	assert.Equal(t, time.Duration(0), delay)
	assert.Equal(t, now.UnixMicro(), at)
	counts := durationCounts(t, reg, "rampmeter_store_duration_seconds")
	assert.Equal(t, uint64(1), counts["adjust/ok"], "AdjustOne measured as an Adjust")
	assert.Equal(t, uint64(1), counts["take/ok"])
	// A malformed request: the store's error, measured as a failed Adjust.
	_, _, _, _, _, _, err = adj.AdjustOne(ctx, ratelimit.Request{Key: "", Limit: &l, Cost: -1})
	require.ErrorIs(t, err, ratelimit.ErrInvalidRequest)
	assert.Equal(t, uint64(1), durationCounts(t, reg, "rampmeter_store_duration_seconds")["adjust/error"])

	type want struct{ one, pair, adj bool }
	for _, c := range []struct {
		s    ratelimit.Store
		want want
	}{
		{struct{ ratelimit.Store }{mem}, want{}},
		{struct {
			ratelimit.Store
			ratelimit.SingleTaker
		}{mem, mem}, want{one: true}},
		{struct {
			ratelimit.Store
			ratelimit.PairTaker
		}{mem, mem}, want{pair: true}},
		{struct {
			ratelimit.Store
			ratelimit.SingleAdjuster
		}{mem, mem}, want{adj: true}},
		{struct {
			ratelimit.Store
			ratelimit.SingleTaker
			ratelimit.PairTaker
		}{mem, mem, mem}, want{one: true, pair: true}},
		{struct {
			ratelimit.Store
			ratelimit.SingleTaker
			ratelimit.SingleAdjuster
		}{mem, mem, mem}, want{one: true, adj: true}},
		{struct {
			ratelimit.Store
			ratelimit.PairTaker
			ratelimit.SingleAdjuster
		}{mem, mem, mem}, want{pair: true, adj: true}},
		{mem, want{one: true, pair: true, adj: true}},
	} {
		w := m.InstrumentStore(c.s)
		_, one := w.(ratelimit.SingleTaker)
		_, pair := w.(ratelimit.PairTaker)
		a, isAdj := w.(ratelimit.SingleAdjuster)
		assert.Equal(t, c.want, want{one, pair, isAdj}, "%T", c.s)
		assert.True(t, m.wraps(w))
		assert.Equal(t, c.s, w.(interface{ Unwrap() ratelimit.Store }).Unwrap())
		if isAdj {
			// Each variant's AdjustOne reaches the store: a refund of 1
			// on a fresh key leaves it full (10 left).
			_, remaining, _, _, _, _, err := a.AdjustOne(ctx, ratelimit.Request{Key: fmt.Sprintf("%T", c.s), Limit: &l, Cost: -1})
			require.NoError(t, err)
			assert.Equal(t, int64(10), remaining)
		}
	}
}
