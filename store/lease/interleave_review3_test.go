package lease_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/internal/clocktest"
	"github.com/rampmeter/ratelimit/store/lease"
	"github.com/rampmeter/ratelimit/store/memory"
)

// Review 3: forced interleavings of TryTake, TryTakeOne and TryTakeTwo
// with the slow path, each run on twin fleets: mode 0 calls Take alone,
// mode 1 TryTake and then Take when it did not decide, mode 2 TryTakeOne /
// TryTakeTwo and then TakeOne / TakeTwo. Decisions, errors, Stats and
// charges must be the same in all three.

// tryTake is a Take of reqs on instance i in the given mode; decided
// reports whether the attempt decided it.
func (f *fleet) tryTake(mode, i int, reqs ...ratelimit.Request) (out []ratelimit.Decision, decided bool, err error) {
	s := f.stores[i]
	ctx := context.Background()
	out = make([]ratelimit.Decision, len(reqs))
	switch {
	case mode == 2 && len(reqs) == 1:
		r := reqs[0]
		ok, allowed, remaining, reset, retryAfter, delay, at := s.TryTakeOne(r)
		if !ok {
			allowed, remaining, reset, retryAfter, delay, at, err = s.TakeOne(ctx, r)
		}
		if err == nil {
			out[0] = ratelimit.Decision{Limit: r.Limit, Allowed: allowed, Remaining: remaining, Reset: reset, RetryAfter: retryAfter, Delay: delay, At: at}
		}
		return out, ok, err
	case mode == 2 && len(reqs) == 2:
		a, b := reqs[0], reqs[1]
		ok, allowedA, remainingA, resetA, retryAfterA, delayA, atA, allowedB, remainingB, resetB, retryAfterB, delayB, atB := s.TryTakeTwo(a.Key, a.Limit, a.Cost, b.Key, b.Limit, b.Cost)
		if !ok {
			allowedA, remainingA, resetA, retryAfterA, delayA, atA, allowedB, remainingB, resetB, retryAfterB, delayB, atB, err = s.TakeTwo(ctx, a.Key, a.Limit, a.Cost, b.Key, b.Limit, b.Cost)
		}
		if err == nil {
			out[0] = ratelimit.Decision{Limit: a.Limit, Allowed: allowedA, Remaining: remainingA, Reset: resetA, RetryAfter: retryAfterA, Delay: delayA, At: atA}
			out[1] = ratelimit.Decision{Limit: b.Limit, Allowed: allowedB, Remaining: remainingB, Reset: resetB, RetryAfter: retryAfterB, Delay: delayB, At: atB}
		}
		return out, ok, err
	case mode >= 1 && s.TryTake(reqs, out):
		return out, true, nil
	}
	return out, false, s.Take(ctx, reqs, out)
}

// snapshot is what must match between the modes.
func (f *fleet) snapshot() string {
	s := ""
	for i, st := range f.stores {
		s += fmt.Sprintf("store %d %+v\n", i, st.Stats())
	}
	f.backing.mu.Lock()
	defer f.backing.mu.Unlock()
	return s + fmt.Sprintf("charged %v takes %d adjusts %d", f.backing.charged, f.backing.takes, f.backing.adjusts)
}

var errDown3 = errors.New("review3: backing down")

