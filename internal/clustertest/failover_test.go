package clustertest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/internal/clocktest"
	"github.com/rampmeter/ratelimit/store/redisstore"
)

// load is the traffic of a set of callers, in passes: each pass advances
// the fake clock by step and sends one Take per caller (a peek, if charge
// is false), from several goroutines, each call with its own deadline. Every decision is compared
// with the model m, exactly. A Take that fails may or may not have been
// charged (the script may have run before the error), so its caller is
// only peeked at (cost 0, which charges nothing) until a peek succeeds and
// tells which: the store's state must then equal the model either without
// the failed Take or with it, once; anything else (a double charge, a lost
// charge, a reset) is recorded as a violation.
type load struct {
	store   *redisstore.Store
	clock   *clocktest.Clock
	m       model
	callers []int
	charge  bool          // false: peek only (step should then be 0)
	timeout time.Duration // deadline of each call
	step    time.Duration // fake time per pass
	pass    int

	pending map[int]pendingTake // callers whose last Take failed

	mu         sync.Mutex // guards the fields below, read while run runs
	calls      []call
	violations []string
	passes     int
	lastClean  time.Time // start of the last pass in which every call succeeded and nothing is pending
	notCharged int       // failed Takes a later peek showed were not charged
	charged    int       // failed Takes a later peek showed were charged (once)
}

// pendingTake is a Take that failed: the caller's states had it been
// charged.
type pendingTake struct{ charged model }

// call is the outcome of one store call, in real time.
type call struct {
	start, end time.Time
	err        error
}

// workers is the number of goroutines sending a pass's calls: the calls
// in flight at any moment.
const workers = 8

// runPass sends one pass of calls and checks their outcomes.
func (l *load) runPass() {
	if l.pending == nil {
		l.pending = map[int]pendingTake{}
	}
	l.clock.Advance(l.step)
	now := ratelimit.Micros(l.clock.Now())
	type result struct {
		reqs []ratelimit.Request
		out  []ratelimit.Decision
		call call
		peek bool
	}
	res := make([]result, len(l.callers))
	for j, i := range l.callers {
		r := &res[j]
		if _, failed := l.pending[i]; failed || !l.charge {
			r.reqs, r.peek = requests(callerKey(i), i, 0), true
		} else {
			// Costs vary by caller and pass, as in TestClusterStackedLimits.
			r.reqs = requests(callerKey(i), i, int64(1+(i+l.pass)%3), int64((i*7+l.pass)%3))
		}
		r.out = make([]ratelimit.Decision, len(r.reqs))
	}
	l.pass++
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for {
				j := int(next.Add(1)) - 1
				if j >= len(res) {
					return
				}
				r := &res[j]
				ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
				r.call.start = time.Now()
				r.call.err = l.store.Take(ctx, r.reqs, r.out)
				r.call.end = time.Now()
				cancel()
			}
		})
	}
	wg.Wait()

	// Each caller's calls are sequential and its decisions depend on its
	// own states only, so checking them in caller order after the pass is
	// checking them in the order the store saw them.
	l.mu.Lock()
	defer l.mu.Unlock()
	clean := true
	for j, i := range l.callers {
		r := &res[j]
		l.calls = append(l.calls, r.call)
		p, failed := l.pending[i]
		switch {
		case r.call.err != nil:
			clean = false
			if !r.peek {
				ch := model{}
				for _, q := range r.reqs {
					ch[q.Key+"\x00"+q.Limit.ID()] = l.m[q.Key+"\x00"+q.Limit.ID()]
				}
				ch.take(r.reqs, now)
				l.pending[i] = pendingTake{charged: ch}
			}
		case failed:
			with := maps.Clone(l.m)
			maps.Copy(with, p.charged)
			switch {
			case same(r.out, l.m.peek(r.reqs, now)):
				l.notCharged++
			case same(r.out, with.peek(r.reqs, now)):
				l.charged++
				maps.Copy(l.m, p.charged)
			default:
				l.violations = append(l.violations, fmt.Sprintf("caller %d, pass %d: after a failed Take the state is neither the model's with it charged once nor without it: %+v", i, l.pass, r.out))
			}
			delete(l.pending, i)
		case r.peek:
			if want := l.m.peek(r.reqs, now); !same(r.out, want) {
				l.violations = append(l.violations, fmt.Sprintf("caller %d, pass %d, now %d: peek %+v, model %+v", i, l.pass, now, r.out, want))
			}
		default:
			if want := l.m.take(r.reqs, now); !same(r.out, want) {
				l.violations = append(l.violations, fmt.Sprintf("caller %d, pass %d: Take %+v, model %+v", i, l.pass, r.out, want))
			}
		}
	}
	if len(l.violations) > 10 {
		l.violations = append(l.violations[:10], "...")
	}
	l.passes++
	if clean && len(l.pending) == 0 {
		l.lastClean = start
	}
}

