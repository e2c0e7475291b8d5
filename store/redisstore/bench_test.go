package redisstore_test

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/internal/redistest"
	"github.com/rampmeter/ratelimit/store/redisstore"
)

const benchKeys = 10_000

// BenchmarkTake measures stacked Takes (60 requests per minute and 100,000
// tokens per day, the seed scenario) against the real redis-server, over
// 10,000 caller keys, with the server's clock (TIME) as in production. Each
// op is one Take of two limits, i.e. two decisions; decisions/s is reported
// as a metric. "serial" is one goroutine, "parallel64" 64 goroutines sharing
// one client (PoolSize 64), "parallel64-pipelined" the same WithPipelining.
// Keys are deleted afterwards.
func BenchmarkTake(b *testing.B) {
	addr := redistest.Addr(b)
	rpm := ratelimit.PerMinute(600).Named("requests") // roomy: most takes are charged
	tpd := ratelimit.PerDay(100_000_000).Named("tokens")
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("api-key-%05d", i)
	}

	run := func(b *testing.B, goroutines int, opts ...redisstore.Option) {
		client := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64, ContextTimeoutEnabled: true})
		defer client.Close()
		prefix := redistest.Prefix(b)
		defer deletePrefix(b, client, prefix)
		s, err := redisstore.New(client, append([]redisstore.Option{redisstore.WithPrefix(prefix)}, opts...)...)
		if err != nil {
			b.Fatal(err)
		}
		var next atomic.Uint64
		var allowed atomic.Int64
		b.ReportAllocs()
		if goroutines > 1 {
			b.SetParallelism((goroutines + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
		}
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			reqs := make([]ratelimit.Request, 2)
			out := make([]ratelimit.Decision, 2)
			for pb.Next() {
				k := keys[next.Add(1)%benchKeys]
				reqs[0] = ratelimit.Request{Key: k, Limit: &rpm, Cost: 1}
				reqs[1] = ratelimit.Request{Key: k, Limit: &tpd, Cost: 500}
				if err := s.Take(b.Context(), reqs, out); err != nil {
					b.Error(err)
					return
				}
				if out[0].Allowed {
					allowed.Add(1)
				}
			}
		})
		b.StopTimer()
		sec := b.Elapsed().Seconds()
		b.ReportMetric(float64(2*b.N)/sec, "decisions/s")
		b.ReportMetric(float64(b.N)/sec, "takes/s")
		if allowed.Load() == 0 {
			b.Error("nothing was allowed")
		}
	}
	b.Run("serial", func(b *testing.B) {
		// RunParallel with parallelism 1 still starts GOMAXPROCS goroutines;
		// a plain loop is one goroutine.
		client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		defer client.Close()
		prefix := redistest.Prefix(b)
		defer deletePrefix(b, client, prefix)
		s, err := redisstore.New(client, redisstore.WithPrefix(prefix))
		if err != nil {
			b.Fatal(err)
		}
		reqs := make([]ratelimit.Request, 2)
		out := make([]ratelimit.Decision, 2)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			k := keys[i%benchKeys]
			reqs[0] = ratelimit.Request{Key: k, Limit: &rpm, Cost: 1}
			reqs[1] = ratelimit.Request{Key: k, Limit: &tpd, Cost: 500}
			if err := s.Take(b.Context(), reqs, out); err != nil {
				b.Fatal(err)
			}
		}
		sec := b.Elapsed().Seconds()
		b.ReportMetric(float64(2*b.N)/sec, "decisions/s")
		b.ReportMetric(float64(b.N)/sec, "takes/s")
	})
	b.Run("parallel64", func(b *testing.B) { run(b, 64) })
	b.Run("parallel64-pipelined", func(b *testing.B) { run(b, 64, redisstore.WithPipelining()) })
}

// BenchmarkKey measures the key derivation alone (HMAC-SHA256, base64 and
// concatenation), to compare with a round trip.
func BenchmarkKey(b *testing.B) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer client.Close()
	s, err := redisstore.New(client)
	if err != nil {
		b.Fatal(err)
	}
	l := ratelimit.PerMinute(60)
	b.ReportAllocs()
	for b.Loop() {
		_ = s.Key("api-key-00042", &l)
	}
}

