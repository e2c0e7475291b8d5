package benchmarks_test

import (
	"context"
	"hash/crc32"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rampmeter/ratelimit/benchmarks/decider"
)

const distinctKeys = 10000

var keys10k = decider.Keys(distinctKeys)

// BenchmarkDecision: cost of one "allow one request for key K" decision,
// in-memory stores only, limit so high that nothing is denied.
//
//	case=serial-hot     one goroutine, one key
//	case=parallel-10k   b.RunParallel (GOMAXPROCS goroutines), 10,000 pre-created keys picked at random
//	case=parallel-hot   b.RunParallel, one key (worst-case contention)
func BenchmarkDecision(b *testing.B) {
	for _, s := range decider.Specs(decider.Memory) {
		b.Run("lib="+s.Name, func(b *testing.B) {
			b.Run("case=serial-hot", func(b *testing.B) { benchSerial(b, s) })
			if !s.SingleKey {
				b.Run("case=parallel-10k", func(b *testing.B) { benchParallel(b, s, keys10k) })
			}
			b.Run("case=parallel-hot", func(b *testing.B) { benchParallel(b, s, []string{"hot"}) })
		})
	}
}

func benchSerial(b *testing.B, s decider.Spec) {
	d := mustNew(b, s, decider.HighLimit())
	defer decider.Close(d)
	ctx := context.Background()
	_, _ = d.Allow(ctx, "hot") // create the bucket outside the timed loop
	denied, errs := 0, 0
	b.ReportAllocs()
	for b.Loop() {
		ok, err := d.Allow(ctx, "hot")
		if err != nil {
			errs++
		} else if !ok {
			denied++
		}
	}
	if denied > 0 {
		b.Errorf("%s denied %d requests; the harness expects none", s.Name, denied)
	}
	if errs > 0 {
		b.ReportMetric(float64(errs)/float64(b.N), "errors/op")
	}
}

func benchParallel(b *testing.B, s decider.Spec, keys []string) {
	d := mustNew(b, s, decider.HighLimit())
	defer decider.Close(d)
	ctx := context.Background()
	for _, k := range keys { // steady state: buckets exist already
		_, _ = d.Allow(ctx, k)
	}
	var seed atomic.Uint64
	var denied, errs atomic.Int64
	n := uint64(len(keys))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		w := decider.ForWorker(d)
		rng := xorshift(seed.Add(0x9E3779B97F4A7C15) | 1)
		var den, er int64
		for pb.Next() {
			k := keys[0]
			if n > 1 {
				k = keys[rng.next()%n]
			}
			ok, err := w.Allow(ctx, k)
			if err != nil {
				er++
			} else if !ok {
				den++
			}
		}
		denied.Add(den)
		errs.Add(er)
	})
	if denied.Load() > 0 {
		b.Errorf("%s: %d denied; the harness expects none", s.Name, denied.Load())
	}
	// Errors are a result, not a harness failure: e.g. throttled's CAS loop
	// gives up after 10 attempts under hot-key contention. Reported per op.
	if e := errs.Load(); e > 0 {
		b.ReportMetric(float64(e)/float64(b.N), "errors/op")
	}
}

// BenchmarkNoiseProbe is a fixed CPU-only workload (CRC32 of 4 KiB). Its
// run-to-run spread is the machine's noise floor for the numbers above.
func BenchmarkNoiseProbe(b *testing.B) {
	buf := make([]byte, 4096)
	for i := range buf {
		buf[i] = byte(i)
	}
	tab := crc32.MakeTable(crc32.Castagnoli)
	var sink uint32
	for b.Loop() {
		sink += crc32.Update(0, tab, buf)
	}
	_ = sink
}

// BenchmarkClockNow: every limiter reads the clock at least once per
// decision; this is its price on the machine at hand.
func BenchmarkClockNow(b *testing.B) {
	var sink int64
	for b.Loop() {
		sink += time.Now().UnixNano()
	}
	_ = sink
}
