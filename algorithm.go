package ratelimit

import (
	"math/bits"
	"time"
)

// The algorithms as pure functions of (state, now, cost): each updates the
// State it is given in place and returns a Decision, and depends on nothing
// else. Stores apply them to their stored State; the Redis store's Lua
// script mirrors them and the conformance suite in package storetest holds
// the two equal. Time is integer microseconds since the Unix epoch
// throughout.

// TakeAt applies Take's rule for one limit at now (µs since the Unix epoch)
// to *s: it charges cost if the cost fits, and otherwise only brings *s up
// to date (an equivalent state, uncharged). A cost of 0 peeks: it never
// charges, and it is refused only while the limit is in debt (an Adjust
// charged more than the capacity), with RetryAfter the time until the debt
// is paid off. The limit must be valid and cost ≥ 0.
//
// The state is updated in place so that a store can decide on its stored
// state without copying it; to decide on a copy, copy the State first. The
// elements of s.Log are never modified: a changed log is a new slice, so a
// copy of a State taken before the call still describes the state before it.
func (l *Limit) TakeAt(s *State, now, cost int64) (d Decision) {
	l.TakeTo(s, now, cost, &d)
	return d
}

// TakeTo is TakeAt writing the Decision to *d (overwriting all of it)
// instead of returning it, for a store's hot path, and it returns
// l.ExpiresAt(s) for the state it leaves, which a bucket computes on the
// way (Reset needs the same division). A caller that stores a returned
// Decision copies it once more, and the copy reads back, 16 bytes at a
// time, the 8-byte fields just spilled, which defeats the CPU's
// store-to-load forwarding (it cost a tenth of a decision of store/memory).
func (l *Limit) TakeTo(s *State, now, cost int64, d *Decision) (expires int64) {
	// The algorithms fill in d in place: a Decision is 64 bytes, and
	// passing it up by value costs more than the arithmetic.
	*d = Decision{}
	switch l.algorithm {
	case GCRA:
		l.gcraTake(s, now, cost, d)
	case FixedWindow, SlidingWindow:
		l.windowTake(s, now, cost, d)
	case SlidingLog:
		l.logTake(s, now, cost, d)
	case Concurrency:
		l.slotsTake(s, now, cost, d)
	case CalendarWindow:
		l.calendarTake(s, now, cost, d)
	default: // TokenBucket, LeakyBucket
		// ExpiresAt is Updated + ⌈Level/drain⌉, the Reset of the level
		// left: bucketTake returns it.
		expires = s.Updated + l.bucketTake(s, now, cost, d)
		d.Limit, d.At = l, now
		return expires
	}
	d.Limit, d.At = l, now
	return l.ExpiresAt(s)
}

// AdjustAt applies Adjust's rule for one limit at now to *s, for usage
// charged now: see AdjustFrom.
func (l *Limit) AdjustAt(s *State, now, delta int64) Decision {
	return l.AdjustFrom(s, now, 0, delta)
}

// AdjustFrom applies Adjust's rule for one limit at now to *s, settling
// usage that was charged at chargedAt (µs; 0 means now): delta > 0 adds
// usage, possibly beyond capacity as debt (bounded internally, at least
// twice the capacity; windows keep at most twice the quota), delta < 0
// refunds it, never below empty. Window algorithms credit a refund only to
// the window that was charged, and drop it once that window has passed, so
// a refund never creates capacity in a later window. Like TakeAt it
// updates *s in place and never modifies the elements of s.Log. After a
// clock step backwards (ClockStepTolerance), usage charged before the step
// has a chargedAt later than now, so it is settled as charged now; usage
// charged while the clock stood still (behind a window's start by at most
// the tolerance) carries the clock's time, so a window may take its refund
// for the previous window's and drop it, which only refuses more.
func (l *Limit) AdjustFrom(s *State, now, chargedAt, delta int64) (d Decision) {
	if l.algorithm == Concurrency { // chargedAt names a slot: used as given
		l.slotsAdjust(s, now, chargedAt, delta, &d)
		d.Limit, d.At, d.Allowed = l, now, true
		return d
	}
	if chargedAt <= 0 || chargedAt > now {
		chargedAt = now
	}
	switch l.algorithm {
	case GCRA:
		l.gcraAdjust(s, now, delta, &d)
	case FixedWindow, SlidingWindow:
		l.windowAdjust(s, now, chargedAt, delta, &d)
	case SlidingLog:
		l.logAdjust(s, now, chargedAt, delta, &d)
	case CalendarWindow:
		l.calendarAdjust(s, now, chargedAt, delta, &d)
	default:
		l.bucketAdjust(s, now, delta, &d)
	}
	d.Limit, d.At, d.Allowed = l, now, true
	return d
}