// TestReview3TryDuringStackRefill: the stack (A 1, B 1) on "k", where A
// has a lease of 2 and B none, reserves 1 unit of A's lease without
// marking A busy (A needs nothing from the backing store) and refills B.
// While B's backing call is in flight, a call on A alone is decided: from
// the unit left in A's lease, as Take decides it; or, when it needs 5,
// by a refill of A that replaces A's lease (a new generation). Then the
// stack's call fails or is refused, and its reserved unit goes back: into
// A's lease, or, once that lease was replaced, to the backing store.
//
// PerSecond(100) limits (10 ms per unit, leases ≤ 10), hot at once.
func TestReview3TryDuringStackRefill(t *testing.T) {
	A := ptr(ratelimit.PerSecond(100).Named("A"))
	B := ptr(ratelimit.PerSecond(100).Named("B"))
	for _, c := range []struct {
		name  string
		inner int64 // the cost of the call on A alone
		fail  bool  // the stack's backing call fails (else B is spent and refuses)
	}{
		{"fails, A served from its lease", 1, true},
		{"refused, A served from its lease", 1, false},
		{"fails, A's lease replaced", 5, true},
		{"refused, A's lease replaced", 5, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var snaps [3]string
			var stackOut, innerOut, afterOut [3][]ratelimit.Decision
			var stackErr [3]error
			var innerDecided, afterDecided [3]bool
			for mode := range 3 {
				f := newFleet(t, 1, lease.WithHotThreshold(1))
				// At t0 a Take of 1 on A leases 2 (demand 1, + 1).
				got, _, err := f.tryTake(mode, 0, ratelimit.Request{Key: "k", Limit: A, Cost: 1})
				require.NoError(t, err)
				f.check(decision(A, true, 99, ms(10), 0), got[0]) // 97 + the 2 held; 30 ms less the 2 held
				if !c.fail {
					out := make([]ratelimit.Decision, 1)
					require.NoError(t, f.mem.Take(context.Background(), []ratelimit.Request{{Key: "k", Limit: B, Cost: 100}}, out))
					require.True(t, out[0].Allowed)
				} else {
					f.backing.setFail(errDown3)
				}
				ran := false
				f.backing.setBefore(func(reqs []ratelimit.Request) {
					if ran {
						return
					}
					ran = true
					require.Equal(t, []ratelimit.Request{{Key: "k", Limit: B, Cost: 3}}, reqs, "B's need 1 and a lease of 2")
					f.backing.setFail(nil) // the inner call's refill, if any, succeeds
					var err error
					innerOut[mode], innerDecided[mode], err = f.tryTake(mode, 0, ratelimit.Request{Key: "k", Limit: A, Cost: c.inner})
					require.NoError(t, err)
					if c.fail {
						f.backing.setFail(errDown3)
					}
				})
				stackOut[mode], _, stackErr[mode] = f.tryTake(mode, 0, ratelimit.Request{Key: "k", Limit: A, Cost: 1}, ratelimit.Request{Key: "k", Limit: B, Cost: 1})
				require.True(t, ran)
				f.backing.setBefore(nil)
				f.backing.setFail(nil)
				// The unit reserved by the stack is usable again (in
				// the lease, or back in the backing store).
				afterOut[mode], afterDecided[mode], err = f.tryTake(mode, 0, ratelimit.Request{Key: "k", Limit: A, Cost: 1})
				require.NoError(t, err)
				require.NoError(t, f.stores[0].Close())
				snaps[mode] = f.snapshot()
				if mode == 0 {
					// Exact values of the plain Take.
					if c.inner == 1 {
						// A's last leased unit: Remaining 97 + 0; Reset 10 ms
						// (the first Take's unit) + 10 ms.
						f.check(decision(A, true, 97, ms(20), 0), innerOut[0][0])
					} else {
						// 1 reserved by the stack, so from 1, need 4 and a
						// lease of min(size, 10): demand 1+1+5 = 7, + 1 = 8.
						require.True(t, innerOut[0][0].Allowed)
						require.Equal(t, uint64(8), f.stores[0].Stats().Leased-2)
					}
					if c.fail {
						require.ErrorIs(t, stackErr[0], errDown3)
					} else {
						require.NoError(t, stackErr[0])
						require.True(t, stackOut[0][0].Allowed, "A had room")
						require.False(t, stackOut[0][1].Allowed)
					}
					require.True(t, afterOut[0][0].Allowed)
				}
			}
			for mode := 1; mode < 3; mode++ {
				require.Equal(t, stackErr[0], stackErr[mode], "mode %d", mode)
				require.Equal(t, stackOut[0], stackOut[mode], "mode %d", mode)
				require.Equal(t, innerOut[0], innerOut[mode], "mode %d", mode)
				require.Equal(t, afterOut[0], afterOut[mode], "mode %d", mode)
				require.Equal(t, snaps[0], snaps[mode], "mode %d", mode)
			}
			// The inner call on A's last leased unit is decided by the
			// attempt (A is not busy); a need of 5 is not.
			require.Equal(t, c.inner == 1, innerDecided[1])
			require.Equal(t, c.inner == 1, innerDecided[2])
			// After the stack put its unit back into A's lease, the next
			// call is served from it; after A's lease was replaced, from
			// the new lease.
			require.True(t, afterDecided[1])
			require.True(t, afterDecided[2])
		})
	}
}

