package redisstore_test

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/redisstore"
)

// model is the Go twin of the Lua script: the state every Redis key should
// hold, computed with (*Limit).TakeAt, AdjustFrom and ExpiresAt.
type model struct {
	states map[string]modelState // by Redis key
}

type modelState struct {
	st      ratelimit.State
	limit   *ratelimit.Limit
	ttlMs   int64 // PX of the last write
	written int64 // µs, when it was written
}

func newModel() *model { return &model{states: map[string]modelState{}} }

// apply runs one Take (take true) or Adjust at now and returns the decisions
// the store must give and the keys it must write with a TTL. keys[i] is the
// Redis key of reqs[i].
func (m *model) apply(take bool, keys []string, reqs []ratelimit.Request, now int64) ([]ratelimit.Decision, []string) {
	work := map[string]ratelimit.State{}
	dirty := map[string]bool{}
	out := make([]ratelimit.Decision, len(reqs))
	refused := false
	// A state the clock stepped back from is written rebased, even by a
	// call that charges nothing (Limit.ClockStepped).
	stepped := map[string]bool{}
	for i, r := range reqs {
		if st := m.states[keys[i]].st; r.Limit.ClockStepped(&st, now) {
			stepped[keys[i]] = true
		}
	}
	for i, r := range reqs {
		st, ok := work[keys[i]]
		if !ok {
			st = m.states[keys[i]].st
		}
		var d ratelimit.Decision
		if take {
			d = r.Limit.TakeAt(&st, now, r.Cost)
			refused = refused || !d.Allowed
		} else {
			d = r.Limit.AdjustFrom(&st, now, r.At, r.Cost)
		}
		dirty[keys[i]] = dirty[keys[i]] || r.Cost != 0 || stepped[keys[i]]
		work[keys[i]] = st
		out[i] = d
	}
	if refused {
		// Nothing is charged; every decision describes the uncharged
		// state, and only the states stepped back from are written, as
		// brought to now.
		for i, r := range reqs {
			peek := r.Limit.TakeAt(new(m.states[keys[i]].st), now, 0)
			out[i].Remaining, out[i].Reset = peek.Remaining, peek.Reset
		}
		for i, r := range reqs {
			if dirty[keys[i]] = stepped[keys[i]]; stepped[keys[i]] {
				st := m.states[keys[i]].st
				r.Limit.TakeAt(&st, now, 0)
				work[keys[i]] = st
			}
		}
	}
	var written []string
	for i, r := range reqs {
		k := keys[i]
		if !dirty[k] {
			continue
		}
		st := work[k]
		ttl := r.Limit.ExpiresAt(&st) - now
		if ttl <= 0 {
			delete(m.states, k)
			continue
		}
		m.states[k] = modelState{st: st, limit: r.Limit, ttlMs: (ttl + 999) / 1000, written: now}
		written = append(written, k)
		dirty[k] = false // written once
	}
	return out, written
}

// checkTTLs requires the PX of keys freshly written by a call that
// started at since to be the model's: the time until the state is
// equivalent to a key never seen, in milliseconds rounded up. miniredis's
// TTLs have not moved since the write; the real server's count down on
// its wall clock (requireRealPTTL).
func (m *model) checkTTLs(e *env, keys []string, since time.Time) {
	e.t.Helper()
	for _, k := range keys {
		got, err := e.client.PTTL(e.t.Context(), k).Result()
		require.NoError(e.t, err)
		want := time.Duration(m.states[k].ttlMs) * time.Millisecond
		if e.real() {
			requireRealPTTL(e.t, got, want, since, k)
		} else {
			require.Equal(e.t, want, got, "PTTL of %s", k)
		}
	}
}

// shortTTL is a PX short enough that a key can expire on the real server
// (whose TTLs follow the wall clock while the store decides by a fake clock)
// during a test.
const shortTTL = 10_000

// pin keeps the keys of the next call from expiring on the real server
// during the call: PERSIST either pins a key the model holds, or finds it
// already expired, and then the model forgets it too (a forgotten key is a
// full bucket). Without this a key written with PX 1 could vanish between
// the model's prediction and the script's GET.
func (m *model) pin(e *env, keys []string) {
	e.t.Helper()
	for _, k := range keys {
		ms, ok := m.states[k]
		if !ok || ms.ttlMs >= shortTTL {
			continue
		}
		if pinned, err := e.client.Persist(e.t.Context(), k).Result(); err != nil || !pinned {
			require.NoError(e.t, err)
			if e.stored(k) == "" {
				delete(m.states, k)
			}
		}
	}
}

