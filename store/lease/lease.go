package lease

import (
	"context"
	"fmt"
	"hash/maphash"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rampmeter/ratelimit"
)

const (
	// stackN is the longest stack the Store decorates; longer stacks
	// pass through (and decisions on them allocate nothing up to it).
	stackN = 8
	// nShards is the number of independently locked parts of the table.
	nShards = 64
	// cacheLine keeps the shards' locks apart.
	cacheLine = 128
	// maxAttempts bounds the backing-store Takes of one refill: the
	// whole lease, the lease the backing store's answer says it can
	// grant, the request alone (see refill).
	maxAttempts = 3
)

// Store is a ratelimit.Store that leases capacity from a backing store in
// batches and decides hot keys locally. Build it with New and Close it when
// done; it is safe for concurrent use. See the package documentation.
type Store struct {
	backing     ratelimit.Store
	life        int64 // the lease lifetime L, µs
	sharePPM    int64
	hot         int64
	maxKeys     int64
	callTimeout time.Duration

	wall   func() time.Time // WithClock's clock, or nil for the monotonic default
	base   time.Time
	baseUS int64

	seed   maphash.Seed
	shards [nShards]shard
	keys   atomic.Int64 // tracked (key, limit) pairs

	// offset is the backing store's clock minus the local clock at the
	// latest answer, µs: the local estimate of where a window stands.
	offset      atomic.Int64
	offsetKnown atomic.Bool

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
	stop      chan struct{} // closed by Close: the expiry goroutine ends
	done      chan struct{} // closed by the expiry goroutine when it ends

	passed, refills, backingTakes, returns, adjusts, errs atomic.Uint64
	leased, returned, lost, dropped, drained              atomic.Uint64
}

var (
	_ ratelimit.Store       = (*Store)(nil)
	_ ratelimit.LocalTaker  = (*Store)(nil)
	_ ratelimit.SingleTaker = (*Store)(nil)
	_ ratelimit.PairTaker   = (*Store)(nil)
)

type shardData struct {
	mu sync.Mutex
	// m maps the hash of a caller key to the chain of its entries (one
	// per limit; and, very rarely, those of another key with the same
	// 64-bit hash): a uint64 hashes and compares faster than the strings.
	m     map[uint64]*entry
	local uint64 // Take calls decided locally, under mu
}

type shard struct {
	shardData
	_ [cacheLine - unsafe.Sizeof(shardData{})%cacheLine]byte
}

// New returns a Store that leases from backing, configured by opts. Unless
// WithExpiryInterval(0) is given it starts one goroutine, which Close
// stops. It returns an error wrapping ErrInvalidOption for a nil backing
// store or an invalid option.
func New(backing ratelimit.Store, opts ...Option) (*Store, error) {
	if backing == nil {
		return nil, fmt.Errorf("%w: nil backing store", ErrInvalidOption)
	}
	c := defaults()
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil Option", ErrInvalidOption)
		}
		if err := o(&c); err != nil {
			return nil, err
		}
	}
	if !c.intervalSet {
		c.interval = max(minExpiryInterval, c.lifetime/10)
	} else if c.interval > 0 && c.interval < minExpiryInterval {
		return nil, fmt.Errorf("%w: expiry interval must be 0 or at least %v, got %v", ErrInvalidOption, minExpiryInterval, c.interval)
	}
	s := &Store{
		backing:     backing,
		life:        c.lifetime.Microseconds(),
		sharePPM:    c.sharePPM,
		hot:         c.hot,
		maxKeys:     int64(c.maxKeys),
		callTimeout: c.callTimeout,
		wall:        c.now,
		seed:        maphash.MakeSeed(),
	}
	if s.wall == nil {
		s.base = time.Now()
		s.baseUS = ratelimit.Micros(s.base)
	}
	for i := range s.shards {
		s.shards[i].m = make(map[uint64]*entry)
	}
	if c.interval > 0 {
		s.stop, s.done = make(chan struct{}), make(chan struct{})
		go s.expireLoop(c.interval)
	}
	return s, nil
}

// Unwrap returns the backing store, following the convention of
// ratelimit.Store for wrapping stores.
func (s *Store) Unwrap() ratelimit.Store { return s.backing }

// now reads the local clock in µs.
func (s *Store) now() int64 {
	if s.wall == nil {
		return s.baseUS + time.Since(s.base).Microseconds()
	}
	return ratelimit.Micros(s.wall())
}

// hash returns the hash of a caller key: its low bits select its shard.
func (s *Store) hash(key string) uint64 { return maphash.String(s.seed, key) }

func shardOf(h uint64) uint32 { return uint32(h & (nShards - 1)) }

// Take implements ratelimit.Store. A call is decided locally when every
// limit it charges has a live lease here that covers its cost; otherwise
// it makes one backing-store call (up to three when the backing store
// cannot grant a whole lease) that charges the request and refills the
// leases of its hot limits. Calls that the Store does not decorate (see
// the package documentation) go to the backing store unchanged. It
// returns ctx.Err() if ctx is already done (or ends while the call waits
// for another call's refill of the same key), an error wrapping
// ratelimit.ErrInvalidRequest for a malformed call, and the backing
// store's error when a backing call fails; in those cases nothing is
// charged by this call, except what the backing store may have charged
// before an ambiguous failure (a timeout).
func (s *Store) Take(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ratelimit.ErrInvalidRequest)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := ratelimit.CheckRequests(reqs, out, true); err != nil {
		return err
	}
	if len(reqs) == 0 {
		return nil
	}
	if !s.decorates(reqs) {
		return s.pass(ctx, reqs, out)
	}
	return s.take(ctx, reqs, out)
}

