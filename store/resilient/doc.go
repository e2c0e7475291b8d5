// Package resilient guards a shared ratelimit.Store (the Redis store) for
// the time it fails: a deadline on every call that holds even when the
// store ignores its context, a circuit breaker that stops calling a store
// that keeps failing and probes it again on a backoff, and an optional
// local fallback that keeps traffic bounded, not unlimited, during the
// outage.
//
//	primary, _ := redisstore.New(client)
//	local, _ := memory.New()
//	store, _ := resilient.New(primary,
//		resilient.WithTimeout(40*time.Millisecond),
//		resilient.WithFallback(local, resilient.EvenShare(5)), // 5 instances share each limit
//	)
//	lim, _ := ratelimit.New(store, ratelimit.WithLimits(...))
//
// # Deadline
//
// Each call to the primary runs on its own goroutine with a context whose
// deadline is the earlier of the caller's and WithTimeout's. The caller
// waits for it at most until that deadline, even if the primary ignores the
// context (a go-redis client without ContextTimeoutEnabled, a connection
// pool that hands out no connection, a paused Redis): it then gets an
// error wrapping ErrTimeout and context.DeadlineExceeded, and the abandoned
// call finishes in the background into buffers of its own. Abandoned calls
// still hold a goroutine and, for Redis, a connection: at most
// WithMaxInFlight primary calls run at once, abandoned ones included, and
// past that calls are not sent to the primary (KindSaturated). So a hung
// Redis can never pile up goroutines without limit, and no caller waits
// longer than its deadline.
//
// # Never replayed
//
// A failed or timed-out call is not retried. After a timeout the primary may
// or may not have charged the request, and sending it again could charge it
// twice. A call decided by the fallback after such a timeout may thus be
// charged on both stores; that errs towards refusing, never towards
// over-admitting. (The Redis store also keeps go-redis from replaying its
// script; see store/redisstore.)
//
// # Circuit breaker
//
// WithFailureThreshold consecutive failures (timeouts and errors of the
// primary; default 5) open the circuit. While it is open no call reaches the
// primary: each fails at once with ErrCircuitOpen, or is decided by the
// fallback. After the backoff (WithBackoff: 100 ms, doubling after each
// failed probe up to 5 s, less up to WithJitter of it, 20 %, drawn from
// WithRand) the next call becomes the probe: it goes to the primary while
// the others keep failing fast. Its success closes the circuit and resets
// the backoff; its failure opens it again. Recovery is automatic. A caller
// that cancels its own context teaches the breaker nothing: it neither
// counts as a failure nor spends the probe. Errors wrapping
// ratelimit.ErrInvalidRequest are the caller's and are returned as they are.
// State reports the state; Hooks.OnCircuitChange reports each transition.
//
// # Fallback
//
// With WithFallback(local, share), calls the primary does not decide (it
// failed, timed out, the circuit is open or the in-flight bound is reached)
// are decided by local, an in-process store such as store/memory, against
// each limit scaled to share of itself (ScaleLimit: quota and burst times
// Num/Den, rounded down, at least 1). With EvenShare(n) and n instances,
// the fleet admits at most about the global limit during the outage. The
// scaled limits are built once per distinct limit (by its ID and shadow
// flag, not its pointer, so a Limit changed in place is scaled afresh) and
// cached. Decisions from the fallback point to the caller's Limit; their
// Remaining and Reset describe the scaled limit. A cost above the scaled
// burst but within the caller's burst is refused with a finite RetryAfter
// (until the circuit's next probe, or the initial backoff), never with
// RetryNever: it fits once the primary is back. Without a fallback the
// error is returned, and the Limiter's FailOpen or FailClosed applies.
//
// The local state starts empty when an outage starts and is not copied to
// the primary when it ends: during the outage each instance may admit its
// share's burst afresh, and when the primary returns, every key resumes
// from the state the primary kept (its usage during the outage unknown to
// it). This is deliberate: the fallback already held each instance to its
// share of the rate during the outage, while the primary's state refilled
// at the same rate, so charging the outage's admissions to the primary at
// recovery would count that time twice and lock well-behaved keys out for
// about as long as the outage lasted. The cost is bounded: across the
// outage and after it, a key gets at most the global limit plus one scaled
// burst per instance (internal/chaos measures it for every fault). Adjust goes to the store that is active when it is called, so a
// settlement made just after a state change lands on another store than
// its Take; such an error is bounded by one reservation per request in
// flight at the change, and an Adjust is never replayed to the primary.
//
// A concurrency cap (ratelimit.Concurrent) is scaled like any limit (each
// instance's fallback holds its share of the cap: floor(n × share), at
// least 1). A slot taken on one store and released after a state change
// reaches the other, where no slot has its start time, so the release
// changes nothing there: the slot returns on its own store after the cap's
// maximum hold. The fleet then holds up to one such stale slot per request
// that was in flight at the change, for at most the maximum hold; no slot
// is ever lost or counted twice.
//
// # Observability
//
// Hooks report every call the primary did not decide (OnStoreError, with
// its ErrorKind), every call the fallback decided (OnFallback), every
// transition of the circuit (OnCircuitChange) and the latency of every
// primary call (OnLatency); Stats counts them. Under a Limiter, a call the
// fallback decided is a normal decision (it counts as allowed or limited
// there); a call that fails without a fallback counts as a store error and
// a bypass (FailOpen) or a 503 (FailClosed).
package resilient
