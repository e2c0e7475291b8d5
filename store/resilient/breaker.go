package resilient

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// State is the state of a Store's circuit breaker.
type State int32

const (
	// Closed: calls go to the primary store. Consecutive failures are
	// counted; FailureThreshold of them open the circuit.
	Closed State = iota
	// Open: calls do not go to the primary store; they fail fast with
	// ErrCircuitOpen (or are decided by the fallback) until the backoff
	// has passed.
	Open
	// HalfOpen: the backoff has passed and one call, the probe, is on its
	// way to the primary store; the others fail fast as in Open. The
	// probe's success closes the circuit, its failure opens it again with
	// twice the backoff (up to the maximum).
	HalfOpen
)

// String returns "closed", "open" or "half-open".
func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half-open"
	default:
		return "state(" + strconv.Itoa(int(s)) + ")"
	}
}

// breaker is a consecutive-failure circuit breaker with exponential
// backoff. Its fast path (closed, no recent failure) takes no lock.
type breaker struct {
	threshold int64
	base, cap time.Duration
	jitter    float64
	now       func() time.Time
	rand      func() float64
	onChange  func(from, to State)

	state    atomic.Int32 // a State
	failures atomic.Int64 // consecutive failures while closed

	mu        sync.Mutex
	opens     int       // consecutive opens without a successful probe
	openUntil time.Time // Open: no probe before this instant
	probing   bool      // HalfOpen: the probe is in flight
	openCount atomic.Uint64
}

// admission is what allow grants a call.
type admission uint8

const (
	rejected admission = iota // circuit open: do not call the primary
	normal                    // circuit closed: call it
	probe                     // circuit half-open: call it as the probe
)

// allow reports whether a call may go to the primary store now.
func (b *breaker) allow() admission {
	if State(b.state.Load()) == Closed {
		return normal
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch State(b.state.Load()) {
	case Closed:
		return normal
	case Open:
		if b.now().Before(b.openUntil) {
			return rejected
		}
		b.setLocked(HalfOpen)
		b.probing = true
		return probe
	default: // HalfOpen
		if b.probing {
			return rejected
		}
		b.probing = true
		return probe
	}
}

// success records a call that the primary store answered.
func (b *breaker) success(a admission) {
	if a == probe {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.probing = false
		b.opens = 0
		b.failures.Store(0)
		b.setLocked(Closed)
		return
	}
	if b.failures.Load() != 0 {
		b.failures.Store(0)
	}
}

// failure records a call that the primary store failed or did not answer.
func (b *breaker) failure(a admission) {
	if a == probe {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.probing = false
		b.openLocked()
		return
	}
	if b.failures.Add(1) < b.threshold {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if State(b.state.Load()) == Closed && b.failures.Load() >= b.threshold {
		b.openLocked()
	}
}

// release gives up a probe that learned nothing about the primary store
// (its caller went away, or no call slot was free): the circuit returns to
// Open with its backoff already over, so the next call probes.
func (b *breaker) release(a admission) {
	if a != probe {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probing = false
	b.setLocked(Open)
}

// retryIn returns how long a caller should wait before a call that only
// the primary can decide: the time until the next probe while the circuit
// is open and that time has not passed, else the initial backoff. It is
// always positive.
func (b *breaker) retryIn() time.Duration {
	d := b.base
	if State(b.state.Load()) != Open {
		return d
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if State(b.state.Load()) == Open {
		if r := b.openUntil.Sub(b.now()); r > 0 {
			d = r
		}
	}
	return d
}

// openLocked opens the circuit for the next backoff.
func (b *breaker) openLocked() {
	b.opens++
	b.failures.Store(0)
	b.openUntil = b.now().Add(b.backoff(b.opens))
	b.openCount.Add(1)
	b.setLocked(Open)
}

// backoff returns the wait before the probe after the n-th consecutive
// open (n ≥ 1): base × 2^(n−1), at most cap, less up to the jitter
// fraction of it (rand's draw in [0, 1) times jitter).
func (b *breaker) backoff(n int) time.Duration {
	d := b.base
	for i := 1; i < n && d < b.cap; i++ {
		d *= 2
	}
	d = min(d, b.cap)
	if b.jitter > 0 {
		r := min(max(b.rand(), 0), 1)
		d -= time.Duration(float64(d) * b.jitter * r)
	}
	return d
}

func (b *breaker) setLocked(to State) {
	from := State(b.state.Swap(int32(to)))
	if from != to && b.onChange != nil {
		b.onChange(from, to)
	}
}
