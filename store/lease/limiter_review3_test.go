package lease_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/lease"
)

// Review 3: the Limiter over a lease store (a LocalTaker, SingleTaker and
// PairTaker) against the Limiter over the same kind of lease store seen
// through wrappers that hide the optional interfaces:
//
//	mode 0: the lease store itself (TryTakeOne/TryTakeTwo/TryTake first);
//	mode 1: storeOnly, only ratelimit.Store (the Limiter's slice path,
//	        every call with the store timeout's context);
//	mode 2: words, Store + SingleTaker + PairTaker but no LocalTaker.
//
// Every Result, error, Limiter Stats, lease Stats, OnStoreCall report,
// middleware response and backing charge must be the same.

// storeOnly exposes only ratelimit.Store of the lease store.
type storeOnly struct{ s *lease.Store }

func (w storeOnly) Take(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	return w.s.Take(ctx, reqs, out)
}

func (w storeOnly) Adjust(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	return w.s.Adjust(ctx, reqs, out)
}

// words exposes Store, SingleTaker and PairTaker, not LocalTaker.
type words struct{ storeOnly }

func (w words) TakeOne(ctx context.Context, r ratelimit.Request) (bool, int64, time.Duration, time.Duration, time.Duration, int64, error) {
	return w.s.TakeOne(ctx, r)
}

func (w words) TakeTwo(ctx context.Context, keyA string, limitA *ratelimit.Limit, costA int64, keyB string, limitB *ratelimit.Limit, costB int64) (bool, int64, time.Duration, time.Duration, time.Duration, int64, bool, int64, time.Duration, time.Duration, time.Duration, int64, error) {
	return w.s.TakeTwo(ctx, keyA, limitA, costA, keyB, limitB, costB)
}

var (
	_ ratelimit.SingleTaker = words{}
	_ ratelimit.PairTaker   = words{}
)

func wrapMode(s *lease.Store, mode int) ratelimit.Store {
	switch mode {
	case 1:
		return storeOnly{s}
	case 2:
		return words{storeOnly{s}}
	}
	return s
}

// callLog collects the OnStoreCall reports of one mode, without Duration
// and Store (the wrapper differs by mode).
type callLog struct {
	mu    sync.Mutex
	calls []string
}

func (c *callLog) hook(name string) func(context.Context, ratelimit.StoreCall) {
	return func(_ context.Context, sc ratelimit.StoreCall) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.calls = append(c.calls, fmt.Sprintf("%s %s n=%d err=%v", name, sc.Op, sc.Requests, sc.Err))
	}
}

func (c *callLog) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.calls
	c.calls = nil
	return out
}

// resultText describes a Result with its decisions' limits by name.
func resultText(res ratelimit.Result, err error) string {
	var b strings.Builder
	fmt.Fprintf(&b, "allowed=%v bypassed=%v retry=%v delay=%v err=%v [", res.Allowed, res.Bypassed, res.RetryAfter, res.Delay, err)
	for _, d := range res.Decisions {
		name := "<nil>"
		if d.Limit != nil {
			name = d.Limit.Name() + "/" + d.Limit.ID()
		}
		fmt.Fprintf(&b, "{%s %v rem=%d reset=%v retry=%v delay=%v at=%d} ", name, d.Allowed, d.Remaining, d.Reset, d.RetryAfter, d.Delay, d.At)
	}
	b.WriteString("]")
	return b.String()
}

// review3Sets are the Limiters' limit stacks: 1, 2, 3 and 4 limits, with
// shadow limits, a pass-through LeakyBucket and a lone shadow limit. Limits
// of the same value in different stacks share their stored state.
func review3Sets(x int64) map[string][]ratelimit.Limit {
	a := ratelimit.Every(200*x, time.Second).WithBurst(40 * x).Named("a")
	f := ratelimit.PerSecond(300 * x).WithAlgorithm(ratelimit.FixedWindow).Named("f")
	g := ratelimit.PerSecond(400 * x).WithAlgorithm(ratelimit.GCRA).WithBurst(30 * x).Named("g")
	w := ratelimit.PerSecond(2000 * x).WithAlgorithm(ratelimit.SlidingWindow).Named("w")
	s := ratelimit.PerSecond(50).WithBurst(12).Named("s").Shadow()
	leaky := ratelimit.PerSecond(100).WithAlgorithm(ratelimit.LeakyBucket).Named("leaky")
	return map[string][]ratelimit.Limit{
		"1":      {a},
		"1g":     {g},
		"shadow": {s},
		"2":      {a, f},
		"2s":     {a, s},
		"2sa":    {s, g},
		"3":      {a, g, w},
		"3s":     {f, s, w},
		"4":      {a, f, s, leaky},
		"4b":     {g, w, a, f},
	}
}

