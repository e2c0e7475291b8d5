package memory

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
	_ "time/tzdata" // the calendar benchmark's zone

	"github.com/rampmeter/ratelimit"
)

// Benchmarks decide against existing entries with the default clock, as in
// production. The limits refill one unit per µs with a
// burst of 2^50 units, and every entry is created with a large charge
// first, so each timed Take is allowed and charged and its entry stays
// alive for the whole run: the measured path is the full read-decide-write
// on an existing key.

func benchLimit(name string) *ratelimit.Limit {
	l := ratelimit.PerSecond(1_000_000).WithBurst(1 << 50).Named(name)
	return &l
}

// warm creates each entry with a charge that takes about 11 days to drain.
func warm(b *testing.B, s *Store, reqs []ratelimit.Request) {
	b.Helper()
	w := make([]ratelimit.Request, len(reqs))
	for i, r := range reqs {
		w[i] = ratelimit.Request{Key: r.Key, Limit: r.Limit, Cost: 1 << 40}
	}
	if err := s.Take(context.Background(), w, make([]ratelimit.Decision, len(w))); err != nil {
		b.Fatal(err)
	}
}

func benchTake(b *testing.B, reqs []ratelimit.Request) {
	s, err := New()
	if err != nil {
		b.Fatal(err)
	}
	warm(b, s, reqs)
	ctx := context.Background()
	out := make([]ratelimit.Decision, len(reqs))
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Take(ctx, reqs, out); err != nil {
			b.Fatal(err)
		}
	}
	if !out[0].Allowed {
		b.Fatal("benchmark measured refusals")
	}
}

func BenchmarkTakeHotKey(b *testing.B) {
	benchTake(b, []ratelimit.Request{{Key: "api-key-0123456789", Limit: benchLimit("requests"), Cost: 1}})
}

func BenchmarkTakeStack2OneKey(b *testing.B) {
	benchTake(b, []ratelimit.Request{
		{Key: "api-key-0123456789", Limit: benchLimit("requests"), Cost: 1},
		{Key: "api-key-0123456789", Limit: benchLimit("tokens"), Cost: 500},
	})
}

func BenchmarkTakeStack2TwoKeys(b *testing.B) {
	benchTake(b, []ratelimit.Request{
		{Key: "api-key-0123456789", Limit: benchLimit("requests"), Cost: 1},
		{Key: "203.0.113.7", Limit: benchLimit("per-ip"), Cost: 1},
	})
}

// BenchmarkTakeHotKeyRefused measures the refusal path: the key's bucket is
// empty and the clock's progress never refills a whole unit of a daily limit.
func BenchmarkTakeHotKeyRefused(b *testing.B) {
	l := ratelimit.PerDay(10)
	s, err := New()
	if err != nil {
		b.Fatal(err)
	}
	reqs := []ratelimit.Request{{Key: "api-key-0123456789", Limit: &l, Cost: 1}}
	out := make([]ratelimit.Decision, 1)
	ctx := context.Background()
	_ = s.Take(ctx, []ratelimit.Request{{Key: reqs[0].Key, Limit: &l, Cost: 10}}, out)
	b.ReportAllocs()
	for b.Loop() {
		_ = s.Take(ctx, reqs, out)
	}
	if out[0].Allowed {
		b.Fatal("benchmark measured admissions")
	}
}

// BenchmarkTakeParallel spreads decisions over 10,000 existing keys from
// GOMAXPROCS goroutines.
func BenchmarkTakeParallel10kKeys(b *testing.B) {
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
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		reqs := []ratelimit.Request{{Limit: l, Cost: 1}}
		out := make([]ratelimit.Decision, 1)
		i := int(time.Now().UnixNano() % nKeys) // goroutines start apart
		for pb.Next() {
			reqs[0].Key = keys[i]
			if i++; i == nKeys {
				i = 0
			}
			if err := s.Take(ctx, reqs, out); err != nil || !out[0].Allowed {
				b.Error("refused or failed", err)
				return
			}
		}
	})
}

// BenchmarkTakeParallelHotKey is the worst case for contention: every
// goroutine decides on one key, so one shard's lock serialises them.
func BenchmarkTakeParallelHotKey(b *testing.B) {
	s, err := New()
	if err != nil {
		b.Fatal(err)
	}
	l := benchLimit("requests")
	warm(b, s, []ratelimit.Request{{Key: "hot", Limit: l}})
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		reqs := []ratelimit.Request{{Key: "hot", Limit: l, Cost: 1}}
		out := make([]ratelimit.Decision, 1)
		for pb.Next() {
			_ = s.Take(ctx, reqs, out)
		}
	})
}

