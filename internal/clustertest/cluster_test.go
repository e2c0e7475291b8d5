package clustertest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/internal/clocktest"
	"github.com/rampmeter/ratelimit/store/redisstore"
)

// cluster is a running Redis Cluster of local redis-servers: three
// masters (nodes 0 to 2 when it starts), then any replicas.
type cluster struct {
	addrs []string // 127.0.0.1:port of each node
	ids   []string // CLUSTER MYID of each
	nodes []*redis.Client
	procs []*exec.Cmd // the redis-server of each, to signal by PID
}

// binaries returns the paths of redis-server and redis-cli, skipping t
// when one is missing (failing it when RAMPMETER_REQUIRE_REDIS=1).
func binaries(t *testing.T) (server, cli string) {
	t.Helper()
	var err error
	if server, err = exec.LookPath("redis-server"); err == nil {
		cli, err = exec.LookPath("redis-cli")
	}
	if err != nil {
		if os.Getenv("RAMPMETER_REQUIRE_REDIS") == "1" {
			t.Fatalf("a real Redis Cluster is required (RAMPMETER_REQUIRE_REDIS=1): %v", err)
		}
		t.Skipf("redis-server and redis-cli are needed for the cluster test: %v", err)
	}
	return server, cli
}

// freePort returns a loopback port that is free, and whose cluster bus
// port (port + 10000) is free too.
func freePort(t *testing.T) int {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if port+10000 > 65535 {
			continue
		}
		bus, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000))
		if err != nil {
			continue
		}
		_ = bus.Close()
		return port
	}
	t.Fatal("no free port pair")
	return 0
}

// startCluster starts three redis-servers in cluster mode on free loopback
// ports, joins them with redis-cli --cluster create (no replicas), waits
// for cluster_state:ok and stops the servers (by PID) when t ends. Then,
// for each master index in replicated, it adds a replica of that master
// (nodes 3, 4, ... in that order) and waits until it is in sync.
func startCluster(t *testing.T, replicated ...int) *cluster {
	server, cli := binaries(t)
	dir := t.TempDir()
	c := &cluster{}
	for range 3 {
		c.start(t, server, dir)
	}
	ctx := context.Background()
	args := append([]string{"--cluster", "create"}, c.addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.Command(cli, args...).CombinedOutput()
	require.NoError(t, err, "redis-cli --cluster create: %s", out)
	for i, node := range c.nodes {
		waitFor(t, "cluster_state:ok on "+c.addrs[i], func() error { return clusterOK(ctx, node) })
		id, err := node.Do(ctx, "CLUSTER", "MYID").Text()
		require.NoError(t, err)
		c.ids = append(c.ids, id)
	}
	for _, m := range replicated {
		c.addReplica(t, server, dir, m)
	}
	return c
}

// start starts one redis-server in cluster mode, with a node timeout of
// 2 s (a stopped node is suspected after 2 s rather than 15), and
// registers its PID and client.
func (c *cluster) start(t *testing.T, server, dir string) {
	port := freePort(t)
	p := strconv.Itoa(port)
	logf, err := os.Create(filepath.Join(dir, "redis-"+p+".log"))
	require.NoError(t, err)
	cmd := exec.Command(server, "--port", p, "--bind", "127.0.0.1",
		"--cluster-enabled", "yes", "--cluster-config-file", "nodes-"+p+".conf",
		"--cluster-node-timeout", "2000",
		"--dir", dir, "--save", "", "--appendonly", "no", "--daemonize", "no")
	cmd.Stdout, cmd.Stderr = logf, logf
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // our own child, by PID; also when stopped
		_ = cmd.Wait()
		_ = logf.Close()
	})
	addr := "127.0.0.1:" + p
	node := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { _ = node.Close() })
	c.addrs = append(c.addrs, addr)
	c.nodes = append(c.nodes, node)
	c.procs = append(c.procs, cmd)
	waitFor(t, "redis-server on "+addr, func() error { return node.Ping(context.Background()).Err() })
}

// addReplica starts a node, introduces it to master m (CLUSTER MEET) and
// makes it m's replica (CLUSTER REPLICATE), as redis-cli --cluster add-node
// --cluster-slave does, then waits until its replication link is up and
// every master lists it as m's replica: only then would the masters vote
// for it in a failover.
func (c *cluster) addReplica(t *testing.T, server, dir string, m int) {
	ctx := context.Background()
	c.start(t, server, dir)
	r := len(c.nodes) - 1
	node := c.nodes[r]
	host, port, _ := net.SplitHostPort(c.addrs[m])
	require.NoError(t, node.Do(ctx, "CLUSTER", "MEET", host, port).Err())
	id, err := node.Do(ctx, "CLUSTER", "MYID").Text()
	require.NoError(t, err)
	c.ids = append(c.ids, id)
	waitFor(t, "replica "+c.addrs[r]+" to know its master", func() error {
		return node.Do(ctx, "CLUSTER", "REPLICATE", c.ids[m]).Err()
	})
	waitFor(t, "replication link of "+c.addrs[r], func() error {
		if f := infoField(t, node, "replication", "master_link_status"); f != "up" {
			return fmt.Errorf("master_link_status:%s", f)
		}
		return clusterOK(ctx, node)
	})
	c.waitReplica(t, r, m)
}

