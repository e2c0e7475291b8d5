package resilient

import (
	"fmt"
	"math/bits"
	"sync"

	"github.com/rampmeter/ratelimit"
)

// Share is the fraction Num/Den of a global limit that one instance may
// spend on its own while the primary store is unavailable. It must satisfy
// 1 ≤ Num ≤ Den. The usual choice is one instance's even share of the
// fleet, Share{Num: 1, Den: instances} (see EvenShare): then the fleet as a
// whole admits at most the global limit (plus at most one unit per limit and
// instance, from rounding up to 1), instead of unlimited traffic under
// FailOpen or none under FailClosed.
type Share struct {
	Num, Den int64
}

// EvenShare returns the share of one of n instances, Share{1, n}. n must be
// at least 1.
func EvenShare(n int64) Share { return Share{Num: 1, Den: n} }

// Err returns nil if s is a usable share, or an error wrapping
// ErrInvalidOption.
func (s Share) Err() error {
	if s.Num < 1 || s.Den < 1 || s.Num > s.Den {
		return fmt.Errorf("%w: share %d/%d must satisfy 1 ≤ Num ≤ Den", ErrInvalidOption, s.Num, s.Den)
	}
	return nil
}

// of returns max(1, floor(n × Num/Den)) for 0 < n < 2^63, exactly (the
// product is formed in 128 bits, and since Num ≤ Den the quotient fits).
func (s Share) of(n int64) int64 {
	hi, lo := bits.Mul64(uint64(n), uint64(s.Num))
	q, _ := bits.Div64(hi, lo, uint64(s.Den))
	return max(1, int64(q))
}

// ScaleLimit returns l scaled to share s of it: the same name, period
// (a calendar period in the same zone), algorithm, unit, cost function,
// window alignment, refusal status and shadow mode, with
// Quota' = max(1, floor(Quota × s)) and Burst' = max(1, floor(Burst × s)).
// Rounding down keeps the instances' shares from adding up to more than the
// whole, except where the floor of 1 applies.
//
// A GCRA limit needs an emission interval of whole microseconds; when the
// scaled quota does not divide the period so, the scaled limit uses
// TokenBucket, which admits exactly what that GCRA would. ScaleLimit
// returns an error wrapping ErrInvalidOption when s is invalid and one
// wrapping ratelimit.ErrInvalidLimit when l is.
func ScaleLimit(l ratelimit.Limit, s Share) (ratelimit.Limit, error) {
	if err := s.Err(); err != nil {
		return ratelimit.Limit{}, err
	}
	if err := l.Err(); err != nil {
		return ratelimit.Limit{}, err
	}
	quota, burst := s.of(l.Quota()), s.of(l.Burst())
	build := func(a ratelimit.Algorithm) ratelimit.Limit {
		sl := ratelimit.Every(quota, l.Period())
		switch l.CalendarPeriod() {
		case ratelimit.CalendarDay:
			sl = ratelimit.PerCalendarDay(quota, l.Location())
		case ratelimit.CalendarMonth:
			sl = ratelimit.PerCalendarMonth(quota, l.Location())
		}
		switch a {
		case ratelimit.TokenBucket, ratelimit.GCRA, ratelimit.LeakyBucket:
			sl = sl.WithBurst(burst)
		} // the window algorithms have Burst == Quota
		sl = sl.WithAlgorithm(a)
		if l.AlignsToFirstHit() {
			sl = sl.AlignToFirstHit()
		}
		if fn := l.Cost(); fn != nil {
			sl = sl.CostFrom(fn)
		}
		sl = sl.WithUnit(l.Unit()).Named(l.Name())
		if l.IsShadow() {
			sl = sl.Shadow()
		}
		if st := l.RefusalStatus(); st != 0 {
			sl = sl.WithRefusalStatus(st)
		}
		return sl
	}
	sl := build(l.Algorithm())
	if sl.Err() != nil && l.Algorithm() == ratelimit.GCRA {
		sl = build(ratelimit.TokenBucket)
	}
	if err := sl.Err(); err != nil {
		return ratelimit.Limit{}, fmt.Errorf("resilient: scaling %v by %d/%d: %w", l, s.Num, s.Den, err)
	}
	return sl, nil
}

// maxScaled bounds the cache of scaled limits. The cache holds one entry
// per distinct limit (see scaleKey), so it normally holds one entry per
// configured limit; a caller that builds limits with ever new parameters
// would otherwise grow it without end.
const maxScaled = 4096

// scaleKey identifies an original limit by value: its ID (name, algorithm,
// window alignment, quota, period and burst) and its shadow flag, which
// together determine every field of its scaled copy that the fallback
// store enforces. The cost function and unit, which only describe the
// limit, are not part of it: Decisions point back to the caller's Limit.
// Keying by value rather than by *Limit means that a Limit changed behind
// its pointer is scaled afresh instead of enforced from a stale copy.
type scaleKey struct {
	id     string
	shadow bool
}

// scaler caches ScaleLimit per original limit (scaleKey).
type scaler struct {
	share Share
	mu    sync.RWMutex
	cache map[scaleKey]*ratelimit.Limit
}

func newScaler(s Share) *scaler {
	return &scaler{share: s, cache: make(map[scaleKey]*ratelimit.Limit)}
}

// scaled returns the cached scaled copy of *l, computing it on first use.
func (sc *scaler) scaled(l *ratelimit.Limit) (*ratelimit.Limit, error) {
	if err := l.Err(); err != nil {
		// An invalid limit has no ID: never cache it.
		_, err := ScaleLimit(*l, sc.share)
		return nil, err
	}
	k := scaleKey{id: l.ID(), shadow: l.IsShadow()}
	sc.mu.RLock()
	s, ok := sc.cache[k]
	sc.mu.RUnlock()
	if ok {
		return s, nil
	}
	v, err := ScaleLimit(*l, sc.share)
	if err != nil {
		return nil, err
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if s, ok := sc.cache[k]; ok {
		return s, nil
	}
	if len(sc.cache) >= maxScaled {
		clear(sc.cache)
	}
	sc.cache[k] = &v
	return &v, nil
}

// len returns the number of cached scaled limits.
func (sc *scaler) len() int {
	sc.mu.RLock()
	defer sc.mu.RUnlock()
	return len(sc.cache)
}