// ExpiresAt returns the time (µs since the Unix epoch) after which *s is
// equivalent to the zero State, so a store may forget it: a forgotten key
// behaves exactly like *s would. A state that is already equivalent to the
// zero State may report any time up to now. It does not modify *s.
func (l *Limit) ExpiresAt(s *State) int64 {
	switch l.algorithm {
	case GCRA:
		return s.Level
	case FixedWindow:
		if s.Level == 0 {
			return s.Updated
		}
		return s.Updated + l.periodUS
	case SlidingWindow:
		switch {
		case s.Level > 0:
			return s.Updated + 2*l.periodUS
		case s.Prev > 0:
			return s.Updated + l.periodUS
		default:
			return s.Updated
		}
	case SlidingLog, Concurrency:
		if len(s.Log) == 0 {
			return 0
		}
		return s.Log[len(s.Log)-1] + l.periodUS
	case CalendarWindow:
		return l.calendarExpires(s)
	default:
		return s.Updated + l.drainBy.ceil(s.Level)
	}
}

// ClockStepTolerance is how far a clock may be behind the last change of a
// state and still be taken for a clock that agrees with it: 128 ms, the
// step threshold of NTP (RFC 5905, §10 and §11.3: ntpd slews an offset
// below it and steps a larger one), so the clocks of NTP-disciplined
// writers agree within it.
//
// When the clock reads now and a state was last changed at u > now (the
// clock stepped back, or another writer's clock is ahead), the algorithms
// decide as follows. If u − now ≤ ClockStepTolerance, the state stands
// still: the decision is made as at u, and its RetryAfter, Reset and Delay
// are lengthened by u − now, so that they stay true by this clock (at most
// 128 ms more than needed, below Retry-After's resolution of one second).
// If u − now is larger, it is a step: the state is rebased, its times moved
// back by the step, so that no capacity is created and the key waits what
// it would have waited had the clock not stepped (a window limit aligned
// to the Unix epoch moves back by whole periods, to stay aligned, so it may
// wait up to one period more). Nothing is created either way; the time
// that passed between the state's last change and the step is unknown, and
// counts as not having passed. What "last change" is, per algorithm: the
// Updated time of a bucket and of GCRA, the start of a window, the newest
// entry of a sliding log. See Limit.ClockStepped for what a store must
// write, and the package documentation (Clocks that step backwards) for
// several writers whose clocks disagree by more than the tolerance: each
// alternation between them grants up to rate × skew.
const ClockStepTolerance = 128 * time.Millisecond

// stepTolUS is ClockStepTolerance in µs.
const stepTolUS = int64(ClockStepTolerance / time.Microsecond)

// stepBack compares now with u, the last change of a state: it returns the
// time to decide at and the lag to add to the waits told (now, 0) when now
// ≥ u; (u, u − now) when now is behind by at most the tolerance; and
// otherwise (now, 0) with shift = u − now > 0, by which the caller moves
// the state's times back.
func stepBack(u, now int64) (t, lag, shift int64) {
	switch {
	case now >= u:
		return now, 0, 0
	case u-now <= stepTolUS:
		return u, u - now, 0
	default:
		return now, 0, u - now
	}
}

// addLag lengthens the waits of d, decided lag µs ahead of the clock, so
// that they are true by the clock.
func addLag(d *Decision, lag int64) {
	if lag == 0 {
		return
	}
	if d.RetryAfter > 0 {
		d.RetryAfter += micros(lag)
	}
	if d.Reset > 0 {
		d.Reset += micros(lag)
	}
	if d.Delay > 0 {
		d.Delay += micros(lag)
	}
}

