package chaos

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/internal/clocktest"
	"github.com/rampmeter/ratelimit/store/redisstore"
	"github.com/rampmeter/ratelimit/store/resilient"
)

// The deadline tests check the promise "no request waits on the store
// longer than its deadline, and a Redis write whose outcome is unknown is
// never replayed" against faults that SIGSTOP and CLIENT PAUSE (TestChaos)
// do not cover: a client whose connection pool is exhausted, a connection
// whose traffic vanishes, and a server that accepts connections and never
// answers.
//
// Every faulted call has the store deadline (callDeadline, 250 ms)
// against a fault that would hold it for 20 s or more (a BLPOP of 20 s, a
// PoolTimeout of 30 s, a black hole that never answers). The tests assert
// that it returned within waitBound, 5 s: far below the hang they rule
// out, and a margin that no load on a shared 2-core machine, nor the race
// detector, comes near, so they run under -race too. They log the times
// they measure. The charge state is exact: the store decides by a frozen
// clock, so no token comes back while a test runs.
const (
	hangFor   = 20 * time.Second // the BLPOP's timeout; the proxy's client's dial, read and write timeouts
	poolWait  = 30 * time.Second // the client's PoolTimeout
	waitBound = 5 * time.Second
	// callDeadline is the store deadline of these tests' calls (the
	// Limiter's, the guard's, storeTake's). Only it ends a call into a
	// fault, and the steps that count one script sent need the client to
	// write the script before it passes: go-redis sends nothing on a
	// context already done, so a client stalled past a 50 ms deadline (a
	// loaded CI machine stalls for that long) would fail them by chance.
	callDeadline = 250 * time.Millisecond
)

// deadlineLimit has a burst of 10, and the frozen clock refills nothing:
// after n charged Takes a key has exactly 10-n left. It is the limit as the
// Limiters of these tests, all named "chaos" (several share a store on
// purpose), charge it: its ID carries their name.
var deadlineLimit = func() ratelimit.Limit {
	lim, err := ratelimit.New(noStore{}, ratelimit.WithName("chaos"), ratelimit.WithLimits(ratelimit.PerHour(10).Named("deadline")))
	if err != nil {
		panic(err)
	}
	return lim.Limits()[0]
}()

// noStore is a Store that is never called.
type noStore struct{}

func (noStore) Take(context.Context, []ratelimit.Request, []ratelimit.Decision) error {
	panic("unused")
}
func (noStore) Adjust(context.Context, []ratelimit.Request, []ratelimit.Decision) error {
	panic("unused")
}

// takeReq is one Take of one unit of deadlineLimit by the key every
// Limiter of these tests uses.
func takeReq() []ratelimit.Request {
	return []ratelimit.Request{{Key: "tenant", Limit: &deadlineLimit, Cost: 1}}
}

// within runs fn, asserts that it returned within waitBound and logs how
// long it took.
func within(t *testing.T, what string, fn func()) {
	t.Helper()
	start := time.Now()
	fn()
	took := time.Since(start)
	t.Logf("%-66s returned after %v", what, took.Round(100*time.Microsecond))
	require.Less(t, took, waitBound, "%s: waited past the deadline", what)
}

// storeTake calls s.Take for takeReq with the store deadline, as the
// Limiter does, and returns its error.
func storeTake(s ratelimit.Store) error {
	ctx, cancel := context.WithTimeout(context.Background(), callDeadline)
	defer cancel()
	return s.Take(ctx, takeReq(), make([]ratelimit.Decision, 1))
}

// decide calls s.Take for takeReq with a generous deadline and returns the
// decision, failing t if the store does not decide.
func decide(t *testing.T, s ratelimit.Store) ratelimit.Decision {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitBound)
	defer cancel()
	out := make([]ratelimit.Decision, 1)
	require.NoError(t, s.Take(ctx, takeReq(), out))
	return out[0]
}