// BenchmarkTakeNewKeysAtCap measures a flood of never-seen keys into a full
// store: every decision inserts an entry and evicts one (the key-rotation
// attack the eviction policy is built for). Each insertion allocates the
// copy of its key.
func BenchmarkTakeNewKeysAtCap(b *testing.B) {
	const nKeys = 1 << 18
	c := &fakeClock{}
	c.Set(t0)
	s, err := New(WithClock(c.Now), WithMaxKeys(10_000))
	if err != nil {
		b.Fatal(err)
	}
	l := ratelimit.PerDay(1000)
	keys := make([]string, nKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("rotating-%010d", i)
	}
	reqs := []ratelimit.Request{{Limit: &l, Cost: 1}}
	out := make([]ratelimit.Decision, 1)
	ctx := context.Background()
	for _, k := range keys[:20_000] { // fill the store
		reqs[0].Key = k
		_ = s.Take(ctx, reqs, out)
	}
	b.ReportAllocs()
	i := 20_000
	for b.Loop() {
		reqs[0].Key = keys[i%nKeys]
		i++
		_ = s.Take(ctx, reqs, out)
	}
	if s.Len() > 10_000 {
		b.Fatal("cap exceeded")
	}
}

// BenchmarkMemoryPerKey measures the heap held per stored entry with
// 1,000,000 distinct keys of 18 bytes under one limit: the index slot, the
// slab entry and its name, the copy of the key, and the spare capacity of
// the index and the slab.
func BenchmarkMemoryPerKey(b *testing.B) {
	const n = 1_000_000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("api-key-%010d", i)
	}
	c := &fakeClock{}
	c.Set(t0)
	l := ratelimit.PerDay(1000)
	ctx := context.Background()
	var perKey float64
	b.ReportAllocs()
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		s, err := New(WithClock(c.Now))
		if err != nil {
			b.Fatal(err)
		}
		reqs := []ratelimit.Request{{Limit: &l, Cost: 1}}
		out := make([]ratelimit.Decision, 1)
		for _, k := range keys {
			reqs[0].Key = k
			_ = s.Take(ctx, reqs, out)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if s.Len() != n {
			b.Fatalf("stored %d entries, want %d", s.Len(), n)
		}
		perKey = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / n
		runtime.KeepAlive(s)
	}
	b.ReportMetric(perKey, "B/key")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/insert")
}

// BenchmarkTakeHotKeyFixedClock is BenchmarkTakeHotKey with a clock that
// costs nothing, to separate the store's own cost from the clock read.
func BenchmarkTakeHotKeyFixedClock(b *testing.B) {
	now := t0
	s, err := New(WithClock(func() time.Time { return now }))
	if err != nil {
		b.Fatal(err)
	}
	reqs := []ratelimit.Request{{Key: "api-key-0123456789", Limit: benchLimit("requests"), Cost: 1}}
	warm(b, s, reqs)
	ctx := context.Background()
	out := make([]ratelimit.Decision, 1)
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Take(ctx, reqs, out); err != nil {
			b.Fatal(err)
		}
	}
	if !out[0].Allowed {
		b.Fatal("benchmark measured refusals")
	}
}

// tickClock is a clock that advances 1µs per reading, so that the state
// each algorithm keeps stays the same size however many iterations run.
type tickClock struct{ us atomic.Int64 }

func (c *tickClock) Now() time.Time { return time.UnixMicro(c.us.Add(1)) }

// algorithmBench is one algorithm's benchmark configuration: a limit that
// admits every decision at one decision per µs of the tick clock, for one
// hot key (serial) and for 10,000 keys each visited once per 10,000 µs
// (parallel), and the charge that puts each key's state in place first.
type algorithmBench struct {
	serial, parallel ratelimit.Limit
	warm             int64
}

// algorithmBenches: the buckets refill one unit per µs, with a burst of
// 2^50 and a warm charge of 2^40 units (12.7 days to drain), so a key's
// state never expires; the windows count 4,000,000 per second against
// the 1,000,000 decisions a second holds; the log holds 50 live entries
// per key in both settings (100 per 50µs on one key, 100 per 500ms over
// 10,000 keys).
func algorithmBenches() []algorithmBench {
	us := time.Microsecond
	bucket := func(a ratelimit.Algorithm) algorithmBench {
		l := ratelimit.Every(1, us).WithBurst(1 << 50).WithAlgorithm(a)
		return algorithmBench{l, l, 1 << 40}
	}
	window := func(a ratelimit.Algorithm) algorithmBench {
		l := ratelimit.Every(4_000_000, time.Second).WithAlgorithm(a)
		return algorithmBench{l, l, 1}
	}
	log := ratelimit.SlidingLog
	return []algorithmBench{
		bucket(ratelimit.TokenBucket), bucket(ratelimit.GCRA), bucket(ratelimit.LeakyBucket),
		window(ratelimit.SlidingWindow),
		{ratelimit.Every(100, 50*us).WithAlgorithm(log), ratelimit.Every(100, 500*time.Millisecond).WithAlgorithm(log), 1},
		window(ratelimit.FixedWindow),
		calendarBench(),
	}
}