// ClockStepped reports whether the clock at now is more than
// ClockStepTolerance behind the last change of *s in a way that makes
// TakeAt and AdjustFrom at now rebase *s (see ClockStepTolerance). It does
// not modify *s.
//
// A store may skip writing the state after a call that charges nothing (a
// refusal, a peek, an Adjust of 0), since while the clock moves forward
// the state brought up to date is equivalent to the stored one. A rebase is
// not: a store must write the state brought to now (TakeAt at now with
// cost 0 on the stored state) whenever ClockStepped reports true, or a
// client that waits the RetryAfter it was given would be rebased again,
// and refused again, by every retry.
func (l *Limit) ClockStepped(s *State, now int64) bool {
	switch l.algorithm {
	case TokenBucket, LeakyBucket, GCRA:
		return s.Updated-now > stepTolUS
	case FixedWindow, SlidingWindow:
		if l.firstHit {
			return s.Level > 0 && s.Updated-now > stepTolUS
		}
		return s.Updated-now > stepTolUS && s.Updated-now >= l.periodUS
	case SlidingLog:
		return len(s.Log) > 0 && s.Log[len(s.Log)-1]-now > stepTolUS
	}
	return false
}

// ---- Token bucket, leaky bucket (queue) and GCRA ----

// bucketTake is the token bucket: capacity C = Burst units, refilled
// continuously at Quota/Period. State.Level is the capacity in use, scaled
// by scale so that refill is an integer drain per microsecond. For a
// LeakyBucket the same state is a queue draining at the rate, and an
// admitted request's Delay is the time until the queue ahead of it has
// drained: its slot (the "leaky bucket as a queue" of Tanenbaum, Computer
// Networks, §5.4).
//
// It returns ⌈Level/drain⌉ for the level it leaves: the µs until the
// bucket is full again (Reset before the lag is added).
func (l *Limit) bucketTake(s *State, now, cost int64, d *Decision) (refill int64) {
	now, lag := bucketStep(s, now)
	l.drainTo(s, now)
	switch {
	case cost > l.burstOf():
		d.RetryAfter = RetryNever
	case s.Level+cost*l.scale > l.capacity:
		d.RetryAfter = micros(l.drainBy.ceil(s.Level + cost*l.scale - l.capacity))
	default:
		d.Allowed = true
		if l.algorithm == LeakyBucket {
			d.Delay = micros(l.drainBy.ceil(s.Level))
		}
		s.Level += cost * l.scale
	}
	// describeBucket, by hand: too large for the compiler to inline.
	if s.Level < l.capacity {
		d.Remaining = l.scaleBy.div(l.capacity - s.Level)
	}
	refill = l.drainBy.ceil(s.Level)
	d.Reset = micros(refill)
	addLag(d, lag)
	return refill
}

func (l *Limit) bucketAdjust(s *State, now, delta int64, d *Decision) {
	now, lag := bucketStep(s, now)
	l.drainTo(s, now)
	switch {
	case delta > 0:
		if delta > (maxLevel-s.Level)/l.scale {
			s.Level = maxLevel
		} else {
			s.Level += delta * l.scale
		}
	case delta < 0:
		if delta <= -ceilDiv(s.Level, l.scale) {
			s.Level = 0
		} else {
			s.Level += delta * l.scale
		}
	}
	l.describeBucket(s.Level, d)
	addLag(d, lag)
}

// bucketStep applies ClockStepTolerance to a bucket: it returns the time to
// decide at and the lag to add to the waits, and rebases a bucket whose
// clock stepped back (its level is kept, dated now).
func bucketStep(s *State, now int64) (t, lag int64) {
	t, lag, shift := stepBack(s.Updated, now)
	s.Updated -= shift
	return t, lag
}

// drainTo brings a bucket forward to now. A clock that moves backwards is
// treated as standing still, so no capacity is created or lost (bucketStep
// has already decided what a clock behind the bucket means).
func (l *Limit) drainTo(s *State, now int64) {
	if now <= s.Updated {
		return
	}
	elapsed := now - s.Updated
	// elapsed ≥ ⌈Level/drain⌉ drains the bucket, which is elapsed×drain ≥
	// Level: compared as a 128-bit product, which cannot overflow, instead
	// of with a division. (drain ≥ 1, so elapsed ≥ Level already drains it,
	// and a level of 0 or less.)
	if hi, lo := bits.Mul64(uint64(elapsed), uint64(l.drain)); elapsed >= s.Level || hi != 0 || lo >= uint64(s.Level) {
		s.Level = 0
	} else {
		s.Level -= int64(lo)
	}
	s.Updated = now
}

