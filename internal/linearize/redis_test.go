package linearize

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/internal/clocktest"
	"github.com/rampmeter/ratelimit/internal/redistest"
	"github.com/rampmeter/ratelimit/store/redisstore"
)

// The limits of the histories decided by the server's clock, in real
// time: a history lasts tens of milliseconds, so the rates refill a unit
// every 500µs and the windows last 5 or 10 ms, and every history sees
// refills, window boundaries, refusals and debts.
var (
	tb   = limit(ratelimit.PerSecond(2000).WithBurst(8).Named("tb"))
	gcra = limit(ratelimit.PerSecond(2000).WithBurst(8).Named("gcra").WithAlgorithm(ratelimit.GCRA))
	sw   = limit(ratelimit.Every(16, 10*time.Millisecond).Named("sw").WithAlgorithm(ratelimit.SlidingWindow))
	lb   = limit(ratelimit.PerSecond(2000).WithBurst(8).Named("lb").WithAlgorithm(ratelimit.LeakyBucket))
	fw   = limit(ratelimit.Every(12, 5*time.Millisecond).Named("fw").WithAlgorithm(ratelimit.FixedWindow))
	fw1  = limit(ratelimit.Every(12, 5*time.Millisecond).Named("fw1").WithAlgorithm(ratelimit.FixedWindow).AlignToFirstHit())
	sl   = limit(ratelimit.Every(10, 5*time.Millisecond).Named("sl").WithAlgorithm(ratelimit.SlidingLog))
)

// serverClockScenarios are the workloads of the histories decided by the
// server's clock: each algorithm the issue names, and stacks of two, on
// one hot key (every goroutine of every client on it) and on 40 keys; the
// other algorithms on many keys and one hot key mixing them.
func serverClockScenarios() []scenario {
	const hotOps, manyOps = 4, 4 // calls per goroutine: 320 per history
	var scs []scenario
	for _, s := range []struct {
		name   string
		stacks [][]*ratelimit.Limit
	}{
		{"token-bucket", [][]*ratelimit.Limit{{tb}}},
		{"gcra", [][]*ratelimit.Limit{{gcra}}},
		{"sliding-window", [][]*ratelimit.Limit{{sw}}},
		{"stacked-tb+sw", [][]*ratelimit.Limit{{tb, sw}}},
		{"stacked-gcra+fw", [][]*ratelimit.Limit{{gcra, fw}}},
		{"others", [][]*ratelimit.Limit{{lb}, {fw1}, {sl}, {lb, sl}}},
	} {
		scs = append(scs,
			scenario{name: s.name + "/hot", keys: []string{"hot"}, stacks: s.stacks, ops: hotOps},
			scenario{name: s.name + "/many", keys: keys("k", 40), stacks: s.stacks, ops: manyOps})
	}
	return scs
}

// roundScenarios are the workloads of the histories decided by a driven
// clock that stands still during each round of calls (one call per
// goroutine): every key's stack mixing the algorithms, on 40 keys and a
// warm key that takes 15% of the calls, about 12 of each round. The
// checker must find the order of a round's calls by search, since they all
// decide at the same instant, and that search grows exponentially with
// the calls in flight on one key when their answers hide the state (a
// limit deep in debt reports Remaining 0 and the same Reset whatever the
// debt): 80 on one key occasionally runs out of any budget, 12 takes
// milliseconds. The hot key with every goroutine on it is checked under
// the server's clock (serverClockScenarios), where the At orders it.
func roundScenarios() []scenario {
	ks := append([]string{"warm"}, keys("k", 40)...)
	return []scenario{
		{name: "buckets", keys: ks, warm: 15, ops: 1, stacks: [][]*ratelimit.Limit{{tb, sw}, {gcra}, {tb}, {sw}, {lb}}},
		{name: "windows", keys: ks, warm: 15, ops: 1, stacks: [][]*ratelimit.Limit{{gcra, fw}, {fw1}, {sl}, {lb, sl}, {sw}}},
	}
}

