package memory

import (
	"context"
	"fmt"
	"hash/maphash"
	"math/bits"
	"time"
	"unsafe"

	"github.com/rampmeter/ratelimit"
)

// stackN is the longest stack of requests decided without allocating.
const stackN = 8

// Store is a sharded, bounded, in-process ratelimit.Store. Build it with
// New; it is safe for concurrent use. A decision on existing entries
// allocates nothing, but slices passed through the ratelimit.Store
// interface escape to the heap: reuse them, one pair per goroutine, to
// decide without allocating (see "Calling it without allocating" in the
// package documentation).
type Store struct {
	wall   func() time.Time // WithClock's clock, or nil for the default
	base   time.Time        // the default clock's origin, with a monotonic reading
	baseUS int64            // base in µs since the Unix epoch
	seed   maphash.Seed
	mask   uint64
	// minCap is the smallest shard's cap: a stack of at most minCap
	// requests always fits in its shards (see fits).
	minCap int
	shards []shard
}

var _ ratelimit.Store = (*Store)(nil)

// New returns an empty store configured by opts. It returns an error
// wrapping ErrInvalidOption if an option is invalid.
func New(opts ...Option) (*Store, error) {
	c := config{maxKeys: DefaultMaxKeys, shards: DefaultShards}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil option", ErrInvalidOption)
		}
		if err := o(&c); err != nil {
			return nil, err
		}
	}
	n := c.shards
	// Every shard holds at least MinShardKeys entries (or all of them).
	if floor := 1 << (bits.Len(uint(max(1, c.maxKeys/MinShardKeys))) - 1); n > floor {
		n = floor
	}
	s := &Store{wall: c.now, seed: maphash.MakeSeed(), mask: uint64(n - 1), minCap: c.maxKeys / n, shards: make([]shard, n)}
	if s.wall == nil {
		s.base = time.Now()
		s.baseUS = ratelimit.Micros(s.base)
	}
	for i := range s.shards {
		// Split the cap exactly: the first maxKeys%n shards hold one more.
		s.shards[i].max = c.maxKeys / n
		if i < c.maxKeys%n {
			s.shards[i].max++
		}
		s.shards[i].seed = s.seed
	}
	return s, nil
}

// Len returns the number of stored (key, limit) entries, at most MaxKeys.
// Expired entries count until they are swept or read.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.live
		sh.mu.Unlock()
	}
	return n
}

// Close releases nothing and returns nil; it exists so that stores can be
// closed alike. The store remains usable.
func (s *Store) Close() error { return nil }

// Take implements ratelimit.Store: it decides reqs atomically, charging all
// or none. Requests for the same key and limit within one call apply in
// order. When the call is refused, every Decision's Remaining and Reset
// describe the stored, uncharged state. It returns ctx.Err() if ctx is
// already done, and an error wrapping ratelimit.ErrInvalidRequest for a
// malformed call, and one wrapping both ratelimit.ErrInvalidRequest and
// ErrStackTooLarge for a stack with more distinct entries in one shard
// than the shard holds; in all these cases nothing is charged.
//
// Take allocates nothing when the entries exist and len(reqs) ≤ 8, and
// keeps neither slice; a caller that holds a ratelimit.Store reuses them
// to allocate nothing either (see the package documentation).
func (s *Store) Take(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	if err := check(ctx, reqs, out, true); err != nil {
		return err
	}
	switch len(reqs) {
	case 0:
	case 1:
		s.one(&reqs[0], &out[0], true) // one entry always fits (minCap ≥ 1)
	default:
		if len(reqs) > s.minCap {
			if err := s.fits(reqs); err != nil {
				return err
			}
		}
		s.stack(reqs, out, true)
	}
	return nil
}

