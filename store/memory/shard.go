package memory

import (
	"hash/maphash"
	"math/rand/v2"
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
	// none marks the absence of a slot.
	none = -1
)

// entry is the stored state of one (key, limit) pair and when it expires
// (µs since the Unix epoch), kept so that sweeping and eviction need no
// Limit. It holds no pointers, so the garbage collector never scans the
// slab; a sliding log's timestamps live in shardData.logs.
type entry struct {
	level, updated, prev int64 // ratelimit.State's numbers
	expires              int64
}

// name identifies the entry in the same slot of the slab, and links the
// entries whose keys hash alike. A free slot has an empty key (stores
// reject empty keys).
type name struct {
	key   string // a private copy of the request's key
	limit string // the limit's ID
	next  int32  // the next slot in the chain, or none
}

// shardData's first 64 bytes hold what every decision on an existing
// entry reads or writes besides the entry itself: the lock, the clock
// (written by advance), and the slab's and the index's slice headers. A
// hot key's decisions alternate between cores, and each one moves the
// lines it writes to its core: kept on the lock's line, the clock moves
// with the lock instead of costing a line of its own. The rest is read
// (shared by the cores' caches) or written only to insert and remove.
type shardData struct {
	mu sync.Mutex
	// clock is the latest time decided in the shard, in µs: by the
	// default clock, which never goes back in a shard (see advance), or
	// the last reading of WithClock's (see observe).
	clock int64
	// slab and names are indexed by slot: the state numbers (no
	// pointers) and who they belong to. A decision on an existing entry
	// hashes its key once and updates its slot in place.
	slab []entry
	// index maps the hash of a key to the first slot of the chain of
	// entries whose keys have that hash: the key's entries under each of
	// its limits, and, very rarely, those of another key with the same
	// 64-bit hash. A uint64 hashes and compares faster than the strings
	// it stands for, and takes a quarter of the space.
	index index
	names []name
	logs  map[int32][]int64 // SlidingLog and Concurrency entries' timestamps, by slot
	free  []int32           // slots not in use
	live  int               // slots in use: at most max
	max   int               // cap on live
	seed  maphash.Seed      // the store's, to find a slot's chain from its key
	// lastSweep is the store's clock at the last sweep, in µs.
	lastSweep int64
}

type shard struct {
	shardData
	_ [cacheLine - unsafe.Sizeof(shardData{})%cacheLine]byte
}

// find returns the slot of (key, limitID), whose key hashes to h, or none.
// The shard must be locked.
func (sh *shard) find(h uint64, key, limitID string) int32 {
	for i := sh.index.get(h); i != none; {
		// The entries of a chain almost always share their key and differ
		// in their limit: compare the IDs first, usually the very same
		// string.
		n := &sh.names[i]
		if sameString(n.limit, limitID) && n.key == key {
			return i
		}
		i = n.next
	}
	return none
}

// get returns the slot of the entry of key (hashing to h) under l, whose
// ID is id, and loads its state into *st, or returns none and leaves *st
// alone if there is none. The caller reads the ID once per request
// (Request.LimitID). The shard must be locked.
//
// An expired entry is equivalent to absence: get leaves *st alone for it
// too, and returns its slot with stale true. The caller then either stores
// the new state in that slot with put, which is what deleting the entry
// and inserting the key afresh would leave, without the work or the copy
// of the key (a key whose bucket refills between its requests, as most
// keys' do, would otherwise be deleted and inserted again on every
// request), or deletes it with leave, as a read of an expired entry does.
func (sh *shard) get(h uint64, key, id string, l *ratelimit.Limit, now int64, st *ratelimit.State) (slot int32, stale bool) {
	i := sh.find(h, key, id)
	if i == none {
		return none, false
	}
	if sh.slab[i].expires <= now {
		return i, true
	}
	sh.load(i, l, st)
	return i, false
}

// getTwo is get for the entries of one key (hashing to h) under two
// different limits, la (ID idA) and lb (ID idB), found in one walk of the
// key's chain: it returns their slots and staleness, and loads their live
// states into *stA and *stB, as get does for each. The shard must be
// locked.
func (sh *shard) getTwo(h uint64, key, idA, idB string, la, lb *ratelimit.Limit, now int64, stA, stB *ratelimit.State) (slotA int32, staleA bool, slotB int32, staleB bool) {
	slotA, slotB = none, none
	for i := sh.index.get(h); i != none; i = sh.names[i].next {
		n := &sh.names[i]
		var hit *int32
		switch {
		case slotA == none && sameString(n.limit, idA):
			hit = &slotA
		case slotB == none && sameString(n.limit, idB):
			hit = &slotB
		default:
			continue
		}
		if !sameString(n.key, key) {
			continue // another key with the same hash
		}
		// The entries of one key share one stored copy of it (insert):
		// compared with that copy, the next entry's key is told equal by
		// its pointer, without reading its bytes.
		key, *hit = n.key, i
		if slotA != none && slotB != none {
			break
		}
	}
	if slotA != none {
		if staleA = sh.slab[slotA].expires <= now; !staleA {
			sh.load(slotA, la, stA)
		}
	}
	if slotB != none {
		if staleB = sh.slab[slotB].expires <= now; !staleB {
			sh.load(slotB, lb, stB)
		}
	}
	return slotA, staleA, slotB, staleB
}

