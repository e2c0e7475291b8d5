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

// An InstrumentStore wrapper inside another store (here store/resilient,
// the usual guard of a measured Redis store) is found through Unwrap, so
// the Hooks leave its calls to it and each call is one sample.
func TestInstrumentStoreInsideResilientCountsOnce(t *testing.T) {
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