// verify compares every key the model knows and every key under the prefix
// with the model: the stored string must be exactly the model's state. A
// key may be missing only once its PX can have elapsed: on miniredis, whose
// TTLs run on the test clock, when the clock has reached write time + PX
// (verify runs after every clock move, so it sees the move that expired
// it); on the real server, whose TTLs run on the wall clock while the store
// decides by a fake one, when the PX was short. The model then forgets the
// key: a forgotten key is a full bucket.
func (m *model) verify(e *env) {
	e.t.Helper()
	for _, k := range scanPrefix(e.t, e.client, e.prefix) {
		if _, ok := m.states[k]; !ok {
			e.t.Fatalf("%s: key %s exists in Redis (%q) but the model has no state for it", e.name, k, e.stored(k))
		}
	}
	if len(m.states) == 0 {
		return
	}
	keys := make([]string, 0, len(m.states))
	for k := range m.states {
		keys = append(keys, k)
	}
	vals, err := e.client.MGet(e.t.Context(), keys...).Result()
	require.NoError(e.t, err)
	for i, k := range keys {
		ms := m.states[k]
		got, _ := vals[i].(string)
		if got == "" {
			expired := e.micros() >= ms.written+ms.ttlMs*1000
			if e.real() {
				expired = expired || ms.ttlMs < shortTTL
			}
			require.True(e.t, expired, "%s: key %s vanished; model state %+v, TTL %dms written at %d, now %d",
				e.name, k, ms.st, ms.ttlMs, ms.written, e.micros())
			delete(m.states, k)
			continue
		}
		require.Equal(e.t, formatState(ms.limit, ms.st), got, "%s: stored state of %s", e.name, k)
	}
}

// formatState is the string the script stores for st under limit l.
func formatState(l *ratelimit.Limit, st ratelimit.State) string {
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	switch l.Algorithm() {
	case ratelimit.GCRA:
		return i(st.Level) + ":" + i(st.Updated)
	case ratelimit.SlidingWindow, ratelimit.CalendarWindow:
		return i(st.Level) + ":" + i(st.Updated) + ":" + i(st.Prev)
	case ratelimit.SlidingLog, ratelimit.Concurrency:
		// Run-length encoded: "t:n" for n equal entries t, in order.
		var parts []string
		for j := 0; j < len(st.Log); {
			n := 1
			for j+n < len(st.Log) && st.Log[j+n] == st.Log[j] {
				n++
			}
			parts = append(parts, i(st.Log[j])+":"+strconv.Itoa(n))
			j += n
		}
		return strings.Join(parts, ",")
	default:
		return i(st.Level) + ":" + i(st.Updated)
	}
}