// start sends passes from a goroutine, at most one per 20 ms (traffic
// does not speed up because calls fail fast), until the stop it returns is
// called or t ends.
func (l *load) start(t *testing.T) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			next := time.Now().Add(20 * time.Millisecond)
			l.runPass()
			select {
			case <-quit:
				return
			case <-time.After(time.Until(next)):
			}
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { close(quit); <-done }) }
	t.Cleanup(stop) // before the clients close, if a check fails first
	return stop
}

// cleanSince returns nil once a pass that started after at had every call
// succeed with nothing left pending.
func (l *load) cleanSince(at time.Time) func() error {
	return func() error {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.lastClean.After(at) {
			return nil
		}
		return errors.New("calls still failing")
	}
}

// started returns nil once n passes have run.
func (l *load) started(n int) func() error {
	return func() error {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.passes >= n {
			return nil
		}
		return errors.New("not started")
	}
}

// calm runs one pass over callers while nothing fails over, with a
// deadline of 10 s, and requires every call to succeed with the model's
// decision.
func (l *load) calm(t *testing.T, callers []int, charge bool, step time.Duration) {
	t.Helper()
	l.callers, l.charge, l.timeout, l.step = callers, charge, 10*time.Second, step
	l.reset()
	l.runPass()
	s := l.reset()
	require.Empty(t, l.violations)
	require.Zero(t, s.failed, "calm pass: %v", s.errs)
	require.Empty(t, l.pending)
}

// switchStats are the figures of the calls of a phase; times are in real
// time from an event (the failover command, or the master's stop).
type switchStats struct {
	calls, failed       int
	errs                map[string]int // failures by kind
	firstFail, lastFail time.Duration  // end of the first and the last failed call
	slowest             time.Duration  // slowest successful call
	notCharged, charged int            // failed Takes, as later peeks resolved them
	passes              int
}

// reset forgets the calls recorded so far and returns their figures.
func (l *load) reset() switchStats { return l.stats(time.Time{}) }

// stats returns the figures of the calls recorded since the last reset,
// relative to event, and forgets them.
func (l *load) stats(event time.Time) switchStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := switchStats{errs: map[string]int{}, notCharged: l.notCharged, charged: l.charged, passes: l.passes}
	for _, c := range l.calls {
		s.calls++
		if c.err == nil {
			s.slowest = max(s.slowest, c.end.Sub(c.start))
			continue
		}
		at := c.end.Sub(event)
		if s.failed == 0 {
			s.firstFail = at
		}
		s.firstFail, s.lastFail = min(s.firstFail, at), max(s.lastFail, at)
		s.failed++
		s.errs[errKind(c.err)]++
	}
	l.calls, l.notCharged, l.charged, l.passes = nil, 0, 0, 0
	return s
}

// errKind names the kind of a store error for the figures.
func errKind(err error) string {
	switch s := err.Error(); {
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	case strings.Contains(s, "connection refused"):
		return "connection refused"
	default:
		return strings.TrimPrefix(s, "redisstore: take: ")
	}
}

func (s switchStats) String() string {
	if s.failed == 0 {
		return fmt.Sprintf("0 of %d calls failed in %d passes; slowest call %v", s.calls, s.passes, s.slowest.Round(time.Millisecond))
	}
	var kinds []string
	for _, k := range slices.Sorted(maps.Keys(s.errs)) {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, s.errs[k]))
	}
	return fmt.Sprintf("%d of %d calls failed in %d passes (%s), the first %v and the last %v after it; slowest successful call %v; failed Takes that later peeks showed uncharged: %d, charged once: %d",
		s.failed, s.calls, s.passes, strings.Join(kinds, ", "), s.firstFail.Round(time.Millisecond), s.lastFail.Round(time.Millisecond),
		s.slowest.Round(time.Millisecond), s.notCharged, s.charged)
}