type review3World struct {
	f        *fleet
	limiters map[string]*ratelimit.Limiter // by instance "i/set"
	log      *callLog
	handler  []http.Handler // by instance: the middleware with WithLimitsFunc
	res      []*ratelimit.Reservation
}

func newReview3World(t *testing.T, mode int, x int64, opts ...lease.Option) *review3World {
	w := &review3World{f: newFleet(t, 2, opts...), limiters: map[string]*ratelimit.Limiter{}, log: &callLog{}}
	sets := review3Sets(x)
	names := make([]string, 0, len(sets))
	for n := range sets {
		names = append(names, n)
	}
	sort.Strings(names)
	tokens := ratelimit.Every(500, time.Second).WithBurst(60).Named("tokens").CostFrom(func(r *http.Request) (int64, error) {
		return strconv.ParseInt(r.Header.Get("E"), 10, 64)
	})
	planSets := map[string]*ratelimit.PolicySet{}
	for _, n := range []string{"1", "2", "3", "2s"} {
		ps, err := ratelimit.NewPolicySet(sets[n]...)
		require.NoError(t, err)
		planSets["light"+n] = ps
		ps, err = ratelimit.NewPolicySet(append(append([]ratelimit.Limit(nil), sets[n]...), tokens)...)
		require.NoError(t, err)
		planSets["cost"+n] = ps
	}
	for i, s := range w.f.stores {
		for _, n := range names {
			lim, err := ratelimit.New(wrapMode(s, mode), ratelimit.WithLimits(sets[n]...), ratelimit.WithoutStoreAlert(), ratelimit.WithName("fleet"),
				ratelimit.WithStoreTimeout(time.Minute),
				ratelimit.WithHooks(ratelimit.Hooks{OnStoreCall: w.log.hook(n)}))
			require.NoError(t, err)
			w.limiters[fmt.Sprint(i, "/", n)] = lim
		}
		lim, err := ratelimit.New(wrapMode(s, mode), ratelimit.WithoutStoreAlert(), ratelimit.WithStoreTimeout(time.Minute), ratelimit.WithName("fleet"),
			ratelimit.WithKey(func(r *http.Request) (string, error) { return r.Header.Get("K"), nil }),
			ratelimit.WithLimitsFunc(func(r *http.Request, _ string) (*ratelimit.PolicySet, error) {
				return planSets[r.Header.Get("P")], nil
			}),
			ratelimit.WithHooks(ratelimit.Hooks{OnStoreCall: w.log.hook("mw")}))
		require.NoError(t, err)
		w.limiters[fmt.Sprint(i, "/mw")] = lim
		w.handler = append(w.handler, lim.Handler(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			if u := r.Header.Get("U"); u != "" {
				n, _ := strconv.ParseInt(u, 10, 64)
				_ = ratelimit.ReportUsage(r.Context(), "tokens", n)
			}
			st, _ := strconv.Atoi(r.Header.Get("S"))
			rw.WriteHeader(st)
		})))
	}
	return w
}

// state describes everything comparable of a world.
func (w *review3World) state() string {
	var b strings.Builder
	keys := make([]string, 0, len(w.limiters))
	for k := range w.limiters {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s %+v\n", k, w.limiters[k].Stats())
	}
	for i, s := range w.f.stores {
		fmt.Fprintf(&b, "store %d %+v\n", i, s.Stats())
	}
	return b.String()
}

