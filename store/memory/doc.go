// Package memory is a ratelimit.Store that keeps its state in the memory of
// one process: fast, bounded, and forgotten on restart. Use it for a single
// instance, for tests, or as the local fallback when a shared store fails;
// use store/redisstore when several processes must share one limit.
//
// # Decisions
//
// Take and Adjust apply the pure functions (*ratelimit.Limit).TakeAt,
// AdjustFrom and ExpiresAt to the stored state, so the memory store and the
// Redis store compute the same integers. A stacked call locks every shard
// it touches (in ascending shard order, so concurrent calls cannot
// deadlock), evaluates all its requests, and commits either all charges or
// none. The state of one key under all its limits lives in one shard, so
// the common stack of several limits on one key takes one lock. A call
// reads the store's clock once, and the times of one key's decisions never
// go backwards even when callers race (which would let GCRA, whose state
// has no time of its own, decide differently from the token bucket): a
// call decides at the later of its reading and the latest time already
// decided in its shards. The default clock is read before the locks are
// taken, so that a hot key's lock is never held across the clock's
// ~25 ns; WithClock's clock is always read with the locks held. Stacks of one and two
// requests, the common ones, take paths of their own; longer stacks share
// one general path.
//
// # Calling it without allocating
//
// A decision on existing entries allocates nothing in the store for stacks
// of up to 8 requests (a new entry allocates the copy of its key; a longer
// stack allocates its scratch space). The caller's slices are another
// matter. Slices passed to a method of the ratelimit.Store interface escape
// to the heap, because the compiler cannot know which implementation will
// receive them: a caller that builds reqs and out for every call, as a
// composite literal or by slicing an array on its stack, pays one
// allocation for each, on every call. Make them once and reuse them, one
// pair per goroutine (a Take reads reqs and writes out only during the
// call, and keeps neither):
//
//	type worker struct {
//		store ratelimit.Store
//		reqs  []ratelimit.Request  // make([]ratelimit.Request, 1), once
//		out   []ratelimit.Decision // make([]ratelimit.Decision, 1), once
//	}
//
//	func (w *worker) allow(ctx context.Context, key string, l *ratelimit.Limit) (bool, error) {
//		w.reqs[0] = ratelimit.Request{Key: key, Limit: l, Cost: 1}
//		if err := w.store.Take(ctx, w.reqs, w.out); err != nil {
//			return false, err
//		}
//		return w.out[0].Allowed, nil
//	}
//
// The Store* benchmarks call the store this way (BenchmarkStoreHotKey,
// BenchmarkStoreParallel10kKeys, BenchmarkStoreStack2, ...), at 0
// allocations per decision. A caller that holds a *Store, not the
// interface, may also slice arrays on its own stack: the methods of *Store
// keep neither slice, and the compiler can see it
// (BenchmarkTakeHotKeyStackArrays).
//
// # Memory, expiry and sweeping
//
// An entry is one (key, limit) pair. It expires when its bucket is full
// again (its Reset has elapsed); an expired entry behaves exactly like an
// absent one and is deleted when next read, unless that read charges it:
// then the new state takes the expired one's place, which is what deleting
// it and inserting the key afresh would leave, without the work (most
// keys of an API are idle long enough between requests to expire each
// time, and pay for no insertion this way). There is no background
// goroutine: inserting a new entry into a shard sweeps that shard (deletes
// its expired entries) when it was last swept more than a minute ago by the
// store's clock, or when the shard is full and was last swept more than a
// second ago. A sweep holds the shard's lock for a scan of its entries
// (MaxKeys/shards of them at most, 16,384 by default).
//
// Expiry is final: once a shard has decided at a time at or after an
// entry's expiry, the entry stays expired whatever the clock does next,
// whether or not a sweep has deleted it yet. Only WithClock's clock can
// step back (the default clock never goes back in a shard), and when it
// does, the shard first deletes every entry expired by its latest time
// before the step (one sweep per step back), so that usage already paid
// off is never charged again; entries it has not seen expire are rebased
// as the algorithms rebase a step (ratelimit.ClockStepTolerance). The
// shard's latest time is the one that counts, not the whole store's: with
// several shards, whether a shard had reached an entry's expiry before a
// step back depends on the other keys it holds, which the store's random
// hash seed picks (a store-wide latest time would put one written memory
// word on every call of every shard).
//
// The number of entries never exceeds MaxKeys (WithMaxKeys, default
// 1,048,576). The cap is divided evenly between the shards, so eviction can
// start in one shard slightly before the store as a whole holds MaxKeys
// entries. Len reports the number of entries held, expired ones included
// until they are swept.
//
// All the limits of one key live in its shard, so a shard must hold a
// whole stack: New uses at most MaxKeys/MinShardKeys shards, whatever
// WithShards asks, so that every shard holds at least MinShardKeys (16)
// entries, or all of MaxKeys when it is smaller. A stack that names more
// distinct entries in one shard than the shard holds (more than 16 limits
// on one key, or on a store with a smaller MaxKeys) cannot be stored
// whole: Take and Adjust refuse it with an error wrapping
// ratelimit.ErrInvalidRequest and ErrStackTooLarge, before anything is
// charged, rather than decide its extra limits as fresh at every call.
//
// # Eviction policy and threat model
//
// When a new entry must go into a full shard that a sweep could not thin,
// the store samples 8 entries of that shard, spread at random over it, and
// evicts the one that expires earliest: the one closest to a full bucket, whose loss forgives the least
// usage. An evicted key starts afresh, with a full bucket, when next seen.
//
// The threat is a client that controls its key, for example by rotating
// API keys or IPv6 addresses, and creates entries at will. An unbounded
// store lets it exhaust memory. A least-recently-used bound lets it push out
// the state of the heaviest real users, forgiving their usage and resetting
// their limits: a cheap way to lift anyone's limit. Under this policy the
// attacker's own entries, which each hold a request's worth of usage and
// expire soon, are evicted first; a key that is near its limit or in debt
// expires late and is evicted last. To push out a user's entry the attacker
// must make the other sampled entries expire later than it, that is, spend
// more on each of its keys than that user has spent, and even then the
// loss is at most that user's usage. Sampling makes the choice approximate
// and cheap: eviction costs a handful of reads, never a scan.
//
// A concurrency cap's entry (ratelimit.Concurrent) holds the start time of
// each slot held and expires when its newest slot's maximum hold ends, so
// it is evicted late, after entries of short rate limits. Evicted anyway,
// it forgets its slots: the key may start up to the cap more requests while
// those still run, and their releases then find nothing to release (they
// never drive a count below zero). Its size is one int64 per held slot.
//
// Eviction is a safety valve, not a working mode: size MaxKeys above the
// number of (key, limit) pairs active within the longest Reset of your
// limits. An entry takes about 140 bytes with short keys (see
// BenchmarkMemoryPerKey), so the default cap bounds the store near 150 MB.
// Memory stays at its high-water mark: the space of deleted entries is
// reused for new ones, not returned.
package memory