// TestRealRedis checks histories of 5 clients × 16 goroutines on the real
// redis-server, decided by its clock (the store's default), for every
// scenario of serverClockScenarios. Every call must succeed and every
// history must be linearizable.
func TestRealRedis(t *testing.T) {
	stores := redisStores(t, redistest.Addr(t), redisstore.WithPrefix(redistest.Prefix(t)))
	model := NewModel(Options{})
	for _, sc := range serverClockScenarios() {
		runServerClock(t, stores, model, sc, scale(t, 4))
	}
}

// TestRealRedisRounds checks histories of the round scenarios on the real
// redis-server, the stores deciding by a shared fake clock that moves 1 ms
// between rounds and stands still during each (30 rounds, 2,400 calls).
func TestRealRedisRounds(t *testing.T) {
	clock := clocktest.New(t0)
	stores := redisStores(t, redistest.Addr(t), redisstore.WithPrefix(redistest.Prefix(t)),
		redisstore.WithClock(clock.Now), redisstore.WithExpiryMargin(time.Minute))
	model := NewModel(Options{})
	for _, sc := range roundScenarios() {
		t.Run(sc.name, func(t *testing.T) {
			var ta tally
			for h := range scale(t, 2) {
				sc := sc
				sc.keys = historyKeys(sc, h)
				d := newDriver(stores, &sc, uint64(h), 10*time.Second)
				start := time.Now()
				for range 30 {
					clock.Advance(time.Millisecond)
					d.round(ratelimit.Micros(clock.Now()))
				}
				recorded := time.Since(start)
				require.Equal(t, map[Outcome]int{Done: 30 * workers}, d.rec.Outcomes(), "history %d: every call succeeds (%v)", h, d.rec.Failures())
				ta.add(Check(t, sc.name, model, d.rec.Operations(), budget), recorded, d.rec)
			}
			t.Logf("%s: %v", sc.name, &ta)
		})
	}
}

// TestMiniredis runs server-clock histories on miniredis (one lock around
// every command; TIME reads the real clock): a bucket, a stack and the
// other algorithms, hot and on many keys, one history of each (under the
// race detector, which slows miniredis's Lua interpreter tenfold, the
// bucket's only).
func TestMiniredis(t *testing.T) {
	stores := redisStores(t, miniredis.RunT(t).Addr())
	model := NewModel(Options{})
	for _, sc := range serverClockScenarios() {
		name, _, _ := strings.Cut(sc.name, "/")
		if name == "token-bucket" || !raceEnabled && (name == "stacked-tb+sw" || name == "others") {
			runServerClock(t, stores, model, sc, scale(t, 1))
		}
	}
}

// redisStores returns one store per client on the redis-server at addr,
// each with its own client (a pool of one connection per goroutine),
// configured as the store asks and closed when t ends.
func redisStores(t *testing.T, addr string, opts ...redisstore.Option) []ratelimit.Store {
	stores := make([]ratelimit.Store, clients)
	for i := range stores {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, PoolSize: goroutines})
		t.Cleanup(func() { _ = c.Close() })
		s, err := redisstore.New(c, opts...)
		require.NoError(t, err)
		stores[i] = s
	}
	return stores
}

// historyKeys returns sc's keys, made unique to history h of sc.
func historyKeys(sc scenario, h int) []string {
	ks := make([]string, len(sc.keys))
	for i, k := range sc.keys {
		ks[i] = fmt.Sprintf("%s/h%d/%s", sc.name, h, k)
	}
	return ks
}

// runServerClock checks n histories of scenario sc on stores, each on
// caller keys of its own, and logs their figures.
func runServerClock(t *testing.T, stores []ratelimit.Store, model porcupine.Model, sc scenario, n int) {
	t.Run(sc.name, func(t *testing.T) {
		var ta tally
		for h := range n {
			sc := sc
			sc.keys = historyKeys(sc, h)
			d := newDriver(stores, &sc, uint64(h), 10*time.Second)
			start := time.Now()
			d.free(sc.ops)
			recorded := time.Since(start)
			require.Equal(t, map[Outcome]int{Done: workers * sc.ops}, d.rec.Outcomes(), "history %d: every call succeeds (%v)", h, d.rec.Failures())
			ta.add(Check(t, sc.name, model, d.rec.Operations(), budget), recorded, d.rec)
		}
		t.Logf("%s: %v", sc.name, &ta)
	})
}
