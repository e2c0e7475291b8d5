package memory

import (
	"strings"
	"sync"
	"unsafe"

	"github.com/rampmeter/ratelimit"
)

const (
	// sweepInterval is how often, by the store's clock in µs, inserting
	// into a shard also deletes the shard's expired entries.
	sweepInterval = 60_000_000
	// fullSweepGap is the shortest time between sweeps of a full shard,
	// in µs. It bounds the cost of a flood of new keys into a shard full
	// of live entries to one scan per second, not one per insert.
	fullSweepGap = 1_000_000
	// evictSamples is how many entries eviction compares.
	evictSamples = 8
	// cacheLine is the padding unit that keeps shards' locks apart.
	cacheLine = 128
)

// entryKey identifies one entry: a key under one limit. Struct keys avoid
// building (and allocating) a combined string for every lookup.
type entryKey struct {
	key     string
	limitID string
}

// entry is the stored state of one (key, limit) pair and when it expires
// (µs since the Unix epoch), kept so that sweeping and eviction need no
// Limit.
type entry struct {
	state   ratelimit.State
	expires int64
}

type shardData struct {
	mu sync.Mutex
	// index maps each stored entry to its slot in slab. Keeping the
	// entries in a slab, not in the map, lets a decision on an existing
	// entry hash its key once and update the slot in place; the slab
	// holds no pointers, so the garbage collector does not scan it.
	index     map[entryKey]int
	slab      []entry
	free      []int // slots of slab not in use
	max       int   // cap on len(index)
	lastSweep int64 // µs
}

type shard struct {
	shardData
	_ [cacheLine - unsafe.Sizeof(shardData{})%cacheLine]byte
}

// get returns the slot and live state of k, or slot -1 and the zero State
// if k is absent or expired (an expired entry is deleted: it is equivalent
// to absence). The shard must be locked.
func (sh *shard) get(k entryKey, now int64) (slot int, s ratelimit.State) {
	i, ok := sh.index[k]
	if !ok {
		return -1, ratelimit.State{}
	}
	if sh.slab[i].expires <= now {
		sh.remove(k, i)
		return -1, ratelimit.State{}
	}
	return i, sh.slab[i].state
}

// put stores s for k, or deletes k if s has already expired. slot is get's
// answer for k in this critical section; protect lists entries that
// eviction must spare. The shard must be locked.
func (sh *shard) put(k entryKey, slot int, s ratelimit.State, expires, now int64, protect []entryKey) {
	if expires <= now {
		if slot >= 0 {
			sh.remove(k, slot)
		}
		return
	}
	if slot >= 0 {
		sh.slab[slot] = entry{s, expires}
		return
	}
	if now < sh.lastSweep {
		sh.lastSweep = now // the clock moved back; measure from here
	}
	full := len(sh.index) >= sh.max
	if since := now - sh.lastSweep; since >= sweepInterval || full && since >= fullSweepGap {
		sh.sweep(now)
		full = len(sh.index) >= sh.max
	}
	if full && !sh.evict(protect) {
		// Every candidate belongs to this call (a shard smaller than
		// the call's stack): the entry cannot be kept, and the key will
		// start afresh.
		return
	}
	if n := len(sh.free); n > 0 {
		slot, sh.free = sh.free[n-1], sh.free[:n-1]
		sh.slab[slot] = entry{s, expires}
	} else {
		slot = len(sh.slab)
		sh.slab = append(sh.slab, entry{s, expires})
	}
	// Copy the key so the entry does not pin a larger string the caller's
	// key may be a slice of (a header, a request line).
	k.key = strings.Clone(k.key)
	sh.index[k] = slot
}

// remove deletes k, stored in slot.
func (sh *shard) remove(k entryKey, slot int) {
	delete(sh.index, k)
	sh.free = append(sh.free, slot)
}

// sweep deletes every expired entry.
func (sh *shard) sweep(now int64) {
	for k, i := range sh.index {
		if sh.slab[i].expires <= now {
			sh.remove(k, i)
		}
	}
	sh.lastSweep = now
}

// evict deletes, among up to evictSamples entries not in protect, the one
// that expires earliest. It reports false if every entry is protected.
// Map iteration starts at a random position, which makes the sample random.
func (sh *shard) evict(protect []entryKey) bool {
	var (
		victim   entryKey
		slot     int
		earliest int64
		found    bool
		seen     int
	)
	for k, i := range sh.index {
		if isIn(k, protect) {
			continue
		}
		if e := sh.slab[i].expires; !found || e < earliest {
			victim, slot, earliest, found = k, i, e, true
		}
		if seen++; seen == evictSamples {
			break
		}
	}
	if found {
		sh.remove(victim, slot)
	}
	return found
}

func isIn(k entryKey, ks []entryKey) bool {
	for i := range ks {
		if ks[i] == k {
			return true
		}
	}
	return false
}