func TestReview3LimiterOverLeaseMatchesHiddenLocalTaker(t *testing.T) {
	sets := review3Sets(1)
	setNames := make([]string, 0, len(sets))
	for n := range sets {
		setNames = append(setNames, n)
	}
	sort.Strings(setNames)
	for seed := range uint64(12) {
		// Seeds 6 to 11: limits 20 times roomier, so that most Takes are
		// served from the leases.
		x := int64(1)
		if seed >= 6 {
			x = 20
		}
		sets := review3Sets(x)
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			opts := []lease.Option{lease.WithHotThreshold(2), lease.WithMaxShare(0.3), lease.WithLifetime(100 * time.Millisecond), lease.WithMaxKeys(40)}
			worlds := []*review3World{newReview3World(t, 0, x, opts...), newReview3World(t, 1, x, opts...), newReview3World(t, 2, x, opts...)}
			rng := rand.New(rand.NewPCG(seed, 3))
			now := time.Duration(0)
			local0 := uint64(0)
			for step := range 2500 {
				now += time.Duration(rng.Int64N(3000)) * time.Microsecond
				key := fmt.Sprint("k", rng.IntN(3))
				inst := rng.IntN(2)
				set := setNames[rng.IntN(len(setNames))]
				op := rng.IntN(20)
				var costs []int64
				if rng.IntN(3) > 0 {
					for _, l := range sets[set] {
						switch rng.IntN(25) {
						case 0:
							costs = append(costs, 0)
						case 1:
							costs = append(costs, l.Burst()+1)
						default:
							costs = append(costs, rng.Int64N(10))
						}
					}
				}
				expire := rng.IntN(50) == 0
				delta := rng.Int64N(11) - 5
				cancelIdx := rng.IntN(1 << 20)
				hdr := map[string]string{"K": key, "E": fmt.Sprint(rng.Int64N(12)), "S": []string{"200", "200", "500", "429"}[rng.IntN(4)],
					"P": []string{"light1", "light2", "light3", "light2s", "cost1", "cost2", "cost3", "cost2s"}[rng.IntN(8)]}
				if rng.IntN(2) == 0 {
					hdr["U"] = fmt.Sprint(rng.Int64N(20))
				}
				var texts [3]string
				for m, w := range worlds {
					w.f.at(now)
					lim := w.limiters[fmt.Sprint(inst, "/", set)]
					ctx := context.Background()
					var text string
					switch {
					case op < 12:
						res, err := lim.Take(ctx, key, costs...)
						text = "take " + resultText(res, err)
					case op < 14:
						r, err := lim.Reserve(ctx, key, costs...)
						if r != nil {
							text = "reserve " + resultText(r.Result(), err)
							w.res = append(w.res, r)
						} else {
							text = fmt.Sprint("reserve nil ", err)
						}
					case op < 15:
						if len(w.res) > 0 {
							r := w.res[cancelIdx%len(w.res)]
							text = fmt.Sprint("cancel ", r.Cancel(ctx))
						}
					case op < 16:
						name := sets[set][0].Name()
						res, err := lim.Adjust(ctx, key, name, delta)
						text = "adjust " + resultText(res, err)
					default:
						req := httptest.NewRequest(http.MethodPost, "/", nil)
						for k, v := range hdr {
							req.Header.Set(k, v)
						}
						rec := httptest.NewRecorder()
						w.handler[inst].ServeHTTP(rec, req)
						hs := make([]string, 0, len(rec.Header()))
						for k, v := range rec.Header() {
							hs = append(hs, k+"="+strings.Join(v, ","))
						}
						sort.Strings(hs)
						text = fmt.Sprint("http ", rec.Code, " ", hs, " ", rec.Body.String())
					}
					if expire {
						require.NoError(t, w.f.stores[inst].Expire(ctx))
					}
					texts[m] = text + "\n" + strings.Join(w.log.take(), "\n") + "\n" + w.state()
				}
				for m := 1; m < 3; m++ {
					require.Equal(t, texts[0], texts[m], "seed %d step %d mode %d: op %d set %s key %s inst %d costs %v hdr %v", seed, step, m, op, set, key, inst, costs, hdr)
				}
			}
			for m, w := range worlds {
				for _, s := range w.f.stores {
					require.NoError(t, s.Close())
				}
				if m > 0 {
					require.Equal(t, worlds[0].f.backing.charged, w.f.backing.charged)
				}
			}
			local0 = worlds[0].f.stores[0].Stats().Local + worlds[0].f.stores[1].Stats().Local
			require.Greater(t, local0, uint64(200), "the leases decided a fair share")
			st0, st1 := worlds[0].f.stores[0].Stats(), worlds[0].f.stores[1].Stats()
			t.Logf("seed %d: local %d, refills %d, passed %d", seed, st0.Local+st1.Local, st0.Refills+st1.Refills, st0.Passed+st1.Passed)
		})
	}
}