// describeBucket sets d's Remaining and Reset for a bucket at level, and
// returns Reset in µs, ⌈level/drain⌉.
func (l *Limit) describeBucket(level int64, d *Decision) (refill int64) {
	if level < l.capacity {
		d.Remaining = l.scaleBy.div(l.capacity - level)
	}
	refill = l.drainBy.ceil(level)
	d.Reset = micros(refill)
	return refill
}

// GCRA (ITU-T I.371 "virtual scheduling"; Brandur Leach, "Rate Limiting,
// Cells, and GCRA", 2015) keeps the theoretical arrival time TAT. With
// emission interval T = Period/Quota and tolerance τ = Burst×T, a cost c is
// admitted iff max(TAT, now) + c×T − now ≤ τ, and then
// TAT = max(TAT, now) + c×T. That is the token bucket with
// Level = max(0, TAT − now) (T being a whole number of microseconds, which
// New checks for GCRA), so the two admit exactly the same requests. The TAT
// alone cannot tell a clock that stepped back from a key in debt, so the
// state keeps the time of its last change too (Updated; 0 in a state
// written before it was kept, which then cannot see a step), and a GCRA
// state that is full again is the zero State.
func (l *Limit) gcraTake(s *State, now, cost int64, d *Decision) {
	now, lag := gcraStep(s, now)
	gcraToBucket(s, now)
	l.bucketTake(s, now, cost, d)
	gcraFromBucket(s, now)
	addLag(d, lag)
}

func (l *Limit) gcraAdjust(s *State, now, delta int64, d *Decision) {
	now, lag := gcraStep(s, now)
	gcraToBucket(s, now)
	l.bucketAdjust(s, now, delta, d)
	gcraFromBucket(s, now)
	addLag(d, lag)
}

// gcraStep is bucketStep for a GCRA state: a rebase moves the TAT back by
// the step.
func gcraStep(s *State, now int64) (t, lag int64) {
	t, lag, shift := stepBack(s.Updated, now)
	s.Level -= shift
	s.Updated -= shift
	return t, lag
}

// gcraToBucket turns a GCRA state into the equivalent bucket at now.
func gcraToBucket(s *State, now int64) {
	*s = State{Level: max(0, s.Level-now), Updated: now}
}

// gcraFromBucket turns a bucket brought to now back into a GCRA state.
func gcraFromBucket(s *State, now int64) {
	if s.Level == 0 {
		*s = State{}
		return
	}
	*s = State{Level: now + s.Level, Updated: now}
}

// ---- Fixed window and sliding-window counter ----

// windowStart returns the start of the window holding now: aligned to the
// Unix epoch, or, for a fixed window aligned to the first hit, to the hit
// that opened it. A first-hit window that counts nothing (emptied by a
// refund, or rolled to by a peek) is no window: the next hit opens one, just
// as it would on a key never seen, which is what ExpiresAt promises and
// what a store that forgets such a state does. A clock that moves
// backwards stays in the stored window.
func (l *Limit) windowStart(s *State, now int64) int64 {
	p := l.periodUS
	if l.firstHit {
		if s.Updated != 0 && s.Level > 0 && now < s.Updated+p {
			return s.Updated
		}
		return now
	}
	return max(now-now%p, s.Updated)
}

// windowStep applies ClockStepTolerance to a window, whose last change is
// taken to be its start (the latest time the state knows to have passed).
// Decisions about a window are made in absolute times (its end, the weight
// of the previous window), so a clock behind the window's start needs no
// lag: the state stays in the stored window, which is the effective time
// at the start, and every wait is told to the window's end by this clock.
// A step larger than the tolerance moves the window back, so that it ends
// no earlier than it would have without the step (no capacity is created)
// and a step does not lock the key out for its length: a window aligned to
// the first hit opens at now; one aligned to the Unix epoch moves back by
// the largest whole number of periods that keeps its start at or after
// now, to stay aligned (so the key may wait up to one period more than
// without the step). An empty first-hit window is no window, and is left
// to windowStart.
func (l *Limit) windowStep(s *State, now int64) {
	if l.firstHit && s.Level == 0 {
		return
	}
	_, _, shift := stepBack(s.Updated, now)
	if l.firstHit {
		s.Updated -= shift
	} else {
		s.Updated -= shift / l.periodUS * l.periodUS
	}
}