// TestReview3LeaseEndsAtNow: a lease hands out units while now < end:
// at end − 1 µs the attempt decides from it, exactly as Take would; at
// end exactly it decides nothing and changes nothing, and the Take that
// follows gives the ended lease back and refills.
//
// Bucket: PerSecond(100), L = 100 ms: the lease of t0 ends at t0 + 100 ms.
// Fixed window PerSecond(300) (window [0, 1 s)), L = 100 ms, leased at
// t0 + 900 ms: the lease ends with its window, at t0 + 1 s.
func TestReview3LeaseEndsAtNow(t *testing.T) {
	bucket := ptr(ratelimit.PerSecond(100).Named("bucket"))
	fixed := ptr(ratelimit.PerSecond(300).WithAlgorithm(ratelimit.FixedWindow).Named("fixed"))
	for _, c := range []struct {
		name       string
		l          *ratelimit.Limit
		start, end time.Duration
		// the decision at end − 1 µs: Remaining, Reset
		remaining int64
		reset     time.Duration
	}{
		// 3 charged at t0 (1 + lease 2): Remaining 97 + the 1 still
		// held; the second unit handed out at 99.999 ms: Reset = 10 ms
		// (the first unit's refill) drained to 0, + 10 ms.
		{"bucket", bucket, 0, 100 * time.Millisecond, 98, 10 * time.Millisecond},
		// 3 charged at 900 ms (at the start of a lifetime-long interval:
		// demand 1, lease 2): Remaining 297 + 1; the window's Reset is
		// its end, 100 ms after the charge, aged to 1 µs.
		{"fixed window", fixed, 900 * time.Millisecond, time.Second, 298, time.Microsecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			for mode := 1; mode < 3; mode++ {
				f, twin := newFleet(t, 1, lease.WithHotThreshold(1), lease.WithLifetime(100*time.Millisecond)),
					newFleet(t, 1, lease.WithHotThreshold(1), lease.WithLifetime(100*time.Millisecond))
				r := ratelimit.Request{Key: "k", Limit: c.l, Cost: 1}
				for _, g := range []*fleet{f, twin} {
					g.at(c.start)
					require.True(t, g.take1(0, "k", c.l, 1).Allowed)
					require.Equal(t, int64(2), g.stores[0].Stats().Held)
					g.at(c.end - time.Microsecond)
				}
				got, decided, err := f.tryTake(mode, 0, r)
				require.NoError(t, err)
				require.True(t, decided, "1 µs before the lease's end")
				f.check(decision(c.l, true, c.remaining, c.reset, 0), got[0])
				require.Equal(t, twin.take(0, r), got)
				require.Equal(t, twin.snapshot(), f.snapshot())
				for _, g := range []*fleet{f, twin} {
					g.at(c.end)
				}
				before := f.snapshot()
				out := make([]ratelimit.Decision, 1)
				require.False(t, f.stores[0].TryTake([]ratelimit.Request{r}, out), "at the lease's end")
				ok, _, _, _, _, _, _ := f.stores[0].TryTakeOne(r)
				require.False(t, ok)
				require.Equal(t, ratelimit.Decision{}, out[0])
				require.Equal(t, before, f.snapshot(), "nothing changed")
				got, decided, err = f.tryTake(mode, 0, r)
				require.NoError(t, err)
				require.False(t, decided)
				require.Equal(t, twin.take(0, r), got)
				require.True(t, got[0].Allowed)
				require.Equal(t, twin.snapshot(), f.snapshot())
				require.Equal(t, uint64(2), f.stores[0].Stats().Refills, "the Take at the end refilled")
			}
		})
	}
}

