package main

import (
	"flag"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite fleetsim.svg with what the command draws")

var (
	once    sync.Once
	runs    []*Run
	runsErr error
)

func simulated(t *testing.T) []*Run {
	t.Helper()
	if raceEnabled {
		t.Skip("the simulation is one goroutine: nothing for the race detector, and 20 times slower under it")
	}
	once.Do(func() { runs, runsErr = simulateAll() })
	require.NoError(t, runsErr)
	return runs
}

// TestSVGUpToDate fails when the committed fleetsim.svg is not what the
// command draws: regenerate it with go generate ./internal/cmd/fleetsim
// (or go test ./internal/cmd/fleetsim -update).
func TestSVGUpToDate(t *testing.T) {
	got := render(simulated(t))
	if *update {
		require.NoError(t, os.WriteFile("fleetsim.svg", got, 0o644))
	}
	want, err := os.ReadFile("fleetsim.svg")
	require.NoError(t, err)
	require.Equal(t, string(want), string(got), "fleetsim.svg is stale: run go generate ./internal/cmd/fleetsim")
}

// TestSimulation checks the bounds on every run: no pair ever admitted
// more than the backing store charged it; the hottest key stayed within
// Burst + ⌊(1 s + L − 1 µs) × Rate⌋ in every second; without leases the
// fleet is the global bucket exactly; with them it admits about as much
// (within the units that can sit idle in leases, plus those that drained
// from bucket leases while held, which are not given back, and those of
// the crashed instance); units held in leases stay within instances × the
// largest lease (the share cap: 60 units per key, 600 for the route).
func TestSimulation(t *testing.T) {
	for _, r := range simulated(t) {
		t.Run(lifetimeName(r.Lifetime), func(t *testing.T) {
			assert.Zero(t, r.OverCharged, "admitted beyond the charges")
			assert.LessOrEqual(t, r.Span, r.SpanBound)
			assert.LessOrEqual(t, r.MaxHeld, int64(instances*(keys*60+600)))
			if r.Lifetime == 0 {
				assert.Equal(t, r.Global, r.Admitted)
				assert.Zero(t, r.Missed+r.Extra)
				assert.Equal(t, r.Requests, r.BackingCalls)
				return
			}
			assert.LessOrEqual(t, r.Admitted, r.Global+r.MaxHeld, "admitted about as much as the global bucket")
			assert.GreaterOrEqual(t, r.Admitted, r.Global-r.MaxHeld-int64(r.Stats.Drained)-r.Lost, "admitted about as much as the global bucket")
		})
	}
	t.Log("\n" + table(simulated(t)))
}
