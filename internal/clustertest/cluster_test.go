package clustertest

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/internal/clocktest"
	"github.com/rampmeter/ratelimit/store/redisstore"
)

// model is the reference store: the pure functions of package ratelimit
// on a map of states, committing a Take only when every limit admits.
type model map[string]ratelimit.State

func (m model) take(reqs []ratelimit.Request, now int64) []ratelimit.Decision {
	out := make([]ratelimit.Decision, len(reqs))
	next := make([]ratelimit.State, len(reqs))
	all := true
	for i, r := range reqs {
		next[i] = m[r.Key+"\x00"+r.Limit.ID()]
		out[i] = r.Limit.TakeAt(&next[i], now, r.Cost)
		all = all && out[i].Allowed
	}
	if all {
		for i, r := range reqs {
			m[r.Key+"\x00"+r.Limit.ID()] = next[i]
		}
		return out
	}
	for i, r := range reqs {
		p := r.Limit.TakeAt(new(m[r.Key+"\x00"+r.Limit.ID()]), now, 0)
		out[i].Remaining, out[i].Reset = p.Remaining, p.Reset
	}
	return out
}

// peek returns the decisions of a Take of reqs at cost 0, which charges
// nothing, without changing m.
func (m model) peek(reqs []ratelimit.Request, now int64) []ratelimit.Decision {
	out := make([]ratelimit.Decision, len(reqs))
	for i, r := range reqs {
		out[i] = r.Limit.TakeAt(new(m[r.Key+"\x00"+r.Limit.ID()]), now, 0)
	}
	return out
}

// equal compares a store's decisions with the model's, exactly.
func equal(t *testing.T, got, want []ratelimit.Decision, format string, args ...any) {
	t.Helper()
	require.Len(t, got, len(want))
	for i := range want {
		g, w := got[i], want[i]
		require.Equal(t, [5]any{w.Allowed, w.Remaining, w.Reset, w.RetryAfter, w.At},
			[5]any{g.Allowed, g.Remaining, g.Reset, g.RetryAfter, g.At},
			"limit %s: %s", w.Limit.Name(), fmt.Sprintf(format, args...))
	}
}

