// Package ratelimit limits HTTP APIs (and outbound calls) per key, per
// request and per AI token, exactly across any number of processes.
//
// A [KeyFunc] names who pays for a request (an API key, a client IP, a
// route, or a composition). A set of [Limit]s (policies) says how much a key
// may spend: for example 60 requests per minute and 100,000 tokens per day.
// A [Store] decides every limit at once, all or nothing: either each limit
// has room and each is charged, or none is charged and the request is
// refused. [store/memory] keeps state in one process; [store/redisstore] shares it
// between processes with one Lua script per decision (one round trip) and the
// Redis server's clock.
//
// The [Limiter] turns decisions into HTTP behaviour: its Handler method is a
// func(http.Handler) http.Handler for chi (r.Use, r.With, groups) or the
// standard library. Admitted requests carry the IETF RateLimit and
// RateLimit-Policy fields (draft-ietf-httpapi-ratelimit-headers-11);
// refused ones get 429 with Retry-After and an RFC 9457 problem body; a
// request whose cost can never fit gets 413 without Retry-After. When the
// store fails, the request fails open (counted and reported) or closed (503),
// by configuration.
//
// For AI tokens, whose real count is known only after the model answers, a
// limit's [CostFunc] reserves an estimate before the handler runs and the
// handler reports the real usage with [ReportUsage]; the difference is
// settled exactly once after the handler returns, however it returns.
// Package [llm] has what is specific to AI providers: the estimator of
// OpenAI-style bodies, the usage parsers of OpenAI and Anthropic responses
// and streams, their rate-limit fields (HeaderWriters for [WithHeaders])
// and the OpenAI API's error body (an [ErrorFormat]).
//
// Concurrency caps bound the requests of a key in flight at once, which a
// rate does not: an AI call lasts seconds to minutes and a stream holds its
// connection throughout. [Concurrent](n, maxHold) admits a request only while
// fewer than n of the key's requests hold a slot, across every process
// sharing the store, and is decided in the same all-or-nothing Take as the
// rate limits (a request refused by one holds nothing of the others). The
// middleware releases the slot when the handler returns, panics or ends
// because its client left (a stream holds it until the handler returns);
// [Reservation.Release] and [Transport] release it for workers and outbound
// calls. A slot whose holder died comes back on its own maxHold after it
// was taken: the store keeps the start time of each slot, never a counter
// that a lost release would leak. A refusal is a 429 with Retry-After: 1
// ([ConcurrencyRetryAfter]), and the rate-limit fields list the cap as its
// own item with the draft's quota unit "concurrent-requests".
//
// Observability: [Limiter.Stats] counts outcomes, and [Hooks] report each
// decided request once with its final [Result] (OnDecision), each store
// call with its operation, size, duration and error (OnStoreCall), each
// failed call (OnStoreError; every store-failure error wraps
// [ErrStoreFailed]) and each request let through without a decision
// (OnBypass). Package [hooks] logs them with log/slog and joins several
// Hooks; package [metrics/prometheus] exports them as Prometheus metrics.
//
// Algorithms (see [Algorithm]): TokenBucket (default), GCRA, LeakyBucket,
// SlidingWindow, SlidingLog and FixedWindow, chosen per limit with
// [Limit.WithAlgorithm], and Concurrency, the cap of [Concurrent]. Every store decides them by the same math (see
// Writing a Store below).
//
// Quotas and budgets by the calendar: [PerCalendarDay] and
// [PerCalendarMonth] build CalendarWindow limits, which count per calendar
// day or month in a time zone (local midnight, the 1st of the month; a
// month of 28 to 31 days, a day of 23 or 25 hours when daylight saving time
// starts or ends). A spend budget is such a limit counted in micro-units of
// a currency (package llm prices token usage); [Limit.WithRefusalStatus]
// answers its refusals with 402 Payment Required, and Retry-After is the
// time until the next period starts.
//
// # Clocks that step backwards
//
// A store decides by one clock: the Redis server's (TIME), or the clock
// given with WithClock (memory store, or a Redis store deciding by client
// clocks). A clock can step backwards: an NTP correction, a failover to a
// replica whose clock is behind, another writer whose clock is behind
// (several instances with WithClock on one Redis store). The algorithms
// measure now against the last change of the stored state
// ([ClockStepTolerance], [State]):
//
//   - Behind by at most ClockStepTolerance (128 ms, NTP's step threshold):
//     the state stands still, decided as at its last change, and every
//     RetryAfter, Reset and Delay told is lengthened by the lag, so it is
//     true by the clock that asked (at most 128 ms more than needed, below
//     Retry-After's resolution of one second).
//   - Behind by more: a step. The state is rebased, its times moved back by
//     the step, so the key has what it had at its last change and waits
//     what it would have waited had the clock not stepped; a window aligned
//     to the Unix epoch moves back by whole periods, to stay aligned, so its
//     key may wait up to one period more. Stores write the rebased state
//     even when the call charges nothing ([Limit.ClockStepped]).
//
// Either way no capacity is created, and a client that waits the
// RetryAfter it was told and retries, with no other traffic, is admitted.
// What cannot be known is the time that passed between the last change and
// the step: it counts as not having passed, so after a step a limit is as
// full as it was at its last change, not fuller.
//
// Several writers with different clocks: within the tolerance of each
// other they agree, and nothing is created. A clock ahead of another by a
// skew beyond the tolerance makes the other's calls rebase the state to
// its own time, and the next call by the clock ahead then sees skew more
// time passed. Each such alternation grants capacity to every writer
// (they share the state): up to rate × skew for a bucket, GCRA or sliding
// log, never more than the burst (quota); for a window aligned to the
// first hit, a window that ends up to skew earlier; for an epoch-aligned
// window nothing unless the skew is at least its period, and then up to a
// window's quota. The number of alternations is bounded only by the calls
// of the writers behind (each rebase is one of their calls), so over time the
// grant has no bound of its own: keep writers' clocks within the
// tolerance (NTP-disciplined clocks are, in normal operation), or let the
// Redis store decide by the server's clock (the default), which only an
// operator or a failover steps.
//
// # Writing a Store
//
// This section is for authors of stores and store decorators; users of the
// Limiter can skip it. [store/memory] and [store/redisstore] are the
// built-in stores; [store/resilient] wraps one.
//
// A [Store] has two methods. Take decides a slice of [Request] values (key,
// *[Limit], cost) atomically, all or nothing, and writes one [Decision] per
// request; Adjust charges or refunds without a check, for settlement. Both
// first call [CheckRequests], so that every store refuses the same
// malformed input with the same error, wrapping [ErrInvalidRequest]. A
// Decision's RetryAfter is [RetryNever] when the cost can never fit.
//
// The algorithms' math is written once, as pure functions of (state, now,
// cost) in integer microseconds that update a [State] in place:
// [Limit.TakeAt], [Limit.AdjustAt] and [Limit.AdjustFrom] (a refund at the
// time it was charged, so window algorithms never credit a later window);
// [Limit.ExpiresAt] says when a state becomes equivalent to the zero State,
// so the store may forget it (the TTL of a Redis key); [Limit.Params] gives the integer parameters a
// store outside Go (the Redis Lua script) needs to mirror the math, and
// [Micros] converts a time to the microseconds of State. A store keeps one
// State per key and [Limit.ID] (which changes with the limit's parameters,
// so a changed limit starts afresh) and must not keep keys in clear: they
// may be secrets. The conformance suite in [store/storetest] holds every store
// to the pure functions.
//
// A Store that wraps another should expose it with a method Unwrap() Store
// (as store/resilient and metrics/prometheus's InstrumentStore do), so that
// code given the outer store can find the inner one, as errors.Unwrap does
// for errors.
//
// [hooks]: https://pkg.go.dev/github.com/rampmeter/ratelimit/hooks
// [llm]: https://pkg.go.dev/github.com/rampmeter/ratelimit/llm
// [metrics/prometheus]: https://pkg.go.dev/github.com/rampmeter/ratelimit/metrics/prometheus
// [store/memory]: https://pkg.go.dev/github.com/rampmeter/ratelimit/store/memory
// [store/redisstore]: https://pkg.go.dev/github.com/rampmeter/ratelimit/store/redisstore
// [store/resilient]: https://pkg.go.dev/github.com/rampmeter/ratelimit/store/resilient
// [store/storetest]: https://pkg.go.dev/github.com/rampmeter/ratelimit/store/storetest
package ratelimit
