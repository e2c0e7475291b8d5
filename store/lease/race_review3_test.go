package lease_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/lease"
)

// TestReview3ManyGoroutinesThroughLimiters: 16 goroutines make Takes
// through Limiters of 1, 2, 3 and 4 limits (TryTakeOne, TryTakeTwo and
// TryTake first) on two lease instances over one backing store, while
// other goroutines move the fake clock, call Expire on both instances,
// read Stats, and finally Close one instance while the Takes go on. Run
// it with -race. Afterwards, for every (key, limit) pair, the units
// admitted (every allowed decision of an admitted Take, shadow limits
// included when they had room) are at most the units the backing store
// charged; all the units charged and not admitted are accounted for by
// the instances' Drained + Dropped + Lost; nothing is held; each
// Limiter's Stats count each Take once, and each Take without a shadow
// limit made exactly one store call (OnStoreCall).
func TestReview3ManyGoroutinesThroughLimiters(t *testing.T) {
	f := newFleet(t, 2, lease.WithHotThreshold(2), lease.WithMaxShare(0.3), lease.WithLifetime(20*time.Millisecond))
	a := ratelimit.Every(2000, time.Second).WithBurst(200).Named("a")
	fw := ratelimit.PerSecond(3000).WithAlgorithm(ratelimit.FixedWindow).Named("f")
	g := ratelimit.PerSecond(4000).WithAlgorithm(ratelimit.GCRA).WithBurst(300).Named("g")
	w := ratelimit.PerSecond(20000).WithAlgorithm(ratelimit.SlidingWindow).Named("w")
	s := ratelimit.PerSecond(500).WithBurst(60).Named("s").Shadow()
	sets := [][]ratelimit.Limit{{a}, {g}, {a, fw}, {g, s}, {a, fw, w}, {w, s, g, a}}
	type limiter struct {
		lim    *ratelimit.Limiter
		shadow bool
		takes  atomic.Int64
		calls  atomic.Int64
	}
	var lims []*limiter
	for i := range f.stores {
		for _, set := range sets {
			l := &limiter{}
			for _, x := range set {
				l.shadow = l.shadow || x.IsShadow()
			}
			var err error
			l.lim, err = ratelimit.New(f.stores[i], ratelimit.WithLimits(set...), ratelimit.WithName("fleet"), ratelimit.WithoutStoreAlert(),
				ratelimit.WithStoreTimeout(time.Minute),
				ratelimit.WithHooks(ratelimit.Hooks{OnStoreCall: func(context.Context, ratelimit.StoreCall) { l.calls.Add(1) }}))
			require.NoError(t, err)
			lims = append(lims, l)
		}
	}
	var mu sync.Mutex
	admitted := map[string]int64{}
	stop := make(chan struct{})
	var bg sync.WaitGroup
	bg.Add(3)
	go func() { // the clock, 50 µs a step
		defer bg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			f.clock.Advance(50 * time.Microsecond)
			runtime.Gosched()
		}
	}()
	go func() { // expiry passes
		defer bg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_ = f.stores[i%2].Expire(context.Background())
			runtime.Gosched()
		}
	}()
	go func() { // Stats readers
		defer bg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, st := range f.stores {
				_ = st.Stats()
			}
			runtime.Gosched()
		}
	}()
	const workers, perWorker = 16, 1500
	var wg sync.WaitGroup
	var started atomic.Int64
	closedOne := make(chan error, 1)
	for wk := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(wk), 5))
			local := map[string]int64{}
			for range perWorker {
				if started.Add(1) == workers*perWorker*2/3 {
					go func() { closedOne <- f.stores[1].Close() }()
				}
				l := lims[rng.IntN(len(lims))]
				key := fmt.Sprint("k", rng.IntN(3))
				limits := l.lim.Limits()
				costs := make([]int64, len(limits))
				for i := range costs {
					costs[i] = rng.Int64N(6)
				}
				res, err := l.lim.Take(context.Background(), key, costs...)
				if err != nil {
					t.Error(err)
					return
				}
				l.takes.Add(1)
				if res.Allowed {
					for i, d := range res.Decisions {
						if d.Allowed {
							local[key+"|"+limits[i].ID()] += costs[i]
						}
					}
				}
			}
			mu.Lock()
			for k, v := range local {
				admitted[k] += v
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(stop)
	bg.Wait()
	require.NoError(t, <-closedOne)
	require.NoError(t, f.stores[0].Close())
	var unused int64
	for _, st := range f.stores {
		x := st.Stats()
		require.Zero(t, x.Held)
		unused += int64(x.Drained + x.Dropped + x.Lost)
		require.Zero(t, x.Lost)
		t.Logf("%+v", x)
	}
	f.backing.mu.Lock()
	var diff int64
	for p, charged := range f.backing.charged {
		require.LessOrEqual(t, admitted[p], charged, "pair %s: admitted more than charged", p)
		diff += charged - admitted[p]
	}
	for p := range admitted {
		_, ok := f.backing.charged[p]
		require.True(t, ok || admitted[p] == 0, "pair %s admitted but never charged", p)
	}
	f.backing.mu.Unlock()
	require.Equal(t, unused, diff, "charged and not admitted = Drained + Dropped + Lost")
	for _, l := range lims {
		st := l.lim.Stats()
		require.Equal(t, uint64(l.takes.Load()), st.Allowed+st.Limited+st.TooLarge)
		require.Zero(t, st.StoreErrors)
		if !l.shadow {
			require.Equal(t, l.takes.Load(), l.calls.Load(), "one store call per Take")
		} else {
			require.GreaterOrEqual(t, l.calls.Load(), l.takes.Load())
		}
	}
}