// roll moves a window state to the window starting at w.
func (l *Limit) roll(s *State, w int64) {
	if w == s.Updated {
		return
	}
	if w == s.Updated+l.periodUS {
		s.Prev = s.Level
	} else {
		s.Prev = 0
	}
	if l.algorithm == FixedWindow {
		s.Prev = 0
	}
	s.Level, s.Updated = 0, w
}

// windowTake decides a fixed window (count ≤ Quota per window) or a
// sliding-window counter (Cloudflare, "How we built rate limiting capable
// of scaling to millions of domains", 2017): the previous window's count
// weighted by the part of it still inside the sliding window, plus the
// current count, must stay ≤ Quota. With P the period and e the time
// elapsed in the current window, both in whole milliseconds, the rule
// prev×(P−e)/P + cur + cost ≤ Quota is evaluated exactly as
// prev×(P−e) + (cur+cost)×P ≤ Quota×P.
func (l *Limit) windowTake(s *State, now, cost int64, d *Decision) {
	l.windowStep(s, now)
	l.roll(s, l.windowStart(s, now))
	switch {
	case cost > l.quota:
		d.RetryAfter = RetryNever
	case l.windowUsed(s, now, cost) > l.quota*l.weightUnits():
		d.RetryAfter = micros(l.windowRetry(s, now, cost))
	default:
		d.Allowed = true
		s.Level += cost
	}
	l.describeWindow(s, now, d)
}

// weightUnits is the sliding window's period in milliseconds (1 for a
// fixed window, which weighs nothing).
func (l *Limit) weightUnits() int64 {
	if l.algorithm == SlidingWindow {
		return l.period.Milliseconds()
	}
	return 1
}

// windowUsed returns the usage at now, including cost, in units × weightUnits.
func (l *Limit) windowUsed(s *State, now, cost int64) int64 {
	if l.algorithm != SlidingWindow {
		return s.Level + cost
	}
	pm := l.period.Milliseconds()
	em := max(0, now-s.Updated) / 1000
	return s.Prev*(pm-em) + (s.Level+cost)*pm
}

// windowRetry returns the µs until cost fits (cost ≤ Quota).
func (l *Limit) windowRetry(s *State, now, cost int64) int64 {
	p := l.periodUS
	if l.algorithm != SlidingWindow {
		return s.Updated + p - now
	}
	pm := l.period.Milliseconds()
	// Later in this window: the previous window's weight falls as e grows;
	// the first whole millisecond e with prev×(pm−e) ≤ (Quota−cur−cost)×pm.
	if a := l.quota - s.Level - cost; a >= 0 && s.Prev > 0 {
		if e := pm - a*pm/s.Prev; e < pm {
			return s.Updated + e*1000 - now
		}
	}
	// In the next window the current count becomes the previous one.
	e := int64(0)
	if s.Level > 0 {
		e = max(0, pm-(l.quota-cost)*pm/s.Level)
	}
	return s.Updated + p + e*1000 - now
}

func (l *Limit) describeWindow(s *State, now int64, d *Decision) {
	pm := l.weightUnits()
	if used := l.windowUsed(s, now, 0); used < l.quota*pm {
		d.Remaining = min(l.quota, (l.quota*pm-used)/pm)
	}
	if exp := l.ExpiresAt(s); exp > now {
		d.Reset = micros(exp - now)
	}
}

