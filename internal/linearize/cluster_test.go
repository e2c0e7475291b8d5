package linearize

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/internal/clocktest"
	"github.com/rampmeter/ratelimit/internal/clustertest"
	"github.com/rampmeter/ratelimit/store/redisstore"
)

// clusterStores returns one store per client on cluster c, each with its
// own cluster client (tuned by tune), configured by opts, and the clients.
func clusterStores(t *testing.T, c *clustertest.Cluster, tune func(*redis.ClusterOptions), opts ...redisstore.Option) ([]ratelimit.Store, []*redis.ClusterClient) {
	stores := make([]ratelimit.Store, clients)
	ccs := make([]*redis.ClusterClient, clients)
	for i := range stores {
		cc := c.Client(t, func(o *redis.ClusterOptions) {
			o.PoolSize = goroutines
			if tune != nil {
				tune(o)
			}
		})
		s, err := redisstore.New(cc, opts...)
		require.NoError(t, err)
		stores[i], ccs[i] = s, cc
	}
	return stores, ccs
}

// slotOf returns the Cluster slot of caller key k's Redis keys in store s
// (every limit of a caller key shares it: the hash tag).
func slotOf(s ratelimit.Store, k string) int {
	return clustertest.KeySlot(s.(*redisstore.Store).Key(k, tb))
}

// TestCluster checks, on one three-master Redis Cluster, the histories of
// every server-clock scenario (each caller key decided by the master of its
// slot, by its clock) and the histories of a slot migration under load
// (clusterSlotMigration).
func TestCluster(t *testing.T) {
	c := clustertest.Start(t)
	stores, _ := clusterStores(t, c, nil, redisstore.WithPrefix(newPrefix()))
	model := NewModel(Options{})
	t.Run("histories", func(t *testing.T) {
		for _, sc := range serverClockScenarios() {
			runServerClock(t, stores, model, sc, scale(t, 1))
		}
	})
	t.Run("slot migration", func(t *testing.T) { clusterSlotMigration(t, c, stores) })
}

// newPrefix returns a key prefix no other run has used.
func newPrefix() string { return fmt.Sprintf("rmlin:%x:", time.Now().UnixNano()) }

// Limits whose states last hundreds of milliseconds: a bucket refills in
// 100 ms, a sliding window's count weighs for a second.
var (
	slowTB   = limit(ratelimit.PerSecond(200).WithBurst(20).Named("tb.slow"))
	slowGCRA = limit(ratelimit.PerSecond(200).WithBurst(20).Named("gcra.slow").WithAlgorithm(ratelimit.GCRA))
	slowSW   = limit(ratelimit.Every(100, 500*time.Millisecond).Named("sw.slow").WithAlgorithm(ratelimit.SlidingWindow))
	slowFW   = limit(ratelimit.Every(40, 200*time.Millisecond).Named("fw.slow").WithAlgorithm(ratelimit.FixedWindow))
	slowLB   = limit(ratelimit.PerSecond(200).WithBurst(20).Named("lb.slow").WithAlgorithm(ratelimit.LeakyBucket))
	slowSL   = limit(ratelimit.Every(20, 200*time.Millisecond).Named("sl.slow").WithAlgorithm(ratelimit.SlidingLog))
)

// clusterSlotMigration moves the slots of a warm key and three other
// caller keys from master to master, back and forth, key by key (CLUSTER
// SETSLOT IMPORTING and MIGRATING, MIGRATE, SETSLOT NODE), while 5 clients
// × 16 goroutines call, decided by the masters' clocks. During a move the
// source decides for callers whose keys are all still there, redirects
// (ASK) those whose keys are all gone, and answers TRYAGAIN to those whose
// keys are split or missing on both sides (the script did not run); after
// it the source answers MOVED. No call may fail otherwise, and the history
// must be linearizable: a move loses, duplicates or resets nothing.
func clusterSlotMigration(t *testing.T, c *clustertest.Cluster, stores []ratelimit.Store) {
	model := NewModel(Options{})
	// Limits whose states live for hundreds of milliseconds (a history
	// lasts about a second), so that the moves have keys to move: the
	// limits of the other histories are full again, and their keys gone,
	// within 20 ms of a call.
	base := scenario{name: "migration", keys: append([]string{"warm"}, keys("k", 40)...), warm: 25, ops: 30,
		stacks: [][]*ratelimit.Limit{{slowTB, slowSW}, {slowGCRA}, {slowSW, slowFW}, {slowLB, slowSL}}}
	var ta tally
	moves, keysMoved := 0, 0
	for h := range scale(t, 2) {
		sc := base
		sc.keys = historyKeys(base, h)
		// The slots that move: the warm key's and three others'.
		var slots []int
		for _, k := range []string{sc.keys[0], sc.keys[1], sc.keys[2], sc.keys[3]} {
			slots = append(slots, slotOf(stores[0], k))
		}
		owner := map[int]int{}
		for _, s := range slots {
			owner[s] = c.Owner(t, s)
		}
		d := newDriver(stores, &sc, uint64(h), 10*time.Second)
		var stop atomic.Bool
		var wg sync.WaitGroup
		var moved []string
		var moveErr error
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				slot := slots[i%len(slots)]
				src := owner[slot]
				dst := (src + 1) % 3
				n, err := migrateSlot(c, slot, src, dst, 500*time.Microsecond)
				if err != nil {
					moveErr = err
					return
				}
				owner[slot] = dst
				keysMoved += n
				moved = append(moved, fmt.Sprintf("slot %d %d→%d (%d keys)", slot, src, dst, n))
			}
		})
		start := time.Now()
		d.free(sc.ops)
		recorded := time.Since(start)
		stop.Store(true)
		wg.Wait()
		require.NoError(t, moveErr)
		require.NotEmpty(t, moved, "no slot moved during the history")
		moves += len(moved)
		outcomes := d.rec.Outcomes()
		require.Equal(t, workers*sc.ops, outcomes[Done]+outcomes[NotRun], "history %d: calls by outcome %v: %v", h, outcomes, d.rec.Failures())
		ta.add(Check(t, "migration", model, d.rec.Operations(), budget), recorded, d.rec)
		t.Logf("history %d: %d moves (%s); calls by outcome %v", h, len(moved), strings.Join(moved, ", "), outcomes)
	}
	require.Positive(t, keysMoved, "no key moved")
	t.Logf("slot migration: %d slot moves, %d keys moved; %v", moves, keysMoved, &ta)
}