// store commits one entry of an admitted call: the state st under l,
// which expires at expires (l.ExpiresAt(st)), if the call charged it,
// otherwise nothing, and the deletion of the entry if get found it stale.
// The shard must be locked.
func (sh *shard) store(h uint64, key, id string, slot int32, stale, charged bool, st *ratelimit.State, expires int64, l *ratelimit.Limit, now int64, protect []ratelimit.Request) {
	if charged {
		sh.put(h, key, id, slot, st, expires, now, protect)
	} else {
		sh.leave(h, key, id, slot, stale, l, now)
	}
}

// leave finishes with an entry that a call did not charge: it deletes it
// if get found it expired (stale), and otherwise keeps it as it is, unless
// the clock stepped back from it (ratelimit.Limit.ClockStepped): then the
// state brought to now is written, so that the rebase holds for the next
// call. The shard must be locked.
func (sh *shard) leave(h uint64, key, id string, slot int32, stale bool, l *ratelimit.Limit, now int64) {
	if slot == none {
		return
	}
	if stale {
		sh.remove(h, slot)
		return
	}
	var st ratelimit.State
	sh.load(slot, l, &st)
	if !l.ClockStepped(&st, now) {
		return
	}
	l.TakeAt(&st, now, 0)
	sh.put(h, key, id, slot, &st, l.ExpiresAt(&st), now, nil)
}

// load reads the state stored in slot, an entry under l, into *st. The
// shard must be locked.
func (sh *shard) load(slot int32, l *ratelimit.Limit, st *ratelimit.State) {
	e := &sh.slab[slot]
	st.Level, st.Updated, st.Prev = e.level, e.updated, e.prev
	// Only SlidingLog and Concurrency entries have logs: a shard without
	// any needs no look at the algorithm.
	if len(sh.logs) != 0 && (l.Algorithm() == ratelimit.SlidingLog || l.Algorithm() == ratelimit.Concurrency) {
		st.Log = sh.logs[slot]
	}
}

// advance returns the time at which to decide in the shard given a reading
// now of the default clock taken before the shard was locked: the later of
// now and the latest time decided in the shard, which it becomes. The
// shard must be locked.
func (sh *shard) advance(now int64) int64 {
	if now < sh.clock {
		return sh.clock
	}
	sh.clock = now
	return now
}

// observe records now, a reading of WithClock's clock taken with the shard
// locked, as the time the shard decides at. If the clock stepped back
// (now is before the time last decided), it first deletes every entry that
// had expired by that time: an entry the shard has seen expire stays
// expired, whatever the clock does next. Without this, an expired entry
// not yet swept would come back to life when the clock steps back before
// its expiry, and usage already paid off would be charged again, or not,
// depending on whether a sweep happened to delete it first (which depends
// on other keys' insertions, and on which keys share the shard). Once
// those entries are gone, every entry left expires after the time last
// decided, hence after now, so comparing expiries with now, as get and
// sweep do, keeps staleness monotonic. The default clock never steps back
// in a shard (advance), so it never needs this. The shard must be locked.
func (sh *shard) observe(now int64) {
	if now < sh.clock {
		sh.stepBack(now)
	}
	sh.clock = now
}

// stepBack is observe's sweep: one scan of the shard per step back of
// WithClock's clock. It is kept out of line so that observe, a compare and
// a store on every decision by WithClock's clock, inlines.
//
//go:noinline
func (sh *shard) stepBack(now int64) {
	sh.sweep(sh.clock)
	sh.lastSweep = now // the next sweep is due a sweepInterval from now
}

// put stores st for key (hashing to h) under the limit whose ID is id, or
// deletes the entry if st has already expired. slot is get's answer in
// this critical section (a live or a stale entry, or none); protect lists
// the requests whose entries eviction must spare. The shard must be
// locked.
func (sh *shard) put(h uint64, key, id string, slot int32, st *ratelimit.State, expires, now int64, protect []ratelimit.Request) {
	if slot != none && expires > now && st.Log == nil && len(sh.logs) == 0 {
		// An existing entry without a log: the common case, inlined.
		sh.slab[slot] = entry{st.Level, st.Updated, st.Prev, expires}
		return
	}
	sh.putSlow(h, key, id, slot, st, expires, now, protect)
}