// calendarBench: a month in New York of 2^49 units, which the benchmarks
// never spend: the period's boundaries are computed (time.Date in the
// zone) on every decision.
func calendarBench() algorithmBench {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		panic(err) // the zone database is embedded (time/tzdata)
	}
	l := ratelimit.PerCalendarMonth(1<<49, ny)
	return algorithmBench{l, l, 1}
}

// BenchmarkAlgorithms measures one decision per op for each algorithm:
// ExistingKey on one key that already has state, from one goroutine;
// Parallel10kKeys over 10,000 existing keys from GOMAXPROCS goroutines.
// Every decision is allowed and charged (the full read-decide-write path
// on an existing entry).
func BenchmarkAlgorithms(b *testing.B) {
	for _, ab := range algorithmBenches() {
		for _, l := range []ratelimit.Limit{ab.serial, ab.parallel} {
			if err := l.Err(); err != nil {
				b.Fatal(err)
			}
		}
		newStore := func(b *testing.B) *Store {
			c := &tickClock{}
			c.us.Store(ratelimit.Micros(t0))
			s, err := New(WithClock(c.Now))
			if err != nil {
				b.Fatal(err)
			}
			return s
		}
		ctx := context.Background()
		b.Run(ab.serial.Algorithm().String()+"/ExistingKey", func(b *testing.B) {
			s := newStore(b)
			l := ab.serial
			reqs := []ratelimit.Request{{Key: "api-key-0123456789", Limit: &l, Cost: ab.warm}}
			out := make([]ratelimit.Decision, 1)
			_ = s.Take(ctx, reqs, out)
			reqs[0].Cost = 1
			for range 100 { // the log at its steady size
				_ = s.Take(ctx, reqs, out)
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := s.Take(ctx, reqs, out); err != nil || !out[0].Allowed {
					b.Fatalf("refused or failed: %v %+v", err, out[0])
				}
			}
		})
		b.Run(ab.parallel.Algorithm().String()+"/Parallel10kKeys", func(b *testing.B) {
			const nKeys = 10_000
			s := newStore(b)
			l := ab.parallel
			keys := make([]string, nKeys)
			out := make([]ratelimit.Decision, 1)
			for i := range keys {
				keys[i] = fmt.Sprintf("api-key-%010d", i)
				_ = s.Take(ctx, []ratelimit.Request{{Key: keys[i], Limit: &l, Cost: ab.warm}}, out)
			}
			if l.Algorithm() == ratelimit.SlidingLog {
				// 50 laps: every key's log at its steady 50 entries.
				for range 49 {
					for _, k := range keys {
						_ = s.Take(ctx, []ratelimit.Request{{Key: k, Limit: &l, Cost: 1}}, out)
					}
				}
			}
			var next atomic.Uint64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				reqs := []ratelimit.Request{{Limit: &l, Cost: 1}}
				out := make([]ratelimit.Decision, 1)
				i := int(next.Add(nKeys/8) % nKeys) // goroutines start apart
				for pb.Next() {
					reqs[0].Key = keys[i]
					if i++; i == nKeys {
						i = 0
					}
					if err := s.Take(ctx, reqs, out); err != nil || !out[0].Allowed {
						b.Errorf("refused or failed: %v %+v", err, out[0])
						return
					}
				}
			})
		})
	}
}

// BenchmarkTakeHotKeyStackArrays calls the concrete *Store with request and
// decision arrays on the caller's stack, built afresh every call: the
// methods of *Store keep neither slice, so neither escapes (0 allocs/op),
// unlike the same call through the ratelimit.Store interface.
func BenchmarkTakeHotKeyStackArrays(b *testing.B) {
	s, err := New()
	if err != nil {
		b.Fatal(err)
	}
	l := benchLimit("requests")
	warm(b, s, []ratelimit.Request{{Key: "api-key-0123456789", Limit: l}})
	ctx := context.Background()
	allowed := 0
	b.ReportAllocs()
	for b.Loop() {
		reqs := [1]ratelimit.Request{{Key: "api-key-0123456789", Limit: l, Cost: 1}}
		var out [1]ratelimit.Decision
		if err := s.Take(ctx, reqs[:], out[:]); err != nil {
			b.Fatal(err)
		}
		if out[0].Allowed {
			allowed++
		}
	}
	if allowed != b.N {
		b.Fatal("benchmark measured refusals")
	}
}