// windowAdjust credits delta to the window that was charged at chargedAt:
// the current one, or (sliding window) the previous one. Usage charged in a
// window that has passed is no longer counted, so a refund for it is
// dropped and an overage is charged to the current window.
func (l *Limit) windowAdjust(s *State, now, chargedAt, delta int64, d *Decision) {
	l.windowStep(s, now)
	l.roll(s, l.windowStart(s, now))
	p := l.periodUS
	cw := chargedAt - chargedAt%p
	if l.firstHit {
		cw = s.Updated
		if chargedAt < s.Updated {
			cw = s.Updated - 1 // a previous window
		}
	}
	limit := 2 * l.quota
	delta = clamp(delta, -limit, limit) // so that adding it cannot overflow
	switch {
	case cw == s.Updated:
		s.Level = clamp(s.Level+delta, 0, limit)
	case l.algorithm == SlidingWindow && cw == s.Updated-p:
		s.Prev = clamp(s.Prev+delta, 0, limit)
	case delta > 0:
		s.Level = clamp(s.Level+delta, 0, limit)
	}
	l.describeWindow(s, now, d)
}

// clamp bounds v to [lo, hi] without overflowing for any delta that was
// added to a value already in range.
func clamp(v, lo, hi int64) int64 { return min(max(v, lo), hi) }

// ---- Sliding log ----

// logTake keeps one admission time per admitted unit and admits cost iff the
// units admitted in the last Period, plus cost, are at most Quota: exact,
// at O(Quota) memory per key (Quota is bounded by MaxLogQuota).
func (l *Limit) logTake(s *State, now, cost int64, d *Decision) {
	s.Log = l.logLive(logStep(s.Log, now))
	switch {
	case cost > l.quota:
		d.RetryAfter = RetryNever
	case int64(len(s.Log))+cost > l.quota:
		// The oldest entries must expire until cost fits.
		k := int64(len(s.Log)) + cost - l.quota
		d.RetryAfter = micros(s.Log[k-1] + l.periodUS - now)
	default:
		d.Allowed = true
		s.Log = logAppend(s.Log, now, cost)
	}
	l.describeLog(s, now, d)
}

func (l *Limit) logAdjust(s *State, now, chargedAt, delta int64, d *Decision) {
	s.Log = l.logLive(logStep(s.Log, now))
	switch {
	case delta > 0:
		s.Log = logAppend(s.Log, now, min(delta, 2*l.quota-int64(len(s.Log))))
	case delta < 0:
		// Remove the newest entries charged at or after chargedAt; older
		// ones belong to usage the refund is not about.
		n := len(s.Log)
		for n > 0 && delta < 0 && s.Log[n-1] >= chargedAt {
			n--
			delta++
		}
		s.Log = s.Log[:n:n]
	}
	l.describeLog(s, now, d)
}

// logStep applies ClockStepTolerance to a log, whose last change is its
// newest entry: it returns the log and the time at which entries expire. A
// step larger than the tolerance moves every entry back by the step (in a
// new slice), so the newest is dated now. Behind by less, entries expire as
// at the newest one; the waits told need no lag, being absolute times (when
// an entry leaves the window), and new entries are dated no earlier than
// the newest (logAppend).
func logStep(log []int64, now int64) ([]int64, int64) {
	n := len(log)
	if n == 0 {
		return log, now
	}
	t, _, shift := stepBack(log[n-1], now)
	if shift == 0 {
		return log, t
	}
	out := make([]int64, n)
	for i, e := range log {
		out[i] = e - shift
	}
	return out, now
}

// logLive drops the entries that have left the window: an entry admitted at
// t counts while now < t + Period.
func (l *Limit) logLive(log []int64, now int64) []int64 {
	p := l.periodUS
	i := 0
	for i < len(log) && log[i]+p <= now {
		i++
	}
	if i == len(log) {
		return nil
	}
	return log[i:len(log):len(log)]
}

// logAppend returns a new slice with n entries at now appended. Entries stay
// in order even if the clock moves backwards.
func logAppend(log []int64, now, n int64) []int64 {
	if n <= 0 {
		return log
	}
	if len(log) > 0 {
		now = max(now, log[len(log)-1])
	}
	out := make([]int64, len(log), len(log)+int(n))
	copy(out, log)
	for range n {
		out = append(out, now)
	}
	return out
}

func (l *Limit) describeLog(s *State, now int64, d *Decision) {
	d.Remaining = max(0, l.quota-int64(len(s.Log)))
	if len(s.Log) > 0 {
		d.Reset = micros(s.Log[len(s.Log)-1] + l.periodUS - now)
	}
}

func micros(n int64) time.Duration { return time.Duration(n) * time.Microsecond }