func newAdmin(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newLimiter(t *testing.T, s ratelimit.Store, mode ratelimit.FailureMode) *ratelimit.Limiter {
	// One name for every Limiter of a test: several share one store and
	// its state on purpose (see WithName).
	lim, err := ratelimit.New(s, ratelimit.WithName("chaos"), ratelimit.WithLimits(deadlineLimit), ratelimit.WithKey(ratelimit.KeyConst("tenant")),
		ratelimit.WithStoreTimeout(callDeadline), ratelimit.WithFailureMode(mode))
	must(t, err)
	return lim
}

// newGuard returns store/resilient with the store deadline in front of
// primary, and waits for its primary calls when t ends.
func newGuard(t *testing.T, primary ratelimit.Store) *resilient.Store {
	g, err := resilient.New(primary, resilient.WithTimeout(callDeadline))
	must(t, err)
	t.Cleanup(func() { drain(t, g) })
	return g
}

// drain waits for the guard's primary calls, abandoned ones included.
func drain(t *testing.T, g *resilient.Store) {
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	if err := g.Drain(ctx); err != nil {
		t.Errorf("primary calls still running: %v", err)
	}
}

// serve sends one request through lim's middleware and returns the
// response and whether the handler ran.
func serve(lim *ratelimit.Limiter) (*httptest.ResponseRecorder, bool) {
	var ran bool
	h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true }))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	return rec, ran
}

// requireTimeout asserts what a Limiter returns when the store call ran
// out of its deadline.
func requireTimeout(t *testing.T, err error) {
	t.Helper()
	require.ErrorIs(t, err, ratelimit.ErrStoreTimeout)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// A poolHolder takes the one connection of a client with PoolSize 1 and
// returns the function that gives it back (also run when t ends).
type poolHolder struct {
	name string
	hold func(t *testing.T, client, admin *redis.Client) (release func())
}

var poolHolders = []poolHolder{
	{"blpop", holdWithBLPop},
	{"checked-out", holdCheckedOut},
}

// holdWithBLPop keeps the connection busy on the wire: a BLPOP of hangFor
// on an empty key, until an LPUSH ends it.
func holdWithBLPop(t *testing.T, client, admin *redis.Client) func() {
	const key = "deadline:blpop"
	type result struct {
		val  []string
		err  error
		took time.Duration
	}
	done := make(chan result, 1)
	go func() {
		start := time.Now()
		val, err := client.BLPop(context.Background(), hangFor, key).Result()
		done <- result{val, err, time.Since(start)}
	}()
	require.Eventually(t, func() bool {
		info, err := admin.Info(t.Context(), "clients").Result()
		return err == nil && strings.Contains(info, "blocked_clients:1\r\n")
	}, waitBound, time.Millisecond, "the BLPOP never blocked")
	var once sync.Once
	release := func() {
		once.Do(func() {
			require.NoError(t, admin.LPush(context.Background(), key, "go").Err())
			r := <-done
			require.NoError(t, r.err)
			require.Equal(t, []string{key, "go"}, r.val)
			t.Logf("the BLPOP held the connection for %v", r.took.Round(time.Millisecond))
		})
	}
	t.Cleanup(release)
	return release
}

// holdCheckedOut keeps the connection checked out of the pool, idle, by a
// redis.Conn that another part of the program holds.
func holdCheckedOut(t *testing.T, client, _ *redis.Client) func() {
	conn := client.Conn()
	require.NoError(t, conn.Ping(t.Context()).Err())
	var once sync.Once
	release := func() { once.Do(func() { require.NoError(t, conn.Close()) }) }
	t.Cleanup(release)
	return release
}

// TestDeadlinePoolExhausted: while the client's only connection is taken
// (PoolSize 1, PoolTimeout 30 s), a Take through the Redis store, through
// the Limiter (FailOpen and FailClosed, Take and middleware) and through
// store/resilient returns at its deadline with a timeout, counted exactly;
// once the connection is back, the store decides again, and none of the
// timed-out calls charged anything (they never got a connection).
func TestDeadlinePoolExhausted(t *testing.T) {
	for _, h := range poolHolders {
		t.Run(h.name, func(t *testing.T) {
			srv := StartRedis(t)
			admin := newAdmin(t, srv.Addr)
			client := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true,
				PoolSize: 1, PoolTimeout: poolWait})
			t.Cleanup(func() { _ = client.Close() })
			clock := clocktest.New(time.Now())
			primary, err := redisstore.New(client, redisstore.WithPrefix("deadline:"), redisstore.WithClock(clock.Now))
			must(t, err)
			guard := newGuard(t, primary)
			open := newLimiter(t, primary, ratelimit.FailOpen)
			closed := newLimiter(t, primary, ratelimit.FailClosed)
			guarded := newLimiter(t, guard, ratelimit.FailClosed)

			release := h.hold(t, client, admin)
			ps := client.PoolStats()
			require.Equal(t, [2]uint32{1, 0}, [2]uint32{ps.TotalConns, ps.IdleConns}, "the pool's one connection is not taken")

			within(t, h.name+": redis store Take", func() {
				err := storeTake(primary)
				require.ErrorIs(t, err, context.DeadlineExceeded)
				require.ErrorContains(t, err, "redisstore: take: ")
			})

			within(t, h.name+": Limiter.Take, FailOpen", func() {
				res, err := open.Take(t.Context(), "tenant")
				requireTimeout(t, err)
				require.Equal(t, ratelimit.Result{Allowed: true, Bypassed: true}, res)
			})
			within(t, h.name+": middleware, FailOpen", func() {
				rec, ran := serve(open)
				require.Equal(t, http.StatusOK, rec.Code)
				require.True(t, ran, "FailOpen must run the handler")
			})
			require.Equal(t, ratelimit.Stats{StoreErrors: 2, Bypassed: 2}, open.Stats())

			within(t, h.name+": Limiter.Take, FailClosed", func() {
				res, err := closed.Take(t.Context(), "tenant")
				requireTimeout(t, err)
				require.Equal(t, ratelimit.Result{RetryAfter: time.Second}, res)
			})
			within(t, h.name+": middleware, FailClosed", func() {
				rec, ran := serve(closed)
				require.Equal(t, http.StatusServiceUnavailable, rec.Code)
				require.Equal(t, "1", rec.Header().Get("Retry-After"))
				require.False(t, ran, "FailClosed must not run the handler")
			})
			require.Equal(t, ratelimit.Stats{StoreErrors: 2}, closed.Stats())

			within(t, h.name+": resilient Take", func() {
				err := storeTake(guard)
				require.ErrorIs(t, err, context.DeadlineExceeded)
			})
			within(t, h.name+": Limiter.Take over resilient, FailClosed", func() {
				res, err := guarded.Take(t.Context(), "tenant")
				requireTimeout(t, err)
				require.Equal(t, ratelimit.Result{RetryAfter: time.Second}, res)
			})
			drain(t, guard)
			gs := guard.Stats()
			// The guard and the primary (whose pool wait ends at the same
			// deadline) race to report the timeout: either may win.
			require.LessOrEqual(t, gs.Abandoned, uint64(2))
			gs.Abandoned = 0
			require.Equal(t, resilient.Stats{PrimaryCalls: 2, Timeouts: 2}, gs)
			require.Equal(t, resilient.Closed, guard.State(), "2 failures < the threshold of 5")

			release()
			// Nothing was charged while the pool was exhausted: 10-1 left.
			d := decide(t, primary)
			require.True(t, d.Allowed)
			require.Equal(t, int64(9), d.Remaining)
			res, err := guarded.Take(t.Context(), "tenant")
			require.NoError(t, err)
			require.True(t, res.Allowed)
			require.Equal(t, int64(8), res.Decisions[0].Remaining)
			require.Equal(t, ratelimit.Stats{Allowed: 1, StoreErrors: 1}, guarded.Stats())
		})
	}
}

