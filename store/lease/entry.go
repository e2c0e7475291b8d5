package lease

import (
	"time"

	"github.com/rampmeter/ratelimit"
)

// entry is what one instance knows of one (key, limit) pair: its recent
// demand, its lease, the backing store's state at the latest answer, and a
// remembered refusal. Its fields are guarded by its shard's lock.
type entry struct {
	key   string
	id    string           // the limit's ID
	next  *entry           // the next entry whose caller key has the same hash
	limit *ratelimit.Limit // a copy, for returns: requests may change theirs

	// The limit's parameters, read once: Limit's accessors have value
	// receivers, and each call through a pointer copies the whole Limit.
	algo         ratelimit.Algorithm
	leasable     bool
	firstHit     bool
	burst        int64
	scale, drain int64 // refilling one unit takes scale/drain µs
	period       int64 // µs
	cap          int64 // floor(share × Burst): the most units a lease holds

	// Demand: units and requests asked for in the lifetime-long interval
	// number slot (local µs / L) and in the one before it.
	slot             int64
	units, prevUnits int64
	reqs, prevReqs   int64

	lease  lease
	view   view
	block  block
	winEnd int64 // the latest lease's window end, backing µs (FixedWindow)
	// settled is the local µs at which an Adjust through the Store that
	// may have put the pair in debt returned (it charged the pair and
	// left it no unit, or failed); 0: none. A cost of 0 is described
	// only from an answer to a call sent after it (see fresh).
	settled int64

	busy chan struct{} // non-nil while a call refills the lease; closed when it ends
	pins int32         // calls in flight that hold a pointer to the entry
}

// lease is the units of one backing-store Take not yet handed out.
type lease struct {
	left int64  // units not yet handed out
	at   int64  // the charge, by the backing store's clock (µs)
	sent int64  // local µs when its Take was sent
	recv int64  // local µs when the grant arrived
	end  int64  // local µs: units are handed out while now < end
	gen  uint64 // incremented by each new lease
}

// view is the backing store's answer for the pair at its latest call.
type view struct {
	remaining int64 // units left in the backing store (leases charged)
	// reset is the time to full, µs from local µs resetAt: at the answer
	// the backing store's Reset less the time the units then held here
	// take to refill (for a bucket), when it would have been full had they
	// not been charged; then, for a bucket, plus the refill time of each
	// unit handed out here since, from when it was handed out.
	reset, resetAt int64
	at             int64 // the answer's time by the backing store's clock, µs
	sent           int64 // local µs when the call it answered was sent
	recv           int64 // local µs when it arrived; 0: never
	refused        bool  // the answer refused the pair (it may be in debt)
}

// setView records the backing store's answer d for the pair to a call sent
// at sent, which arrived at recv, with the units the lease holds now.
func (e *entry) setView(d *ratelimit.Decision, sent, recv int64) {
	e.view = view{remaining: d.Remaining, reset: max(0, d.Reset.Microseconds()-e.unitTime(e.lease.left)),
		resetAt: recv, at: d.At, sent: sent, recv: recv}
}

// fresh reports whether the view may admit the pair at cost 0 at now: a
// cost of 0 is refused only while the limit is in debt, which an Adjust
// (this instance's or another's) may have caused since any answer, so the
// answer must have admitted the pair, to a call sent less than a lifetime
// ago and after the latest Adjust through this Store that may have put the
// pair in debt. Otherwise the call asks the backing store (see slow).
func (e *entry) fresh(now, life int64) bool {
	return e.view.recv != 0 && !e.view.refused && now-e.view.sent < life && e.view.sent > e.settled
}

// use records n units handed out from the lease at now: for a bucket, the
// time to full drains to now and grows by their refill time.
func (e *entry) use(n, now int64) {
	if u := e.unitTime(n); u > 0 {
		e.view.reset = max(0, e.view.reset-max(0, now-e.view.resetAt)) + u
		e.view.resetAt = max(now, e.view.resetAt)
	}
}

// block is a refusal the backing store gave for need units: until local µs
// until, calls needing at least as much from it are refused locally.
type block struct {
	need, until int64
}

// entry returns the entry of r, whose caller key hashes to h, creating it,
// or nil when the table is full. Its shard must be locked.
func (s *Store) entry(h uint64, r *ratelimit.Request, now int64) *entry {
	if e := s.lookup(h, r); e != nil {
		return e
	}
	if s.keys.Load() >= s.maxKeys {
		return nil
	}
	s.keys.Add(1)
	sh := &s.shards[shardOf(h)]
	l := *r.Limit
	e := &entry{key: r.Key, id: l.ID(), next: sh.m[h], limit: &l, slot: now / s.life,
		algo: l.Algorithm(), leasable: leasable(l.Algorithm()), firstHit: l.AlignsToFirstHit(),
		burst: l.Burst(), period: l.Period().Microseconds()}
	e.scale, e.drain, _ = l.Params()
	e.cap = mulDiv(e.burst, s.sharePPM, 1_000_000)
	sh.m[h] = e
	return e
}

