package memory

// index maps the 64-bit hash of a key to the first slot of the chain of
// entries whose keys have that hash. It is an open-addressing table with
// linear probing: one 16-byte cell per distinct hash, found in one cache
// line where a Go map reads its control word and its slot (two lines when
// the table is not in cache, and a second hash of the uint64 key). The
// table doubles when it is three-quarters full and never shrinks, like the
// slab. Deleting shifts the cells after it back (Knuth's algorithm R), so
// there are no tombstones and a lookup stops at the first empty cell.
//
// A cell's home is chosen by the hash's bits above the shard's: the low
// bits select the shard (Store.mask), so within one shard they are equal.
type index struct {
	cells []cell
	used  int // cells in use
}

// cell is one slot of the table: a hash and the head of its chain, plus
// one, so that the zero cell is empty.
type cell struct {
	hash uint64
	head int32 // the chain's first slot + 1; 0 marks an empty cell
}

// homeShift skips the hash bits that select the shard (at most 16, see
// MaxShards).
const homeShift = 16

// minCells is the size of a table when it is first needed.
const minCells = 8

func (x *index) home(h uint64) int { return int(h>>homeShift) & (len(x.cells) - 1) }

// get returns the head of the chain of h, or none.
func (x *index) get(h uint64) int32 {
	if len(x.cells) == 0 {
		return none
	}
	m := len(x.cells) - 1
	for i := x.home(h); ; i = (i + 1) & m {
		c := &x.cells[i]
		if c.head == 0 {
			return none
		}
		if c.hash == h {
			return c.head - 1
		}
	}
}

// set makes slot the head of the chain of h, adding h if it is new.
func (x *index) set(h uint64, slot int32) {
	if 4*(x.used+1) > 3*len(x.cells) {
		x.grow()
	}
	m := len(x.cells) - 1
	for i := x.home(h); ; i = (i + 1) & m {
		c := &x.cells[i]
		if c.head == 0 {
			*c = cell{hash: h, head: slot + 1}
			x.used++
			return
		}
		if c.hash == h {
			c.head = slot + 1
			return
		}
	}
}

// del removes h, which must be present.
func (x *index) del(h uint64) {
	m := len(x.cells) - 1
	i := x.home(h)
	for x.cells[i].hash != h || x.cells[i].head == 0 {
		i = (i + 1) & m
	}
	// Shift back every cell of the run after i whose home is not in
	// (i, j]: it was placed past i because i was taken.
	for j := i; ; {
		x.cells[i] = cell{}
		for {
			j = (j + 1) & m
			if x.cells[j].head == 0 {
				x.used--
				return
			}
			k := x.home(x.cells[j].hash)
			if i <= j {
				if i < k && k <= j {
					continue
				}
			} else if i < k || k <= j {
				continue
			}
			x.cells[i] = x.cells[j]
			i = j
			break
		}
	}
}

// grow doubles the table (or makes the first one) and reinserts its cells.
func (x *index) grow() {
	old := x.cells
	x.cells = make([]cell, max(minCells, 2*len(old)))
	x.used = 0
	for _, c := range old {
		if c.head != 0 {
			x.set(c.hash, c.head-1)
		}
	}
}

// len returns the number of distinct hashes held.
func (x *index) len() int { return x.used }

// each calls f with every hash held and the head of its chain.
func (x *index) each(f func(h uint64, head int32)) {
	for _, c := range x.cells {
		if c.head != 0 {
			f(c.hash, c.head-1)
		}
	}
}
