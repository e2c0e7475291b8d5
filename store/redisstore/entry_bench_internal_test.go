package redisstore

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/rampmeter/ratelimit"
)

// BenchmarkEntry measures the key cache alone (entry: the Redis key and
// params of a (caller key, limit) pair) as a Take's command pays it, at the
// default size (DefaultKeyCache slots), over 10,000
// uniformly drawn caller keys (more pairs than slots: hits and misses, each
// miss an HMAC and its allocations) and over one hot key (hits only),
// serially and from parallel goroutines.
func BenchmarkEntry(b *testing.B) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	b.Cleanup(func() { _ = client.Close() })
	l := ratelimit.Every(1_000_000_000, 60_000_000_000).Named("requests")
	for _, nkeys := range []int{10_000, 1} {
		b.Run(fmt.Sprintf("keys=%d", nkeys), func(b *testing.B) {
			s, err := New(client)
			if err != nil {
				b.Fatal(err)
			}
			keys := make([]string, nkeys)
			for i := range keys {
				keys[i] = fmt.Sprintf("api-key-%05d", i)
			}
			b.ReportAllocs()
			b.Run("serial", func(b *testing.B) {
				rng := uint64(0x9E3779B97F4A7C15)
				for b.Loop() {
					rng ^= rng << 13
					rng ^= rng >> 7
					rng ^= rng << 17
					if s.entry(keys[rng%uint64(nkeys)], &l) == nil {
						b.Fatal("no entry")
					}
				}
			})
			var seed atomic.Uint64
			b.Run("parallel", func(b *testing.B) {
				b.RunParallel(func(pb *testing.PB) {
					rng := seed.Add(1)*0x9E3779B97F4A7C15 | 1
					for pb.Next() {
						rng ^= rng << 13
						rng ^= rng >> 7
						rng ^= rng << 17
						if s.entry(keys[rng%uint64(nkeys)], &l) == nil {
							b.Fatal("no entry")
						}
					}
				})
			})
		})
	}
}