// lookup returns the entry of r, whose caller key hashes to h, or nil
// when there is none. Its shard must be locked.
func (s *Store) lookup(h uint64, r *ratelimit.Request) *entry {
	id := r.LimitID()
	for e := s.shards[shardOf(h)].m[h]; e != nil; e = e.next {
		if e.id == id && e.key == r.Key {
			return e
		}
	}
	return nil
}

// observe counts a request of cost units at now.
func (e *entry) observe(now, cost, life int64) {
	if slot := now / life; slot > e.slot {
		if slot == e.slot+1 {
			e.prevUnits, e.prevReqs = e.units, e.reqs
		} else {
			e.prevUnits, e.prevReqs = 0, 0
		}
		e.units, e.reqs, e.slot = 0, 0, slot
	}
	e.units = min(e.units+cost, 1<<62) // cost ≤ Burst < 2^51: no overflow
	e.reqs++
}

// recent estimates what was asked for over one lifetime, from the counts
// of the current interval and the one before: their sum over the time
// they span (L + the time elapsed in the current interval), times L. A
// steady demand of r per lifetime gives r wherever in its interval now
// is, and a burst late in an interval still counts fully (the previous
// interval's count is not weighted down, as a sliding-window counter
// would weigh it).
func recent(cur, prev, now, slot, life int64) int64 {
	switch s := now / life; {
	case s > slot+1:
		return 0
	case s == slot+1: // the current interval ended: it is the previous one
		return mulDiv(cur, life, life+now-s*life)
	}
	return mulDiv(prev+cur, life, life+max(0, now-slot*life))
}

// hot reports whether this instance leases for the pair: it was asked at
// least hot times within the current lifetime-long interval and the one
// before it (so within the last one to two lifetimes: a burst is hot
// wherever in its interval it falls).
func (e *entry) hot(now, life, hot int64) bool {
	switch s := now / life; {
	case s > e.slot+1:
		return false
	case s == e.slot+1:
		return e.reqs >= hot
	}
	return e.reqs+e.prevReqs >= hot
}

// size returns the lease to ask for: the units asked for within about the
// last lifetime, scaled to how long the lease will last (a window
// algorithm's lease ends with its window), rounded up.
func (e *entry) size(now int64, s *Store) int64 {
	units := recent(e.units, e.prevUnits, now, e.slot, s.life)
	d := s.life
	switch e.algo {
	case ratelimit.FixedWindow, ratelimit.SlidingWindow:
		if s.offsetKnown.Load() {
			bn := now + s.offset.Load() // the backing store's clock, estimated
			p := e.period
			left := p - bn%p
			if e.firstHit {
				left = p
				if bn < e.winEnd {
					left = e.winEnd - bn
				}
			}
			d = min(d, max(1, left))
		}
	}
	return max(1, mulDiv(units, d, s.life)+1)
}

// decision describes the pair to a caller at now: allowed (charged, or had
// room in a refused stack), from the backing store's state at its latest
// answer and the local use since. Remaining is the backing store's
// Remaining then plus the units this instance still holds (what refilled
// since is not counted); Reset is when the backing store would have been
// full had the units held then not been charged and the units handed out
// since been charged as they were handed out (see use), aged to now.
func (e *entry) decision(l *ratelimit.Limit, now int64, allowed bool) ratelimit.Decision {
	el := max(0, now-e.view.recv)
	return ratelimit.Decision{
		Limit:     l,
		Allowed:   allowed,
		Remaining: min(e.burst, e.view.remaining+e.lease.left),
		Reset:     time.Duration(max(0, e.view.reset-max(0, now-e.view.resetAt))) * time.Microsecond,
		At:        e.view.at + el,
	}
}

// unitTime returns how long n units of a bucket (token bucket, GCRA) take
// to refill, µs: n × scale/drain, rounded down (exact when drain is 1,
// otherwise within 1 µs). For a window algorithm, whose Reset is when its
// window's count expires whatever the count, it is 0.
func (e *entry) unitTime(n int64) int64 {
	switch e.algo {
	case ratelimit.TokenBucket, ratelimit.GCRA:
		if n > 0 {
			return n * e.scale / e.drain // n ≤ 2 × Burst: n × scale < 2^52
		}
	}
	return 0
}

// detachEnded takes the unused units of an ended lease out of it, to be
// given back, and returns how many it dropped instead: those of a fixed
// window whose window has certainly passed by the backing store's clock
// (its clock at the grant plus the local time since, a lower bound), for
// which the backing store would drop the refund.
func (e *entry) detachEnded(now int64, rets []ret) ([]ret, int64) {
	if e.lease.left <= 0 || now < e.lease.end {
		return rets, 0
	}
	if e.algo == ratelimit.FixedWindow && e.lease.at+now-e.lease.recv >= e.winEnd {
		n := e.lease.left
		e.lease.left = 0
		return rets, n
	}
	return e.detach(rets), 0
}

