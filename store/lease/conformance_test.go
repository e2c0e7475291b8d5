package lease_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit/internal/clocktest"
	"github.com/rampmeter/ratelimit/store/lease"
	"github.com/rampmeter/ratelimit/store/memory"
	"github.com/rampmeter/ratelimit/store/storetest"
)

func harness(opts ...lease.Option) func(t *testing.T) storetest.Harness {
	return func(t *testing.T) storetest.Harness {
		clock := clocktest.New(time.Time{})
		mem, err := memory.New(memory.WithClock(clock.Now))
		require.NoError(t, err)
		s, err := lease.New(mem, append([]lease.Option{lease.WithClock(clock.Now), lease.WithExpiryInterval(0)}, opts...)...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		return storetest.Harness{Store: s, SetTime: clock.Set}
	}
}

// TestConformanceCold: with leasing disabled every key is cold, and the
// decorator is the backing store, exactly. With leasing (run the suite
// with WithHotThreshold(2) to see it), a single instance passes every
// scenario but those that, by design, cannot hold while a lease is out:
//
//   - RetryAfter of a refused hot limit is at most the lease lifetime
//     (units leased by other instances come back by then), where the
//     suite wants the backing store's own wait (BurstThenRefill's
//     neighbours StackedAtomic, FixedWindowBoundaryBurst,
//     FixedWindowFirstHit, SlidingWindowCounter, the clock-backwards and
//     model scenarios);
//   - a peek (a Take of cost 0) reads the backing store's exact state, in
//     which leased units count as spent, where the suite checks with a
//     peek that a refused stack charged nothing (StackedAtomic,
//     StackedThree, ConcurrentStack): the lease, not the request, holds
//     those units.
//
// TestHotKeyLeases and TestStackedAllOrNothing pin the leased decisions
// exactly instead.
func TestConformanceCold(t *testing.T) {
	storetest.Run(t, harness(lease.WithHotThreshold(math.MaxInt64)))
}

func TestPropertiesCold(t *testing.T) {
	storetest.RunProperties(t, harness(lease.WithHotThreshold(math.MaxInt64)))
}
