// Package lease is fleet mode: a ratelimit.Store decorator that takes
// capacity from a shared backing store (store/redisstore) in batches, and
// decides the keys that are hot on this instance in memory, at about the
// memory store's speed, without ever admitting more than the backing store
// charged.
//
// Use it when many instances share a few busy limits: a vendor's 10,000
// calls per minute shared by a fleet of workers, a global per-route limit,
// a busy API key. There every decision is otherwise one Redis round trip
// (about 130 µs, and one redis-server saturates near 80,000 scripts per
// second). For the usual per-client limits (60 requests per minute per API
// key) keys are cold on each instance and it changes nothing: every call
// goes straight through, as without it.
//
//	shared, _ := redisstore.New(client)
//	store, _ := lease.New(shared)      // leases of ~1 s of this instance's demand
//	defer store.Close()                // gives the unused units back
//	lim, _ := ratelimit.New(store, ratelimit.WithLimits(...))
//
// # Leases
//
// A lease is one backing-store Take of the request plus n more units,
// charged there before any of them is handed out. The instance then
// decides the next requests for that key and limit from those n units,
// under one lock, with no backing call. A lease hands out units for its
// lifetime L (WithLifetime, default 1 s) measured from when its Take was
// sent, and for a window algorithm never beyond the end of the window it
// was charged in. When it ends, its unused units go back with one Adjust
// dated at the charge (Request.At), so a window algorithm credits the
// window that was charged, or drops the refund once that window has passed
// (a fixed window's leftovers are then not even sent). A bucket's (token
// bucket, GCRA) go back less those the bucket refilled while they were
// held, Rate × the time since the lease's Take was sent plus one round
// trip (Stats.Drained; see Bounds for why). Close returns every
// lease; a background goroutine returns ended ones every L/10
// (WithExpiryInterval; 0 leaves it to the next request and to Expire).
//
// Sizing: a key and limit are hot on this instance once they were asked at
// least 10 times (WithHotThreshold) within the current lifetime-long
// interval and the one before. A lease is then the units this instance was
// asked for over the last lifetime, estimated from those two intervals and
// scaled to how long the lease will last, plus one; at most a share of the
// limit's burst (WithMaxShare, default 0.1, so with n instances at most
// n × 0.1 × Burst sit in leases); and never more than the backing store
// grants. To learn what it grants without an extra round trip, the Store
// asks for the whole lease; if that is refused, the refusal's Remaining
// (exact for every leased algorithm: a cost fits if and only if it is at
// most Remaining) says how much is left, and if the request fits, a second
// Take asks for the request plus that much. Another instance may take
// those units in between; then a third Take asks for the request alone.
// So a refill is one round trip except near exhaustion, and at most three.
// (A peek first, then a Take of min(n, Remaining), would cost two round
// trips always and race the same way.)
//
// Stacked limits stay all or nothing. A stack is decided locally when every
// limit's lease covers its cost; otherwise one backing call charges, for
// each limit that needs it, the part of the request its lease cannot cover
// plus a new lease for it if it is hot, atomically; the units taken from
// the other leases are reserved meanwhile and put back if the call is
// refused or fails. While one call refills a lease, the others for it wait
// for that call (or their context) and then decide with what it brought.
//
// A limit charged 0 in a stack (reserve 0, settle the real usage later
// with Adjust: Request.Cost) is refused only while it is in debt, which no
// lease can show: a settlement on any instance may cause it. Such a limit
// is decided locally only from an answer of the backing store that
// admitted it, to a call sent less than L ago and after the latest Adjust
// through this instance that charged it and left it no unit (it may be in
// debt) or failed. Otherwise the stack's backing call includes it at cost
// 0, and a debt refuses the stack (a hot limit's refusal is remembered as
// any other: until then, calls that include it at cost 0 or need units of
// it from the backing store are refused locally). So a debt is enforced on
// every instance at most L after it arose at the backing store, and at
// once on the instance whose settlement caused it.
//
// What passes straight through, one backing call per call as without the
// decorator: cold keys; LeakyBucket limits, whose Delay is a place in a
// schedule the fleet shares, SlidingLog limits, which record each
// admission's time, and concurrency caps (ratelimit.Concurrent), whose
// slots are held by requests in flight across the fleet and released one
// by one (none can be handed out in advance), and calendar windows
// (budgets, spent by few large settled calls); peeks (every
// cost 0), which read the backing store's exact state, in which leased
// units count as spent; costs above a limit's burst; stacks of more than 8
// requests or naming one (key, limit) pair twice; calls beyond WithMaxKeys
// tracked pairs; every call after Close. Adjust (settlement, refunds)
// always passes through: a refund of units handed out from a lease
// reaches the backing store, where the lease was charged (and a charge
// that leaves a limit no unit makes its next cost-0 use ask, above).
//
// Through a ratelimit.Limiter, a call that a lease decides makes no store
// call with the store timeout: the Store is a ratelimit.LocalTaker, whose
// TryTake, TryTakeOne and TryTakeTwo decide under the shards' locks,
// without waiting and without a backing call, the calls Take would decide
// locally at once (admitted from live leases, or refused by a remembered
// refusal), and decide nothing, changing nothing, for the others, which
// the Limiter then makes with Take (or TakeOne, TakeTwo: the Store is a
// ratelimit.SingleTaker and PairTaker too) and the store timeout, as
// before. Such a Take costs no allocation and
// about what the same Take costs over the memory store (bench_test.go's
// BenchmarkLimiterTake).
//
// # Decisions
//
// A decision made from a lease is what the backing store said at the
// latest answer for that key and limit, plus what happened here since:
//
//   - Remaining is the backing store's Remaining then plus the units this
//     instance still holds. On one instance, at the refill, it is exactly
//     one shared bucket's; it does not count what refilled since (at most
//     Rate × L units) nor what other instances used or hold (their leased
//     units count as spent).
//   - Reset is when the backing store would have been full had the units
//     held then not been charged, with each unit handed out since
//     charged when it was handed out (token bucket and GCRA: on one
//     instance one shared bucket's Reset, exact to 1 µs when the rate's
//     drain is 1, as for PerSecond(10) or PerMinute(10_000)); a window's
//     Reset is its window's.
//   - At is the backing store's clock at that answer plus the local time
//     elapsed, a lower bound of the backing store's clock (within the
//     window of the lease, for window algorithms): pass it to Adjust as
//     usual.
//   - A refused hot limit's RetryAfter is the backing store's wait for the
//     units the request needs from it (not for the lease asked with them;
//     exact for buckets and fixed windows, asked again for a sliding
//     window), but at most the lifetime L, since the units other instances
//     hold come back by then, and at least L/10. The refusal is remembered
//     that long: calls needing at least as much from the backing store are
//     refused locally, with the remaining wait. So a saturated limit, whose
//     units trickle back one at a time, is asked by each instance ten times
//     per lifetime rather than at every request (in the simulation below
//     this took a stacked fleet from 0.99 to 0.61 backing calls per
//     decision at L = 1 s, for 0.6 % fewer admissions). Cold limits report the
//     backing store's RetryAfter unchanged.
//
// With leasing disabled (WithHotThreshold(math.MaxInt64)) or on cold keys
// the decorator passes storetest's conformance suite exactly. With leases
// out, two of its checks cannot hold by design: RetryAfter capped at L as
// above, and a peek showing a stack's leased units as charged.
//
// # Bounds
//
// Write L for the lifetime, B for a limit's burst, R = Quota/Period its
// rate, and assume the local clock and the backing store's advance at the
// same rate and do not step (a drift of d makes L longer by the fraction
// d; a step of the backing store's clock while a window's lease is out
// moves its window under the lease).
//
// Never more than charged. Every unit admitted is the request's own charge
// in a backing call or a unit of a lease charged before it, and only units
// never handed out are given back. So at every instant, for every key and
// limit, the units admitted by all instances together are at most the
// units the backing store has charged (and after Close, exactly those
// plus Stats.Lost, Dropped and Drained, and whatever refills that timed
// out may have charged).
//
// Token bucket and GCRA: at most B + ⌊(T + L − 1 µs)·R⌋ units in any
// closed span of T, which is C + R·(T + L) with C = B. Derivation: let U
// be a bucket of burst B charged only with the units actually used, each
// at its lease's charge time (a unit used outright, at its own Take), and
// A the backing bucket, charged also with the leases' unused units and
// refunded; write d = A − U. A lease's charge raises d by its unused
// units r; the drain lowers d only while U is empty and A is not, by at
// most R per unit of time; a refund lowers d by at most what it credits.
// A lease's refund credits at most r − ⌈R·e⌉ units, e being the time
// since its Take was sent (plus a round trip, for the refund's own
// latency): so d ≥ Σ max(0, r − R·e) over the leases not yet given back,
// at all times (while d drains at most R, each positive term drains at
// R). So U ≤ A ≤ B: U admitted all its charges, and a bucket of burst B
// charges at most B + ⌊R·(b − a)⌋ units at times in [a, b] (its level
// starts ≥ 0, ends ≤ B, and drains at rate R). A unit is handed out less
// than L after its lease's Take was sent, and the charge came after the
// send, so the units admitted in [t, t + T] were charged in
// [t − L + 1 µs, t + T]. One shared bucket admits B + ⌊R·T⌋ in the same
// span: leasing adds at most ⌈R·L⌉, and nothing over longer times (the
// used units form a bucket's admissions). The bound is reached to within
// one unit: TestBucketBoundIsTight builds the schedule (B = 100, R = 10/s,
// L = 1 s, T = 2 s: 128 units admitted, the bound 129, one shared bucket
// 120).
//
// Why not give every unused unit back: a bucket stops draining when it is
// empty, so units that sat in a lease while the backing bucket drained
// them may be units one shared bucket, never charged with them, would
// have drained nothing for; refunding them in full credits capacity that
// bucket never had. Idle leases rotated for a while and then cashed in a
// burst add up to the units idle in all leases beyond the bound
// (TestBucketBoundWithIdleLeases: 230 units in 1 s, where the bound is
// 119 and one shared bucket 110); with full refunds the bound would be
// B + ⌊R·T⌋ + H, H the units held in leases by all instances at the start
// of the span (up to instances × share × B). The price of the deduction:
// when R·L is at least a lease (share × B ≤ R·L, as for a PerSecond limit
// at the defaults) no unused unit of a bucket lease that lived its
// lifetime comes back, and while the backing bucket stays busy those
// units are missing from the fleet until it next runs empty. In the
// simulation below the fleet admits 0.8 % fewer than one shared bucket at
// L = 1 s, 4.4 % at L = 50 ms (0.08 % and 0 % with full refunds).
//
// Window algorithms: a lease ends no later than the window it was charged
// in (its end is computed from the backing store's clock at the charge),
// so every unit admitted in a window was charged in it, and the refunds
// are of unused units of that window only. A fixed window admits at most
// its quota per window, exactly; a sliding window's estimate over the
// admitted units stays within the quota at every admission, as over the
// charged ones.
//
// Under-admission: units held in leases are not available to other
// instances. At most WithMaxShare × B per instance and (key, limit), so at
// most instances × share × B at once; a crashed instance's units are lost
// until its bucket would have refilled them (a window's, for that
// window), and so are a bucket lease's drained units (above). A refused
// request that one shared bucket would have admitted waits at most L for
// the units other instances hold. The simulation measures both.
//
// # Failures
//
// When the backing store fails, the units already leased keep being
// handed out until their leases end; a call that needs the backing store
// gets its error, and the Limiter's failure mode applies (FailOpen,
// FailClosed). A refill that times out may have been charged: its units
// are lost, never double-spent. A return that fails or times out is not
// retried (it might have been applied; applying it twice would create
// capacity): its units are lost to the fleet until the backing store
// refills them, counted in Stats.Lost. Under store/resilient put the lease
// in front, lease.New(resilient.New(redis, ...)): local decisions then
// never pay for the guard's goroutine, and the guard's deadline and
// circuit breaker apply to refills and returns. With a fallback, leases
// come from the fallback's scaled limits during an outage; a lease taken
// from one store and returned after the switch to the other refunds units
// that store never charged, so across a switch the bound above is off by
// at most one lease per instance and (key, limit), like the fallback's own
// Adjust (see store/resilient).
// On Redis Cluster and Ring every backing call names the keys of one
// request stack (returns are grouped per caller key), so the Redis
// store's hash tags keep each on one slot.
//
// # Measurements
//
// TestRedisCallsPerDecision: 5 processes on one hot key on the real
// redis-server, 1,000 decisions per second between them (under the limit),
// make 0.0061 Redis calls per decision. TestWorkflowEngine: 100 workers in 5
// processes calling a vendor through ratelimit.Transport on the real
// redis-server, 10,000 calls per minute (a fixed window), 3 minutes on a
// synctest fake clock: exactly 10,000 vendor calls in each minute, Redis
// round trips 3.9 % of the vendor calls (most of them the once-per-lifetime
// re-asks of the processes refused for the rest of each minute). The
// benchmarks (bench_test.go) compare a local decision with the memory
// store's and the leased Redis hot key with the plain Redis store. The
// command internal/cmd/fleetsim simulates 100 instances with Zipf keys and
// draws fleetsim.svg.
package lease
