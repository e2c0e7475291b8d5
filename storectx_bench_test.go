package ratelimit_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/memory"
)

// mayBlock is a store/memory seen only through the Store interface: not
// NonBlocking, not a SingleTaker, as a store that may wait (store/lease,
// store/resilient, a third-party store) is seen by the Limiter, which then
// makes each call with the store timeout.
type mayBlock struct{ s *memory.Store }

func (m mayBlock) Take(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	return m.s.Take(ctx, reqs, out)
}

func (m mayBlock) Adjust(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	return m.s.Adjust(ctx, reqs, out)
}

func mayBlockLimiter(tb testing.TB, opts ...ratelimit.Option) *ratelimit.Limiter {
	tb.Helper()
	store, err := memory.New(memory.WithClock(standing))
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = store.Close() })
	lim, err := ratelimit.New(mayBlock{store}, opts...)
	require.NoError(tb, err)
	return lim
}

// BenchmarkTakeMayBlock measures Limiter.Take on a store that may block
// (mayBlock): the store timeout's context is the cost over BenchmarkTake's
// one/serial, a store call that asks only ctx.Err starting no timer.
func BenchmarkTakeMayBlock(b *testing.B) {
	lim := mayBlockLimiter(b, ratelimit.WithLimits(hugeRate("requests")))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if res, err := lim.Take(ctx, "hot"); err != nil || !res.Allowed {
			b.Fatal(res.Allowed, err)
		}
	}
}

func TestTakeMayBlockAllocations(t *testing.T) {
	// The store timeout of a store that may block costs one allocation,
	// the call's context, when the store starts no timer (it asks only
	// ctx.Err, as store/memory does); context.WithTimeout cost three.
	// The store's slices come from the Limiter's pooled scratch, which
	// the race detector's sync.Pool drops now and then.
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops pooled scratch at random")
	}
	lim := mayBlockLimiter(t, ratelimit.WithLimits(hugeRate("requests")))
	require.True(t, allowed(lim, "k"))
	assert.Equal(t, 1.0, testing.AllocsPerRun(100, func() {
		if !allowed(lim, "k") {
			t.Fatal("refused")
		}
	}))
}