// TestClusterFailover charges callers with stacked limits while the master
// serving a third of them fails over to its replica, twice:
//
//  1. A graceful manual failover (CLUSTER FAILOVER on the replica): the
//     master stops taking writes, the replica catches up and takes over,
//     the old master becomes its replica and answers MOVED, which go-redis
//     follows. No acknowledged charge is lost, none is counted twice.
//  2. A forced failover (CLUSTER FAILOVER FORCE) of a master that hangs
//     (SIGSTOP) and then dies (SIGKILL), after it acknowledged charges its
//     replica never received (the test cuts the replication link first;
//     WAIT proves everything before that was replicated). The replica's
//     state is the old master's at the last write it received, so exactly
//     the unreplicated charges are forgiven: each caller's remaining budget
//     on each limit is higher by what those charges cost it, and by nothing
//     else. No error is a wrong decision.
//
// Calls during each switch use a 250 ms deadline; their failures are
// counted, never asserted (real time on a shared machine). The figures are
// logged.
func TestClusterFailover(t *testing.T) { testClusterFailover(t) }

// TestClusterFailoverPipelined is TestClusterFailover with pipelined stores
// (WithPipelining).
func TestClusterFailoverPipelined(t *testing.T) { testClusterFailover(t, redisstore.WithPipelining()) }

