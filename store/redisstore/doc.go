// Package redisstore is the many-process ratelimit.Store: every instance of
// a service that uses the same Redis (standalone, Sentinel, Cluster or Ring
// through go-redis v9), the same key prefix and the same key secret shares
// one state per caller key and limit.
//
//	client := redis.NewClient(&redis.Options{
//		Addr:                  "redis:6379",
//		ContextTimeoutEnabled: true, // required: the caller's deadline ends a call (see below)
//	})
//	store, err := redisstore.New(client, redisstore.WithKeySecret(secret))
//	// ...
//	err = store.Ping(ctx) // before serving: the script runs, writes are accepted, the clock reads
//
// # One round trip
//
// Take and Adjust each run one Lua script (ratelimit.lua, embedded),
// whatever the number of stacked limits: on Redis 7 and later as a Redis
// Function (FCALL), whose library the store loads with FUNCTION LOAD (on
// every master of a Cluster) the first time a server answers "Function not
// found" (a new server, FUNCTION FLUSH, a node that never had it), so that
// the script's helpers are built once per server instead of once per call.
// Where FCALL is not available (Redis before 7, miniredis, an ACL that
// denies FCALL or FUNCTION) the store sends the script with EVALSHA from
// then on, and when the server does not have it cached (after SCRIPT
// FLUSH, a restart or a failover) once with EVAL. A call that a server
// refuses before running it because it may write (READONLY on a replica,
// OOM under maxmemory) is sent again as EVALSHA, which Redis lets start,
// so that refusals, which write nothing, are still decided there. Each of
// these errors says the call did not run, so sending it again is no
// replay. The script decides every request in
// order and, for Take, writes only if all are allowed, so a stacked Take is
// atomic: a request refused by its tokens-per-day limit charges nothing to
// its requests-per-minute limit.
//
// The script implements every ratelimit.Algorithm by mirroring the Go
// functions (*ratelimit.Limit).TakeAt, AdjustFrom and ExpiresAt in exact
// integers: Lua numbers are doubles, and ratelimit's bounds (bucket
// capacity at most 2^51 and level at most 2^52, window quota × period in
// milliseconds at most 2^50, times in microseconds) keep every intermediate
// below 2^53. The tests compare the two step by step, per algorithm, on
// rates such as 7 per 3 s and 1 per µs and at the bounds. Decision.At is
// the clock the script decided by; Decision.Delay is set for LeakyBucket.
//
// Redis runs scripts on its one command thread, so their cost bounds a
// server's throughput. Measured with INFO commandstats on redis-server 7
// (a shared 2-core VM; a trivial script took 2 µs): a charged Take of one
// token-bucket limit about 30 µs, of two about 37 µs, of five about 68 µs;
// sliding windows and logs take up to twice as long. A SlidingLog's state
// is its log, run-length encoded (one entry per distinct admission time,
// up to 2×Quota of them), which the script parses and rewrites whole on
// every charge: prefer SlidingWindow or a bucket for large quotas.
//
// # Clock
//
// By default the script reads the Redis server's clock (TIME, to the
// microsecond), so instances whose clocks disagree still make the same
// decisions. WithClock makes the store decide by a clock of the caller's
// instead: for tests, or when all instances run clocks you trust. Either
// way a clock that steps backwards creates no capacity, and the waits told
// stay true (ratelimit.ClockStepTolerance: within 128 ms a key stands
// still, beyond it the key is rebased by the step). Instances with
// WithClock whose clocks disagree by more than that tolerance grant
// capacity at each alternation between them: see "Clocks that step
// backwards" in package ratelimit.
//
// Calendar windows (ratelimit.PerCalendarMonth) are aligned to a time zone,
// which Lua cannot compute: with each such limit the store sends the
// starts of four consecutive periods around the time the script will
// decide at as this process knows it (the WithClock time, or this host's
// clock corrected by the Redis clock's offset last seen). A Redis clock
// outside them (more than a whole period off, at least 23 hours) is
// answered with an error before anything is written, and the store sends
// the call once more with periods around the Redis time it reported: one
// extra round trip after the Redis clock jumps, none after that. The stored
// state holds its period's end, so a clock that steps back stays in the
// stored period however far it steps.
//
// # Keys and state
//
// The state of caller key k under limit l lives at
//
//	prefix + "{" + base64url(HMAC-SHA256(secret, k))[:22] + "}:" + l.ID()
//
// (see Store.Key). Raw caller keys (API keys, IP addresses) never reach
// Redis. The default secret is a fixed public salt, which stops no one who
// can read Redis from hashing guesses of low-entropy keys such as IP
// addresses; WithKeySecret with a random secret shared by all instances
// stops that. All limits of one caller key share the hash tag, so a stacked
// call touches one Redis Cluster slot. Limit.ID encodes the limit's name,
// algorithm, quota, period and burst, so a changed limit starts afresh.
//
// A key holds one string: "<level>:<updated>" for the buckets (the level
// in the limit's internal units and the microsecond it was computed, as in
// ratelimit.State), "<tat>:<updated>" for GCRA (the theoretical arrival
// time and the time of the last change; "<tat>" alone, as written by
// earlier versions, is still read), "<count>:<window start>" for a fixed
// window, "<count>:<window start>:<previous count>" for a sliding window,
// and "<t>:<n>,<t>:<n>,..." for a sliding log. A token-bucket key takes
// about 150 bytes of Redis memory (MEMORY USAGE, default prefix, a limit
// named "requests"). Each key expires (PX) when its state becomes
// equivalent to a key never seen (ExpiresAt: a bucket full again, a window
// passed), rounded up to the millisecond, so idle callers cost nothing; a
// charge or refund that leaves a state already there deletes the key.
// Peeks (cost 0) and refused Takes write nothing. A key holding anything
// else makes the call fail with a "malformed rate-limit state" error
// rather than guess.
//
// # Redis Cluster and Ring
//
// On a *redis.ClusterClient or *redis.Ring one call may only stack limits
// of one caller key, since keys of different callers hash to different
// slots or shards: Take and Adjust refuse a call mixing caller keys with an
// error wrapping ratelimit.ErrInvalidRequest before sending anything. A
// standalone or Sentinel client accepts such calls.
//
// A Cluster replicates asynchronously. A graceful failover (CLUSTER
// FAILOVER on a replica) waits for the replica to catch up, so it loses
// no charge and counts none twice: the calls in flight wait while the
// master pauses writes (tens of milliseconds in the test), then are
// redirected; those whose deadline ends first fail, uncharged. A forced
// failover (a dead or hung master, or FAILOVER FORCE or TAKEOVER) loses
// the charges the old master had acknowledged but not yet sent to its
// replica, usually the last milliseconds' (the replication lag). The
// replica has each caller's state as of the last write it received, so
// exactly the lost charges' budget is given back, to be used again;
// nothing is reset and nothing is charged twice. While the old master is
// dead or hung it answers no MOVED, which is what makes go-redis (v9.23,
// issue 3979) reload its slot map: until its ClusterStateReloadInterval
// (60 s by default) has passed, it sends the calls for that master's
// slots to it, and they fail. Set the interval to a few seconds.
// TestClusterFailover (internal/clustertest) measures both failovers on
// real servers; with a 1 s interval, calls succeeded again about 1 s
// after the master hung.
//
// # Deadlines, retries and double charging
//
// When a call fails with a timeout or a dropped connection, the script may
// or may not have run. Sending it again could charge the request twice, so
// it is sent once: the store never retries it, and it keeps go-redis from
// retrying it too. go-redis (v9.23: redis.go processWithRetry, error.go
// shouldRetry, osscluster.go, ring.go) would otherwise re-send a command
// after an error it deems retryable, up to Options.MaxRetries times
// (default 3), and a ClusterClient would retry again on the same node and
// then another, up to MaxRedirects times. Two such errors are ambiguous
// for a script that writes: a connection closed after the command was sent
// (io.EOF), and a socket read timeout (ReadTimeout). The store sends its
// FCALL (and FUNCTION LOAD and FCALL again, EVALSHA or EVAL, after the
// answers above that mean the script did not run) as a command whose NoRetry method returns true, and
// every retry loop of go-redis gives up on such a command rather than
// re-send it, unless the failure happened before it was written. MOVED and
// ASK redirects, which say the script did not run, are followed. So the
// client's MaxRetries does not matter to this store: keep the default for
// the other commands your client sends. The TestNoReplay tests pin this
// against a fake server that swallows or drops every script, for Client,
// ClusterClient and Ring, with MaxRetries 0, 2 and -1; internal/chaos's
// TestDeadlineLostTraffic against a real redis-server behind a proxy that
// swallows the script, loses its reply or drops the connection after it,
// counting both the scripts sent and the charges they made.
//
// The caller's deadline (the rate-limit middleware puts one on every store
// call, 50 ms by default) ends a call to a hung Redis only if the client
// has Options.ContextTimeoutEnabled set: otherwise go-redis consults the
// context only while it waits for a pooled connection, and a call to an
// unresponsive Redis lasts the client's ReadTimeout (5 s by default)
// whatever its deadline. New therefore refuses a client without
// ContextTimeoutEnabled (and one whose options it cannot read, a
// UniversalClient of another type) with an error wrapping ErrInvalidOption
// that says what to set, unless AllowContextTimeoutDisabled acknowledges
// the risk, for example behind store/resilient, whose guard stops waiting
// at the deadline whatever the client does. Client settings, therefore:
//
//   - ContextTimeoutEnabled: true (required);
//   - ReadTimeout and WriteTimeout longer than the deadline (the defaults
//     are), so that it is the caller's deadline that ends a slow call;
//   - MaxRetries as you like (the store's scripts are never re-sent), and
//     PoolSize above the number of concurrent store calls you expect, so
//     that calls do not queue for a connection.
//
// A call that failed because its context ended returns an error wrapping
// the context's error (context.DeadlineExceeded), also when the socket
// deadline it set surfaced first as a network timeout.
//
// # Pipelining
//
// WithPipelining makes concurrent calls share round trips. On one server (a
// *redis.Client, standalone or Sentinel) the store coalesces the calls
// that arrive while a batch is on its way into one script call in batch
// mode, up to 128 calls: one round trip, one script invocation and one
// clock reading (TIME) for all of them, each call decided as if alone
// (atomic, all or nothing, in arrival order; a call that fails, say on a
// malformed state, fails alone). A call alone in the queue is sent as an
// ordinary script call, so a lone caller waits as long as without the
// option. On a *redis.ClusterClient, whose callers live on different
// slots, each call stays its own script call, and the client's async
// go-redis AutoPipeliner writes the calls bound for one master together. A
// *redis.Ring is refused. Either way the caller's deadline bounds the call
// (a call whose context ended before its batch was formed is never sent;
// one that ends later returns at once, and may or may not be decided by
// Redis, as after a timeout without pipelining), and nothing is re-sent.
//
// The key names of a caller (the HMAC of its key, see Keys and state) are kept in a
// small lock-free cache (WithKeyCache, 8192 entries by default), so a
// caller seen recently costs neither an HMAC nor an allocation.
//
// # Redis versions
//
// The script uses GET, SET with PX, DEL and TIME. On Redis 3.2 to 4.x it
// switches to effects replication (redis.replicate_commands), which makes
// writing after TIME legal; Redis 5 and later do so by default. Older
// servers refuse the script's writes unless the store uses WithClock. The
// tests run on redis-server 7 and on miniredis.
package redisstore
