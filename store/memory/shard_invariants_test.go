package memory

import (
	"context"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
)

// checkShard verifies the shard's structure: every used slot is reachable
// from the index by its key's hash, chains hold only their hash's keys,
// free slots are empty, live counts the used slots, and logs belong to
// used slots.
func checkShard(t *testing.T, sh *shard) {
	t.Helper()
	used := 0
	inChains := map[int32]bool{}
	sh.index.each(func(h uint64, head int32) {
		require.NotEqual(t, int32(none), head)
		require.Equal(t, head, sh.index.get(h), "hash %x not found where it is", h)
		for i := head; i != none; i = sh.names[i].next {
			require.False(t, inChains[i], "slot %d in two chains or a cycle", i)
			inChains[i] = true
			require.NotEmpty(t, sh.names[i].key, "free slot %d in a chain", i)
			require.Equal(t, h, maphash.String(sh.seed, sh.names[i].key), "slot %d in another hash's chain", i)
		}
	})
	for i := range sh.names {
		if sh.names[i].key != "" {
			used++
			require.True(t, inChains[int32(i)], "used slot %d unreachable", i)
		}
	}
	require.Equal(t, used, sh.live)
	require.LessOrEqual(t, sh.live, sh.max)
	require.Equal(t, len(sh.slab), used+len(sh.free))
	for _, f := range sh.free {
		require.Empty(t, sh.names[f].key, "free slot %d in use", f)
	}
	for slot := range sh.logs {
		require.NotEmpty(t, sh.names[slot].key, "log of free slot %d", slot)
	}
}

// TestShardInvariantsUnderEviction runs random stacks over many keys
// and limits (up to 12 limits on one key) through shards of 1 to 5
// entries, so that nearly every insert sweeps or evicts, while the clock
// jumps forward and back; after every call each shard's structure must be
// intact.
func TestShardInvariantsUnderEviction(t *testing.T) {
	algs := []ratelimit.Algorithm{ratelimit.TokenBucket, ratelimit.GCRA, ratelimit.FixedWindow,
		ratelimit.SlidingWindow, ratelimit.SlidingLog, ratelimit.LeakyBucket}
	var limits []ratelimit.Limit
	for i := range 12 {
		l := ratelimit.Every(4, time.Duration(1+i%3)*time.Second).WithAlgorithm(algs[i%len(algs)]).Named(fmt.Sprint("l", i))
		require.NoError(t, l.Err())
		limits = append(limits, l)
	}
	for seed := range uint64(30) {
		rng := rand.New(rand.NewPCG(seed, 11))
		s, c := newTestStore(t, WithShards(2), WithMaxKeys(2+rng.IntN(9)))
		now := t0
		for range 600 {
			now = now.Add(time.Duration(rng.IntN(3_000_000)-500_000) * time.Microsecond)
			if rng.IntN(50) == 0 {
				now = now.Add(2 * time.Minute)
			}
			c.Set(now)
			n := 1 + rng.IntN(14)
			reqs := make([]ratelimit.Request, n)
			take := rng.IntN(3) != 0
			for i := range reqs {
				reqs[i] = ratelimit.Request{Key: fmt.Sprint("k", rng.IntN(6)), Limit: &limits[rng.IntN(len(limits))], Cost: int64(rng.IntN(3))}
				if !take {
					reqs[i].Cost -= 1
				}
			}
			out := make([]ratelimit.Decision, n)
			var err error
			if take {
				err = s.Take(context.Background(), reqs, out)
			} else {
				err = s.Adjust(context.Background(), reqs, out)
			}
			if overfull(s, reqs) { // a stack the shards cannot hold fails whole
				require.ErrorIs(t, err, ErrStackTooLarge)
				require.Equal(t, make([]ratelimit.Decision, n), out)
			} else {
				require.NoError(t, err)
			}
			for i := range s.shards {
				checkShard(t, &s.shards[i])
			}
		}
	}
}