// ---- Concurrency cap ----

// slotsTake admits cost slots iff the slots held at now plus cost are at
// most the cap (Quota). State.Log holds one start time per held slot,
// oldest first; a slot is held while start + Period (the maximum hold) >
// now. A refusal's RetryAfter is the time until enough of the oldest slots'
// holds end, at most ConcurrencyRetryAfter: slots usually return sooner,
// when their requests finish.
func (l *Limit) slotsTake(s *State, now, cost int64, d *Decision) {
	s.Log = l.slotsHeld(s.Log, now)
	held := int64(len(s.Log))
	switch {
	case cost > l.quota:
		d.RetryAfter = RetryNever
	case held+cost > l.quota:
		k := held + cost - l.quota // the oldest k slots must return
		wait := s.Log[k-1] + l.periodUS - now
		d.RetryAfter = min(micros(wait), ConcurrencyRetryAfter)
	default:
		d.Allowed = true
		s.Log = slotsInsert(s.Log, now, cost)
	}
	l.describeSlots(s, now, d)
}

// slotsAdjust releases (delta < 0) up to −delta slots that started at
// chargedAt exactly (the At of the Take that took them), or with chargedAt
// ≤ 0 the −delta newest slots; a slot no longer held is not found, so a
// late or repeated release changes nothing. delta > 0 takes slots at now
// without a check, at most twice the cap in all.
func (l *Limit) slotsAdjust(s *State, now, chargedAt, delta int64, d *Decision) {
	s.Log = l.slotsHeld(s.Log, now)
	switch {
	case delta > 0:
		s.Log = slotsInsert(s.Log, now, min(delta, 2*l.quota-int64(len(s.Log))))
	case delta < 0 && chargedAt <= 0:
		n := len(s.Log) - int(slotsUpTo(delta, len(s.Log)))
		s.Log = slotsTrim(s.Log[:n:n])
	case delta < 0:
		// The slots that started at chargedAt are one run of the sorted log.
		i, j := len(s.Log), len(s.Log)
		for i > 0 && s.Log[i-1] >= chargedAt {
			i--
			if s.Log[i] > chargedAt {
				j = i
			}
		}
		if k := int(slotsUpTo(delta, j-i)); k > 0 {
			out := make([]int64, 0, len(s.Log)-k)
			out = append(out, s.Log[:j-k]...)
			s.Log = slotsTrim(append(out, s.Log[j:]...))
		}
	}
	l.describeSlots(s, now, d)
}

// slotsUpTo returns min(−delta, n) for delta < 0, n ≥ 0, without negating
// delta (which overflows for math.MinInt64).
func slotsUpTo(delta int64, n int) int64 {
	if delta < -int64(n) {
		return int64(n)
	}
	return -delta
}

// slotsHeld drops the slots whose maximum hold has ended by now.
func (l *Limit) slotsHeld(log []int64, now int64) []int64 {
	i := 0
	for i < len(log) && log[i]+l.periodUS <= now {
		i++
	}
	return slotsTrim(log[i:len(log):len(log)])
}

// slotsTrim returns nil for an empty log, so that a key holding no slot
// stores nothing.
func slotsTrim(log []int64) []int64 {
	if len(log) == 0 {
		return nil
	}
	return log
}

// slotsInsert returns a new slice with n slots started at now inserted in
// order: after every slot that started at or before now, so that a slot
// keeps its own start time (the At that releases it) even when the clock
// has moved backwards.
func slotsInsert(log []int64, now, n int64) []int64 {
	if n <= 0 {
		return log
	}
	i := len(log)
	for i > 0 && log[i-1] > now {
		i--
	}
	out := make([]int64, 0, len(log)+int(n))
	out = append(out, log[:i]...)
	for range n {
		out = append(out, now)
	}
	return append(out, log[i:]...)
}

// describeSlots sets d's Remaining (the cap minus the slots held) and
// Reset (until every held slot's maximum hold has ended).
func (l *Limit) describeSlots(s *State, now int64, d *Decision) {
	d.Remaining = max(0, l.quota-int64(len(s.Log)))
	if n := len(s.Log); n > 0 {
		d.Reset = micros(s.Log[n-1] + l.periodUS - now)
	}
}
