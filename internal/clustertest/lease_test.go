package clustertest

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/internal/clocktest"
	"github.com/rampmeter/ratelimit/store/lease"
)

// charges wraps a store and sums, per (caller key, limit), the costs of
// its admitted Takes and of its Adjusts: the units the store holds charged.
type charges struct {
	ratelimit.Store
	mu    sync.Mutex
	calls int
	net   map[string]int64
}

func (c *charges) record(reqs []ratelimit.Request, out []ratelimit.Decision, take bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	for i := range reqs {
		if take && !out[i].Allowed {
			return
		}
	}
	for _, r := range reqs {
		c.net[r.Key+"|"+r.Limit.ID()] += r.Cost
	}
}

func (c *charges) Take(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	err := c.Store.Take(ctx, reqs, out)
	if err == nil {
		c.record(reqs, out, true)
	}
	return err
}

func (c *charges) Adjust(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	err := c.Store.Adjust(ctx, reqs, out)
	if err == nil {
		c.record(reqs, out, false)
	}
	return err
}

// TestClusterLease runs three lease.Stores, each over its own Redis store
// and cluster client, against a real three-master Redis Cluster: 40 caller
// keys spread over the slots of all three masters, the first of them hot
// (half the requests), each request a stack of two limits of its caller
// key, on a fake clock, with expiry passes and, at the end, Close. Every
// refill charges the keys of one request, and every return those of one
// caller key, so no call fails (no CROSSSLOT); the hot key is decided
// mostly locally; and after Close each (key, limit) pair holds charged
// the units admitted and, all pairs together, exactly those plus the units
// of bucket leases that drained while held (lease.Stats.Drained: they are
// not given back).
func TestClusterLease(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	clock := clocktest.New(t0)
	prefix := newPrefix()
	rps := ratelimit.PerSecond(100).Named("rps")
	tokens := ratelimit.Every(10_000, time.Second).Named("tokens")
	var stores []*lease.Store
	var backs []*charges
	slots := map[int]bool{}
	for range 3 {
		rs := newStore(t, c.client(t), clock, prefix)
		if len(slots) == 0 {
			for k := range 40 {
				slots[c.owner(t, keySlot(rs.Key(callerKey(k), &rps)))] = true
			}
		}
		b := &charges{Store: rs, net: map[string]int64{}}
		// Returns get a minute: a return that misses its deadline on a
		// loaded machine is lost by design, and this test counts units.
		s, err := lease.New(b, lease.WithClock(clock.Now), lease.WithExpiryInterval(0), lease.WithCallTimeout(time.Minute))
		require.NoError(t, err)
		stores = append(stores, s)
		backs = append(backs, b)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	admitted := map[string]int64{}
	out := make([]ratelimit.Decision, 2)
	const steps = 6000
	for step := range steps {
		clock.Set(t0.Add(time.Duration(step) * time.Millisecond))
		k := 0
		if rng.IntN(2) == 0 {
			k = 1 + rng.IntN(39)
		}
		key := callerKey(k)
		cost := 1 + rng.Int64N(50)
		reqs := []ratelimit.Request{{Key: key, Limit: &rps, Cost: 1}, {Key: key, Limit: &tokens, Cost: cost}}
		require.NoError(t, stores[step%3].Take(ctx, reqs, out), "step %d", step)
		if out[0].Allowed && out[1].Allowed {
			admitted[key+"|"+rps.ID()]++
			admitted[key+"|"+tokens.ID()] += cost
		}
		if step%100 == 99 {
			for _, s := range stores {
				require.NoError(t, s.Expire(ctx))
			}
		}
	}
	for _, s := range stores {
		require.NoError(t, s.Close())
	}
	require.Len(t, slots, 3, "the caller keys live on all three masters")
	calls := 0
	net := map[string]int64{}
	var drained int64
	for i, b := range backs {
		calls += b.calls
		st := stores[i].Stats()
		require.Zero(t, st.Errors)
		require.Positive(t, st.Leased)
		require.Positive(t, st.Returns)
		drained += int64(st.Drained)
		for p, n := range b.net {
			net[p] += n
		}
	}
	var totalAdmitted, totalNet int64
	for p, n := range net {
		require.LessOrEqual(t, admitted[p], n, "%s holds charged at least the units admitted", p)
		totalNet += n
		totalAdmitted += admitted[p]
	}
	require.Len(t, net, len(admitted))
	require.Equal(t, totalAdmitted+drained, totalNet, "charged = admitted + drained")
	t.Logf("%d decisions, %d Redis calls: %.3f per decision", steps, calls, float64(calls)/steps)
	require.Less(t, float64(calls)/steps, 0.6, "the hot half of the requests is decided locally")
}