// TryTake implements ratelimit.LocalTaker: it decides reqs as Take would,
// and returns true, when Take would decide them locally at once: every
// (key, limit) pair of the stack is one the Store decorates (see the
// package documentation) and already tracks, none has a refill in
// flight, and either every pair's live lease covers its cost (a pair of
// cost 0: a fresh answer of the backing store admitted it, see the package
// documentation; the stack is admitted, its units handed out from the
// leases) or a remembered refusal refuses the stack (see Decisions). It
// then counts the call's demand and the local decision (Stats.Local) as
// Take does. Otherwise (a malformed call, a pair not tracked, a lease
// that does not cover its cost or has ended, a refill in flight, a call
// the Store passes through, a closed Store) it returns false having
// changed nothing, and the caller calls Take. It never calls the backing store and waits only for
// its shards' locks; it allocates nothing.
func (s *Store) TryTake(reqs []ratelimit.Request, out []ratelimit.Decision) bool {
	if !s.decorates(reqs) || ratelimit.CheckRequests(reqs, out, true) != nil {
		return false
	}
	n := len(reqs)
	var (
		entA        [stackN]*entry
		hashA       [stackN]uint64
		idxA, lockA [stackN]uint32
		hashes      = hashA[:n]
		ents        = entA[:n]
	)
	for i := range reqs {
		hashes[i] = s.hash(reqs[i].Key)
		idxA[i] = shardOf(hashes[i])
	}
	locked := sortedUnique(lockA[:0], idxA[:n])
	s.lock(locked)
	for i := range reqs {
		e := s.lookup(hashes[i], &reqs[i])
		if e == nil { // never asked for, or forgotten: cold
			s.unlock(locked)
			return false
		}
		ents[i] = e
	}
	now := s.now()
	decided := s.decidesLocally(reqs, out, ents, now)
	if decided {
		// The demand is counted as take counts it (before deciding:
		// neither serveLocal nor refuseCached reads it).
		for i, e := range ents {
			e.observe(now, reqs[i].Cost, s.life)
		}
		s.shards[locked[0]].local++
	}
	s.unlock(locked)
	return decided
}

// decidesLocally reports whether a LocalTaker attempt decides reqs, whose
// entries are ents, at now, the decisions then written to out: the Store
// decorates them (decorated), no refill of theirs is in flight, and their
// leases serve them (serveLocal) or a cached refusal refuses them
// (refuseCached). The entries' shards must be locked.
func (s *Store) decidesLocally(reqs []ratelimit.Request, out []ratelimit.Decision, ents []*entry, now int64) bool {
	return decorated(reqs, ents) && busyOf(ents) == nil &&
		(serveLocal(reqs, out, ents, now, s.life) || refuseCached(reqs, out, ents, now, s.life))
}

// TryTakeOne implements ratelimit.LocalTaker: TryTake of the one request
// r, with the decision's fields returned one by one (see
// ratelimit.SingleTaker), all zero when decided is false.
func (s *Store) TryTakeOne(r ratelimit.Request) (decided, allowed bool, remaining int64, reset, retryAfter, delay time.Duration, at int64) {
	// TryTake's steps for a stack of one: one shard, one lock.
	reqs := [1]ratelimit.Request{r}
	var out [1]ratelimit.Decision
	if !s.decorates(reqs[:]) || ratelimit.CheckRequests(reqs[:], out[:], true) != nil {
		return
	}
	h := s.hash(r.Key)
	sh := &s.shards[shardOf(h)]
	sh.mu.Lock()
	e := s.lookup(h, &reqs[0])
	if e == nil {
		sh.mu.Unlock()
		return
	}
	ents := [1]*entry{e}
	now := s.now()
	if s.decidesLocally(reqs[:], out[:], ents[:], now) {
		e.observe(now, r.Cost, s.life)
		sh.local++
		decided = true
	}
	sh.mu.Unlock()
	if !decided {
		return
	}
	d := &out[0]
	return true, d.Allowed, d.Remaining, d.Reset, d.RetryAfter, d.Delay, d.At
}

// TryTakeTwo implements ratelimit.LocalTaker: TryTake of the stack of
// the two requests a = {keyA, limitA, costA} and b = {keyB, limitB,
// costB}, with the decisions' fields returned one by one, a's and then
// b's (see ratelimit.PairTaker), all zero when decided is false.
func (s *Store) TryTakeTwo(keyA string, limitA *ratelimit.Limit, costA int64, keyB string, limitB *ratelimit.Limit, costB int64) (decided, allowedA bool, remainingA int64, resetA, retryAfterA, delayA time.Duration, atA int64,
	allowedB bool, remainingB int64, resetB, retryAfterB, delayB time.Duration, atB int64) {
	// TryTake's steps for a stack of two: one or two shards, locked in
	// order.
	reqs := [2]ratelimit.Request{{Key: keyA, Limit: limitA, Cost: costA}, {Key: keyB, Limit: limitB, Cost: costB}}
	var out [2]ratelimit.Decision
	if !s.decorates(reqs[:]) || ratelimit.CheckRequests(reqs[:], out[:], true) != nil {
		return
	}
	ha, hb := s.hash(keyA), s.hash(keyB)
	lo, hi := shardOf(ha), shardOf(hb)
	if lo > hi {
		lo, hi = hi, lo
	}
	s.shards[lo].mu.Lock()
	if hi != lo {
		s.shards[hi].mu.Lock()
	}
	var ents [2]*entry
	if ents[0], ents[1] = s.lookup(ha, &reqs[0]), s.lookup(hb, &reqs[1]); ents[0] != nil && ents[1] != nil {
		now := s.now()
		if s.decidesLocally(reqs[:], out[:], ents[:], now) {
			ents[0].observe(now, costA, s.life)
			ents[1].observe(now, costB, s.life)
			s.shards[lo].local++
			decided = true
		}
	}
	if hi != lo {
		s.shards[hi].mu.Unlock()
	}
	s.shards[lo].mu.Unlock()
	if !decided {
		return
	}
	a, b := &out[0], &out[1]
	return true, a.Allowed, a.Remaining, a.Reset, a.RetryAfter, a.Delay, a.At, b.Allowed, b.Remaining, b.Reset, b.RetryAfter, b.Delay, b.At
}