// TakeOne implements ratelimit.SingleTaker: it decides r as Take does a
// call of one request, with the same errors, and returns the Decision's
// fields (but Limit, r.Limit). It allocates nothing when the entry exists
// (the Limiter calls it for a request of one limit).
func (s *Store) TakeOne(ctx context.Context, r ratelimit.Request) (allowed bool, remaining int64, reset, retryAfter, delay time.Duration, at int64, err error) {
	var d ratelimit.Decision
	// check's answer for a valid request in a live context, without its
	// call and its loop; check gives the error otherwise.
	if ctx == nil || !valid(&r, true) || ctx.Err() != nil {
		if err := check(ctx, unsafe.Slice(&r, 1), unsafe.Slice(&d, 1), true); err != nil {
			return false, 0, 0, 0, 0, 0, err
		}
	}
	s.one(&r, &d, true)
	return d.Allowed, d.Remaining, d.Reset, d.RetryAfter, d.Delay, d.At, nil
}

// TakeTwo implements ratelimit.PairTaker: it decides the stack of the
// requests a = {keyA, limitA, costA} and b = {keyB, limitB, costB} as Take
// does a call of those two requests, with the same errors, and returns
// the fields of their Decisions (but Limit). It allocates nothing when
// the entries exist (the Limiter calls it for a request of two limits).
func (s *Store) TakeTwo(ctx context.Context, keyA string, limitA *ratelimit.Limit, costA int64, keyB string, limitB *ratelimit.Limit, costB int64) (allowedA bool, remainingA int64, resetA, retryAfterA, delayA time.Duration, atA int64, allowedB bool, remainingB int64, resetB, retryAfterB, delayB time.Duration, atB int64, err error) {
	a := ratelimit.Request{Key: keyA, Limit: limitA, Cost: costA}
	b := ratelimit.Request{Key: keyB, Limit: limitB, Cost: costB}
	// checkTwo's answer for valid requests in a live context, without its
	// call (as TakeOne); checkTwo gives the error otherwise.
	if ctx == nil || !valid(&a, true) || !valid(&b, true) || ctx.Err() != nil {
		if err := checkTwo(ctx, &a, &b); err != nil {
			return false, 0, 0, 0, 0, 0, false, 0, 0, 0, 0, 0, err
		}
	}
	if s.minCap < 2 {
		if err := s.fits([]ratelimit.Request{a, b}); err != nil {
			return false, 0, 0, 0, 0, 0, false, 0, 0, 0, 0, 0, err
		}
	}
	var da, db ratelimit.Decision
	s.two(&a, &b, &da, &db, true)
	return da.Allowed, da.Remaining, da.Reset, da.RetryAfter, da.Delay, da.At,
		db.Allowed, db.Remaining, db.Reset, db.RetryAfter, db.Delay, db.At, nil
}

// NonBlocking implements ratelimit.NonBlocking: it returns true, since a
// decision waits for nothing but a shard's lock (a clock given to
// WithClock must not block either), so the Limiter calls the store
// without a store timeout.
func (s *Store) NonBlocking() bool { return true }

// Adjust implements ratelimit.Store: it charges (Cost > 0) or refunds
// (Cost < 0) every request without a check, in order. It returns ctx.Err()
// if ctx is already done, and an error wrapping ratelimit.ErrInvalidRequest
// for a malformed call (or ErrStackTooLarge, as Take); in all these cases
// nothing is charged. It allocates as Take does.
func (s *Store) Adjust(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	if err := check(ctx, reqs, out, false); err != nil {
		return err
	}
	switch len(reqs) {
	case 0:
	case 1:
		s.one(&reqs[0], &out[0], false) // one entry always fits (minCap ≥ 1)
	default:
		if len(reqs) > s.minCap {
			if err := s.fits(reqs); err != nil {
				return err
			}
		}
		s.stack(reqs, out, false)
	}
	return nil
}

