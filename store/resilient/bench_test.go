package resilient_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/memory"
	"github.com/rampmeter/ratelimit/store/resilient"
)

// BenchmarkTake measures what the guard adds to a healthy primary (here the
// memory store, so the overhead is not hidden behind a network round trip):
// one goroutine and one context per call. Keys rotate over 10,000.
func BenchmarkTake(b *testing.B) {
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = "key-" + strconv.Itoa(i)
	}
	l := ratelimit.PerSecond(1_000_000)
	run := func(b *testing.B, s ratelimit.Store) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			reqs := []ratelimit.Request{{Limit: &l, Cost: 1}}
			out := make([]ratelimit.Decision, 1)
			i := 0
			for pb.Next() {
				reqs[0].Key = keys[i%len(keys)]
				i++
				if err := s.Take(b.Context(), reqs, out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("memory", func(b *testing.B) {
		m, err := memory.New()
		if err != nil {
			b.Fatal(err)
		}
		run(b, m)
	})
	b.Run("resilient(memory)", func(b *testing.B) {
		m, err := memory.New()
		if err != nil {
			b.Fatal(err)
		}
		s, err := resilient.New(m, resilient.WithTimeout(time.Second)) // a loaded test machine can stall 50 ms
		if err != nil {
			b.Fatal(err)
		}
		run(b, s)
	})
	b.Run("resilient(memory)/open-circuit-fallback", func(b *testing.B) {
		local, err := memory.New()
		if err != nil {
			b.Fatal(err)
		}
		s, err := resilient.New(&primary{fail: errDown}, resilient.WithFallback(local, resilient.EvenShare(4)), resilient.WithBackoff(1<<40, 1<<40))
		if err != nil {
			b.Fatal(err)
		}
		run(b, s)
	})
}