// one is the slices of a TakeOne's Take, pooled: they reach the backing
// store through an interface, so they would escape to the heap.
type one struct {
	reqs [1]ratelimit.Request
	out  [1]ratelimit.Decision
}

var onePool = sync.Pool{New: func() any { return new(one) }}

// TakeOne implements ratelimit.SingleTaker: Take of the one request r,
// with the decision's fields returned one by one, in ratelimit.Decision's
// order and units, all but Limit (all zero on an error). The Store is a
// SingleTaker whatever it wraps, so that a Limiter's one-limit path, which
// asks TryTakeOne first, applies; a call that reaches the backing store
// does so through its Take, with pooled slices.
func (s *Store) TakeOne(ctx context.Context, r ratelimit.Request) (allowed bool, remaining int64, reset, retryAfter, delay time.Duration, at int64, err error) {
	o := onePool.Get().(*one)
	o.reqs[0] = r
	err = s.Take(ctx, o.reqs[:], o.out[:])
	d := o.out[0]
	*o = one{} // drop the pointers
	onePool.Put(o)
	if err != nil {
		return false, 0, 0, 0, 0, 0, err
	}
	return d.Allowed, d.Remaining, d.Reset, d.RetryAfter, d.Delay, d.At, nil
}

// two is the slices of a TakeTwo's Take, pooled (see one).
type two struct {
	reqs [2]ratelimit.Request
	out  [2]ratelimit.Decision
}

var twoPool = sync.Pool{New: func() any { return new(two) }}

// TakeTwo implements ratelimit.PairTaker: Take of the stack of the two
// requests a = {keyA, limitA, costA} and b = {keyB, limitB, costB}, with
// the decisions' fields returned one by one, a's and then b's, in
// ratelimit.Decision's order and units, all but Limit (all zero on an
// error). As for TakeOne, the Store is a PairTaker whatever it wraps.
func (s *Store) TakeTwo(ctx context.Context, keyA string, limitA *ratelimit.Limit, costA int64, keyB string, limitB *ratelimit.Limit, costB int64) (allowedA bool, remainingA int64, resetA, retryAfterA, delayA time.Duration, atA int64,
	allowedB bool, remainingB int64, resetB, retryAfterB, delayB time.Duration, atB int64, err error) {
	w := twoPool.Get().(*two)
	w.reqs = [2]ratelimit.Request{{Key: keyA, Limit: limitA, Cost: costA}, {Key: keyB, Limit: limitB, Cost: costB}}
	err = s.Take(ctx, w.reqs[:], w.out[:])
	a, b := w.out[0], w.out[1]
	*w = two{} // drop the pointers
	twoPool.Put(w)
	if err != nil {
		return
	}
	return a.Allowed, a.Remaining, a.Reset, a.RetryAfter, a.Delay, a.At, b.Allowed, b.Remaining, b.Reset, b.RetryAfter, b.Delay, b.At, nil
}

// Adjust implements ratelimit.Store: settlements go straight to the
// backing store. A refund of units that were handed out from a lease
// reaches the backing store, where the lease was charged, so nothing is
// counted twice. A charge that leaves a tracked limit no unit (it may be
// in debt), or fails (it may have been applied), makes the next stacks
// that include that limit at cost 0 ask the backing store about it, which
// refuses them while it is in debt (see fresh).
func (s *Store) Adjust(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	s.adjusts.Add(1)
	err := s.backing.Adjust(ctx, reqs, out)
	var now int64
	for i := range reqs {
		r := &reqs[i]
		if r.Cost <= 0 || r.Limit == nil || err == nil && (i >= len(out) || out[i].Remaining > 0) {
			continue
		}
		if now == 0 {
			now = s.now() // after the backing call: a later call sees the charge
		}
		h := s.hash(r.Key)
		sh := &s.shards[shardOf(h)]
		sh.mu.Lock()
		if e := s.lookup(h, r); e != nil {
			e.settled = max(e.settled, now)
		}
		sh.mu.Unlock()
	}
	return err
}

// pass sends a Take to the backing store unchanged.
func (s *Store) pass(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	s.passed.Add(1)
	return s.backing.Take(ctx, reqs, out)
}

