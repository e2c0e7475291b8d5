package memory

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/rampmeter/ratelimit"
)

// Review of 6ddd977's shard layout (the clock on the lock's cache line).
// TestShardHotLine checks offsets inside shardData; these check the
// addresses the shards actually get, on the architecture the tests run on
// (run them with GOARCH=386 too). A slice of shards of more than 512 bytes
// and at most 32 KiB (2 to 128 shards, the default 64 among them) is a
// small object with pointers, which Go 1.22+ allocates with an 8-byte
// header in front: the shards then start 8 bytes past a 64-byte line, not
// on one.

// line is the cache line of the architectures the layout is tuned for.
const line = 64

// hotEnd is the end of the words every decision on an existing entry
// reads or writes besides the entry (see shardData): the lock, the clock,
// the slab's data pointer and length (sh.slab[i]) and the index's
// (index.get reads len(x.cells) and x.cells[i]; neither capacity is read
// on that path).
func hotEnd() uintptr {
	var sd shardData
	return unsafe.Offsetof(sd.index) + unsafe.Offsetof(sd.index.cells) + 2*unsafe.Sizeof(uintptr(0))
}

// reviewShardCounts returns the shard counts reviewed, the small ones
// several times (each allocation may land in another slot of its span).
func reviewShardCounts() []int {
	var ns []int
	for _, n := range []int{1, 2, 4, 8, 16, 32, DefaultShards, 128} {
		for range 4 {
			ns = append(ns, n)
		}
	}
	return append(ns, 256, 1024, MaxShards)
}

// TestShardHotWordsShareALineReview: in every shard of stores of 1 to
// MaxShards shards, the hot words (hotEnd) lie in one 64-byte line at
// their real addresses. On 64-bit platforms they do, by luck of the size
// classes (every class a 2..128-shard slice falls in is a multiple of 64
// bytes, so the 8-byte header leaves the shards at 8 mod 64, and the hot
// words are [8, 64)). On 32-bit platforms (GOARCH=386: 128-byte shards,
// a header from 128 bytes up, size classes such as 288 that are not
// multiples of 64) a slice of 2 shards lands at 8 or at 40 mod 64,
// depending on its slot in the span, and at 40 its hot words straddle two
// lines: reported, not failed, there (see the review report for the fix).
// Each count is allocated several times, to land in several slots.
func TestShardHotWordsShareALineReview(t *testing.T) {
	var bad []string
	for _, n := range reviewShardCounts() {
		s, err := New(WithShards(n))
		if err != nil {
			t.Fatal(err)
		}
		base := uintptr(unsafe.Pointer(&s.shards[0]))
		for i := range s.shards {
			start := uintptr(unsafe.Pointer(&s.shards[i]))
			if first, last := start/line, (start+hotEnd()-1)/line; first != last {
				bad = append(bad, fmt.Sprintf("%d shards (the first at %d mod %d): shard %d's hot words [0, %d) span two lines",
					n, base%line, line, i, hotEnd()))
				break
			}
		}
		t.Logf("%d shards: the first at %d mod 64, %d mod 128", n, base%64, base%128)
	}
	if len(bad) == 0 {
		return
	}
	if unsafe.Sizeof(uintptr(0)) == 4 {
		t.Skipf("known on 32-bit platforms (shards not line-aligned):\n%s", strings.Join(bad, "\n"))
	}
	t.Fatal(strings.Join(bad, "\n"))
}

