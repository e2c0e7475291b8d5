package prometheus

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/memory"
	"github.com/rampmeter/ratelimit/store/resilient"
)

// The package documentation promises "Each call is counted once" when a
// Limiter's store contains an InstrumentStore wrapper of the same Metrics.
// The Hooks recognise the wrapper only when it is the Limiter's store
// itself: wrapped in another store (here store/resilient, the usual way
// to guard a measured Redis store, as the demo's InstrumentStore(redis)
// did before this session), every call is observed twice.
func TestReviewInstrumentStoreInsideResilientCountsOnce(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := New(reg)
	require.NoError(t, err)
	mem, err := memory.New()
	require.NoError(t, err)
	guarded, err := resilient.New(m.InstrumentStore(mem))
	require.NoError(t, err)
	lim, err := ratelimit.New(guarded, ratelimit.WithHooks(m.Hooks()), ratelimit.WithLimits(ratelimit.PerMinute(60)))
	require.NoError(t, err)
	_, err = lim.Take(context.Background(), "k")
	require.NoError(t, err)
	assert.Equal(t, uint64(1), durationCounts(t, reg, "rampmeter_store_duration_seconds")["take/ok"],
		"one store call, one sample")
}