// AdjustOne implements ratelimit.SingleAdjuster: it charges or refunds r
// as Adjust does a call of one request, with the same errors, and returns
// the fields of the Decision (but Limit, r.Limit). It allocates nothing
// when the entry exists (the Limiter calls it to settle one limit).
func (s *Store) AdjustOne(ctx context.Context, r ratelimit.Request) (allowed bool, remaining int64, reset, retryAfter, delay time.Duration, at int64, err error) {
	var d ratelimit.Decision
	// check's answer for a valid request in a live context, without its
	// call and its loop; check gives the error otherwise.
	if ctx == nil || !valid(&r, false) || ctx.Err() != nil {
		if err := check(ctx, unsafe.Slice(&r, 1), unsafe.Slice(&d, 1), false); err != nil {
			return false, 0, 0, 0, 0, 0, err
		}
	}
	s.one(&r, &d, false)
	return d.Allowed, d.Remaining, d.Reset, d.RetryAfter, d.Delay, d.At, nil
}

// check validates a call before anything is locked or charged.
func check(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision, take bool) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ratelimit.ErrInvalidRequest)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(out) >= len(reqs) {
		i := 0
		for i < len(reqs) && valid(&reqs[i], take) {
			i++
		}
		if i == len(reqs) {
			return nil
		}
	}
	return ratelimit.CheckRequests(reqs, out, take)
}

// fits returns nil if every shard can hold all the distinct entries (key,
// limit) that reqs name in it, and otherwise an error wrapping
// ratelimit.ErrInvalidRequest and ErrStackTooLarge. Such a stack could not
// be stored whole: eviction spares the call's own entries, so an entry
// that does not fit would be dropped, and its limit would decide as fresh
// at every call, never refusing. It is a property of the call and the
// store's configuration, not of the stored state, so it is checked before
// anything is locked, and the same call fails the same way every time
// (for a stack on several keys, which of them share a shard depends on the
// store's hash seed). Take and Adjust call it only for a stack longer than
// the smallest shard's cap, so the common stacks skip it.
func (s *Store) fits(reqs []ratelimit.Request) error {
	if len(reqs) <= stackN { // without allocating, as the decision itself
		for i := range reqs {
			r := &reqs[i]
			idx := s.hash(r.Key) & s.mask
			if !firstOf(reqs[:i], r) {
				continue // a duplicate of an earlier request: counted there
			}
			n := 0 // distinct entries of reqs[:i+1] in r's shard
			for j := range i + 1 {
				q := &reqs[j]
				if s.hash(q.Key)&s.mask == idx && firstOf(reqs[:j], q) {
					n++
				}
			}
			if n > s.shards[idx].max {
				return s.tooLarge(i, r.Key, idx)
			}
		}
		return nil
	}
	type entryKey struct {
		key, limitID string
		shard        uint32
	}
	seen := make(map[entryKey]struct{}, len(reqs))
	count := make(map[uint32]int)
	for i := range reqs {
		r := &reqs[i]
		k := entryKey{r.Key, r.LimitID(), uint32(s.hash(r.Key) & s.mask)}
		if _, dup := seen[k]; dup {
			continue
		}
		seen[k] = struct{}{}
		if count[k.shard]++; count[k.shard] > s.shards[k.shard].max {
			return s.tooLarge(i, r.Key, uint64(k.shard))
		}
	}
	return nil
}

// firstOf reports whether no request of reqs is for q's entry.
func firstOf(reqs []ratelimit.Request, q *ratelimit.Request) bool {
	for i := range reqs {
		if sameString(reqs[i].Key, q.Key) && sameString(reqs[i].LimitID(), q.LimitID()) {
			return false
		}
	}
	return true
}

// tooLarge is fits' error for request i, on key, in the shard idx.
func (s *Store) tooLarge(i int, key string, idx uint64) error {
	return fmt.Errorf("%w: %w: request %d: the call names more distinct entries in the shard of key %q than the %d it holds (see MinShardKeys)",
		ratelimit.ErrInvalidRequest, ErrStackTooLarge, i, key, s.shards[idx].max)
}

// checkTwo is check for the requests a and b of TakeTwo, without slices
// of them.
func checkTwo(ctx context.Context, a, b *ratelimit.Request) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ratelimit.ErrInvalidRequest)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if valid(a, true) && valid(b, true) {
		return nil
	}
	var out [2]ratelimit.Decision
	return ratelimit.CheckRequests([]ratelimit.Request{*a, *b}, out[:], true)
}