// TestDeadlineLostTraffic: behind a proxy that loses traffic, a Take
// returns at its deadline with a timeout, the script is sent once whatever
// the client's MaxRetries, the lost connection is replaced when traffic
// flows again, and the unknown write happened once or not at all — exactly
// as the proxy lost it:
//
//  1. forwarding: a Take charges 1 (10-1 = 9 left);
//  2. swallowing, on the open connection (a black hole): the script is
//     sent once and never reaches Redis (Limiter, FailOpen);
//  3. swallowing, on a new connection (a dead server that completes the
//     TCP handshake): the call gives up at its deadline in the dial or the
//     unanswered handshake (HELLO), and sends no script (Redis store);
//  4. forwarding: a new connection, and 9-1 = 8 left: step 2 charged nothing;
//  5. dropping replies, on the open connection: the script reaches Redis
//     and runs once, its reply is lost (Limiter over resilient, FailClosed);
//  6. forwarding: 8-1-1 = 6 left: step 5 charged exactly once;
//  7. resetting scripts: the script reaches Redis and runs, and the
//     connection closes before the reply, which go-redis would retry on a
//     new connection (MaxRetries 0 means 3 retries) were the store's
//     script not marked NoRetry: the script is sent once (Redis store);
//  8. forwarding: 6-1-1 = 4 left: step 7 charged exactly once.
//
// (With a deadline alone, go-redis would not replay in steps 2 and 5
// either: its retry loop gives up once the context is done. Step 7 is the
// fault where the store's own guard is what keeps the count at one.)
func TestDeadlineLostTraffic(t *testing.T) {
	srv := StartRedis(t)
	for _, maxRetries := range []int{0, 3, -1} {
		t.Run(fmt.Sprintf("MaxRetries=%d", maxRetries), func(t *testing.T) {
			p := startProxy(t, srv.Addr)
			// Socket timeouts of hangFor: only the deadline can end a call
			// within waitBound.
			client := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true,
				MaxRetries: maxRetries, MinRetryBackoff: time.Millisecond, PoolSize: 1,
				DialTimeout: hangFor, ReadTimeout: hangFor, WriteTimeout: hangFor})
			t.Cleanup(func() { _ = client.Close() })
			clock := clocktest.New(time.Now())
			primary, err := redisstore.New(client, redisstore.WithPrefix(fmt.Sprintf("deadline:%d:", maxRetries)),
				redisstore.WithClock(clock.Now))
			must(t, err)
			guard := newGuard(t, primary)
			open := newLimiter(t, primary, ratelimit.FailOpen)
			guarded := newLimiter(t, guard, ratelimit.FailClosed)
			name := func(step string) string { return fmt.Sprintf("MaxRetries %d: %s", maxRetries, step) }

			// 1.
			require.Equal(t, int64(9), decide(t, primary).Remaining)
			conns := p.accepted()

			// 2.
			p.set(swallowing)
			scripts := p.scripts()
			within(t, name("black hole, Limiter.Take FailOpen"), func() {
				res, err := open.Take(t.Context(), "tenant")
				requireTimeout(t, err)
				require.Equal(t, ratelimit.Result{Allowed: true, Bypassed: true}, res)
			})
			must(t, p.settle(scripts+1))
			require.Equal(t, 1, p.scripts()-scripts, "scripts sent into the black hole")
			require.Equal(t, conns, p.accepted(), "the open connection was not used")
			require.Equal(t, ratelimit.Stats{StoreErrors: 1, Bypassed: 1}, open.Stats())

			// 3.
			scripts = p.scripts()
			hellos := p.count("hello")
			within(t, name("dead server, redis store Take"), func() {
				err := storeTake(primary)
				require.ErrorIs(t, err, context.DeadlineExceeded)
				require.ErrorContains(t, err, "redisstore: take: ")
			})
			// go-redis dials on a goroutine of its own, which may connect
			// after the call gave up; the handshake is the call's.
			require.Eventually(t, func() bool { return p.accepted() > conns }, waitBound, time.Millisecond,
				"no new connection was dialled")
			must(t, p.settle(scripts))
			require.Zero(t, p.scripts()-scripts, "a script was sent on a connection whose handshake got no answer")
			t.Logf("%s: the store dialled %d connection(s) and sent %d HELLO(s) into the dead server",
				name("step 3"), p.accepted()-conns, p.count("hello")-hellos)

			// 4.
			p.set(forwarding)
			// The client closed the black-holed connection (settle), so
			// this ran on another one.
			require.Equal(t, int64(8), decide(t, primary).Remaining, "the swallowed script must not have run")

			// 5.
			p.set(droppingReplies)
			scripts = p.scripts()
			within(t, name("lost reply, Limiter.Take over resilient FailClosed"), func() {
				res, err := guarded.Take(t.Context(), "tenant")
				requireTimeout(t, err)
				require.Equal(t, ratelimit.Result{RetryAfter: time.Second}, res)
			})
			must(t, p.settle(scripts+1))
			require.Equal(t, 1, p.scripts()-scripts, "scripts sent whose reply was lost")
			require.Equal(t, ratelimit.Stats{StoreErrors: 1}, guarded.Stats())
			drain(t, guard)
			gs := guard.Stats()
			require.LessOrEqual(t, gs.Abandoned, uint64(1))
			gs.Abandoned = 0
			require.Equal(t, resilient.Stats{PrimaryCalls: 1, Timeouts: 1}, gs)

			// 6.
			p.set(forwarding)
			require.Equal(t, int64(6), decide(t, primary).Remaining, "the script whose reply was lost must have run once")

			// 7.
			p.set(resettingScripts)
			scripts = p.scripts()
			within(t, name("reset after send, redis store Take"), func() {
				err := storeTake(primary)
				require.ErrorContains(t, err, "redisstore: take: ")
				t.Logf("%s: %v", name("step 7"), err)
			})
			must(t, p.settle(scripts+1))
			require.Equal(t, 1, p.scripts()-scripts, "scripts sent when the connection closed after send")

			// 8.
			p.set(forwarding)
			require.Equal(t, int64(4), decide(t, primary).Remaining, "the script sent before the reset must have run once")
		})
	}
}