func (sh *shard) putSlow(h uint64, key, id string, slot int32, st *ratelimit.State, expires, now int64, protect []ratelimit.Request) {
	if expires <= now {
		if slot != none {
			sh.remove(h, slot)
		}
		return
	}
	if slot == none {
		if slot = sh.insert(h, key, id, now, protect); slot == none {
			return
		}
	}
	sh.slab[slot] = entry{st.Level, st.Updated, st.Prev, expires}
	if st.Log != nil {
		if sh.logs == nil {
			sh.logs = make(map[int32][]int64)
		}
		sh.logs[slot] = st.Log
	} else if len(sh.logs) > 0 {
		delete(sh.logs, slot)
	}
}

// insert takes a slot for a new entry, sweeping or evicting first if it is
// due or the shard is full, and links it into its chain. It returns none
// if the entry cannot be kept: every candidate for eviction belongs to the
// calling stack. That needs a stack with more distinct entries in the
// shard than it holds, which Take and Adjust refuse before deciding
// (Store.fits), so it does not happen; put then keeps nothing.
func (sh *shard) insert(h uint64, key, limitID string, now int64, protect []ratelimit.Request) int32 {
	if now < sh.lastSweep {
		sh.lastSweep = now // the clock moved back; measure from here
	}
	full := sh.live >= sh.max
	if since := now - sh.lastSweep; since >= sweepInterval || full && since >= fullSweepGap {
		sh.sweep(now)
		full = sh.live >= sh.max
	}
	if full && !sh.evict(protect) {
		return none
	}
	var slot int32
	if n := len(sh.free); n > 0 {
		slot, sh.free = sh.free[n-1], sh.free[:n-1]
	} else {
		slot = int32(len(sh.slab))
		sh.slab = append(sh.slab, entry{})
		sh.names = append(sh.names, name{})
	}
	next := sh.index.get(h)
	// The entries of one key share one copy of it (getTwo compares them
	// by pointer), made for the first: a copy, so that the entry does not
	// pin a larger string the caller's key may be a slice of (a header, a
	// request line).
	stored := ""
	for i := next; i != none; i = sh.names[i].next {
		if sh.names[i].key == key {
			stored = sh.names[i].key
			break
		}
	}
	if stored == "" {
		stored = strings.Clone(key)
	}
	sh.names[slot] = name{key: stored, limit: limitID, next: next}
	sh.index.set(h, slot)
	sh.live++
	return slot
}

// remove deletes the entry in slot, whose key hashes to h.
func (sh *shard) remove(h uint64, slot int32) {
	next := sh.names[slot].next
	if head := sh.index.get(h); head == slot {
		if next == none {
			sh.index.del(h)
		} else {
			sh.index.set(h, next)
		}
	} else {
		for sh.names[head].next != slot {
			head = sh.names[head].next
		}
		sh.names[head].next = next
	}
	sh.names[slot] = name{} // frees the key
	if len(sh.logs) > 0 {
		delete(sh.logs, slot)
	}
	sh.free = append(sh.free, slot)
	sh.live--
}

// sweep deletes every expired entry.
func (sh *shard) sweep(now int64) {
	for i := range sh.slab {
		if k := sh.names[i].key; k != "" && sh.slab[i].expires <= now {
			sh.remove(maphash.String(sh.seed, k), int32(i))
		}
	}
	sh.lastSweep = now
}

// evict deletes, among up to evictSamples entries whose requests are not in
// protect, the one that expires earliest. It reports false if every entry
// is protected. The sample visits the slots in the order start, start+step,
// start+2×step, ... (mod the slab's length), with start and step random
// and step coprime to the length: distinct slots spread over the whole
// slab, so the sample is not biased towards entries inserted at about the
// same time, and all of them when the shard holds at most evictSamples.
func (sh *shard) evict(protect []ratelimit.Request) bool {
	n := len(sh.slab)
	if n == 0 {
		return false
	}
	i, step := rand.IntN(n), 1
	if n > 2 {
		for step = 1 + rand.IntN(n-1); gcd(step, n) != 1; step = 1 + rand.IntN(n-1) {
		}
	}
	var (
		victim   = int32(none)
		earliest int64
		seen     int
	)
	for range n {
		if nm := &sh.names[i]; nm.key != "" && !isIn(nm, protect) {
			if e := sh.slab[i].expires; victim == none || e < earliest {
				victim, earliest = int32(i), e
			}
			if seen++; seen == evictSamples {
				break
			}
		}
		if i += step; i >= n {
			i -= n
		}
	}
	if victim == none {
		return false
	}
	sh.remove(maphash.String(sh.seed, sh.names[victim].key), victim)
	return true
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// isIn reports whether the entry named n belongs to one of reqs.
func isIn(n *name, reqs []ratelimit.Request) bool {
	for i := range reqs {
		if reqs[i].Key == n.key && reqs[i].LimitID() == n.limit {
			return true
		}
	}
	return false
}