// leasable reports whether limits of algorithm a can be leased: the
// meters. A LeakyBucket's Delay is a place in a schedule shared by the
// fleet, a SlidingLog records each admission's time, and a Concurrency
// cap's slots are released one by one, by their start time: none can be
// handed out in advance. A CalendarWindow passes through too: budgets are
// spent by few, large, settled calls, where a lease would hold money back
// from the other instances for little gain.
func leasable(a ratelimit.Algorithm) bool {
	switch a {
	case ratelimit.TokenBucket, ratelimit.GCRA, ratelimit.FixedWindow, ratelimit.SlidingWindow:
		return true
	}
	return false
}

// decorates reports, before the entries are looked up, whether the Store
// may decide reqs (valid and non-empty) itself rather than pass them
// through: the Store is open, the stack is at most stackN long and some
// cost is positive (a peek reads the backing store's exact state). take
// checks the rest on the entries: see decorated.
func (s *Store) decorates(reqs []ratelimit.Request) bool {
	if s.closed.Load() || len(reqs) > stackN {
		return false
	}
	for i := range reqs {
		if reqs[i].Cost > 0 {
			return true
		}
	}
	return false
}

// decorated reports whether the Store decides the stack whose entries are
// ents: every limit is leasable, no cost exceeds its limit's burst (the
// backing store answers RetryNever with its state), and no (key, limit)
// pair appears twice (it would be charged twice, in order).
func decorated(reqs []ratelimit.Request, ents []*entry) bool {
	for i, e := range ents {
		if !e.leasable || reqs[i].Cost > e.burst {
			return false
		}
		for _, o := range ents[:i] {
			if o == e {
				return false
			}
		}
	}
	return true
}

// call is the plan for one request of a stack that needs the backing
// store: from units of its cost come from this instance's lease (reserved
// while the backing call is in flight), need units from the backing store,
// and extra units more are charged there to become the new lease.
type call struct {
	from, need, extra  int64
	fromAt, fromEnd    int64  // the reserved units' lease: charge (backing µs), end (local µs)
	fromSent, fromRecv int64  // its Take's send and answer (local µs)
	fromGen            uint64 // and generation, to give them back to it
	busy               bool   // this call marked the entry busy
}

// ret is a number of unused units to give back to the backing store.
type ret struct {
	key   string
	limit *ratelimit.Limit
	units int64
	at    int64 // the lease's charge, backing µs: Request.At of the refund
	// For a bucket (token bucket, GCRA; drain > 0): the local µs from
	// which the units count as draining from the backing bucket, and its
	// refill parameters (see drainedUnits). A window's refund is exact,
	// dated at: drain is 0.
	from, scale, drain int64
}

// take decides a call that the Store decorates: locally when it can, in
// one pass under the locks of its keys' shards, allocating nothing;
// otherwise through slow.
func (s *Store) take(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	n := len(reqs)
	var (
		entA          [stackN]*entry
		hashA         [stackN]uint64
		idxA, lockA   [stackN]uint32
		hashes, ents  = hashA[:n], entA[:n]
		locked        []uint32
		observedLocal bool
	)
	for i := range reqs {
		hashes[i] = s.hash(reqs[i].Key)
		idxA[i] = shardOf(hashes[i])
	}
	locked = sortedUnique(lockA[:0], idxA[:n])
	s.lock(locked)
	now := s.now()
	for i := range reqs {
		e := s.entry(hashes[i], &reqs[i], now)
		if e == nil { // the table is full
			s.unlock(locked)
			return s.pass(ctx, reqs, out)
		}
		ents[i] = e
	}
	if !decorated(reqs, ents) {
		s.unlock(locked)
		return s.pass(ctx, reqs, out)
	}
	for i, e := range ents {
		e.observe(now, reqs[i].Cost, s.life)
	}
	if busyOf(ents) == nil && (serveLocal(reqs, out, ents, now, s.life) || refuseCached(reqs, out, ents, now, s.life)) {
		s.shards[locked[0]].local++
		observedLocal = true
	}
	s.unlock(locked)
	if observedLocal {
		return nil
	}
	return s.slow(ctx, reqs, out, hashes, locked)
}