// BenchmarkPingBaseline is one PING per op on the same server and client
// settings as BenchmarkTake/serial: the round-trip floor a Take is compared
// with.
func BenchmarkPingBaseline(b *testing.B) {
	client := redis.NewClient(&redis.Options{Addr: redistest.Addr(b), ContextTimeoutEnabled: true})
	defer client.Close()
	b.ReportAllocs()
	for b.Loop() {
		if err := client.Ping(b.Context()).Err(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTakeAlgorithms measures single-limit Takes (one decision per
// op) of each algorithm against the real redis-server, over 10,000 caller
// keys, with the server's clock (TIME): "serial" from one goroutine,
// "parallel64" from 64 goroutines sharing one client (PoolSize 64). Every
// limit is 1000 per second, which the ~10-40k decisions/s spread over
// 10,000 keys never exhaust, so every decision is charged and written.
// decisions/s is reported as a metric. Keys are deleted afterwards.
func BenchmarkTakeAlgorithms(b *testing.B) {
	addr := redistest.Addr(b)
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("api-key-%05d", i)
	}
	for _, a := range []ratelimit.Algorithm{ratelimit.TokenBucket, ratelimit.GCRA, ratelimit.LeakyBucket,
		ratelimit.SlidingWindow, ratelimit.SlidingLog, ratelimit.FixedWindow} {
		l := ratelimit.PerSecond(1000).WithAlgorithm(a)
		if err := l.Err(); err != nil {
			b.Fatal(err)
		}
		for _, goroutines := range []int{1, 64} {
			name := a.String() + "/serial"
			if goroutines > 1 {
				name = a.String() + "/parallel64"
			}
			b.Run(name, func(b *testing.B) {
				client := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64, ContextTimeoutEnabled: true})
				defer client.Close()
				prefix := redistest.Prefix(b)
				defer deletePrefix(b, client, prefix)
				s, err := redisstore.New(client, redisstore.WithPrefix(prefix))
				if err != nil {
					b.Fatal(err)
				}
				var next atomic.Uint64
				var refused atomic.Int64
				take := func(reqs []ratelimit.Request, out []ratelimit.Decision) bool {
					reqs[0] = ratelimit.Request{Key: keys[next.Add(1)%benchKeys], Limit: &l, Cost: 1}
					if err := s.Take(b.Context(), reqs, out); err != nil {
						b.Error(err)
						return false
					}
					if !out[0].Allowed {
						refused.Add(1)
					}
					return true
				}
				b.ReportAllocs()
				if goroutines == 1 {
					reqs, out := make([]ratelimit.Request, 1), make([]ratelimit.Decision, 1)
					for b.Loop() {
						if !take(reqs, out) {
							return
						}
					}
				} else {
					b.SetParallelism((goroutines + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
					b.ResetTimer()
					b.RunParallel(func(pb *testing.PB) {
						reqs, out := make([]ratelimit.Request, 1), make([]ratelimit.Decision, 1)
						for pb.Next() {
							if !take(reqs, out) {
								return
							}
						}
					})
				}
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
				if n := refused.Load(); n > 0 {
					b.Errorf("%d of %d decisions refused: the benchmark must measure admissions", n, b.N)
				}
			})
		}
	}
}

// BenchmarkTakeOne measures one-limit Takes shaped like the benchmarks
// module's Redis load (cmd/redisbench): a limit that never refuses (10^9
// per minute, so keys expire within milliseconds of their last Take), 64
// goroutines sharing one client (PoolSize 64), over 10,000 caller keys or
// one hot key, without and with WithPipelining, and a trivial EVALSHA
// ("return 1") through the same client as the ceiling the issue compares
// with. Each op is one decision; decisions/s is reported as a metric.
func BenchmarkTakeOne(b *testing.B) {
	addr := redistest.Addr(b)
	l := ratelimit.Every(1_000_000_000, time.Minute).Named("requests")
	trivial := redis.NewScript("return 1")
	for _, nkeys := range []int{benchKeys, 1} {
		keys := make([]string, nkeys)
		for i := range keys {
			keys[i] = fmt.Sprintf("api-key-%05d", i)
		}
		for _, mode := range []string{"trivial", "plain", "pipelined"} {
			b.Run(fmt.Sprintf("keys=%d/%s", nkeys, mode), func(b *testing.B) {
				client := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64, ContextTimeoutEnabled: true})
				defer client.Close()
				prefix := redistest.Prefix(b)
				defer deletePrefix(b, client, prefix)
				opts := []redisstore.Option{redisstore.WithPrefix(prefix)}
				if mode == "pipelined" {
					opts = append(opts, redisstore.WithPipelining())
				}
				s, err := redisstore.New(client, opts...)
				if err != nil {
					b.Fatal(err)
				}
				var next atomic.Uint64
				b.ReportAllocs()
				b.SetParallelism((64 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					reqs := make([]ratelimit.Request, 1)
					out := make([]ratelimit.Decision, 1)
					rk := []string{prefix + "trivial"}
					for pb.Next() {
						k := keys[next.Add(1)%uint64(nkeys)]
						if mode == "trivial" {
							if err := trivial.Run(b.Context(), client, rk).Err(); err != nil {
								b.Error(err)
								return
							}
							continue
						}
						reqs[0] = ratelimit.Request{Key: k, Limit: &l, Cost: 1}
						if err := s.Take(b.Context(), reqs, out); err != nil {
							b.Error(err)
							return
						}
						if !out[0].Allowed {
							b.Error("refused")
							return
						}
					}
				})
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
			})
		}
	}
}
