// Package linearize checks that the Redis store is linearizable on real
// servers: that every history of concurrent Take and Adjust calls, each with
// its invocation and response times and the decisions it got, could have
// been produced by one sequential store taking the calls one at a time, in
// an order that respects real time. It uses the linearizability checker
// github.com/anishathalye/porcupine, with a model (NewModel) that is the
// reference model of package storetest (the pure functions
// (*ratelimit.Limit).TakeAt and AdjustFrom on one state per caller key and
// limit, a Take all or nothing), partitioned by caller key.
//
// The tests record histories of 5 clients (each its own go-redis client and
// store instance, as 5 processes would be) × 16 goroutines:
//
//   - on the real redis-server (RAMPMETER_REDIS_ADDR) and on miniredis, for
//     a token bucket, GCRA, a sliding window, stacks of two algorithms and
//     the other algorithms, each on one hot key (all 80 goroutines) and on
//     40 keys, decided by the server's clock (the store's default); and with
//     the store driven by a shared fake clock that stands still during
//     each round of calls and moves between rounds;
//   - on a three-master Redis Cluster (internal/clustertest), including
//     while slots move from master to master under load;
//   - through a restart of a redis-server without persistence (a Reset of
//     every key's usage, allowed only while it restarts) and through a
//     forced failover on the Cluster (a Rollback of the failed master's
//     keys to a state they had since the last write the replica provably
//     has: forgiven charges), the two anomalies the store's documentation
//     states. Each test also checks the same history without its fault
//     transition and requires it to fail: the anomaly happened, and the
//     model would not have let it pass unannounced.
//
// A deliberately broken store (peekThenCharge: a Take that peeks and then
// charges in two calls) fails the check, on two interleaved calls and under
// load, so the check is known to bite.
//
// # Time
//
// How time enters the model is the crux: the decisions depend on the
// microsecond. Under the server's clock the model takes each operation's
// time from the At the store reported and requires it never to go back along
// the linearization of a key, and Check requires it to lie within the
// call's interval by this host's clock (on which the servers run): a
// correct store satisfies both (Redis runs one script at a time, each reads
// TIME once), and a store cannot pass by reporting times that suit it.
// Narrow then shrinks each such operation's interval to that microsecond,
// which changes no verdict and spares the checker a search that is
// exponential on a hot key. Under a driven clock the time is the one the
// store was given; the clock stands still during a round, so the checker
// must find the order of the round's calls, and the histories bound the
// calls in flight on one key (about 12, on a warm key) to keep that search
// in milliseconds. Calls whose outcome is unknown (a timeout, a dropped
// connection: during the faults) need the driven clock, which says when
// they would have decided. NewModel's documentation argues why the model
// is neither too strict nor too lax.
//
// # Running
//
// go test ./internal/linearize checks about 90 histories (some 50,000
// operations) in about 25 s on a loaded 2-core machine, most of it
// starting the two Clusters (the Cluster tests start their own
// redis-servers, as internal/clustertest does; the restart test its own
// redis-server, as internal/chaos does; the others use the server of
// RAMPMETER_REDIS_ADDR, under a prefix of their own).
// RAMPMETER_LINEARIZE_SCALE=N checks N times as many histories, for a
// long run; the race detector checks about a quarter. A
// history that is not linearizable fails with the caller key, its
// operations in order and a porcupine visualization (kept with go test
// -artifacts); one the checker cannot decide within its budget fails too,
// as too hard to check, never as a pass.
package linearize