// scratch is the working memory of slow, pooled: its arrays reach the
// backing store through an interface, so they would escape to the heap.
type scratch struct {
	ents  [stackN]*entry
	calls [stackN]call
	rets  [stackN]ret
	breqs [stackN]ratelimit.Request
	bout  [stackN]ratelimit.Decision
	in    [stackN]int
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// slow decides a call that take could not decide locally (the demand is
// counted already): it waits for a refill of one of its leases in flight,
// gives back the units of ended leases, and makes the backing call that
// charges the request and refills the leases of its hot limits, then
// decides again when a lease it reserved units from ended meanwhile.
func (s *Store) slow(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision, hashes []uint64, locked []uint32) error {
	sc := scratchPool.Get().(*scratch)
	defer func() {
		*sc = scratch{} // drop the pointers
		scratchPool.Put(sc)
	}()
	n := len(reqs)
	ents, calls := sc.ents[:n], sc.calls[:n]
	for {
		if s.closed.Load() { // (a call waiting, or starting afresh, after Close)
			return s.pass(ctx, reqs, out)
		}
		rets := sc.rets[:0]
		s.lock(locked)
		now := s.now()
		for i := range reqs {
			e := s.entry(hashes[i], &reqs[i], now)
			if e == nil { // forgotten since, and the table is full
				s.unlock(locked)
				return s.pass(ctx, reqs, out)
			}
			ents[i] = e
		}
		if ch := busyOf(ents); ch != nil {
			// Another call is refilling one of these leases: wait for
			// it, then decide again with what it brought.
			s.unlock(locked)
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		for _, e := range ents {
			var dropped int64
			if rets, dropped = e.detachEnded(now, rets); dropped > 0 {
				s.dropped.Add(uint64(dropped))
			}
		}
		if serveLocal(reqs, out, ents, now, s.life) || refuseCached(reqs, out, ents, now, s.life) {
			s.shards[locked[0]].local++
			s.unlock(locked)
			_ = s.giveBack(ctx, rets) // a failure is counted: the decision stands
			return nil
		}

		// Plan the backing call.
		leases := false
		for i := range reqs {
			e, c := ents[i], &calls[i]
			cost := reqs[i].Cost
			*c = call{from: min(e.lease.left, cost)}
			c.need = cost - c.from
			if c.need > 0 && e.cap > 0 && e.hot(now, s.life, s.hot) {
				c.extra = min(e.size(now, s), e.cap, e.burst-c.need)
			}
			leases = leases || c.from > 0 || c.extra > 0
		}
		if !leases {
			s.unlock(locked)
			_ = s.giveBack(ctx, rets)
			return s.pass(ctx, reqs, out)
		}
		var ch chan struct{}
		in := sc.in[:0]
		for i, e := range ents {
			c := &calls[i]
			e.pins++
			if c.from > 0 {
				c.fromAt, c.fromEnd, c.fromGen = e.lease.at, e.lease.end, e.lease.gen
				c.fromSent, c.fromRecv = e.lease.sent, e.lease.recv
				e.lease.left -= c.from
			}
			if c.extra > 0 {
				if ch == nil {
					ch = make(chan struct{})
				}
				e.busy, c.busy = ch, true
			}
			if c.need > 0 || reqs[i].Cost == 0 && !e.fresh(now, s.life) {
				// (A limit of cost 0 that no fresh answer admitted is
				// peeked at in the same call: if it is in debt, the
				// stack is refused.)
				in = append(in, i)
			}
		}
		s.unlock(locked)
		// Units of ended leases go back before the refill asks for more,
		// so that a limit nearly exhausted can grant them again.
		_ = s.giveBack(ctx, rets)
		rets = rets[:0]

		s.refills.Add(1)
		breqs, bout := sc.breqs[:len(in)], sc.bout[:len(in)]
		allowed, sent, recv, err := s.refill(ctx, reqs, calls, in, breqs, bout)

		s.lock(locked)
		now = s.now()
		restart := false
		switch {
		case err != nil:
			rets = restoreUnits(ents, calls, now, rets)
		case allowed:
			for i := range reqs {
				if c := &calls[i]; c.from > 0 && now >= c.fromEnd {
					restart = true // reserved units outlived their lease
				}
			}
			if restart {
				// Give back everything: what the backing call charged
				// and the units whose lease ended meanwhile; then decide
				// afresh.
				for j, i := range in {
					r := ents[i].ret(breqs[j].Cost, bout[j].At, sent, recv)
					r.limit = reqs[i].Limit // as charged
					rets = append(rets, r)
				}
				rets = restoreUnits(ents, calls, now, rets)
				break
			}
			rets = s.admit(reqs, out, ents, calls, in, bout, now, sent, recv, rets)
		default:
			rets = restoreUnits(ents, calls, now, rets)
			s.refuse(reqs, out, ents, calls, in, breqs, bout, now, sent, recv)
		}
		if s.closed.Load() {
			// Close has run while the call was in flight, and its sweep
			// missed what the call held: the new leases, and the units
			// reserved from the old ones and put back above. No lease
			// may outlive Close. (Close sets closed before it sweeps, each
			// shard under its lock: seen false here, its sweep of these
			// shards is still to come.)
			for _, e := range ents {
				rets = e.detach(rets)
			}
		}
		s.release(ents, calls, ch)
		s.unlock(locked)
		_ = s.giveBack(ctx, rets)
		if err != nil || !restart {
			return err
		}
	}
}

// release unpins the entries of a call and wakes the calls waiting for its
// refill. The entries' shards must be locked.
func (s *Store) release(ents []*entry, calls []call, ch chan struct{}) {
	for i, e := range ents {
		e.pins--
		if calls[i].busy {
			e.busy = nil
		}
	}
	if ch != nil {
		close(ch)
	}
}

// restoreUnits puts the units a refused or failed call reserved back into
// their lease, or, when that lease has ended or been replaced, gives them
// back to the backing store. The shards must be locked.
func restoreUnits(ents []*entry, calls []call, now int64, rets []ret) []ret {
	for i, e := range ents {
		c := &calls[i]
		if c.from == 0 {
			continue
		}
		if e.lease.gen == c.fromGen && now < e.lease.end {
			e.lease.left += c.from
		} else {
			rets = append(rets, e.ret(c.from, c.fromAt, c.fromSent, c.fromRecv))
		}
	}
	return rets
}

// refill makes the backing-store call of a stack: for each request in (the
// indices of the stack's requests that need the backing store) a Take of
// need + extra units. When the backing store refuses, its answer says how
// many units each limit has now (Remaining, exact for the meters: a cost
// fits if and only if it is at most Remaining): if the request itself
// does not fit, the call is refused; otherwise the Store asks once more
// for the request plus the lease the backing store can still grant, and,
// should another instance take those units in between, once more for the
// request alone. (A sliding window that refuses the request is asked
// again for the request alone, whose RetryAfter the refusal of more does
// not tell.) So a refill costs one round trip unless the limit is nearly
// exhausted, and at most maxAttempts. The extras in calls are
// updated to the lease actually granted; sent and recv are the local clock
// before and after the last attempt.
func (s *Store) refill(ctx context.Context, reqs []ratelimit.Request, calls []call, in []int,
	breqs []ratelimit.Request, bout []ratelimit.Decision) (allowed bool, sent, recv int64, err error) {
	if len(in) == 0 { // (take never plans such a call)
		now := s.now()
		return true, now, now, nil
	}
	for attempt := 0; attempt < maxAttempts; attempt++ {
		for j, i := range in {
			breqs[j] = ratelimit.Request{Key: reqs[i].Key, Limit: reqs[i].Limit, Cost: calls[i].need + calls[i].extra}
		}
		sent = s.now()
		err = s.backing.Take(ctx, breqs, bout)
		recv = s.now()
		s.backingTakes.Add(1)
		if err != nil {
			s.errs.Add(1)
			return false, sent, recv, err
		}
		s.offset.Store(bout[0].At - recv)
		s.offsetKnown.Store(true)
		allowed = true
		fits, extras, inexact := true, false, false
		for j, i := range in {
			allowed = allowed && bout[j].Allowed
			f := needFits(&bout[j], calls[i].need, breqs[j].Cost)
			fits = fits && f
			extras = extras || calls[i].extra > 0
			// A sliding window's RetryAfter for need + extra units does
			// not tell the one for need: ask for need alone to learn it.
			inexact = inexact || !f && calls[i].extra > 0 && reqs[i].Limit.Algorithm() == ratelimit.SlidingWindow
		}
		if allowed || !extras || !fits && (!inexact || attempt == maxAttempts-1) {
			return allowed, sent, recv, nil
		}
		for j, i := range in {
			c := &calls[i]
			if attempt == 0 && fits {
				c.extra = min(c.extra, bout[j].Remaining-c.need)
			} else {
				c.extra = 0
			}
		}
	}
	return false, sent, recv, nil
}

// admit records an admitted refill: the new leases, the backing store's
// view, and the decisions; it appends to rets what must be given back.
// The shards must be locked.
func (s *Store) admit(reqs []ratelimit.Request, out []ratelimit.Decision, ents []*entry, calls []call, in []int,
	bout []ratelimit.Decision, now, sent, recv int64, rets []ret) []ret {
	j := 0
	for i := range reqs {
		e, c, l := ents[i], &calls[i], reqs[i].Limit
		if j >= len(in) || in[j] != i {
			e.use(c.from, now)
			out[i] = e.decision(l, now, true) // from its lease alone
			continue
		}
		d := &bout[j]
		j++
		e.block = block{}
		if c.busy && c.extra > 0 {
			// Units another call reserved from the old lease, and put
			// back after this call emptied it, go back to the backing
			// store: the new lease replaces the old.
			rets = e.detach(rets)
			e.lease = lease{left: c.extra, at: d.At, sent: sent, recv: recv, end: sent + s.duration(l, d), gen: e.lease.gen + 1}
			e.winEnd = windowEnd(l, d)
			s.leased.Add(uint64(c.extra))
		}
		e.setView(d, sent, recv)
		out[i] = e.decision(l, recv, true)
	}
	return rets
}

// refuse records a refused refill and writes the decisions: the backing
// store's uncharged state, each limit judged by the request's own need.
// A refused hot limit remembers the refusal until the backing store's
// RetryAfter, but at most one lifetime: by then every lease that other
// instances held at the refusal has ended and its unused units are back.
func (s *Store) refuse(reqs []ratelimit.Request, out []ratelimit.Decision, ents []*entry, calls []call, in []int,
	breqs []ratelimit.Request, bout []ratelimit.Decision, now, sent, recv int64) {
	j := 0
	for i := range reqs {
		e, c, l := ents[i], &calls[i], reqs[i].Limit
		if j >= len(in) || in[j] != i {
			out[i] = e.decision(l, now, true)
			continue
		}
		d := &bout[j]
		j++
		e.setView(d, sent, recv)
		od := e.decision(l, recv, true)
		if !needFits(d, c.need, breqs[j-1].Cost) {
			e.view.refused = true
			od.Allowed = false
			od.RetryAfter = retryFor(l, d, breqs[j-1].Cost-c.need)
			if od.RetryAfter > 0 && e.hot(now, s.life, s.hot) {
				od.RetryAfter = min(max(od.RetryAfter, time.Duration(s.life/10)*time.Microsecond), time.Duration(s.life)*time.Microsecond)
				e.block = block{need: c.need, until: recv + od.RetryAfter.Microseconds()}
			}
		}
		out[i] = od
	}
}

// needFits reports whether need units fit the limit that decision d
// judged for amount ≥ need units: d's own verdict when amount is need, and
// otherwise whether need is at most Remaining, which is exact for the
// meters at d's instant (a cost fits if and only if it is at most the
// units left, rounded down).
func needFits(d *ratelimit.Decision, need, amount int64) bool {
	if amount == need {
		return d.Allowed
	}
	return need <= d.Remaining
}

// retryFor returns the RetryAfter of a request of need units from the
// backing store's refusal d of need+extra units: for a bucket the time to
// refill extra units less (exact when the rate's drain is 1 unit per
// microsecond numerator, otherwise at most 1 µs more), for a fixed window
// the same (the window's end), for a sliding window d's own, an upper
// bound.
func retryFor(l *ratelimit.Limit, d *ratelimit.Decision, extra int64) time.Duration {
	ra := d.RetryAfter
	if extra <= 0 || ra <= 0 {
		return ra
	}
	switch l.Algorithm() {
	case ratelimit.TokenBucket, ratelimit.GCRA:
		scale, drain, _ := l.Params()
		return max(time.Microsecond, ra-time.Duration(extra*scale/drain)*time.Microsecond)
	}
	return ra
}

// duration returns how long after it was sent a lease granted by d may
// hand out units, µs: the lifetime, but for a window algorithm no longer
// than the window it was charged in lasts (by the backing store's clock,
// from the charge: the charge came after the send, so the lease ends no
// later than the window).
func (s *Store) duration(l *ratelimit.Limit, d *ratelimit.Decision) int64 {
	switch l.Algorithm() {
	case ratelimit.FixedWindow, ratelimit.SlidingWindow:
		return min(s.life, windowEnd(l, d)-d.At)
	}
	return s.life
}

// windowEnd returns the end of the window that decision d charged, by the
// backing store's clock (µs), for a window algorithm; 0 otherwise. A fixed
// window's charged state expires with its window, so its Reset is the time
// to the window's end (also for windows aligned to the first hit); a
// sliding window's windows are aligned to the Unix epoch.
func windowEnd(l *ratelimit.Limit, d *ratelimit.Decision) int64 {
	switch l.Algorithm() {
	case ratelimit.FixedWindow:
		return d.At + d.Reset.Microseconds()
	case ratelimit.SlidingWindow:
		p := l.Period().Microseconds()
		return d.At - d.At%p + p
	}
	return 0
}

// giveBack returns unused units to the backing store: one Adjust per
// caller key (so that a Redis Cluster sees one hash slot per call), each
// refund dated at its lease's charge so that a window algorithm credits
// the window that was charged (and drops the refund once it has passed).
// A bucket's refund leaves out the units that may have drained since the
// charge, reckoned when its call is sent (see drainedUnits; counted in
// Stats.Drained). A failed return is not retried: after a timeout the
// refund may have been applied, and applying it twice would create
// capacity. Its units are lost to the fleet until the backing store
// refills them (counted in Stats.Lost). The calls use ctx's values but not
// its cancellation, with the WithCallTimeout deadline.
func (s *Store) giveBack(ctx context.Context, rets []ret) error {
	if len(rets) == 0 {
		return nil
	}
	sortRets(rets)
	ctx = context.WithoutCancel(ctx)
	var first error
	var reqA [stackN]ratelimit.Request
	var outA [stackN]ratelimit.Decision
	for len(rets) > 0 {
		k := 1
		for k < len(rets) && rets[k].key == rets[0].key {
			k++
		}
		group := rets[:k]
		rets = rets[k:]
		reqs := reqA[:0]
		if k > len(reqA) {
			reqs = make([]ratelimit.Request, 0, k)
		}
		now := s.now() // (the calls before this one took time)
		var units int64
		for _, r := range group {
			if r.drain > 0 {
				d := drainedUnits(r.units, now-r.from, r.scale, r.drain)
				s.drained.Add(uint64(d))
				r.units -= d
			}
			if r.units > 0 {
				reqs = append(reqs, ratelimit.Request{Key: r.key, Limit: r.limit, Cost: -r.units, At: r.at})
				units += r.units
			}
		}
		if len(reqs) == 0 {
			continue
		}
		out := outA[:]
		if len(reqs) > len(outA) {
			out = make([]ratelimit.Decision, len(reqs))
		}
		cctx, cancel := context.WithTimeout(ctx, s.callTimeout)
		err := s.backing.Adjust(cctx, reqs, out)
		cancel()
		s.returns.Add(1)
		if err != nil {
			s.errs.Add(1)
			s.lost.Add(uint64(units))
			if first == nil {
				first = fmt.Errorf("lease: returning %d unused units of key %q: %w", units, group[0].key, err)
			}
			continue
		}
		s.returned.Add(uint64(units))
	}
	return first
}

// sortRets sorts rets by key (insertion sort: there are few), so that
// each key's refunds make one call, in a deterministic order.
func sortRets(rets []ret) {
	for i := 1; i < len(rets); i++ {
		for j := i; j > 0 && rets[j].key < rets[j-1].key; j-- {
			rets[j], rets[j-1] = rets[j-1], rets[j]
		}
	}
}

// Expire returns to the backing store the unused units of every lease that
// has ended by the local clock, and forgets the (key, limit) pairs that
// have been idle for two lifetimes. The background goroutine calls it
// every WithExpiryInterval; call it yourself when that is 0. Its backing
// calls use ctx's values with the WithCallTimeout deadline; it returns the
// first error of a return (see Stats.Lost).
func (s *Store) Expire(ctx context.Context) error {
	now := s.now()
	var rets []ret
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for h, head := range sh.m {
			var keep *entry // the chain rebuilt without the idle entries
			for e := head; e != nil; {
				next := e.next
				var dropped int64
				if rets, dropped = e.detachEnded(now, rets); dropped > 0 {
					s.dropped.Add(uint64(dropped))
				}
				if e.idle(now, s.life) {
					s.keys.Add(-1)
				} else {
					e.next, keep = keep, e
				}
				e = next
			}
			if keep == nil {
				delete(sh.m, h)
			} else {
				sh.m[h] = keep
			}
		}
		sh.mu.Unlock()
	}
	return s.giveBack(ctx, rets)
}

func (s *Store) expireLoop(every time.Duration) {
	defer close(s.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			_ = s.Expire(context.Background())
		}
	}
}