// valid reports that ratelimit.CheckRequests accepts r (in a Take when
// take is set), without its call: a key, a limit, a cost ≥ 0 in a Take,
// and a limit with an ID, which only a valid Limit has (Limit.ID is empty
// when Limit.Err is not nil). When it reports false, CheckRequests says
// what is wrong.
func valid(r *ratelimit.Request, take bool) bool {
	return r.Key != "" && r.Limit != nil && (r.Cost >= 0 || !take) && r.LimitID() != ""
}

// lockOne locks the shard sh, whose index is idx, and returns the time to
// decide at, reading the default clock as one explains: before locking.
// WithClock's clock is read with the lock held, and a step back of it
// first deletes the entries expired by the shard's last time
// (shard.observe).
func (s *Store) lockOne(sh *shard, idx uint32) int64 {
	if s.wall != nil {
		sh.mu.Lock()
		now := s.wallNow([]uint32{idx})
		sh.observe(now)
		return now
	}
	now := s.monotonic()
	sh.mu.Lock()
	return sh.advance(now)
}

// lock locks the shards in locked, in that order, and returns the time to
// decide at, in µs since the Unix epoch, by the store's clock: see one for
// the default clock, read before locking, and the latest time decided in
// any of the shards; WithClock's clock is read with the locks held, and
// observed by each shard as in lockOne.
func (s *Store) lock(locked []uint32) int64 {
	if s.wall != nil {
		for _, idx := range locked {
			s.shards[idx].mu.Lock()
		}
		now := s.wallNow(locked)
		for _, idx := range locked {
			s.shards[idx].observe(now)
		}
		return now
	}
	now := s.monotonic()
	for _, idx := range locked {
		s.shards[idx].mu.Lock()
	}
	for _, idx := range locked {
		now = s.shards[idx].advance(now)
	}
	if len(locked) > 1 {
		for _, idx := range locked {
			s.shards[idx].advance(now) // the latest of them all
		}
	}
	return now
}

// monotonic reads the default clock, in µs since the Unix epoch: the wall
// time at New plus the monotonic time elapsed since (see WithClock).
func (s *Store) monotonic() int64 {
	return s.baseUS + time.Since(s.base).Microseconds()
}

// wallNow reads WithClock's clock, with the shards in locked held: every
// decision reads it inside the locks of the shards it decides in, so that
// the times of one key's decisions follow the order of the locks. If the
// clock panics, it unlocks the shards in locked before the panic goes on,
// so that they stay usable.
func (s *Store) wallNow(locked []uint32) int64 {
	done := false
	defer func() {
		if !done {
			for _, i := range locked {
				s.shards[i].mu.Unlock()
			}
		}
	}()
	now := ratelimit.Micros(s.wall())
	done = true
	return now
}

// hash returns the hash of key that selects its shard (the low bits) and
// its chain in the shard's index. All limits of one key share a shard, so
// a stack on one key takes one lock.
func (s *Store) hash(key string) uint64 { return maphash.String(s.seed, key) }

// one decides a single request: the common case, with no bookkeeping.
//
// The default clock (~25 ns a reading, a third of a decision) is read
// before the shard is locked, never with the lock held: a hot key's
// decisions are serialised by the lock, and a reading under it would
// lengthen every turn. (Read under the lock when it was free, and only
// while waiting for it when it was busy, it saved about 2 ns per
// uncontended decision, and cost 8% of a hot key's decisions on two
// cores and 7-14% on 10,000 keys: a lock found free by one core is often
// wanted by the other before the reading is done.) The time of the
// decision is the later of the reading and the latest time already
// decided in the shard (shard.advance), so that the times of one key's
// decisions never go backwards, even when two callers read the clock in
// one order and take the lock in the other; and it is a time that passed
// during the call: at least its own reading, and at most the reading of a
// call that held the lock before it. WithClock's clock, which may move
// backwards on purpose, is always read with the lock held (wallNow).
func (s *Store) one(r *ratelimit.Request, d *ratelimit.Decision, take bool) {
	l := r.Limit
	h := s.hash(r.Key)
	idx := uint32(h & s.mask)
	sh := &s.shards[idx]
	now := s.lockOne(sh, idx)
	id := r.LimitID()
	var st ratelimit.State
	slot, stale := sh.get(h, r.Key, id, l, now, &st)
	expires := decide(r, &st, now, take, d)
	if d.Allowed && r.Cost != 0 {
		sh.put(h, r.Key, id, slot, &st, expires, now, nil)
	} else {
		sh.leave(h, r.Key, id, slot, stale, l, now)
	}
	sh.mu.Unlock()
}

