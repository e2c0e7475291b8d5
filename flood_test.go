package ratelimit_test

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/memory"
)

// TestKeyFlood sends 1,000,000 distinct keys through a Limiter's Take on a
// memory store capped at 100,000 entries, with two stacked limits (so 2
// million entries are offered): the store never holds more than its cap,
// its heap stays bounded by the cap rather than by the flood, and a heavy
// user's long-lived state survives.
func TestKeyFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000,000 keys; skipped with -short")
	}
	const maxEntries, keys = 100_000, 1_000_000
	clock := newClock() // stands still: nothing expires, every shard fills
	store, err := memory.New(memory.WithMaxKeys(maxEntries), memory.WithClock(clock.Now))
	require.NoError(t, err)
	lim, err := ratelimit.New(store, ratelimit.WithStoreTimeout(time.Hour), // not a latency test: a GC pause must not bypass
		ratelimit.WithLimits(
			ratelimit.PerMinute(10).Named("requests"),
			ratelimit.PerDay(1000).Named("tokens"),
		))
	require.NoError(t, err)
	ctx := context.Background()

	// The victim spends 9 of 10 requests and 900 of 1000 tokens. Its
	// tokens entry expires in 900 × 86.4 s, much later than any flood
	// entry (6 s for a request, 86.4 s for a token), so eviction, which
	// removes the earliest-expiring of 8 sampled entries, never picks it.
	res, err := lim.Take(ctx, "victim", 9, 900)
	require.NoError(t, err)
	require.True(t, res.Allowed)

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	buf := make([]byte, 0, 16)
	for i := range keys {
		buf = strconv.AppendInt(append(buf[:0], "flood-"...), int64(i), 10)
		res, err := lim.Take(ctx, string(buf), 1, 1)
		if err != nil || !res.Allowed {
			t.Fatalf("flood key %d: %+v, %v", i, res, err)
		}
		if i%10_000 == 9_999 && store.Len() > maxEntries {
			t.Fatalf("after %d keys the store holds %d entries, cap %d", i+1, store.Len(), maxEntries)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	// Every shard was offered far more than its share and nothing
	// expires, so the store is exactly full.
	assert.Equal(t, maxEntries, store.Len())
	st := lim.Stats()
	assert.Equal(t, uint64(keys+1), st.Allowed, "every fresh key gets a full budget: rotating keys buys budget")

	// Peek (cost 0): the victim still has exactly 1000 − 900 = 100 tokens.
	res, err = lim.Take(ctx, "victim", 0, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(100), res.Decisions[1].Remaining, "the heavy user's tokens state survived the flood")
	// Its requests entry (expiring in 9 × 6 s = 54 s) is earlier than the
	// flood's token entries (86.4 s), so a sample without a fresher flood
	// request entry may evict it: then the victim regains at most the 9
	// requests it had spent, as the memory store's threat model says.
	assert.Contains(t, []int64{1, 10}, res.Decisions[0].Remaining)
	t.Logf("victim's requests remaining after the flood: %d (1: kept, 10: evicted)", res.Decisions[0].Remaining)

	grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("heap growth over the flood: %d bytes for %d entries (%.0f B/entry)", grown, maxEntries, float64(grown)/maxEntries)
	// BenchmarkMemoryPerKey measures about 150 B per entry with short
	// keys; 1 KiB per entry is a generous bound that a store growing with
	// the flood (2,000,000 entries) would break.
	assert.Less(t, grown, int64(maxEntries*1024))
	runtime.KeepAlive(store)
}