// Close stops the background goroutine and returns the unused units of
// every lease, live or ended, to the backing store (one Adjust per caller
// key, each with the WithCallTimeout deadline). Afterwards every call
// passes straight through to the backing store, so requests still in
// flight keep being decided; a refill in flight when Close runs gives its
// lease back as soon as it arrives, and with it the units it reserved from
// the old leases if it was refused or failed. Close returns the first error of a
// return; calling it again returns the same error and does nothing.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		if s.stop != nil {
			close(s.stop)
			<-s.done
		}
		var rets []ret
		for i := range s.shards {
			sh := &s.shards[i]
			sh.mu.Lock()
			for _, head := range sh.m {
				for e := head; e != nil; e = e.next {
					rets = e.detach(rets)
				}
			}
			sh.mu.Unlock()
		}
		s.closeErr = s.giveBack(context.Background(), rets)
	})
	return s.closeErr
}

// Stats are counters since the Store was created. Each is read atomically;
// the set is not one snapshot.
type Stats struct {
	// Local counts Take calls decided without a backing-store call:
	// admitted from leases, or refused while a refusal is remembered.
	Local uint64
	// Passed counts Take calls sent to the backing store unchanged (cold
	// keys, calls the Store does not decorate, calls after Close).
	Passed uint64
	// Refills counts Take calls that made a backing-store call to charge
	// themselves and refill leases.
	Refills uint64
	// BackingTakes counts the backing-store Takes those refills made (up
	// to three each, see Take).
	BackingTakes uint64
	// Returns counts backing-store Adjust calls that gave unused units
	// back.
	Returns uint64
	// Adjusts counts Adjust calls passed through to the backing store.
	Adjusts uint64
	// Errors counts failed backing-store calls made by refills and
	// returns.
	Errors uint64
	// Leased counts units charged in the backing store for leases,
	// beyond the requests that took them.
	Leased uint64
	// Returned counts unused units given back.
	Returned uint64
	// Lost counts unused units whose return failed: charged in the
	// backing store and never used.
	Lost uint64
	// Dropped counts unused units of fixed-window leases that ended
	// with their window: the backing store would drop their refund (the
	// window has passed), so none is sent.
	Dropped uint64
	// Drained counts unused units of token-bucket and GCRA leases that
	// were not given back because the backing bucket may have refilled
	// as many while they were held (Rate × the time since the lease's
	// Take, plus one round trip): giving them back could create capacity
	// that one shared bucket would not have had (see the package
	// documentation, Bounds). With Returned, Lost and Dropped they
	// account for every unit leased: after Close, Leased = the units
	// handed out from leases + Returned + Lost + Dropped + Drained.
	Drained uint64
	// Held is the number of units in this instance's leases now, live or
	// ended and not yet returned.
	Held int64
	// Keys is the number of (key, limit) pairs tracked.
	Keys int64
}