// decide applies r to *st at now, writes the Decision to *d and returns
// when the state it leaves expires (Limit.ExpiresAt): TakeTo
// writes it in place, where a copy of a returned Decision would read back
// the fields just spilled, 16 bytes at a time, defeating store-to-load
// forwarding (5-8% of the profiles).
func decide(r *ratelimit.Request, st *ratelimit.State, now int64, take bool, d *ratelimit.Decision) (expires int64) {
	if take {
		return r.Limit.TakeTo(st, now, r.Cost, d)
	}
	*d = r.Limit.AdjustFrom(st, now, r.At, r.Cost)
	return r.Limit.ExpiresAt(st)
}

// pending is the work of one request in a stack: id is its limit's ID,
// hash its key's hash, and first the index of the first request of the
// stack for the same entry (key, limit). In the first request's pending,
// st is the entry's working state, slot its slot in its shard (or none)
// and stale whether that slot holds an expired entry (see shard.get), and
// dirty reports whether some request of the stack charges it.
type pending struct {
	st      ratelimit.State
	expires int64  // when st expires (Limit.ExpiresAt), after the stack's last request on it
	id      string // the request's Limit.ID() (Request.LimitID)
	hash    uint64
	first   int32
	slot    int32
	stale   bool
	dirty   bool
}

// stack decides a stack of requests atomically: two requests by two, up
// to stackN with scratch space on the goroutine's stack, and longer stacks
// with scratch space on the heap.
func (s *Store) stack(reqs []ratelimit.Request, out []ratelimit.Decision, take bool) {
	switch n := len(reqs); {
	case n == 2:
		s.two(&reqs[0], &reqs[1], &out[0], &out[1], take)
	case n <= stackN:
		var p [stackN]pending
		var locked [stackN]uint32
		s.many(reqs, out, take, p[:n], locked[:0])
	default:
		s.many(reqs, out, take, make([]pending, n), make([]uint32, 0, n))
	}
}