func testClusterFailover(t *testing.T, opts ...redisstore.Option) {
	// Registered first, so run last: after the clients are closed.
	t.Cleanup(func() { waitDialProbes(t) })
	c := startCluster(t, 0) // node 3 replicates master 0
	primary, replica := 0, 3
	ctx := context.Background()
	clock := clocktest.New(t0)
	prefix := newPrefix()
	store := newStore(t, c.client(t), clock, prefix, opts...)

	const callers = 150
	all := make([]int, callers)
	var shard []int // the callers whose slot primary serves
	slotOf := func(i int) int { return keySlot(store.Key(callerKey(i), stacks[0][0])) }
	for i := range callers {
		all[i] = i
		if c.owner(t, slotOf(i)) == primary {
			shard = append(shard, i)
		}
	}
	require.NotEmpty(t, shard)
	slot := slotOf(shard[0]) // one of the slots that fail over
	t.Logf("%d of %d callers on the master that fails over", len(shard), callers)

	l := &load{store: store, clock: clock, m: model{}}
	for range 3 {
		l.calm(t, all, true, 150*time.Second)
	}

	// 1. Graceful failover under load.
	l.callers, l.charge, l.timeout, l.step = shard, true, 250*time.Millisecond, 150*time.Second
	stop := l.start(t)
	waitFor(t, "load", l.started(2))
	event := time.Now()
	require.NoError(t, c.nodes[replica].Do(ctx, "CLUSTER", "FAILOVER").Err())
	promoted := c.waitPromoted(t, replica, slot)
	promotedAfter := time.Since(event)
	waitFor(t, "calls to succeed again", l.cleanSince(promoted))
	stop()
	s := l.stats(event)
	t.Logf("graceful failover: the replica was master (ROLE, and in node 1's slot map) %v after CLUSTER FAILOVER; %v",
		promotedAfter.Round(time.Millisecond), s)
	require.Empty(t, l.violations)
	// Every caller's state, by peeks, is the model's: nothing acknowledged
	// was lost, nothing counted twice; then charging goes on exactly.
	l.calm(t, all, false, 0)
	l.calm(t, all, true, 150*time.Second)
	primary, replica = replica, primary

	// 2. Forced failover. The old master follows the new one; once it is in
	// sync, a write of ours on the master and WAIT 1 prove that the replica
	// has every charge so far.
	waitFor(t, "old master to replicate the new one", func() error {
		if r, err := role(ctx, c.nodes[replica]); err != nil || r != "slave" {
			return fmt.Errorf("role %q, %v", r, err)
		}
		if f := infoField(t, c.nodes[replica], "replication", "master_link_status"); f != "up" {
			return fmt.Errorf("master_link_status:%s", f)
		}
		return nil
	})
	c.waitReplica(t, replica, primary)
	k := store.Key(callerKey(shard[0]), stacks[0][0])
	tag := k[:strings.IndexByte(k, '}')+1] // the caller's slot
	var acked *redis.IntCmd
	_, err := c.nodes[primary].Pipelined(ctx, func(p redis.Pipeliner) error { // one connection: WAIT waits for its writes
		p.Set(ctx, tag+":wait", "1", time.Minute)
		acked = redis.NewIntCmd(ctx, "WAIT", 1, 10000) // milliseconds
		_ = p.Process(ctx, acked)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, int64(1), acked.Val(), "WAIT 1: replicas that have every write")

	// Cut replication: the replica's next handshakes fail (AUTH with a
	// password the master does not have), so it receives nothing more.
	require.NoError(t, c.nodes[replica].ConfigSet(ctx, "masterauth", "not-the-password").Err())
	n, err := c.nodes[primary].ClientKillByFilter(ctx, "TYPE", "replica").Result()
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "replication links killed")
	waitFor(t, "replication link down", func() error {
		if f := infoField(t, c.nodes[replica], "replication", "master_link_status"); f != "down" {
			return fmt.Errorf("master_link_status:%s", f)
		}
		return nil
	})
	replicated := maps.Clone(l.m)

	// One pass of Takes on the shard, acknowledged by the master alone,
	// through a client that reloads its slot map every second (see below).
	tuned := newStore(t, c.client(t, func(o *redis.ClusterOptions) { o.ClusterStateReloadInterval = time.Second }), clock, prefix, opts...)
	l.store = tuned
	windowPass := l.pass // the pass that decides the costs
	l.calm(t, shard, true, 150*time.Second)
	windowAt := ratelimit.Micros(clock.Now())
	acknowledged := maps.Clone(l.m)
	require.Equal(t, "down", infoField(t, c.nodes[replica], "replication", "master_link_status"))
	require.Equal(t, "0", infoField(t, c.nodes[primary], "replication", "connected_slaves"))

	// The master hangs; the replica is forced to take over; once the
	// cluster agrees, the old master dies, so that it can never answer
	// MOVED. From the hang on, the shard is only peeked at (which charges
	// nothing), at the fake instant of the unreplicated charges, so that
	// the state the replica took over with can be compared with the
	// acknowledged one: no call can reach the old master and succeed.
	l.m = replicated
	l.callers, l.charge, l.timeout, l.step = shard, false, 250*time.Millisecond, 0
	event = time.Now()
	c.signal(t, primary, syscall.SIGSTOP)
	stop = l.start(t)
	require.NoError(t, c.nodes[replica].Do(ctx, "CLUSTER", "FAILOVER", "FORCE").Err())
	c.waitPromoted(t, replica, slot)
	promotedAfter = time.Since(event)
	c.signal(t, primary, syscall.SIGKILL)
	killed := time.Now()
	waitFor(t, "calls to succeed again", l.cleanSince(killed))
	stop()
	s = l.stats(event)
	require.Empty(t, l.violations)

	// The bound: every peek that succeeded equalled the model as of the
	// last replicated write; at that instant each caller's remaining
	// budget on each limit exceeds the acknowledged one by exactly what
	// the unreplicated Takes charged it.
	unreplicatedTakes, unreplicatedUnits := 0, int64(0)
	for _, i := range shard {
		peek := requests(callerKey(i), i, 0)
		got := make([]ratelimit.Decision, len(peek))
		require.NoError(t, tuned.Take(ctx, peek, got))
		equal(t, got, replicated.peek(peek, windowAt), "caller %d after the forced failover", i)
		acked := acknowledged.peek(peek, windowAt)
		// What the unreplicated Take charged this caller: its costs if
		// every limit admitted it, nothing otherwise.
		take := requests(callerKey(i), i, int64(1+(i+windowPass)%3), int64((i*7+windowPass)%3))
		admitted := true
		for _, d := range maps.Clone(replicated).take(take, windowAt) {
			admitted = admitted && d.Allowed
		}
		if admitted {
			unreplicatedTakes++
		}
		for j, d := range got {
			want := int64(0)
			if admitted {
				want = take[j].Cost
			}
			require.Equal(t, want, d.Remaining-acked[j].Remaining, "caller %d limit %s: budget regained by the failover", i, d.Limit.Name())
			unreplicatedUnits += want
		}
	}
	t.Logf("forced failover: the replica was master (ROLE, and in node 1's slot map) %v after the master's SIGSTOP, and the master was killed; %v; the %d Takes (%d units over their limits) acknowledged after the replication link was cut were forgiven, exactly",
		promotedAfter.Round(time.Millisecond), s, unreplicatedTakes, unreplicatedUnits)

	// A client with go-redis's default ClusterStateReloadInterval (60 s)
	// still routes the slot to the dead master: it reloads its slot map on
	// MOVED, which a dead master never sends (go-redis issue #3979).
	peek := requests(callerKey(shard[0]), shard[0], 0)
	err = store.Take(ctx, peek, make([]ratelimit.Decision, len(peek)))
	t.Logf("a client with the default ClusterStateReloadInterval, after the forced failover: %v", err)

	// Charging goes on exactly from the replicated state.
	l.calm(t, all, true, 150*time.Second)
}
