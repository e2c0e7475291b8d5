package storetest

import (
	"context"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/memory"
	"github.com/rampmeter/ratelimit/store/redisstore"
)

// modelStore is the model behind a mutex: the reference implementation the
// suite's expected values must agree with.
type modelStore struct {
	mu  sync.Mutex
	m   model
	now time.Time
}

func (s *modelStore) call(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision, take bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := ratelimit.CheckRequests(reqs, out, take); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var ds []ratelimit.Decision
	if take {
		ds = s.m.take(reqs, ratelimit.Micros(s.now))
	} else {
		ds = s.m.adjust(reqs, ratelimit.Micros(s.now))
	}
	copy(out, ds)
	return nil
}

func (s *modelStore) Take(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	return s.call(ctx, reqs, out, true)
}

func (s *modelStore) Adjust(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	return s.call(ctx, reqs, out, false)
}

func (s *modelStore) setTime(t time.Time) {
	s.mu.Lock()
	s.now = t
	s.mu.Unlock()
}

// TestModel runs the suite against the model, so that a wrong expected
// value in a scenario shows up here rather than as a store bug.
func TestModel(t *testing.T) {
	Run(t, func(t *testing.T) Harness {
		s := &modelStore{m: model{states: map[modelKey]ratelimit.State{}}}
		return Harness{Store: s, SetTime: s.setTime}
	})
}

// FuzzStoresAgree feeds the property tests' sequence generator from the
// fuzzer's bytes (byteSource: each choice reads as few bytes as its range
// needs; missing bytes read as zeros) and requires the memory store and
// the Redis store on miniredis (deciding by Redis TIME) to decide every
// call exactly as the model does, headers included. Run it with
//
//	go test ./store/storetest -run '^$' -fuzz FuzzStoresAgree -fuzztime 5m
func FuzzStoresAgree(f *testing.F) {
	// A few hand-made seeds: the first byte picks the algorithm.
	for a := range byte(len(Algorithms)) {
		f.Add([]byte{a})
		f.Add([]byte{a, 1, 0, 2, 1, 30, 3, 0, 7, 2, 1, 0, 4, 9, 9, 1, 2, 3, 4, 5, 6, 7, 8, 250, 251, 252, 253, 254, 255})
	}
	memStore, err := memory.New(memory.WithClock(fuzzClock.Now))
	if err != nil {
		f.Fatal(err)
	}
	mem := Harness{Store: memStore, SetTime: fuzzClock.Set}
	mini := newMiniHarness(f)
	var n atomic.Int64
	f.Fuzz(func(t *testing.T, data []byte) {
		src := &byteSource{data: data}
		algo := Algorithms[src.draw(0, int64(len(Algorithms)-1), "algorithm")]
		seq := drawSequence(src, algo)
		id := "f" + strconv.FormatInt(n.Add(1), 10)
		runSequence(t, mem, seq, id)
		runSequence(t, mini, seq, id)
	})
}

// fuzzClock is the memory store's clock in FuzzStoresAgree.
var fuzzClock = &manualClock{}

type manualClock struct{ us atomic.Int64 }

func (c *manualClock) Now() time.Time  { return time.UnixMicro(c.us.Load()).UTC() }
func (c *manualClock) Set(t time.Time) { c.us.Store(ratelimit.Micros(t)) }

// newMiniHarness returns a Redis store on a miniredis that lives as long as
// tb, deciding by Redis TIME, which SetTime sets. Key TTLs count down only
// when the clock passes its latest value, as a real server's absolute
// expiry times would, so no key expires before its state is forgettable.
func newMiniHarness(tb testing.TB) Harness {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(mr.Close)
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	tb.Cleanup(func() { _ = client.Close() })
	s, err := redisstore.New(client)
	if err != nil {
		tb.Fatal(err)
	}
	var mu sync.Mutex
	latest := start
	mr.SetTime(latest)
	return Harness{Store: s, SetTime: func(t time.Time) {
		mu.Lock()
		defer mu.Unlock()
		mr.SetTime(t)
		if t.After(latest) {
			mr.FastForward(t.Sub(latest))
			latest = t
		}
	}}
}

// TestByteSource pins the fuzz decoding: ranges read the bytes they need,
// little-endian, modulo their size, and exhausted input reads as zeros.
func TestByteSource(t *testing.T) {
	src := &byteSource{data: []byte{7, 0x34, 0x12, 200}}
	if got := src.draw(0, 5, ""); got != 1 { // 7 mod 6
		t.Errorf("draw(0, 5) = %d, want 1", got)
	}
	if got := src.draw(10, 10+65535, ""); got != 10+0x1234 {
		t.Errorf("draw(10, 65545) = %d, want %d", got, 10+0x1234)
	}
	if got := src.draw(-1, 1, ""); got != -1+200%3 {
		t.Errorf("draw(-1, 1) = %d, want %d", got, -1+200%3)
	}
	if got := src.draw(3, 1<<40, ""); got != 3 {
		t.Errorf("draw on exhausted input = %d, want the low end 3", got)
	}
	full := &byteSource{data: []byte{1, 2, 3, 4, 5, 6, 7, 0x80}}
	// 0x8007060504030201 above MinInt64 = 0x8000000000000000, modulo 2^64.
	if got := full.draw(math.MinInt64, math.MaxInt64, ""); got != 0x0007060504030201 {
		t.Errorf("full-range draw = %#x", got)
	}
	if seq := drawSequence(&byteSource{}, ratelimit.SlidingLog); len(seq.calls) != 1 || len(seq.limits) != 2 {
		t.Errorf("empty input: %v", seq)
	}
}