// newPrefix returns a key prefix no other run has used.
func newPrefix() string { return "rmcluster:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":" }

// newStore returns a Redis store on cc that decides by clock, under
// prefix.
func newStore(t *testing.T, cc *redis.ClusterClient, clock *clocktest.Clock, prefix string, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	store, err := redisstore.New(cc, append([]redisstore.Option{redisstore.WithClock(clock.Now), redisstore.WithPrefix(prefix)}, opts...)...)
	require.NoError(t, err)
	return store
}

// same reports whether a store's decisions equal the model's, exactly.
func same(got, want []ratelimit.Decision) bool {
	if len(got) != len(want) {
		return false
	}
	for i, w := range want {
		g := got[i]
		if g.Allowed != w.Allowed || g.Remaining != w.Remaining || g.Reset != w.Reset || g.RetryAfter != w.RetryAfter || g.At != w.At {
			return false
		}
	}
	return true
}

var t0 = time.Date(2026, 3, 4, 5, 6, 7, 891011000, time.UTC)

// stacks are the limits a caller may be charged against: callers with an
// even index get the first two, the others all three. The algorithms
// differ, so the Lua script's three code paths meet the cluster.
var stacks = func() [][]*ratelimit.Limit {
	rpm := ratelimit.PerMinute(5).Named("rpm")
	hourly := ratelimit.PerHour(12).Named("hourly").WithAlgorithm(ratelimit.GCRA)
	window := ratelimit.PerMinute(8).Named("window").WithAlgorithm(ratelimit.SlidingWindow)
	return [][]*ratelimit.Limit{{&rpm, &hourly}, {&rpm, &hourly, &window}}
}()

func requests(key string, i int, costs ...int64) []ratelimit.Request {
	ls := stacks[i%2]
	reqs := make([]ratelimit.Request, len(ls))
	for j, l := range ls {
		reqs[j] = ratelimit.Request{Key: key, Limit: l, Cost: costs[j%len(costs)]}
	}
	return reqs
}

func callerKey(i int) string { return fmt.Sprintf("sk-caller-%03d", i) }

// TestClusterStackedLimits charges 200 callers, spread over the slots of
// all three masters, with stacks of two or three limits over 12 rounds
// on a fake clock, and compares every decision with the model: no
// CROSSSLOT, exact admission counts. It runs twice on one cluster: with
// the default store, and pipelined (WithPipelining: the ClusterClient's
// autopipeliner batches per master), each round's callers then charged
// concurrently.
func TestClusterStackedLimits(t *testing.T) {
	c := startCluster(t)
	t.Run("default", func(t *testing.T) { testClusterStackedLimits(t, c, false) })
	t.Run("pipelined", func(t *testing.T) { testClusterStackedLimits(t, c, true) })
}

func testClusterStackedLimits(t *testing.T, c *Cluster, pipelined bool) {
	ctx := context.Background()
	cc := c.client(t)
	clock := clocktest.New(t0)
	var opts []redisstore.Option
	if pipelined {
		opts = append(opts, redisstore.WithPipelining())
	}
	store := newStore(t, cc, clock, newPrefix(), opts...)

	// Every Redis key of one caller is in one slot, which the cluster
	// (CLUSTER KEYSLOT) and our CRC16 agree on; the callers cover all
	// three masters.
	const callers = 200
	perMaster := make([]int, 3)
	slotOf := make([]int, callers)
	for i := range callers {
		slot := -1
		for _, l := range stacks[i%2] {
			k := store.Key(callerKey(i), l)
			s, err := cc.ClusterKeySlot(ctx, k).Result()
			require.NoError(t, err)
			require.Equal(t, int64(keySlot(k)), s, "CRC16 of %q", k)
			if slot == -1 {
				slot = int(s)
			}
			require.Equal(t, slot, int(s), "caller %d: key %q in another slot", i, k)
		}
		slotOf[i] = slot
		perMaster[c.owner(t, slot)]++
	}
	for m, n := range perMaster {
		require.Positive(t, n, "no caller on master %s", c.addrs[m])
	}
	t.Logf("callers per master: %v", perMaster)

	// A call mixing two callers could span slots: the store refuses it
	// before sending anything.
	mixed := append(requests(callerKey(0), 0, 1), requests(callerKey(1), 1, 1)...)
	err := store.Take(ctx, mixed, make([]ratelimit.Decision, len(mixed)))
	require.ErrorIs(t, err, ratelimit.ErrInvalidRequest)

	m := model{}
	admitted, modelAdmitted := 0, 0
	for round := range 12 {
		now := ratelimit.Micros(clock.Now())
		// Costs vary by caller and round: 1 to 3 units on the first
		// limit, 0 to 2 on the others.
		reqsOf := func(i int) []ratelimit.Request {
			return requests(callerKey(i), i, int64(1+(i+round)%3), int64((i*7+round)%3))
		}
		outs := make([][]ratelimit.Decision, callers)
		errs := make([]error, callers)
		var wg sync.WaitGroup
		for i := range callers {
			reqs := reqsOf(i)
			outs[i] = make([]ratelimit.Decision, len(reqs))
			if !pipelined {
				errs[i] = store.Take(ctx, reqs, outs[i])
				continue
			}
			// Callers are distinct, so concurrent calls are decided as
			// the sequential ones would be.
			wg.Go(func() { errs[i] = store.Take(ctx, reqs, outs[i]) })
		}
		wg.Wait()
		for i := range callers {
			reqs := reqsOf(i)
			out := outs[i]
			require.NoError(t, errs[i], "round %d caller %d", round, i)
			want := m.take(reqs, now)
			equal(t, out, want, "round %d caller %d", round, i)
			if out[0].Allowed && out[len(out)-1].Allowed {
				admitted++
			}
			if want[0].Allowed && want[len(want)-1].Allowed {
				modelAdmitted++
			}
		}
		clock.Advance(7 * time.Second)
	}
	assert.Equal(t, modelAdmitted, admitted)
	t.Logf("admitted %d of %d stacked Takes, exactly as the model", admitted, 12*callers)
}

// TestClusterSlotMigration moves the slot of a tested caller from one
// master to another (CLUSTER SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT
// NODE) between decisions, and checks every decision against the model.
func TestClusterSlotMigration(t *testing.T) { testClusterSlotMigration(t) }

// TestClusterSlotMigrationPipelined is TestClusterSlotMigration with a
// pipelined store (WithPipelining): the redirects reach it through the
// ClusterClient's autopipeliner.
func TestClusterSlotMigrationPipelined(t *testing.T) {
	testClusterSlotMigration(t, redisstore.WithPipelining())
}

func testClusterSlotMigration(t *testing.T, opts ...redisstore.Option) {
	c := startCluster(t)
	ctx := context.Background()
	cc := c.client(t)
	clock := clocktest.New(t0)
	store := newStore(t, cc, clock, newPrefix(), opts...)
	m := model{}
	take := func(key string, i int, msg string) ([]ratelimit.Decision, error) {
		reqs := requests(key, i, 1)
		out := make([]ratelimit.Decision, len(reqs))
		if err := store.Take(ctx, reqs, out); err != nil {
			return nil, err
		}
		equal(t, out, m.take(reqs, ratelimit.Micros(clock.Now())), "%s", msg)
		return out, nil
	}

	// The caller under test has three limits (odd index); a second caller
	// in the same slot has two; a third, never seen, has three.
	const ki = 1
	key := callerKey(ki)
	slot := keySlot(store.Key(key, stacks[1][0]))
	var sibling, fresh string
	for n := 0; sibling == "" || fresh == ""; n++ {
		k := "sk-same-slot-" + strconv.Itoa(n)
		if keySlot(store.Key(k, stacks[0][0])) != slot {
			continue
		}
		if sibling == "" {
			sibling = k
		} else {
			fresh = k
		}
	}
	src := c.owner(t, slot)
	dst := (src + 1) % 3
	srcNode, dstNode := c.nodes[src], c.nodes[dst]
	t.Logf("slot %d: %s -> %s", slot, c.addrs[src], c.addrs[dst])

	// Before: both callers charged twice on the source.
	for range 2 {
		_, err := take(key, ki, "before")
		require.NoError(t, err)
		_, err = take(sibling, 0, "before (sibling)")
		require.NoError(t, err)
	}
	clock.Advance(time.Second)

	// 1. The slot is marked migrating, nothing has moved: the source
	//    holds every key of both callers and decides as before.
	require.NoError(t, dstNode.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", c.ids[src]).Err())
	require.NoError(t, srcNode.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", c.ids[dst]).Err())
	_, err := take(key, ki, "migrating, nothing moved")
	require.NoError(t, err)

	// 2. One of the caller's three keys moves: its keys are split, so
	//    Redis answers TRYAGAIN (go-redis retries it MaxRedirects times)
	//    and the store reports an error; nothing is charged anywhere, so
	//    the model is not advanced.
	keys := make([]string, len(stacks[1]))
	for j, l := range stacks[1] {
		keys[j] = store.Key(key, l)
		n, err := srcNode.Exists(ctx, keys[j]).Result()
		require.NoError(t, err)
		require.Equal(t, int64(1), n, "key %s is on the source", keys[j])
	}
	migrate := func(ks ...string) {
		host, port, _ := net.SplitHostPort(c.addrs[dst])
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		for _, k := range ks {
			args = append(args, k)
		}
		require.NoError(t, srcNode.Do(ctx, args...).Err())
	}
	migrate(keys[0])
	reqs := requests(key, ki, 1)
	err = store.Take(ctx, reqs, make([]ratelimit.Decision, len(reqs)))
	require.Error(t, err)
	require.Contains(t, err.Error(), "TRYAGAIN")

	// 3. The rest of its keys move: every key is missing on the source,
	//    which redirects (ASK) to the target, where all of them are: the
	//    decision is exact, and the state moved intact.
	migrate(keys[1:]...)
	_, err = take(key, ki, "all keys moved, ASK")
	require.NoError(t, err)
	// The sibling's keys are still all on the source: decided there.
	_, err = take(sibling, 0, "sibling, not moved")
	require.NoError(t, err)
	// A caller never seen, with three limits: its keys are missing on
	// both nodes, which the target refuses for a multi-key script in an
	// importing slot (TRYAGAIN): no decision until the slot is settled.
	reqs = requests(fresh, 1, 1)
	err = store.Take(ctx, reqs, make([]ratelimit.Decision, len(reqs)))
	require.Error(t, err)
	require.Contains(t, err.Error(), "TRYAGAIN")

	// 4. The sibling's keys move too, and the slot is assigned to the
	//    target on every master: the source answers MOVED, go-redis
	//    reloads its slot map, and every caller is decided exactly.
	var rest []string
	for _, l := range stacks[0] {
		rest = append(rest, store.Key(sibling, l))
	}
	migrate(rest...)
	for _, node := range c.nodes {
		require.NoError(t, node.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", c.ids[dst]).Err())
	}
	clock.Advance(13 * time.Second)
	for range 4 {
		_, err = take(key, ki, "after")
		require.NoError(t, err)
		_, err = take(sibling, 0, "after (sibling)")
		require.NoError(t, err)
		_, err = take(fresh, 1, "after (fresh)")
		require.NoError(t, err)
	}
	require.Equal(t, dst, c.owner(t, slot))
	for _, k := range append(keys, rest...) {
		n, err := dstNode.Exists(ctx, k).Result()
		require.NoError(t, err)
		assert.Equal(t, int64(1), n, "key %s lives on the target", k)
	}
}

// TestCRC16 pins keySlot to the cluster specification's test vector.
func TestCRC16(t *testing.T) {
	assert.Equal(t, uint16(0x31C3), crc16("123456789"))
	assert.Equal(t, keySlot("{user1000}.following"), keySlot("{user1000}.followers"))
	assert.Equal(t, keySlot("foo{}{bar}"), int(crc16("foo{}{bar}")%16384))
}
