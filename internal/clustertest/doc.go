// Package clustertest holds the integration tests of the Redis store on a
// real Redis Cluster of three masters (and a replica, for failovers), which
// it starts itself from the redis-server and redis-cli binaries on PATH
// (skipped when they are missing, unless RAMPMETER_REQUIRE_REDIS=1, which
// makes it fail instead).
// Its code (cluster.go) is the cluster starter: Start, and the Cluster's
// methods to reach, signal and fail over its nodes, which the tests here
// and the linearizability checks of internal/linearize share.
//
// # Cluster, Sentinel and Ring
//
// redisstore.New takes any redis.UniversalClient:
//
//   - Redis Cluster: redis.NewClusterClient(&redis.ClusterOptions{Addrs:
//     seeds, ContextTimeoutEnabled: true}). Every Redis key of one caller
//     key shares one hash tag, so a stacked Take is one EVALSHA on one slot:
//     no CROSSSLOT. go-redis follows MOVED and ASK redirects (up to
//     MaxRedirects, default 3) and reloads its slot map, so resharding
//     needs no restart. During a slot migration a caller whose Redis keys
//     are split between the two nodes, or who has several limits but only
//     some (or none) of their keys yet, gets TRYAGAIN from Redis: the store
//     returns that error and the Limiter's failure mode decides (FailOpen by
//     default); nothing is charged, and decisions are exact again as soon as
//     the caller's keys are on one node. A caller with all its keys on the
//     source node is decided there; one with all its keys moved is
//     redirected (ASK) and decided on the target. TestClusterSlotMigration
//     shows each case. A graceful failover loses nothing; a forced one
//     forgives the charges the replica had not received; go-redis finds a
//     new master only by MOVED or every ClusterStateReloadInterval (default
//     60 s: set a few seconds). TestClusterFailover shows both, with figures
//     (see the Cluster section of package redisstore).
//   - Sentinel: redis.NewFailoverClient(&redis.FailoverOptions{MasterName:
//     "mymaster", SentinelAddrs: sentinels, ContextTimeoutEnabled: true,
//     MaxRetries: -1}). All commands go to the current master; on failover
//     the client reconnects to the promoted replica. Replication is
//     asynchronous, so charges acknowledged by the old master in its last
//     moments may be lost: a few requests can be admitted twice around a
//     failover. The script reads the clock with TIME on the master, so
//     decisions continue on the new master's clock (keep masters NTP-synced).
//     Do not route the store's scripts to replicas (ReadOnly or
//     RouteByLatency on a failover cluster client): they write.
//   - Ring: redis.NewRing(&redis.RingOptions{Addrs: shards}) shards keys by
//     consistent hashing of the hash tag, so each caller lives on one shard,
//     and the store refuses a call mixing caller keys as on a Cluster.
//     There is no replication or resharding: when a shard is removed or
//     added, the callers that move to another shard start with a full
//     budget, and a dead shard fails the calls of its callers until the
//     ring drops it (HeartbeatFrequency).
//   - redis.NewUniversalClient(&redis.UniversalOptions{...}) picks one of
//     the above from its options (MasterName: Sentinel; several Addrs:
//     Cluster; one: a plain client); all of them work with the store.
package clustertest