// detach takes the unused units of the lease out of it, ended or not.
func (e *entry) detach(rets []ret) []ret {
	if e.lease.left <= 0 {
		return rets
	}
	rets = append(rets, e.ret(e.lease.left, e.lease.at, e.lease.sent, e.lease.recv))
	e.view.remaining += e.lease.left // back in the backing store
	e.lease.left = 0
	return rets
}

// ret describes units of the pair to give back: charged at at (backing
// µs) by a Take sent at local µs sent whose answer arrived at recv. For a
// bucket (token bucket, GCRA) the units drain from sent less one round
// trip (recv − sent) on: see drainedUnits.
func (e *entry) ret(units, at, sent, recv int64) ret {
	r := ret{key: e.key, limit: e.limit, units: units, at: at}
	switch e.algo {
	case ratelimit.TokenBucket, ratelimit.GCRA:
		r.scale, r.drain, r.from = e.scale, e.drain, sent-(recv-sent)
	}
	return r
}

// drainedUnits returns how many of units charged to a bucket may have
// drained from it el µs after the charge, had nothing else been charged:
// ⌈el × drain / scale⌉, at most units. Returning those would credit
// capacity that one shared bucket, never charged with them, would not
// have had (it stops draining when empty): see the package documentation,
// Bounds.
func drainedUnits(units, el, scale, drain int64) int64 {
	switch {
	case el <= 0 || units <= 0:
		return 0
	case el >= (units*scale+drain-1)/drain: // units × scale ≤ Burst × scale < 2^53
		return units
	}
	return min(units, (el*drain+scale-1)/scale)
}

// idle reports whether the entry can be forgotten: nothing leased, nothing
// in flight, no refusal remembered, and not asked for in the current
// interval or the one before.
func (e *entry) idle(now, life int64) bool {
	return e.lease.left == 0 && e.busy == nil && e.pins == 0 && now >= e.block.until && now/life > e.slot+1
}

// busyOf returns the channel of a refill in flight on one of ents, or nil.
func busyOf(ents []*entry) chan struct{} {
	for _, e := range ents {
		if e.busy != nil {
			return e.busy
		}
	}
	return nil
}

// serveLocal decides the stack from the leases when each covers its cost
// (a limit of cost 0 needs a fresh answer from the backing store that
// admitted it: see fresh), charging all of them; it reports whether it did.
func serveLocal(reqs []ratelimit.Request, out []ratelimit.Decision, ents []*entry, now, life int64) bool {
	for i, e := range ents {
		if c := reqs[i].Cost; c > 0 && (c > e.lease.left || now >= e.lease.end) || c == 0 && !e.fresh(now, life) {
			return false
		}
	}
	for i, e := range ents {
		e.lease.left -= reqs[i].Cost
		e.use(reqs[i].Cost, now)
		out[i] = e.decision(reqs[i].Limit, now, true)
	}
	return true
}

// refuseCached refuses the stack locally when one of its limits would need
// at least as many units from the backing store as it refused within its
// remembered refusal (a refusal of cost 0, a debt, refuses every positive
// need and cost 0), and every other limit is covered by its lease or was
// described by the backing store within the last lifetime; it reports
// whether it did. Nothing is charged.
func refuseCached(reqs []ratelimit.Request, out []ratelimit.Decision, ents []*entry, now, life int64) bool {
	blocked := false
	for i, e := range ents {
		if e.lease.left > 0 && now >= e.lease.end {
			return false // an ended lease to give back first
		}
		need := reqs[i].Cost - min(e.lease.left, reqs[i].Cost)
		switch {
		case e.blocks(reqs[i].Cost, need, now):
			blocked = true
		case need > 0 && (e.view.recv == 0 || now-e.view.recv >= life):
			return false // nothing recent to describe it with
		case need == 0 && e.view.recv == 0:
			return false
		}
	}
	if !blocked {
		return false
	}
	for i, e := range ents {
		need := reqs[i].Cost - min(e.lease.left, reqs[i].Cost)
		d := e.decision(reqs[i].Limit, now, true)
		if e.blocks(reqs[i].Cost, need, now) {
			d.Allowed, d.RetryAfter = false, time.Duration(e.block.until-now)*time.Microsecond
		}
		out[i] = d
	}
	return true
}

// blocks reports whether the remembered refusal refuses a request of cost
// units that needs need of them from the backing store at now: one that
// needs at least as many as were refused, or, when a cost of 0 was refused
// (the limit is in debt), any positive need and a cost of 0 (a cost its
// lease covers needs nothing from the backing store, which would not be
// asked about it).
func (e *entry) blocks(cost, need, now int64) bool {
	return now < e.block.until && (need > 0 && need >= e.block.need || cost == 0 && e.block.need == 0)
}