// limitGroups are the limits the agreement test runs on, by algorithm:
// rates whose ratios do not divide evenly, rates at the extremes of what
// ratelimit accepts, and capacities and quotas near their bounds.
func limitGroups(t testing.TB) map[string][]*ratelimit.Limit {
	const maxScaled = int64(1) << 51
	buckets := func(a ratelimit.Algorithm) []*ratelimit.Limit {
		return []*ratelimit.Limit{
			limitOf(t, ratelimit.PerSecond(10).WithAlgorithm(a).Named("ten-per-second")), // scale 1e5, drain 1
			limitOf(t, ratelimit.PerDay(100_000).WithAlgorithm(a).Named("tokens")),       // scale 864000, drain 1
			limitOf(t, ratelimit.Every(1, time.Microsecond).WithAlgorithm(a).Named("one-per-us")),
			limitOf(t, ratelimit.PerMinute(60).WithBurst(7).WithAlgorithm(a).Named("rpm")),
			// Burst × scale just under 2^51: 2251799813 × 1e6.
			limitOf(t, ratelimit.PerSecond(1).WithBurst(maxScaled/1_000_000).WithAlgorithm(a).Named("huge-burst")),
			// 50 years per unit: scale 1.5768e15, TTLs of decades.
			limitOf(t, ratelimit.Every(1, 50*365*24*time.Hour).WithAlgorithm(a).Named("fifty-years")),
		}
	}
	odd := func(a ratelimit.Algorithm) []*ratelimit.Limit {
		return []*ratelimit.Limit{
			limitOf(t, ratelimit.Every(7, 3*time.Second).WithAlgorithm(a).Named("seven-per-3s")),           // scale 3e6, drain 7
			limitOf(t, ratelimit.Every(3, 7*time.Microsecond).WithAlgorithm(a).Named("three-per-7us")),     // scale 7, drain 3
			limitOf(t, ratelimit.Every(1_000_003, time.Second).WithAlgorithm(a).Named("prime-per-second")), // drain > scale
			limitOf(t, ratelimit.Every(maxScaled, time.Microsecond).WithAlgorithm(a).Named("max-drain")),   // drain 2^51
		}
	}
	fixed := func(first bool) []*ratelimit.Limit {
		ls := []ratelimit.Limit{
			ratelimit.Every(7, 3*time.Second).Named("seven-per-3s"),
			ratelimit.PerMinute(60).Named("rpm"),
			ratelimit.Every(5, 7*time.Millisecond).Named("five-per-7ms"),
			ratelimit.Every(3, 7*time.Microsecond).Named("three-per-7us"),
			ratelimit.PerDay(100_000).Named("tokens"),
			// Quota 2^49, the most a window takes, with scale 1.
			ratelimit.Every(1<<49, (1<<20)*time.Microsecond).Named("max-quota"),
		}
		out := make([]*ratelimit.Limit, len(ls))
		for i, l := range ls {
			l = l.WithAlgorithm(ratelimit.FixedWindow)
			if first {
				l = l.AlignToFirstHit()
			}
			out[i] = limitOf(t, l)
		}
		return out
	}
	sliding := ratelimit.SlidingWindow
	log := ratelimit.SlidingLog
	g := map[string][]*ratelimit.Limit{
		"TokenBucket": append(buckets(ratelimit.TokenBucket), odd(ratelimit.TokenBucket)...),
		"LeakyBucket": append(buckets(ratelimit.LeakyBucket), odd(ratelimit.LeakyBucket)...),
		"GCRA":        buckets(ratelimit.GCRA), // needs whole-µs emission intervals
		"FixedWindow": fixed(false),
		"FirstHit":    fixed(true),
		"SlidingWindow": {
			limitOf(t, ratelimit.PerSecond(10).WithAlgorithm(sliding).Named("ten-per-second")),
			limitOf(t, ratelimit.Every(7, 3*time.Second).WithAlgorithm(sliding).Named("seven-per-3s")),
			limitOf(t, ratelimit.PerDay(100_000).WithAlgorithm(sliding).Named("tokens")), // quota × ms = 8.64e12
			limitOf(t, ratelimit.Every(5, 7*time.Millisecond).WithAlgorithm(sliding).Named("five-per-7ms")),
			limitOf(t, ratelimit.Every(1, time.Millisecond).WithAlgorithm(sliding).Named("one-per-ms")),
			// quota × period in ms = 2^40 × 1024 = 2^50, the bound.
			limitOf(t, ratelimit.Every(1<<40, 1024*time.Millisecond).WithAlgorithm(sliding).Named("max-quota")),
		},
		"SlidingLog": {
			limitOf(t, ratelimit.Every(5, 10*time.Millisecond).WithAlgorithm(log).Named("five-per-10ms")),
			limitOf(t, ratelimit.PerSecond(100).WithAlgorithm(log).Named("hundred-per-second")),
			limitOf(t, ratelimit.Every(3, 7*time.Microsecond).WithAlgorithm(log).Named("three-per-7us")),
			limitOf(t, ratelimit.Every(ratelimit.MaxLogQuota, time.Minute).WithAlgorithm(log).Named("max-quota")),
		},
		"Concurrency": {
			limitOf(t, ratelimit.Concurrent(3, 10*time.Millisecond).Named("three-for-10ms")),
			limitOf(t, ratelimit.Concurrent(1, 7*time.Microsecond).Named("one-for-7us")),
			limitOf(t, ratelimit.Concurrent(100, time.Minute).Named("hundred")),
			limitOf(t, ratelimit.Concurrent(ratelimit.MaxConcurrent, 50*365*24*time.Hour).Named("max-cap-fifty-years")),
		},
	}
	g["Calendar"] = calendarLimits(t)
	var all []*ratelimit.Limit
	for _, ls := range g {
		all = append(all, ls...)
	}
	g["Mixed"] = all // stacks across algorithms
	return g
}

