package memory

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// The index agrees with a Go map under random sets and deletes of hashes
// chosen to collide: few distinct homes, so that runs of cells are long,
// wrap around the end of the table and are shifted back by deletes from
// their middle, while the table grows from its first 8 cells.
func TestIndexAgainstMap(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 3))
		var x index
		model := map[uint64]int32{}
		// Hashes differ in their high bits but share one of 5 homes in
		// any table smaller than 2^20 cells; the low bits (the shard's)
		// are the same for all, as in one shard.
		pool := make([]uint64, 40)
		for i := range pool {
			home := uint64(rng.IntN(5)) | uint64(rng.IntN(2))*(1<<20-1) // some at the table's end
			pool[i] = uint64(i+1)<<40 | home<<homeShift | 7
		}
		for step := range 1000 {
			h := pool[rng.IntN(len(pool))]
			if _, ok := model[h]; ok && rng.IntN(2) == 0 {
				x.del(h)
				delete(model, h)
			} else {
				slot := int32(rng.IntN(1000))
				x.set(h, slot)
				model[h] = slot
			}
			require.Equal(t, len(model), x.len(), "seed %d step %d", seed, step)
			for _, p := range pool {
				want, ok := model[p]
				if !ok {
					want = none
				}
				require.Equal(t, want, x.get(p), "seed %d step %d hash %x", seed, step, p)
			}
			seen := map[uint64]int32{}
			x.each(func(h uint64, head int32) { seen[h] = head })
			require.Equal(t, model, seen, "seed %d step %d", seed, step)
			require.LessOrEqual(t, 4*x.len(), 3*len(x.cells), "load factor")
		}
	}
}

// An empty index finds nothing and holds no table until the first set.
func TestIndexEmpty(t *testing.T) {
	var x index
	require.Equal(t, int32(none), x.get(42))
	require.Zero(t, x.len())
	require.Nil(t, x.cells)
	x.set(42, 0)
	require.Equal(t, int32(0), x.get(42), "slot 0 is a slot, not an empty cell")
	require.Len(t, x.cells, minCells)
	x.del(42)
	require.Equal(t, int32(none), x.get(42))
	require.Zero(t, x.len())
}
