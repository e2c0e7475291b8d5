package ratelimit_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/lease"
)

// Review 3: the Limiter over store/lease (a LocalTaker) while its backing
// store fails and recovers, against the Limiter over the same lease store
// seen only as a ratelimit.Store: the failure modes, Stats, Hooks
// (OnStoreCall, OnStoreError, OnBypass) and the store-failure alert's lines
// must be the same, call by call.

// onlyStore hides every optional interface of the store it wraps.
type onlyStore struct{ s ratelimit.Store }

func (w onlyStore) Take(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	return w.s.Take(ctx, reqs, out)
}

func (w onlyStore) Adjust(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	return w.s.Adjust(ctx, reqs, out)
}

// review3Log collects hook reports in order.
type review3Log struct {
	mu    sync.Mutex
	lines []string
}

func (l *review3Log) add(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *review3Log) take() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := strings.Join(l.lines, "\n")
	l.lines = nil
	return s
}

type review3LeaseWorld struct {
	clock    *fakeClock
	down     *switchStore
	lease    *lease.Store
	limiters []*ratelimit.Limiter
	names    []string
	log      review3Log
	alert    logLines
}

func review3Result(res ratelimit.Result, err error) string {
	var b strings.Builder
	fmt.Fprintf(&b, "allowed=%v bypassed=%v retry=%v delay=%v err=%v [", res.Allowed, res.Bypassed, res.RetryAfter, res.Delay, err)
	for _, d := range res.Decisions {
		name := "<nil>"
		if d.Limit != nil {
			name = d.Limit.Name()
		}
		fmt.Fprintf(&b, "{%s %v %d %v %v %v %d}", name, d.Allowed, d.Remaining, d.Reset, d.RetryAfter, d.Delay, d.At)
	}
	return b.String() + "]"
}

func newReview3LeaseWorld(t *testing.T, hide bool, mode ratelimit.FailureMode) *review3LeaseWorld {
	w := &review3LeaseWorld{clock: newClock()}
	w.down = &switchStore{Store: newStore(t, w.clock.Now)}
	var err error
	w.lease, err = lease.New(w.down, lease.WithClock(w.clock.Now), lease.WithExpiryInterval(0), lease.WithHotThreshold(2),
		lease.WithLifetime(100*time.Millisecond), lease.WithMaxShare(0.3), lease.WithCallTimeout(time.Minute))
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.lease.Close() })
	var store ratelimit.Store = w.lease
	if hide {
		store = onlyStore{w.lease}
	}
	a := ratelimit.Every(200, time.Second).WithBurst(40).Named("a")
	f := ratelimit.PerSecond(300).WithAlgorithm(ratelimit.FixedWindow).Named("f")
	g := ratelimit.PerSecond(400).WithAlgorithm(ratelimit.GCRA).WithBurst(30).Named("g")
	s := ratelimit.PerSecond(50).WithBurst(12).Named("s").Shadow()
	for _, set := range [][]ratelimit.Limit{{a}, {a, f}, {g, s}, {a, f, g}, {f, s, g, a}} {
		name := ""
		for _, l := range set {
			name += l.Name()
		}
		lim, err := ratelimit.New(store, ratelimit.WithLimits(set...), ratelimit.WithName("fleet"),
			ratelimit.WithFailureMode(mode), ratelimit.WithStoreTimeout(time.Minute),
			ratelimit.WithStoreAlert(w.alert.logger(), time.Second),
			ratelimit.WithHooks(ratelimit.Hooks{
				OnStoreCall: func(_ context.Context, c ratelimit.StoreCall) {
					w.log.add("%s call %s %d %v %v", name, c.Op, c.Requests, c.Duration, c.Err)
				},
				OnStoreError: func(_ context.Context, err error) { w.log.add("%s error %v", name, err) },
				OnBypass:     func(_ context.Context, err error) { w.log.add("%s bypass %v", name, err) },
			}))
		require.NoError(t, err)
		ratelimit.SetClock(lim, w.clock.Now)
		w.limiters = append(w.limiters, lim)
		w.names = append(w.names, name)
	}
	return w
}

func (w *review3LeaseWorld) state() string {
	var b strings.Builder
	for i, lim := range w.limiters {
		fmt.Fprintf(&b, "%s %+v\n", w.names[i], lim.Stats())
	}
	fmt.Fprintf(&b, "lease %+v\n", w.lease.Stats())
	return b.String() + w.log.take() + "\n" + w.alert.String()
}

