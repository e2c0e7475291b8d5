package memory

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rampmeter/ratelimit"
)

// The Store* benchmarks call the store through the ratelimit.Store
// interface, as the Limiter and the middleware do, with request and
// decision slices allocated once and reused (per goroutine in the parallel
// cases): the slices escape to the heap once, when made, and every timed
// decision must then allocate nothing.

// asStore hides s's concrete type from the compiler, so that calls go
// through the interface instead of being devirtualised.
//
//go:noinline
func asStore(s *Store) ratelimit.Store { return s }

func benchStoreTake(b *testing.B, reqs []ratelimit.Request) {
	s, err := New()
	if err != nil {
		b.Fatal(err)
	}
	warm(b, s, reqs)
	st := asStore(s)
	ctx := context.Background()
	out := make([]ratelimit.Decision, len(reqs))
	b.ReportAllocs()
	for b.Loop() {
		if err := st.Take(ctx, reqs, out); err != nil {
			b.Fatal(err)
		}
	}
	for i := range out {
		if !out[i].Allowed {
			b.Fatal("benchmark measured refusals")
		}
	}
}

// BenchmarkStoreHotKey: one goroutine, one key, one limit.
func BenchmarkStoreHotKey(b *testing.B) {
	benchStoreTake(b, []ratelimit.Request{{Key: "api-key-0123456789", Limit: benchLimit("requests"), Cost: 1}})
}

// BenchmarkStoreStack2OneKey: two limits on one key (one shard, one lock).
func BenchmarkStoreStack2OneKey(b *testing.B) {
	benchStoreTake(b, []ratelimit.Request{
		{Key: "api-key-0123456789", Limit: benchLimit("requests"), Cost: 1},
		{Key: "api-key-0123456789", Limit: benchLimit("tokens"), Cost: 500},
	})
}

// BenchmarkStoreStack2: two limits on two keys (usually two shards).
func BenchmarkStoreStack2(b *testing.B) {
	benchStoreTake(b, []ratelimit.Request{
		{Key: "api-key-0123456789", Limit: benchLimit("requests"), Cost: 1},
		{Key: "203.0.113.7", Limit: benchLimit("per-ip"), Cost: 1},
	})
}

// BenchmarkStoreParallel10kKeys: GOMAXPROCS goroutines over 10,000
// existing keys, each goroutine with its own request and decision slices.
func BenchmarkStoreParallel10kKeys(b *testing.B) {
	const nKeys = 10_000
	s, err := New()
	if err != nil {
		b.Fatal(err)
	}
	l := benchLimit("requests")
	keys := make([]string, nKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("api-key-%010d", i)
		warm(b, s, []ratelimit.Request{{Key: keys[i], Limit: l}})
	}
	st := asStore(s)
	ctx := context.Background()
	var next atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		reqs := []ratelimit.Request{{Limit: l, Cost: 1}}
		out := make([]ratelimit.Decision, 1)
		i := int(next.Add(nKeys/8) % nKeys) // goroutines start apart
		for pb.Next() {
			reqs[0].Key = keys[i]
			if i++; i == nKeys {
				i = 0
			}
			if err := st.Take(ctx, reqs, out); err != nil || !out[0].Allowed {
				b.Error("refused or failed", err)
				return
			}
		}
	})
}

// BenchmarkStoreParallelHotKey: GOMAXPROCS goroutines on one key, the
// worst case for contention on its shard's lock.
func BenchmarkStoreParallelHotKey(b *testing.B) {
	s, err := New()
	if err != nil {
		b.Fatal(err)
	}
	l := benchLimit("requests")
	warm(b, s, []ratelimit.Request{{Key: "hot", Limit: l}})
	st := asStore(s)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		reqs := []ratelimit.Request{{Key: "hot", Limit: l, Cost: 1}}
		out := make([]ratelimit.Decision, 1)
		for pb.Next() {
			if err := st.Take(ctx, reqs, out); err != nil || !out[0].Allowed {
				b.Error("refused or failed", err)
				return
			}
		}
	})
}

