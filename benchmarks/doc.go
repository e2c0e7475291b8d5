// Package benchmarks measures rampmeter side by side with the Go rate
// limiters people use instead, and with physical references (a trivial Redis
// script, PING, INCR, redis-benchmark, a bare HTTP handler), so that every
// figure is a ratio measured in one run on one machine. It is a module of
// its own: the peers it imports never reach the builds of rampmeter's users.
//
//	go -C benchmarks run ./cmd/compare    # from the repository root
//
// runs everything and prints a Markdown report; see README.md for the
// sections, the knobs and how to read the ratios. The benchmarks live in
// this package's _test files (BenchmarkDecision, BenchmarkMiddleware), the
// adapters in ./adapters (one file per library; rampmeter's in one file),
// the Redis load generator in ./cmd/redisbench and the HTTP server for wrk
// in ./cmd/httpserve.
package benchmarks