// TestReview3LeaseOutageMatchesHidden: random Takes, Reserves, Cancels
// and Adjusts on five stacks (1 to 4 limits, a shadow limit) while the
// backing store goes down and up, under FailOpen and FailClosed.
func TestReview3LeaseOutageMatchesHidden(t *testing.T) {
	for _, mode := range []ratelimit.FailureMode{ratelimit.FailOpen, ratelimit.FailClosed} {
		for seed := range uint64(8) {
			t.Run(fmt.Sprint(mode, seed), func(t *testing.T) {
				worlds := []*review3LeaseWorld{newReview3LeaseWorld(t, false, mode), newReview3LeaseWorld(t, true, mode)}
				rng := rand.New(rand.NewPCG(seed, 77))
				var res [2][]*ratelimit.Reservation
				down := false
				locals := uint64(0)
				localsDown := 0
				for step := range 2000 {
					adv := time.Duration(rng.Int64N(4000)) * time.Microsecond
					if rng.IntN(200) == 0 {
						adv += 1500 * time.Millisecond // past the alert's interval
					}
					if rng.IntN(60) == 0 {
						down = !down
					}
					li := rng.IntN(len(worlds[0].limiters))
					key := fmt.Sprint("k", rng.IntN(3))
					op := rng.IntN(20)
					var costs []int64
					if rng.IntN(2) == 0 {
						for range worlds[0].limiters[li].Limits() {
							costs = append(costs, rng.Int64N(8))
						}
					}
					pick, delta := rng.IntN(1<<20), rng.Int64N(9)-4
					expire := rng.IntN(40) == 0
					var texts [2]string
					for m, w := range worlds {
						w.clock.Advance(adv)
						w.down.down.Store(down)
						lim := w.limiters[li]
						ctx := context.Background()
						before := w.lease.Stats().Local
						var text string
						switch {
						case op < 14:
							text = "take " + review3Result(lim.Take(ctx, key, costs...))
						case op < 16:
							r, err := lim.Reserve(ctx, key, costs...)
							if r == nil {
								text = fmt.Sprint("reserve nil ", err)
								break
							}
							res[m] = append(res[m], r)
							text = "reserve " + review3Result(r.Result(), err)
						case op < 18:
							if len(res[m]) > 0 {
								text = fmt.Sprint("cancel ", res[m][pick%len(res[m])].Cancel(ctx))
							}
						default:
							text = "adjust " + review3Result(lim.Adjust(ctx, key, lim.Limits()[0].Name(), delta))
						}
						if expire {
							text += fmt.Sprint(" expire ", w.lease.Expire(ctx))
						}
						if m == 0 && w.lease.Stats().Local > before && down {
							localsDown++
						}
						texts[m] = text + "\n" + w.state()
					}
					require.Equal(t, texts[0], texts[1], "%v seed %d step %d (down %v): limiter %s op %d key %s costs %v", mode, seed, step, down, worlds[0].names[li], op, key, costs)
				}
				locals = worlds[0].lease.Stats().Local
				require.Greater(t, locals, uint64(100))
				require.Greater(t, localsDown, 5, "some Takes were served from leases while the backing store was down")
				lines := strings.Count(worlds[0].alert.String(), "\n")
				require.Greater(t, lines, 2, "the alert spoke")
			})
		}
	}
}

// TestReview3LocalDecisionEndsAlertEpisode pins what a Take decided from
// a lease does to the store-failure alert while the backing store is
// still down: it is a successful store call, so, an interval after the
// episode's first line, it logs "the rate-limit store answers again" and
// closes the episode; the next refill's failure opens a new one with a
// first line. The same happens with the LocalTaker hidden (a lease
// store's Take that serves from its lease returned nil before LocalTaker
// too), so this is no regression of LocalTaker; but the recovery line is
// false: the backing store never answered.
//
// PerSecond(100) (10 ms per unit), hot at the first request, leases of
// up to 10 units that live a minute; the alert's interval is a second.
func TestReview3LocalDecisionEndsAlertEpisode(t *testing.T) {
	for _, hide := range []bool{false, true} {
		t.Run(fmt.Sprint("hidden ", hide), func(t *testing.T) {
			clock := newClock()
			down := &switchStore{Store: newStore(t, clock.Now)}
			ls, err := lease.New(down, lease.WithClock(clock.Now), lease.WithExpiryInterval(0), lease.WithHotThreshold(1),
				lease.WithLifetime(time.Minute), lease.WithCallTimeout(time.Minute))
			require.NoError(t, err)
			t.Cleanup(func() { _ = ls.Close() })
			var store ratelimit.Store = ls
			if hide {
				store = onlyStore{ls}
			}
			var alert logLines
			lim, err := ratelimit.New(store, ratelimit.WithLimits(ratelimit.PerSecond(100)), ratelimit.WithStoreTimeout(time.Minute),
				ratelimit.WithStoreAlert(alert.logger(), time.Second))
			require.NoError(t, err)
			ratelimit.SetClock(lim, clock.Now)
			ctx := context.Background()
			// t = 0 (5 s into a lifetime-long interval): a Take of 1
			// on "hot" leases 1: its demand, 1 unit over 65 s, is 0
			// units per lifetime rounded down, + 1.
			res, err := lim.Take(ctx, "hot")
			require.NoError(t, err)
			require.True(t, res.Allowed)
			require.Equal(t, int64(1), ls.Stats().Held)
			down.down.Store(true)
			// t = 0: a cold key fails: the first line.
			res, err = lim.Take(ctx, "cold")
			require.ErrorIs(t, err, ratelimit.ErrStoreFailed)
			require.True(t, res.Bypassed)
			// t = 1 s: "hot" is served from its lease: Allowed, not
			// bypassed, no store error; and the episode ends.
			clock.Advance(time.Second)
			res, err = lim.Take(ctx, "hot")
			require.NoError(t, err)
			require.True(t, res.Allowed)
			require.False(t, res.Bypassed)
			require.Zero(t, ls.Stats().Held)
			require.Equal(t, uint64(1), ls.Stats().Local)
			// t = 1 s: the cold key fails again: a new episode.
			_, err = lim.Take(ctx, "cold")
			require.ErrorIs(t, err, ratelimit.ErrStoreFailed)
			want := `level=WARN msg="ratelimit: the rate-limit store failed; requests are let through unlimited while it fails (FailOpen)" op=take error="ratelimit: store: store down"
level=WARN msg="ratelimit: the rate-limit store answers again" store_errors=1 bypassed=1 since=1s
level=WARN msg="ratelimit: the rate-limit store failed; requests are let through unlimited while it fails (FailOpen)" op=take error="ratelimit: store: store down"
`
			require.Equal(t, want, alert.String())
			require.Equal(t, uint64(2), lim.Stats().StoreErrors)
			require.Equal(t, uint64(2), lim.Stats().Bypassed)
		})
	}
}