// TestLuaGoAgreement drives the store and the model through the same
// pseudo-random Takes (single and stacked, with repeated keys), Adjusts
// (with charge times now, past, of an earlier decision and in the future)
// and clock moves (µs to a year, and backwards) on every algorithm,
// comparing every decision and every stored state.
func TestLuaGoAgreement(t *testing.T) {
	onBoth(t, func(t *testing.T, newEnv func(*testing.T, ...redisstore.Option) *env) {
		for name, limits := range limitGroups(t) {
			t.Run(name, func(t *testing.T) {
				for seed := uint64(1); seed <= 2; seed++ {
					e := newEnv(t)
					steps := 300
					if testing.Short() {
						steps = 60
					}
					runAgreement(e, limits, rand.New(rand.NewPCG(seed, 0x5eed)), steps)
				}
			})
		}
	})
}

func runAgreement(e *env, limits []*ratelimit.Limit, rng *rand.Rand, steps int) {
	t := e.t
	callers := []string{"alice", "bob"}
	m := newModel()
	var ats []int64 // the At of earlier decisions, to settle against
	for step := 0; step < steps; step++ {
		switch op := rng.IntN(10); {
		case op < 2: // move the clock
			if len(ats) > 0 && rng.IntN(3) == 0 {
				// To a boundary: one period after an earlier decision,
				// give or take 1 µs, where entries and windows expire.
				at := ats[rng.IntN(len(ats))]
				p := limits[rng.IntN(len(limits))].Period().Microseconds()
				e.setTime(time.UnixMicro(at + p + rng.Int64N(3) - 1).UTC())
				break
			}
			var d time.Duration
			switch rng.IntN(6) {
			case 0:
				d = time.Duration(rng.IntN(5)) * time.Microsecond
			case 1:
				d = time.Duration(rng.IntN(100_000)) * time.Microsecond
			case 2:
				d = time.Duration(rng.IntN(3_000_000)) * time.Microsecond
			case 3:
				d = time.Duration(rng.IntN(48)) * time.Hour
			case 4:
				// Back: within ratelimit.ClockStepTolerance, at it, just
				// beyond it, or by up to 2 s or 2 days (steps).
				tol := ratelimit.ClockStepTolerance
				d = -[]time.Duration{
					time.Duration(1+rng.IntN(int(tol/time.Microsecond))) * time.Microsecond,
					tol, tol + time.Microsecond,
					time.Duration(rng.IntN(2_000_000)) * time.Microsecond,
					time.Duration(rng.Int64N(int64(48 * time.Hour))),
				}[rng.IntN(5)]
			default:
				d = time.Duration(rng.Int64N(int64(400 * 24 * time.Hour)))
			}
			e.advance(d)
		default:
			take := op < 8
			caller := callers[rng.IntN(len(callers))]
			n := 1 + rng.IntN(3)
			reqs := make([]ratelimit.Request, n)
			keys := make([]string, n)
			for i := range reqs {
				l := limits[rng.IntN(len(limits))]
				reqs[i] = req(caller, l, randomCost(rng, l, take))
				if !take {
					switch rng.IntN(4) {
					case 1:
						reqs[i].At = e.micros() - rng.Int64N(3_000_000)
					case 2:
						if len(ats) > 0 {
							reqs[i].At = ats[rng.IntN(len(ats))]
						}
					case 3:
						reqs[i].At = e.micros() + 1000 // future: means now
					}
				}
				keys[i] = e.store.Key(caller, l)
			}
			if e.real() {
				m.pin(e, keys)
			}
			want, written := m.apply(take, keys, reqs, e.micros())
			since := time.Now()
			var got []ratelimit.Decision
			if take {
				got = e.take(reqs...)
			} else {
				got = e.adjust(reqs...)
			}
			for i := range reqs {
				require.Same(t, reqs[i].Limit, got[i].Limit)
				require.Equal(t, want[i], got[i], "%s step %d: take=%v request %d of %s at %d",
					e.name, step, take, i, describeReqs(reqs), e.micros())
			}
			m.checkTTLs(e, written, since)
			ats = append(ats, got[0].At)
		}
		m.verify(e)
	}
}

// randomCost picks costs around the interesting edges: 0 (peek), 1, the
// burst and one more, random sizes, and for Adjust refunds and charges up to
// the int64 extremes.
func randomCost(rng *rand.Rand, l *ratelimit.Limit, take bool) int64 {
	b := l.Burst()
	var c int64
	switch rng.IntN(7) {
	case 0:
		c = 0
	case 1:
		c = 1
	case 2:
		c = b
	case 3:
		c = b + 1
	case 4:
		c = rng.Int64N(b + 1)
	case 5:
		c = 1 + rng.Int64N(3)
	default:
		if take {
			c = rng.Int64N(b/2 + 1)
		} else {
			extremes := []int64{1 << 52, 1<<62 + 12345, 1<<63 - 1, 3 * b}
			c = extremes[rng.IntN(len(extremes))]
		}
	}
	if !take && rng.IntN(2) == 0 {
		c = -c
		if rng.IntN(8) == 0 {
			c = -1 << 63
		}
	}
	return c
}