// two is many for a stack of two requests, the common stack (a request
// limit and a token limit on one key), without many's bookkeeping: the
// same locking order, clock reading, duplicate rule, all-or-nothing commit
// and eviction protection, for exactly two requests, a then b, whose
// decisions it writes to *dA and *dB. Two requests on one key, the
// common case, take the shard's lock as one does and find both entries in
// one walk of the key's chain.
func (s *Store) two(a, b *ratelimit.Request, dA, dB *ratelimit.Decision, take bool) {
	idA, idB := a.LimitID(), b.LimitID()
	hA := s.hash(a.Key)
	hB := hA
	sameKey := sameString(a.Key, b.Key)
	if !sameKey {
		hB = s.hash(b.Key)
	}
	// dup: both requests are for one entry, so b applies to the state a
	// leaves, and the entry is stored once.
	dup := sameKey && sameString(idA, idB)
	iA, iB := uint32(hA&s.mask), uint32(hB&s.mask)
	shA, shB := &s.shards[iA], &s.shards[iB]
	var now int64
	var locked [2]uint32
	n := 1
	var stA, stB ratelimit.State
	var slotA, slotB int32
	var staleA, staleB bool
	if iA == iB {
		locked[0] = iA
		now = s.lockOne(shA, iA)
	} else {
		locked, n = [2]uint32{iA, iB}, 2
		if iB < iA { // ascending order, as in many
			locked = [2]uint32{iB, iA}
		}
		now = s.lock(locked[:])
	}
	switch {
	case dup:
		slotA, staleA = shA.get(hA, a.Key, idA, a.Limit, now, &stA)
		slotB, staleB = slotA, staleA
	case sameKey:
		slotA, staleA, slotB, staleB = shA.getTwo(hA, a.Key, idA, idB, a.Limit, b.Limit, now, &stA, &stB)
	default:
		slotA, staleA = shA.get(hA, a.Key, idA, a.Limit, now, &stA)
		slotB, staleB = shB.get(hB, b.Key, idB, b.Limit, now, &stB)
	}
	expA := decide(a, &stA, now, take, dA)
	wB := &stB
	if dup {
		wB = &stA
	}
	// For a dup, expB is the expiry of the entry after both requests.
	expB := decide(b, wB, now, take, dB)

	switch {
	case take && !(dA.Allowed && dB.Allowed):
		// Nothing is charged: both decisions report the stored state
		// (none for a stale entry), and stale entries are deleted.
		peek(shA, live(slotA, staleA), a.Limit, now, dA)
		peek(shB, live(slotB, staleB), b.Limit, now, dB)
		shA.leave(hA, a.Key, idA, slotA, staleA, a.Limit, now)
		if !dup {
			shB.leave(hB, b.Key, idB, slotB, staleB, b.Limit, now)
		}
	case dup && a.Cost == 0 && b.Cost == 0:
		shA.leave(hA, a.Key, idA, slotA, staleA, a.Limit, now)
	case dup && slotA != none:
		// An existing slot: put inserts nothing, so nothing needs
		// protection from eviction.
		shA.put(hA, a.Key, idA, slotA, &stA, expB, now, nil)
	case dup:
		protect := [2]ratelimit.Request{*a, *b}
		shA.put(hA, a.Key, idA, slotA, &stA, expB, now, protect[:])
	case slotA != none && slotB != none && a.Cost != 0 && b.Cost != 0:
		// Both entries exist (live or stale) and both are charged: put
		// inserts nothing, so nothing needs protection from eviction.
		shA.put(hA, a.Key, idA, slotA, &stA, expA, now, nil)
		shB.put(hB, b.Key, idB, slotB, &stB, expB, now, nil)
	default:
		// The call's own entries are protected from eviction, as in many,
		// and existing entries are stored before new ones are inserted:
		// an insertion may sweep the shard, which would delete a stale
		// entry of the call.
		protect := [2]ratelimit.Request{*a, *b}
		chA, chB := a.Cost != 0, b.Cost != 0
		if slotB != none && slotA == none {
			shB.store(hB, b.Key, idB, slotB, staleB, chB, &stB, expB, b.Limit, now, protect[:])
			shA.store(hA, a.Key, idA, slotA, staleA, chA, &stA, expA, a.Limit, now, protect[:])
		} else {
			shA.store(hA, a.Key, idA, slotA, staleA, chA, &stA, expA, a.Limit, now, protect[:])
			shB.store(hB, b.Key, idB, slotB, staleB, chB, &stB, expB, b.Limit, now, protect[:])
		}
	}

	s.shards[locked[0]].mu.Unlock()
	if n == 2 {
		s.shards[locked[1]].mu.Unlock()
	}
}

// live returns slot if it holds a live entry, or none if it is stale.
func live(slot int32, stale bool) int32 {
	if stale {
		return none
	}
	return slot
}

// peek sets d's Remaining and Reset to those of the state stored in slot
// of sh (or of a fresh state if slot is none) under l at now, uncharged.
func peek(sh *shard, slot int32, l *ratelimit.Limit, now int64, d *ratelimit.Decision) {
	var st ratelimit.State
	if slot != none {
		sh.load(slot, l, &st)
	}
	p := l.TakeAt(&st, now, 0)
	d.Remaining, d.Reset = p.Remaining, p.Reset
}