// BackingCalls returns the number of calls made to the backing store:
// Passed + BackingTakes + Returns + Adjusts.
func (st Stats) BackingCalls() uint64 { return st.Passed + st.BackingTakes + st.Returns + st.Adjusts }

// Stats returns the counters. It locks each shard in turn to sum the
// local decisions and the units held.
func (s *Store) Stats() Stats {
	st := Stats{
		Passed:       s.passed.Load(),
		Refills:      s.refills.Load(),
		BackingTakes: s.backingTakes.Load(),
		Returns:      s.returns.Load(),
		Adjusts:      s.adjusts.Load(),
		Errors:       s.errs.Load(),
		Leased:       s.leased.Load(),
		Returned:     s.returned.Load(),
		Lost:         s.lost.Load(),
		Dropped:      s.dropped.Load(),
		Drained:      s.drained.Load(),
		Keys:         s.keys.Load(),
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.Local += sh.local
		for _, head := range sh.m {
			for e := head; e != nil; e = e.next {
				st.Held += e.lease.left
			}
		}
		sh.mu.Unlock()
	}
	return st
}

func (s *Store) lock(idx []uint32) {
	for _, i := range idx {
		s.shards[i].mu.Lock()
	}
}

func (s *Store) unlock(idx []uint32) {
	for _, i := range idx {
		s.shards[i].mu.Unlock()
	}
}

// sortedUnique appends the distinct values of idx to dst in ascending
// order: the order in which a call locks its shards, so that concurrent
// calls cannot deadlock.
func sortedUnique(dst, idx []uint32) []uint32 {
	for _, v := range idx {
		k := len(dst)
		for k > 0 && dst[k-1] > v {
			k--
		}
		if k > 0 && dst[k-1] == v {
			continue
		}
		dst = append(dst, 0)
		copy(dst[k+1:], dst[k:])
		dst[k] = v
	}
	return dst
}

// mulDiv returns a×b/c rounded down (a, b ≥ 0, c > 0), saturating at the
// largest int64.
func mulDiv(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return 1<<63 - 1
	}
	q, _ := bits.Div64(hi, lo, uint64(c))
	return int64(min(q, 1<<63-1))
}
