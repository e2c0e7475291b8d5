package memory

import (
	"context"
	"fmt"
	"hash/maphash"
	"math/bits"
	"time"

	"github.com/rampmeter/ratelimit"
)

// stackN is the longest stack of requests decided without allocating.
const stackN = 8

// Store is a sharded, bounded, in-process ratelimit.Store. Build it with
// New; it is safe for concurrent use.
type Store struct {
	wall   func() time.Time // WithClock's clock, or nil for the default
	base   time.Time        // the default clock's origin, with a monotonic reading
	baseUS int64            // base in µs since the Unix epoch
	seed   maphash.Seed
	mask   uint64
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
	if floor := 1 << (bits.Len(uint(c.maxKeys)) - 1); n > floor {
		n = floor // every shard must hold at least one entry
	}
	s := &Store{wall: c.now, seed: maphash.MakeSeed(), mask: uint64(n - 1), shards: make([]shard, n)}
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
		s.shards[i].index = make(map[uint64]int32)
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
// describe the stored, uncharged state. It returns ctx.Err() if ctx is already done, and an error wrapping
// ratelimit.ErrInvalidRequest for a malformed call; in both cases nothing is
// charged.
func (s *Store) Take(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	return s.do(ctx, reqs, out, true)
}

// Adjust implements ratelimit.Store: it charges (Cost > 0) or refunds
// (Cost < 0) every request without a check, in order. It returns ctx.Err()
// if ctx is already done, and an error wrapping ratelimit.ErrInvalidRequest
// for a malformed call; in both cases nothing is charged.
func (s *Store) Adjust(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	return s.do(ctx, reqs, out, false)
}

func (s *Store) do(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision, take bool) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ratelimit.ErrInvalidRequest)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := ratelimit.CheckRequests(reqs, out, take); err != nil {
		return err
	}
	switch len(reqs) {
	case 0:
		return nil
	case 1:
		s.one(&reqs[0], &out[0], take)
		return nil
	}
	s.many(reqs, out, take)
	return nil
}

// now reads the store's clock in µs since the Unix epoch, with the shards
// in locked held: every decision reads it inside the locks of the shards
// it decides in, so that the times of one key's decisions never go
// backwards even when concurrent callers race. The default clock is the
// wall time at New plus the monotonic time elapsed since: it reads one
// clock instead of time.Now's two, and steps of the wall clock (NTP, an
// operator) neither refill nor freeze buckets.
func (s *Store) now(locked []uint32) int64 {
	if s.wall == nil {
		return s.baseUS + time.Since(s.base).Microseconds()
	}
	return s.wallNow(locked)
}

// wallNow reads WithClock's clock. If the clock panics, it unlocks the
// shards in locked before the panic goes on, so that they stay usable.
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
func (s *Store) one(r *ratelimit.Request, d *ratelimit.Decision, take bool) {
	l := r.Limit
	h := s.hash(r.Key)
	idx := uint32(h & s.mask)
	sh := &s.shards[idx]
	sh.mu.Lock()
	now := s.now([]uint32{idx})
	var st ratelimit.State
	slot := sh.get(h, r.Key, l, now, &st)
	if take {
		*d = l.TakeAt(&st, now, r.Cost)
	} else {
		*d = l.AdjustFrom(&st, now, r.At, r.Cost)
	}
	if d.Allowed && r.Cost != 0 {
		sh.put(h, r.Key, l, slot, &st, l.ExpiresAt(&st), now, nil)
	}
	sh.mu.Unlock()
}

// many decides a stack of requests atomically.
func (s *Store) many(reqs []ratelimit.Request, out []ratelimit.Decision, take bool) {
	n := len(reqs)
	// Scratch space on the stack for up to stackN requests.
	var (
		hashA   [stackN]uint64
		firstA  [stackN]int32
		slotA   [stackN]int32
		workA   [stackN]ratelimit.State
		dirtyA  [stackN]bool
		lockedA [stackN]uint32
	)
	hashes := fit(hashA[:], n)
	// first[i] is the index of the first request for the same entry as
	// request i; slot, work and dirty are indexed by it. slot[i] is the
	// entry's slot in its shard, or none.
	first := fit(firstA[:], n)
	slot := fit(slotA[:], n)
	work := fit(workA[:], n)
	dirty := fit(dirtyA[:], n)
	locked := lockedA[:0]

	type entryKey struct{ key, limitID string }
	var index map[entryKey]int32 // finds duplicates in long stacks
	if n > 4*stackN {
		index = make(map[entryKey]int32, n)
	}
	for i := range reqs {
		r := &reqs[i]
		hashes[i] = s.hash(r.Key)
		locked = insertSorted(locked, uint32(hashes[i]&s.mask))
		first[i] = int32(i)
		if index != nil {
			k := entryKey{r.Key, r.Limit.ID()}
			if j, dup := index[k]; dup {
				first[i] = j
			} else {
				index[k] = int32(i)
			}
			continue
		}
		for j := range i {
			if first[j] == int32(j) && hashes[j] == hashes[i] && reqs[j].Key == r.Key && reqs[j].Limit.ID() == r.Limit.ID() {
				first[i] = int32(j)
				break
			}
		}
	}

	// Lock in ascending shard order: two calls that share shards acquire
	// them in the same order and cannot deadlock.
	for _, idx := range locked {
		s.shards[idx].mu.Lock()
	}
	now := s.now(locked)

	all := true
	for i := range reqs {
		r := &reqs[i]
		j := first[i]
		if j == int32(i) {
			slot[i] = s.shards[hashes[i]&s.mask].get(hashes[i], r.Key, r.Limit, now, &work[i])
		}
		if take {
			out[i] = r.Limit.TakeAt(&work[j], now, r.Cost)
			all = all && out[i].Allowed
		} else {
			out[i] = r.Limit.AdjustFrom(&work[j], now, r.At, r.Cost)
		}
		if r.Cost != 0 {
			dirty[j] = true
		}
	}

	if all {
		for i := range reqs {
			if first[i] == int32(i) && dirty[i] {
				// The call's own entries are protected from eviction:
				// an entry charged (or about to be) in this commit
				// must not be lost by it.
				r := &reqs[i]
				s.shards[hashes[i]&s.mask].put(hashes[i], r.Key, r.Limit, slot[i], &work[i], r.Limit.ExpiresAt(&work[i]), now, reqs)
			}
		}
	} else {
		// Nothing is charged, so every decision reports the stored
		// state: a peek at it (get found every live entry above, so
		// none has expired since).
		for i := range reqs {
			r := &reqs[i]
			var st ratelimit.State
			if j := slot[first[i]]; j != none {
				s.shards[hashes[i]&s.mask].load(j, r.Limit, &st)
			}
			p := r.Limit.TakeAt(&st, now, 0)
			out[i].Remaining, out[i].Reset = p.Remaining, p.Reset
		}
	}

	for _, idx := range locked {
		s.shards[idx].mu.Unlock()
	}
}

// fit returns buf[:n] if it is long enough, otherwise a new slice.
func fit[T any](buf []T, n int) []T {
	if n <= len(buf) {
		return buf[:n]
	}
	return make([]T, n)
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