// many decides reqs atomically with the zeroed scratch p (len(reqs) of
// them) and locked (empty, with room for len(reqs) shards).
func (s *Store) many(reqs []ratelimit.Request, out []ratelimit.Decision, take bool, p []pending, locked []uint32) {
	p = p[:len(reqs)]
	type entryKey struct{ key, limitID string }
	var index map[entryKey]int32 // finds duplicates in long stacks
	if len(reqs) > 4*stackN {
		index = make(map[entryKey]int32, len(reqs))
	}
	for i := range reqs {
		r := &reqs[i]
		// A stack usually names one key under several limits: hash it once.
		if i > 0 && sameString(r.Key, reqs[i-1].Key) {
			p[i].hash = p[i-1].hash
		} else {
			p[i].hash = s.hash(r.Key)
		}
		locked = insertSorted(locked, uint32(p[i].hash&s.mask))
		p[i].first = int32(i)
		p[i].id = r.LimitID()
		if index != nil {
			k := entryKey{r.Key, p[i].id}
			if j, dup := index[k]; dup {
				p[i].first = j
			} else {
				index[k] = int32(i)
			}
			continue
		}
		for j := range i {
			if p[j].first == int32(j) && p[j].hash == p[i].hash && sameString(p[j].id, p[i].id) && reqs[j].Key == r.Key {
				p[i].first = int32(j)
				break
			}
		}
	}

	// Lock in ascending shard order: two calls that share shards acquire
	// them in the same order and cannot deadlock.
	now := s.lock(locked)

	all := true
	for i := range reqs {
		r := &reqs[i]
		w := &p[p[i].first]
		if w == &p[i] {
			w.slot, w.stale = s.shards[w.hash&s.mask].get(w.hash, r.Key, w.id, r.Limit, now, &w.st)
		}
		d := &out[i]
		w.expires = decide(r, &w.st, now, take, d)
		all = all && d.Allowed
		if r.Cost != 0 {
			w.dirty = true
		}
	}

	if all {
		// The call's own entries are protected from eviction: an entry
		// charged (or about to be) in this commit must not be lost by
		// it. Existing entries (live or stale) are stored first and new
		// ones inserted after: an insertion may sweep its shard, which
		// would delete a stale entry of the call not yet stored.
		for _, inserting := range [2]bool{false, true} {
			for i := range reqs {
				if w := &p[i]; w.first == int32(i) && (w.slot == none) == inserting {
					r := &reqs[i]
					s.shards[w.hash&s.mask].store(w.hash, r.Key, w.id, w.slot, w.stale, w.dirty, &w.st, w.expires, r.Limit, now, reqs)
				}
			}
		}
	} else {
		// Nothing is charged, so every decision reports the stored
		// state: a peek at it (get found every live entry above, so
		// none has expired since), and stale entries are deleted.
		for i := range reqs {
			w := &p[p[i].first]
			peek(&s.shards[p[i].hash&s.mask], live(w.slot, w.stale), reqs[i].Limit, now, &out[i])
		}
		for i := range reqs {
			if w := &p[i]; w.first == int32(i) {
				s.shards[w.hash&s.mask].leave(w.hash, reqs[i].Key, w.id, w.slot, w.stale, reqs[i].Limit, now)
			}
		}
	}

	for _, idx := range locked {
		s.shards[idx].mu.Unlock()
	}
}

// sameString reports whether a == b, without comparing the bytes when both
// are the same string, as a stack's keys and a limit's ID usually are.
func sameString(a, b string) bool {
	return len(a) == len(b) && (unsafe.StringData(a) == unsafe.StringData(b) || a == b)
}

// insertSorted inserts v into the ascending, duplicate-free s.
func insertSorted(s []uint32, v uint32) []uint32 {
	i := len(s)
	for i > 0 && s[i-1] > v {
		i--
	}
	if i > 0 && s[i-1] == v {
		return s
	}
	s = append(s, 0)
	copy(s[i+1:], s[i:])
	s[i] = v
	return s
}