// BenchmarkStore10kKeys: one goroutine cycling over 10,000 existing keys,
// so that each decision finds its entry in cache less often than on a
// hot key (the cost of the index and slab lookups without contention).
func BenchmarkStore10kKeys(b *testing.B) {
	const nKeys = 10_000
	s, err := New()
	if err != nil {
		b.Fatal(err)
	}
	l := benchLimit("requests")
	keys := make([]string, nKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("api-key-%010d", i)
		warm(b, s, []ratelimit.Request{{Key: keys[i], Limit: l}})
	}
	st := asStore(s)
	ctx := context.Background()
	reqs := []ratelimit.Request{{Limit: l, Cost: 1}}
	out := make([]ratelimit.Decision, 1)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		// A stride coprime to nKeys visits every key in an order the
		// hardware prefetcher cannot follow through the slab.
		reqs[0].Key = keys[i]
		if i += 7919; i >= nKeys {
			i -= nKeys
		}
		if err := st.Take(ctx, reqs, out); err != nil || !out[0].Allowed {
			b.Fatal("refused or failed", err)
		}
	}
}

// BenchmarkStoreParallel10kKeysRefilled is BenchmarkStoreParallel10kKeys
// with a limit whose bucket refills between two visits of a key (one unit
// per 60 µs, as the peer-comparison harness configures every limiter), so
// every decision finds its entry expired and charges it again: the path
// of most keys of a real API, idle between their requests.
func BenchmarkStoreParallel10kKeysRefilled(b *testing.B) {
	const nKeys = 10_000
	s, err := New()
	if err != nil {
		b.Fatal(err)
	}
	l := ratelimit.Every(1_000_000_000, time.Minute).Named("requests")
	keys := make([]string, nKeys)
	out := make([]ratelimit.Decision, 1)
	for i := range keys {
		keys[i] = fmt.Sprintf("api-key-%010d", i)
		if err := s.Take(context.Background(), []ratelimit.Request{{Key: keys[i], Limit: &l, Cost: 1}}, out); err != nil || !out[0].Allowed {
			b.Fatal("refused or failed", err)
		}
	}
	st := asStore(s)
	ctx := context.Background()
	var next atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		reqs := []ratelimit.Request{{Limit: &l, Cost: 1}}
		out := make([]ratelimit.Decision, 1)
		i := int(next.Add(nKeys/8) % nKeys)
		for pb.Next() {
			reqs[0].Key = keys[i]
			if i++; i == nKeys {
				i = 0
			}
			if err := st.Take(ctx, reqs, out); err != nil || !out[0].Allowed {
				b.Error("refused or failed", err)
				return
			}
		}
	})
	if n := s.Len(); n > nKeys {
		b.Fatalf("%d entries for %d keys", n, nKeys)
	}
}

// asPair hides s's concrete type, as asStore does, for the Limiter's
// interfaces of one and two requests.
//
//go:noinline
func asPair(s *Store) interface {
	ratelimit.SingleTaker
	ratelimit.PairTaker
} {
	return s
}

// BenchmarkStoreTakeOne: one goroutine, one key, one limit, through
// ratelimit.SingleTaker as the Limiter calls it (values, no slices).
func BenchmarkStoreTakeOne(b *testing.B) {
	s, err := New()
	if err != nil {
		b.Fatal(err)
	}
	r := ratelimit.Request{Key: "api-key-0123456789", Limit: benchLimit("requests"), Cost: 1}
	warm(b, s, []ratelimit.Request{r})
	st := asPair(s)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if allowed, _, _, _, _, _, err := st.TakeOne(ctx, r); err != nil || !allowed {
			b.Fatal(allowed, err)
		}
	}
}

// BenchmarkStoreTakeTwo: one goroutine, two limits on one key, through
// ratelimit.PairTaker as the Limiter calls it (values, no slices).
func BenchmarkStoreTakeTwo(b *testing.B) {
	s, err := New()
	if err != nil {
		b.Fatal(err)
	}
	ra := ratelimit.Request{Key: "api-key-0123456789", Limit: benchLimit("requests"), Cost: 1}
	rb := ratelimit.Request{Key: "api-key-0123456789", Limit: benchLimit("tokens"), Cost: 500}
	warm(b, s, []ratelimit.Request{ra, rb})
	st := asPair(s)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if okA, _, _, _, _, _, okB, _, _, _, _, _, err := st.TakeTwo(ctx, ra.Key, ra.Limit, ra.Cost, rb.Key, rb.Limit, rb.Cost); err != nil || !okA || !okB {
			b.Fatal(okA, okB, err)
		}
	}
}