// waitReplica waits until every node that may be a master (0 to 2, and m)
// other than r lists node r
// as the replica of node m. Masters refuse to vote for a replica they
// still see as a master ("it is a master node"), so a failover started
// before then fails.
func (c *cluster) waitReplica(t *testing.T, r, m int) {
	t.Helper()
	ctx := context.Background()
	for _, i := range []int{0, 1, 2, m} {
		if i == r {
			continue
		}
		waitFor(t, c.addrs[i]+" to list "+c.addrs[r]+" as a replica", func() error {
			nodes, err := c.nodes[i].ClusterNodes(ctx).Result()
			if err != nil {
				return err
			}
			for _, line := range strings.Split(nodes, "\n") {
				if strings.HasPrefix(line, c.ids[r]+" ") && strings.Contains(line, " slave "+c.ids[m]+" ") {
					return nil
				}
			}
			return errors.New("not listed as a replica")
		})
	}
}

// clusterOK returns an error unless node reports cluster_state:ok.
func clusterOK(ctx context.Context, node *redis.Client) error {
	info, err := node.ClusterInfo(ctx).Result()
	if err != nil {
		return err
	}
	if !strings.Contains(info, "cluster_state:ok") {
		return errors.New("cluster state not ok")
	}
	return nil
}

// infoField returns one field of a section of node's INFO ("" when
// absent).
func infoField(t *testing.T, node *redis.Client, section, field string) string {
	t.Helper()
	info, err := node.Info(context.Background(), section).Result()
	require.NoError(t, err)
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v
		}
	}
	return ""
}

// role returns node's role, "master" or "slave", by ROLE.
func role(ctx context.Context, node *redis.Client) (string, error) {
	r, err := node.Do(ctx, "ROLE").Slice()
	if err != nil {
		return "", err
	}
	if len(r) == 0 {
		return "", errors.New("empty ROLE reply")
	}
	s, _ := r[0].(string)
	return s, nil
}

// signal sends sig to node i's redis-server, by PID.
func (c *cluster) signal(t *testing.T, i int, sig syscall.Signal) {
	t.Helper()
	require.NoError(t, syscall.Kill(c.procs[i].Process.Pid, sig))
}

// waitFor polls f until it succeeds, for at most 20 seconds: readiness of
// processes the test started, not a timed assertion.
func waitFor(t *testing.T, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// client returns a cluster client configured as the store's documentation
// asks: the context's deadline ends a call, no replays. tune, if any,
// changes its options further.
func (c *cluster) client(t *testing.T, tune ...func(*redis.ClusterOptions)) *redis.ClusterClient {
	opt := &redis.ClusterOptions{Addrs: c.addrs, MaxRetries: -1, ContextTimeoutEnabled: true}
	for _, f := range tune {
		f(opt)
	}
	cc := redis.NewClusterClient(opt)
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// owner returns the index of the node serving slot as master, by the slot
// map of node 1 (a master that the tests never stop or fail over).
func (c *cluster) owner(t *testing.T, slot int) int {
	t.Helper()
	shards, err := c.nodes[1].ClusterShards(context.Background()).Result()
	require.NoError(t, err)
	for _, sh := range shards {
		for _, r := range sh.Slots {
			if int(r.Start) > slot || slot > int(r.End) {
				continue
			}
			for _, n := range sh.Nodes {
				if n.Role != "master" {
					continue
				}
				for i, a := range c.addrs {
					if a == "127.0.0.1:"+strconv.FormatInt(n.Port, 10) {
						return i
					}
				}
			}
		}
	}
	t.Fatalf("no master serves slot %d", slot)
	return -1
}

// crc16 is the CRC16-CCITT (XMODEM) Redis Cluster hashes keys with
// (cluster specification, "Keys distribution model").
func crc16(b string) uint16 {
	var crc uint16
	for i := 0; i < len(b); i++ {
		crc ^= uint16(b[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// keySlot is the slot of a Redis key: the CRC16 of its first non-empty
// {...} hash tag (or of the whole key) modulo 16384.
func keySlot(key string) int {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	return int(crc16(key) % 16384)
}

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
func newStore(t *testing.T, cc *redis.ClusterClient, clock *clocktest.Clock, prefix string) *redisstore.Store {
	t.Helper()
	store, err := redisstore.New(cc, redisstore.WithClock(clock.Now), redisstore.WithPrefix(prefix))
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
// CROSSSLOT, exact admission counts.
func TestClusterStackedLimits(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	cc := c.client(t)
	clock := clocktest.New(t0)
	store := newStore(t, cc, clock, newPrefix())

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
		for i := range callers {
			// Costs vary by caller and round: 1 to 3 units on the
			// first limit, 0 to 2 on the others.
			cost := int64(1 + (i+round)%3)
			reqs := requests(callerKey(i), i, cost, int64((i*7+round)%3))
			out := make([]ratelimit.Decision, len(reqs))
			require.NoError(t, store.Take(ctx, reqs, out), "round %d caller %d", round, i)
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
func TestClusterSlotMigration(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	cc := c.client(t)
	clock := clocktest.New(t0)
	store := newStore(t, cc, clock, newPrefix())
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