// migrateSlot moves slot from master src to master dst as redis-cli
// --cluster reshard does, one key per MIGRATE with pause between keys (so
// that calls meet the slot half moved), and returns the number of keys
// moved. Keys can vanish from the source while it runs (a refund to full
// deletes a key, a key expires); the source never creates a key in a
// migrating slot (it sends such calls to the target), so the loop ends.
func migrateSlot(c *clustertest.Cluster, slot, src, dst int, pause time.Duration) (int, error) {
	ctx := context.Background()
	srcNode, dstNode := c.Node(src), c.Node(dst)
	if err := dstNode.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", c.ID(src)).Err(); err != nil {
		return 0, err
	}
	if err := srcNode.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", c.ID(dst)).Err(); err != nil {
		return 0, err
	}
	host, port, _ := net.SplitHostPort(c.Addr(dst))
	n := 0
	for {
		keys, err := srcNode.ClusterGetKeysInSlot(ctx, slot, 10).Result()
		if err != nil {
			return n, err
		}
		if len(keys) == 0 {
			break
		}
		for _, k := range keys {
			// NOKEY: "the key has vanished since GETKEYSINSLOT".
			if err := srcNode.Do(ctx, "MIGRATE", host, port, k, 0, 5000).Err(); err != nil && !strings.Contains(err.Error(), "NOKEY") {
				return n, fmt.Errorf("MIGRATE %s: %w", k, err)
			}
			n++
			time.Sleep(pause)
		}
	}
	// The target first, then the source, then the third master (the
	// order redis-cli uses), so that no master sends the slot's callers
	// back to the source.
	for _, i := range []int{dst, src, 3 - src - dst} {
		if err := c.Node(i).Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", c.ID(dst)).Err(); err != nil {
			return n, err
		}
	}
	return n, nil
}

// TestClusterForcedFailover fails over the master of a warm key and a
// third of the other caller keys, by force, in the middle of a round of
// calls, while 5 clients × 16 goroutines call, the stores deciding by a
// shared fake clock (1 ms a round). Before it, a WAIT proves the replica
// has every write up to the end of a round (its Now is the loss window's
// start, Options.LossFrom); then the replication link is cut (as
// TestClusterFailover in package clustertest does), so that two rounds of
// charges are acknowledged by the master alone: the forgiven charges are
// certain to happen, not left to the replication lag. Then the master
// hangs (SIGSTOP), its replica takes over (CLUSTER FAILOVER FORCE), and
// the master is killed. The documented anomaly is exactly that those
// charges are forgiven: each caller key of the failed master may lose the
// writes since the window opened (a Rollback), no older ones, and no
// other key may lose anything. Calls to the hung master time out or end
// with its connections: their outcome is unknown, but they ran before
// the SIGKILL or never (Recorder.Killed). Only the round in flight at
// the SIGSTOP meets it: the next waits for the promotion and for the
// clients to be told to reload the slot map (go-redis reloads it in the
// background, within a few hundred ms; until then calls to the dead
// master are refused or lost, never timed out). Both bounds keep the
// checker's work small whatever the machine's load: each call of unknown
// outcome multiplies the ways to order its key's history by the number
// of calls it overlaps, and a CI run in which a slow promotion let 93 of
// them overlap the rest of the history was not decided within the budget.
// The same history without the Rollback must fail the check: the loss
// was observed.
func TestClusterForcedFailover(t *testing.T) {
	var ta tally
	for h := range scale(t, 1) {
		t.Run(fmt.Sprint(h), func(t *testing.T) { forcedFailover(t, h, &ta) })
	}
	t.Logf("forced failover: %v", &ta)
}

