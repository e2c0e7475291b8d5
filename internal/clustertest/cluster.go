package clustertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// The cluster starter and its helpers, for this package's tests and for
// other packages' (internal/linearize) that need a real Redis Cluster: the
// exported functions and methods below are thin names over the ones the
// tests here use.

// Start starts a Redis Cluster of three masters on free loopback ports and
// stops it (by PID) when t ends; for each master index in replicated it
// adds a replica of that master (nodes 3, 4, ...), in sync before Start
// returns. It skips t when redis-server or redis-cli is missing from PATH,
// and fails it instead when RAMPMETER_REQUIRE_REDIS=1.
func Start(t *testing.T, replicated ...int) *Cluster { return startCluster(t, replicated...) }

// Addr returns the address (127.0.0.1:port) of node i.
func (c *Cluster) Addr(i int) string { return c.addrs[i] }

// ID returns the cluster node ID (CLUSTER MYID) of node i.
func (c *Cluster) ID(i int) string { return c.ids[i] }

// Node returns a plain client of node i (MaxRetries -1), closed when the
// test that started the cluster ends.
func (c *Cluster) Node(i int) *redis.Client { return c.nodes[i] }

// Client returns a cluster client of every node, configured as the Redis
// store asks (ContextTimeoutEnabled, MaxRetries -1) and closed when t ends;
// tune, if any, changes its options further.
func (c *Cluster) Client(t *testing.T, tune ...func(*redis.ClusterOptions)) *redis.ClusterClient {
	return c.client(t, tune...)
}

// Owner returns the index of the node serving slot as master, by the slot
// map of node 1 (a master that the tests never stop or fail over).
func (c *Cluster) Owner(t *testing.T, slot int) int { return c.owner(t, slot) }

// Signal sends sig to node i's redis-server, by PID.
func (c *Cluster) Signal(t *testing.T, i int, sig syscall.Signal) { c.signal(t, i, sig) }

// WaitPromoted waits (at most 20 s) until node i is a master and node 1's
// slot map gives it slot, and returns when.
func (c *Cluster) WaitPromoted(t *testing.T, i, slot int) time.Time {
	return c.waitPromoted(t, i, slot)
}

// InfoField returns one field of a section of node i's INFO ("" when
// absent).
func (c *Cluster) InfoField(t *testing.T, i int, section, field string) string {
	return infoField(t, c.nodes[i], section, field)
}

// KeySlot returns the Redis Cluster slot of a Redis key: the CRC16 of its
// first non-empty {...} hash tag (or of the whole key) modulo 16384.
func KeySlot(key string) int { return keySlot(key) }

// WaitFor polls f until it succeeds, for at most 20 seconds (readiness of
// processes a test started, not a timed assertion), and fails t otherwise.
func WaitFor(t *testing.T, what string, f func() error) { waitFor(t, what, f) }

// WaitDialProbes waits until no goroutine runs go-redis's dial probe, which
// outlives a closed client by up to a second after dials to a killed node
// failed: call it (from a t.Cleanup registered first, so that it runs last)
// before goleak looks.
func WaitDialProbes(t *testing.T) { waitDialProbes(t) }

// Cluster is a running Redis Cluster of local redis-servers: three
// masters (nodes 0 to 2 when it starts), then any replicas.
type Cluster struct {
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
func startCluster(t *testing.T, replicated ...int) *Cluster {
	server, cli := binaries(t)
	dir := t.TempDir()
	c := &Cluster{}
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
func (c *Cluster) start(t *testing.T, server, dir string) {
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
func (c *Cluster) addReplica(t *testing.T, server, dir string, m int) {
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
func (c *Cluster) waitReplica(t *testing.T, r, m int) {
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
func (c *Cluster) signal(t *testing.T, i int, sig syscall.Signal) {
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
func (c *Cluster) client(t *testing.T, tune ...func(*redis.ClusterOptions)) *redis.ClusterClient {
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
func (c *Cluster) owner(t *testing.T, slot int) int {
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

// waitPromoted waits until node i is a master and node 1's slot map gives
// it slot, and returns when.
func (c *Cluster) waitPromoted(t *testing.T, i, slot int) time.Time {
	t.Helper()
	waitFor(t, c.addrs[i]+" to take over", func() error {
		if r, err := role(context.Background(), c.nodes[i]); err != nil || r != "master" {
			return fmt.Errorf("role %q, %v", r, err)
		}
		if o := c.owner(t, slot); o != i {
			return fmt.Errorf("node 1 gives slot %d to node %d", slot, o)
		}
		return nil
	})
	return time.Now()
}

// waitDialProbes waits until no goroutine runs go-redis's dial probe. A
// connection pool starts one after PoolSize failed dials (as to a killed
// node) and the probe notices the pool's Close only after its 1 s sleep
// (go-redis v9.23, internal/pool ConnPool.tryDial): goleak, which waits
// less, would report it.
func waitDialProbes(t *testing.T) {
	buf := make([]byte, 1<<20)
	waitFor(t, "go-redis dial probes to end", func() error {
		if n := runtime.Stack(buf, true); bytes.Contains(buf[:n], []byte("(*ConnPool).tryDial")) {
			return errors.New("a dial probe runs")
		}
		return nil
	})
}