// TestReview3CloseDuringTryTake: Close marks the Store closed while
// TryTakeOne holds its shard's lock (from inside the Store's clock, which
// TryTakeOne reads under the lock, the test starts Close and waits until
// probes on other shards see the Store closed): the attempt had seen the
// Store open, so it decides from the lease, as a Take that had got as far
// would; Close's sweep, which waits for the lock, then gives the rest of
// the lease back. Afterwards every attempt decides nothing, and the
// backing store holds charged exactly the units admitted, key by key.
func TestReview3CloseDuringTryTake(t *testing.T) {
	clock := clocktest.New(t0)
	var hook atomic.Pointer[func()]
	now := func() time.Time {
		if h := hook.Swap(nil); h != nil {
			(*h)()
		}
		return clock.Now()
	}
	mem, err := memory.New(memory.WithClock(clock.Now))
	require.NoError(t, err)
	backing := newCounting(mem)
	s, err := lease.New(backing, lease.WithClock(now), lease.WithExpiryInterval(0), lease.WithHotThreshold(1),
		lease.WithMaxShare(1), lease.WithCallTimeout(time.Minute))
	require.NoError(t, err)
	ctx := context.Background()
	l := ptr(ratelimit.PerSecond(100))
	big := ptr(ratelimit.PerSecond(1_000_000).WithBurst(1 << 40).Named("big"))
	// "k": a Take of 1 leases 2 (demand 1, + 1); each probe key: a Take
	// of 10^6 leases 10^6 + 1.
	_, _, _, _, _, _, err = s.TakeOne(ctx, ratelimit.Request{Key: "k", Limit: l, Cost: 1})
	require.NoError(t, err)
	const probes = 8
	admitted := make([]atomic.Int64, probes)
	for p := range probes {
		_, _, _, _, _, _, err = s.TakeOne(ctx, ratelimit.Request{Key: fmt.Sprint("p", p), Limit: big, Cost: 1_000_000})
		require.NoError(t, err)
		admitted[p].Store(1_000_000)
	}
	require.Equal(t, int64(2+probes*1_000_001), s.Stats().Held)

	closed := make(chan error, 1)
	seen := make(chan struct{}, probes)
	done := make(chan struct{}, probes)
	fire := func() {
		go func() { closed <- s.Close() }()
		// Probes on the other shards return false once Close has marked
		// the Store closed (their leases are far from spent); one on
		// this shard blocks until the attempt below lets go of it.
		for p := range probes {
			go func() {
				defer func() { done <- struct{}{} }()
				for {
					ok, _, _, _, _, _, _ := s.TryTakeOne(ratelimit.Request{Key: fmt.Sprint("p", p), Limit: big, Cost: 1})
					if !ok {
						seen <- struct{}{}
						return
					}
					admitted[p].Add(1)
					runtime.Gosched()
				}
			}()
		}
		<-seen // the Store is closed, the attempt's lock still held
	}
	hook.Store(&fire)
	ok, allowed, remaining, reset, retryAfter, delay, at := s.TryTakeOne(ratelimit.Request{Key: "k", Limit: l, Cost: 1})
	require.Equal(t, []any{true, true, int64(98), ms(20), time.Duration(0), time.Duration(0), ratelimit.Micros(t0)},
		[]any{ok, allowed, remaining, reset, retryAfter, delay, at}, "the attempt had seen the Store open")
	require.NoError(t, <-closed)
	for range probes {
		<-done
	}
	st := s.Stats()
	require.Zero(t, st.Held)
	require.Equal(t, uint64(0), st.Drained, "the clock has not moved")
	for _, key := range []string{"k", "p0"} {
		ok, _, _, _, _, _, _ := s.TryTakeOne(ratelimit.Request{Key: key, Limit: l, Cost: 1})
		require.False(t, ok, "closed")
	}
	require.Equal(t, int64(2), backing.chargedTo("k", l), "the 2 admitted")
	for p := range probes {
		require.Equal(t, admitted[p].Load(), backing.chargedTo(fmt.Sprint("p", p), big), "probe %d", p)
	}
}
