package lease_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/lease"
	"github.com/rampmeter/ratelimit/store/memory"
)

// TestConcurrentFleet races 4 instances of 8 goroutines each on the real
// clock, with the background expiry running and a short lifetime, on one
// hot key with a stack of two limits and on a spread of cold keys. After
// Close, every unit admitted was charged, the stack was all or nothing
// (both limits admitted the same requests), and the hot key's requests
// stayed within Burst + Rate × (elapsed + L). Run it with -race.
// (Accounting: the units the backing store kept charged are those
// admitted plus those of bucket leases that drained while held, which
// are not sent back: Stats.Drained.)
func TestConcurrentFleet(t *testing.T) {
	mem, err := memory.New()
	require.NoError(t, err)
	backing := newCounting(mem)
	const life = 50 * time.Millisecond
	// Rates low enough that the hot key goes over them even when a loaded
	// machine under -race decides only a few thousand calls a second.
	rps := ptr(ratelimit.PerSecond(200).Named("rps"))
	tokens := ptr(ratelimit.Every(2_000, time.Second).Named("tokens"))
	var stores []*lease.Store
	for range 4 {
		// (A minute for the returns: on a loaded machine a goroutine can
		// wait longer than the default 50 ms for the CPU, and a return
		// that times out is lost, by design; this test is about races.)
		s, err := lease.New(backing, lease.WithLifetime(life), lease.WithMaxShare(0.2), lease.WithCallTimeout(time.Minute))
		require.NoError(t, err)
		stores = append(stores, s)
	}
	var admittedReqs, admittedTokens atomic.Int64 // the hot key's
	var allReqs, allTokens atomic.Int64           // every key's
	var refused atomic.Int64
	start := time.Now()
	// 300 ms, and longer if the hot key has not been refused yet (at most
	// 10 s): the test is about what happens over the limit.
	deadline, hardDeadline := start.Add(300*time.Millisecond), start.Add(10*time.Second)
	var wg sync.WaitGroup
	for i, s := range stores {
		for g := range 8 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(i), uint64(g)))
				out := make([]ratelimit.Decision, 2)
				for now := time.Now(); now.Before(deadline) || refused.Load() == 0 && now.Before(hardDeadline); now = time.Now() {
					key := "hot"
					if rng.IntN(4) == 0 {
						key = fmt.Sprintf("cold-%d", rng.IntN(1000))
					}
					cost := 1 + rng.Int64N(20)
					reqs := []ratelimit.Request{{Key: key, Limit: rps, Cost: 1}, {Key: key, Limit: tokens, Cost: cost}}
					if err := s.Take(context.Background(), reqs, out); err != nil {
						t.Error(err)
						return
					}
					switch {
					case out[0].Allowed && out[1].Allowed:
						allReqs.Add(1)
						allTokens.Add(cost)
						if key == "hot" {
							admittedReqs.Add(1)
							admittedTokens.Add(cost)
						}
					case key == "hot":
						refused.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	for _, s := range stores {
		require.NoError(t, s.Close())
		require.Equal(t, int64(0), s.Stats().Held)
	}
	var drained uint64
	for _, s := range stores {
		require.Zero(t, s.Stats().Lost)
		drained += s.Stats().Drained
	}
	// The leases are all back, less what drained while held: what the
	// backing store kept charged is what was admitted plus that, over
	// all keys and both limits of the stack; and for the hot key at
	// least what was admitted, for each.
	require.Equal(t, allReqs.Load()+allTokens.Load()+int64(drained), backing.chargedAll(rps)+backing.chargedAll(tokens))
	require.LessOrEqual(t, admittedReqs.Load(), backing.chargedTo("hot", rps))
	require.LessOrEqual(t, admittedTokens.Load(), backing.chargedTo("hot", tokens))
	bound := rps.Burst() + int64((elapsed+life).Seconds()*float64(rps.Quota()))
	require.LessOrEqual(t, admittedReqs.Load(), bound)
	require.Positive(t, refused.Load(), "the hot key was over its limit")
	var local, calls uint64
	for _, s := range stores {
		st := s.Stats()
		local += st.Local
		calls += st.BackingCalls()
	}
	t.Logf("hot key: %d admitted, %d refused in %v (bound %d); %d local decisions, %d backing calls",
		admittedReqs.Load(), refused.Load(), elapsed, bound, local, calls)
}

// TestCloseRacesTakes: Close runs while 16 goroutines keep deciding a hot
// stack and cold keys, and they go on after it (passing through). When all
// are done nothing is held, and the backing store has charged exactly the
// units admitted plus those that drained from bucket leases while held.
// Run it with -race.
func TestCloseRacesTakes(t *testing.T) {
	for round := range 5 {
		mem, err := memory.New()
		require.NoError(t, err)
		backing := newCounting(mem)
		rps := ptr(ratelimit.PerSecond(5000).Named("rps"))
		tokens := ptr(ratelimit.Every(50_000, time.Second).Named("tokens"))
		s, err := lease.New(backing, lease.WithLifetime(20*time.Millisecond), lease.WithMaxShare(0.2), lease.WithCallTimeout(time.Minute))
		require.NoError(t, err)
		var admitted atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for g := range 16 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(round), uint64(g)))
				out := make([]ratelimit.Decision, 2)
				for {
					select {
					case <-stop:
						return
					default:
					}
					key := "hot"
					if rng.IntN(4) == 0 {
						key = fmt.Sprintf("cold-%d", rng.IntN(50))
					}
					cost := 1 + rng.Int64N(20)
					reqs := []ratelimit.Request{{Key: key, Limit: rps, Cost: 1}, {Key: key, Limit: tokens, Cost: cost}}
					if err := s.Take(context.Background(), reqs, out); err != nil {
						t.Error(err)
						return
					}
					if out[0].Allowed && out[1].Allowed {
						admitted.Add(1 + cost)
					}
				}
			})
		}
		time.Sleep(30 * time.Millisecond)
		require.NoError(t, s.Close())
		time.Sleep(10 * time.Millisecond)
		close(stop)
		wg.Wait()
		st := s.Stats()
		require.Equal(t, int64(0), st.Held, "round %d", round)
		require.Zero(t, st.Lost)
		require.Equal(t, admitted.Load()+int64(st.Drained), backing.chargedAll(rps)+backing.chargedAll(tokens), "round %d", round)
	}
}