// TestShardsShareNoLineReview: no 64-byte line holds fields of two shards
// (the padding may share a line with the next shard: it is never
// touched). On 32-bit platforms, when the slice lands at 40 mod 64 (see
// TestShardHotWordsShareALineReview), shard i's last fields (seed,
// lastSweep) share a line with shard i+1's lock and clock: reported, not
// failed, there. (At main the last field was the clock, written by every
// decision, so 6ddd977 makes that case better, not worse.)
func TestShardsShareNoLineReview(t *testing.T) {
	data := unsafe.Sizeof(shardData{})
	var bad []string
	for _, n := range reviewShardCounts() {
		s, err := New(WithShards(n))
		if err != nil {
			t.Fatal(err)
		}
		pairShared := 0
		for i := 0; i+1 < len(s.shards); i++ {
			end := uintptr(unsafe.Pointer(&s.shards[i])) + data - 1 // shard i's last field byte
			next := uintptr(unsafe.Pointer(&s.shards[i+1]))
			if end/line >= next/line {
				bad = append(bad, fmt.Sprintf("%d shards (the first at %d mod %d): shard %d's fields end in the line where shard %d starts",
					n, uintptr(unsafe.Pointer(&s.shards[0]))%line, line, i, i+1))
				break
			}
			if end/(2*line) >= next/(2*line) {
				pairShared++
			}
		}
		if pairShared > 0 {
			// cacheLine (128) is meant to keep shards apart for the
			// adjacent-line prefetcher too; it cannot while the slice
			// does not start on a 128-byte boundary (see the report).
			t.Logf("%d shards: %d neighbours share a 128-byte pair of lines", n, pairShared)
		}
	}
	if len(bad) == 0 {
		return
	}
	if unsafe.Sizeof(uintptr(0)) == 4 {
		t.Skipf("known on 32-bit platforms (shards not line-aligned):\n%s", strings.Join(bad, "\n"))
	}
	t.Fatal(strings.Join(bad, "\n"))
}

// TestHotKeyConcurrentExactReview decides one hot key from many
// goroutines at once through TakeOne, TakeTwo and Take (stacks over two
// shards included) on the default clock, for the race detector and for
// exactness: limits that refill one unit per 100 years admit exactly
// their burst, whatever the interleaving, and every shard's clock (read
// before locking since 650824b) never puts a key's decision before an
// earlier one of the same goroutine.
func TestHotKeyConcurrentExactReview(t *testing.T) {
	s, err := New(WithShards(4))
	if err != nil {
		t.Fatal(err)
	}
	const century = 100 * 365 * 24 * time.Hour
	la := ratelimit.Every(1, century/1000).WithBurst(300).Named("a") // one unit per 36.5 days
	lb := ratelimit.Every(1, century/1000).WithBurst(200).Named("b")
	if la.Err() != nil || lb.Err() != nil {
		t.Fatal(la.Err(), lb.Err())
	}
	// A second key in another shard, for two-shard stacks.
	other := "cold"
	for i := 0; s.hash(other)&s.mask == s.hash("hot")&s.mask; i++ {
		other = "cold" + string(rune('a'+i))
	}
	var admittedA, admittedB, admittedOther atomic.Int64
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lastAt int64
			for i := range 400 {
				var at int64
				switch (g + i) % 3 {
				case 0:
					ok, _, _, _, _, a, err := s.TakeOne(ctx, ratelimit.Request{Key: "hot", Limit: &la, Cost: 1})
					if err != nil {
						t.Error(err)
						return
					}
					if ok {
						admittedA.Add(1)
					}
					at = a
				case 1:
					okA, _, _, _, _, a, okB, _, _, _, _, _, err := s.TakeTwo(ctx, "hot", &la, 1, "hot", &lb, 1)
					if err != nil {
						t.Error(err)
						return
					}
					if okA && okB { // all or nothing: a limit with room reports Allowed in a refused stack
						admittedA.Add(1)
						admittedB.Add(1)
					}
					at = a
				default:
					reqs := []ratelimit.Request{{Key: "hot", Limit: &lb, Cost: 1}, {Key: other, Limit: &la, Cost: 1}}
					out := make([]ratelimit.Decision, 2)
					if err := s.Take(ctx, reqs, out); err != nil {
						t.Error(err)
						return
					}
					if out[0].Allowed && out[1].Allowed {
						admittedB.Add(1)
						admittedOther.Add(1)
					}
					at = out[0].At
					if out[1].At != at {
						t.Errorf("one stack, two times: %d %d", at, out[1].At)
					}
				}
				if at < lastAt {
					t.Errorf("goroutine %d: decision at %d after one at %d", g, at, lastAt)
				}
				lastAt = at
			}
		}()
	}
	wg.Wait()
	// 8×400 calls: a third of them each way, far more than the bursts.
	if got := admittedA.Load(); got != 300 {
		t.Errorf("limit a on the hot key admitted %d, want exactly its burst 300", got)
	}
	if got := admittedB.Load(); got != 200 {
		t.Errorf("limit b on the hot key admitted %d, want exactly its burst 200", got)
	}
	if got := admittedOther.Load(); got > 300 {
		t.Errorf("limit a on %q admitted %d, more than its burst", other, got)
	}
}