func describeReqs(reqs []ratelimit.Request) string {
	s := ""
	for _, r := range reqs {
		s += fmt.Sprintf("[%s cost %d at %d] ", r.Limit.ID(), r.Cost, r.At)
	}
	return s
}

// TestLargeValues pins the bounds: a full-capacity take on a burst near
// 2^51/scale and debt clamped at 2^52, checked against the Go functions and
// the stored strings.
func TestLargeValues(t *testing.T) {
	onBoth(t, func(t *testing.T, newEnv func(*testing.T, ...redisstore.Option) *env) {
		e := newEnv(t)
		huge := limitOf(t, ratelimit.PerSecond(1).WithBurst(2251799813).Named("huge")) // capacity 2251799813000000
		now := e.micros()

		// Take the whole burst: level = capacity = 2251799813000000 < 2^51,
		// Remaining 0, Reset = capacity/drain = 2251799813 s.
		d := e.take(req("k", huge, 2251799813))[0]
		require.Equal(t, ratelimit.Decision{Limit: huge, Allowed: true, Remaining: 0, Reset: 2251799813 * time.Second, At: now}, d)
		require.Equal(t, "2251799813000000:"+strconv.FormatInt(now, 10), e.stored(e.store.Key("k", huge)))

		// Charge the most Adjust can: the level clamps at 2^52 = 4503599627370496.
		d = e.adjust(req("k", huge, 1<<63-1))[0]
		require.Equal(t, ratelimit.Decision{Limit: huge, Allowed: true, Remaining: 0, Reset: (1 << 52) * time.Microsecond, At: now}, d)
		require.Equal(t, "4503599627370496:"+strconv.FormatInt(now, 10), e.stored(e.store.Key("k", huge)))
		want := huge.AdjustAt(&ratelimit.State{Level: 1 << 52, Updated: now}, now, 1)
		require.Equal(t, want, e.adjust(req("k", huge, 1))[0])

		// In debt 2^52 - capacity, a take of 1 waits until level + 1e6 <=
		// capacity: (2^52 - 2251799813000000 + 1e6) µs.
		d = e.take(req("k", huge, 1))[0]
		require.False(t, d.Allowed)
		require.Equal(t, time.Duration((1<<52)-2251799813000000+1_000_000)*time.Microsecond, d.RetryAfter)

		// Refund everything, even with the most negative delta: the key goes.
		d = e.adjust(req("k", huge, -1<<63))[0]
		require.Equal(t, ratelimit.Decision{Limit: huge, Allowed: true, Remaining: 2251799813, At: now}, d)
		require.Equal(t, "", e.stored(e.store.Key("k", huge)))
	})
}

// TestGCRALegacyState: a GCRA state written before the script kept its
// last change ("<tat>" alone) is still read, as the Go State with Updated
// 0, which cannot see a clock step; the next write adds the last change.
func TestGCRALegacyState(t *testing.T) {
	onBoth(t, func(t *testing.T, newEnv func(*testing.T, ...redisstore.Option) *env) {
		e := newEnv(t)
		l := limitOf(t, ratelimit.PerSecond(10).WithBurst(50).WithAlgorithm(ratelimit.GCRA)) // T = 100ms
		now := e.micros()
		k := e.store.Key("k", l)
		// TAT 5 s ahead: the burst is spent.
		tat := now + 5_000_000
		require.NoError(t, e.client.Set(t.Context(), k, strconv.FormatInt(tat, 10), time.Minute).Err())
		old := ratelimit.State{Level: tat}
		want := l.TakeAt(new(old), now, 1)
		require.Equal(t, want, e.take(req("k", l, 1))[0])
		require.False(t, want.Allowed)
		// 100 ms later one cell conforms: TAT = tat + 100ms, dated now.
		e.advance(100 * time.Millisecond)
		now = e.micros()
		st := old
		want = l.TakeAt(&st, now, 1)
		require.True(t, want.Allowed)
		require.Equal(t, want, e.take(req("k", l, 1))[0])
		require.Equal(t, strconv.FormatInt(tat+100_000, 10)+":"+strconv.FormatInt(now, 10), e.stored(k))
	})
}
