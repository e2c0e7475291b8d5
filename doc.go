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
// Observability: [Limiter.Stats] counts outcomes, and [Hooks] report each
// decided request once with its final [Result] (OnDecision), each store
// call with its operation, size, duration and error (OnStoreCall), each
// failed call (OnStoreError; every store-failure error wraps
// [ErrStoreFailed]) and each request let through without a decision
// (OnBypass). Package [hooks] logs them with log/slog and joins several
// Hooks; package [metrics/prometheus] exports them as Prometheus metrics.
//
// Algorithms (see [Algorithm]): TokenBucket (default), GCRA, LeakyBucket,
// SlidingWindow, SlidingLog and FixedWindow. Their math is written once, as
// pure functions of (state, now, cost) in integer microseconds that update
// the state in place ([Limit.TakeAt], [Limit.AdjustFrom]); the Redis script mirrors it and the
// conformance suite in store/storetest holds every store to it.
//
// [hooks]: https://pkg.go.dev/github.com/rampmeter/ratelimit/hooks
// [llm]: https://pkg.go.dev/github.com/rampmeter/ratelimit/llm
// [metrics/prometheus]: https://pkg.go.dev/github.com/rampmeter/ratelimit/metrics/prometheus
// [store/memory]: https://pkg.go.dev/github.com/rampmeter/ratelimit/store/memory
// [store/redisstore]: https://pkg.go.dev/github.com/rampmeter/ratelimit/store/redisstore
package ratelimit