// forcedFailover is one history of TestClusterForcedFailover, on a cluster
// of its own, added to ta.
func forcedFailover(t *testing.T, h int, ta *tally) {
	t.Cleanup(func() { clustertest.WaitDialProbes(t) }) // registered first, so run last
	c := clustertest.Start(t, 0)                        // node 3 replicates master 0
	const primary, replica = 0, 3
	ctx := context.Background()
	clock := clocktest.New(t0)
	stores, ccs := clusterStores(t, c, func(o *redis.ClusterOptions) { o.ClusterStateReloadInterval = time.Second },
		redisstore.WithPrefix(newPrefix()), redisstore.WithClock(clock.Now), redisstore.WithExpiryMargin(time.Minute))

	sc := roundScenarios()[0]
	sc.name = "failover"
	sc.keys = historyKeys(sc, h)
	// The warm key lives on the master that fails.
	for i := 0; c.Owner(t, slotOf(stores[0], sc.keys[0])) != primary; i++ {
		sc.keys[0] = fmt.Sprintf("failover/h%d/warm-%d", h, i)
	}
	var hit []string // the caller keys the failed master serves
	for _, k := range sc.keys {
		if c.Owner(t, slotOf(stores[0], k)) == primary {
			hit = append(hit, k)
		}
	}
	slot := slotOf(stores[0], sc.keys[0])
	d := newDriver(stores, &sc, uint64(h), 10*time.Second)
	start := time.Now()
	for range 10 {
		clock.Advance(time.Millisecond)
		d.round(ratelimit.Micros(clock.Now()))
	}
	require.Equal(t, map[Outcome]int{Done: 10 * workers}, d.rec.Outcomes(), "%v", d.rec.Failures())

	// Everything so far is on the replica: a write after it, and WAIT 1
	// on the same connection.
	k := stores[0].(*redisstore.Store).Key(sc.keys[0], tb)
	tag := k[:strings.IndexByte(k, '}')+1]
	var acked *redis.IntCmd
	_, err := c.Node(primary).Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, tag+":wait", "1", time.Minute)
		acked = redis.NewIntCmd(ctx, "WAIT", 1, 10000)
		_ = p.Process(ctx, acked)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, int64(1), acked.Val(), "WAIT 1")
	// Cut the replication: the replica's handshakes fail from now on.
	require.NoError(t, c.Node(replica).ConfigSet(ctx, "masterauth", "not-the-password").Err())
	n, err := c.Node(primary).ClientKillByFilter(ctx, "TYPE", "replica").Result()
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "replication links killed")
	clustertest.WaitFor(t, "replication link down", func() error {
		if f := c.InfoField(t, replica, "replication", "master_link_status"); f != "down" {
			return fmt.Errorf("master_link_status:%s", f)
		}
		return nil
	})
	lossFrom := ratelimit.Micros(clock.Now().Add(time.Millisecond)) // the next round's Now

	// From now on calls give up after 300 ms: those to the hung master
	// time out rather than hold their round for 10 s.
	d.timeout.Store(int64(300 * time.Millisecond))
	var promoted time.Duration
	rounds := faultRounds(t, d, clock, 2, 10, 1, func() {
		from := time.Now()
		c.Signal(t, primary, syscall.SIGSTOP)
		require.NoError(t, c.Node(replica).Do(ctx, "CLUSTER", "FAILOVER", "FORCE").Err())
		to := c.WaitPromoted(t, replica, slot)
		promoted = to.Sub(from)
		d.rec.Fault(Rollback, hit, from, to)
		c.Signal(t, primary, syscall.SIGKILL)
		d.rec.Killed(hit, time.Now())
		// The clients learn the new master now rather than at their next
		// reload (up to a second away): every round before they do adds
		// a dozen calls on the warm key lost on the dead master's
		// connections (of unknown outcome), and the proof that the
		// history without its Rollback is not linearizable must try every
		// way those calls could have been applied.
		for _, cc := range ccs {
			cc.ReloadState(ctx)
		}
	})
	outcomes := d.rec.Outcomes()
	require.Zero(t, outcomes[Failed], "calls by outcome %v: %v", outcomes, d.rec.Failures())
	history := d.rec.Operations()
	f := Check(t, "forced failover", NewModel(Options{LossFrom: lossFrom}), history, budget)
	ta.add(f, time.Since(start), d.rec)
	res, g := Verdict(NewModel(Options{}), withoutFaults(history), budget)
	require.Equal(t, porcupine.Illegal, res, "the history without its Rollback (%v)", g)
	t.Logf("forced failover of %d of %d caller keys, the replica master %v after the SIGSTOP; %d rounds (%d after the cut); calls by outcome %v; %v; without the Rollback it is %v (decided in %v)",
		len(hit), len(sc.keys), promoted.Round(time.Millisecond), 10+rounds, rounds, outcomes, f, res, g.Took.Round(time.Millisecond))
}
