package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrInvalidRequest is wrapped by the errors a Store returns for a malformed
// call: an empty key, an invalid limit, a negative cost in Take, or an output
// slice shorter than the requests. Nothing is charged when it is returned.
var ErrInvalidRequest = errors.New("ratelimit: invalid store request")

// RetryNever is the RetryAfter of a Decision whose cost exceeds the limit's
// burst: waiting cannot help, so clients must not retry the same request.
const RetryNever time.Duration = -1

// Request asks a Store to charge Cost units of Limit to Key.
type Request struct {
	// Key names who pays: an API key, a client IP, a route, or a
	// composition. Stores never keep it in clear (the Redis store hashes
	// it); it must not be empty.
	Key string
	// Limit is the policy to enforce. It must be valid (Limit.Err() == nil).
	Limit *Limit
	// Cost is the number of units to charge. In Take it must be ≥ 0; 0
	// peeks at the state without charging (refused only while the limit
	// is in debt). In Adjust it may be negative (a
	// refund).
	Cost int64
	// At is used by Adjust only: when the usage being settled was charged,
	// in microseconds since the Unix epoch by the store's clock (the At of
	// the Take's Decision); 0 means now. Window algorithms use it so that
	// a refund never creates capacity in a later window than the one
	// charged.
	At int64
}

// LimitID returns r.Limit.ID() without copying the Limit, for a store's
// hot path: Limit's accessors have value receivers, so r.Limit.ID()
// copies the whole Limit (about 200 bytes) at every call. r.Limit must
// not be nil.
func (r *Request) LimitID() string { return r.Limit.id }

// Decision is a Store's answer for one Request.
type Decision struct {
	// Limit is the policy decided (the Request's Limit).
	Limit *Limit
	// Allowed reports whether this limit had room for the cost. In a
	// stacked Take the request as a whole is admitted only if every
	// Decision is Allowed; when one refuses, none is charged.
	Allowed bool
	// Remaining is the number of whole units left after this decision,
	// rounded down and clamped to [0, Burst].
	Remaining int64
	// Reset is the time until the limit is back to its full capacity
	// (zero when it already is).
	Reset time.Duration
	// RetryAfter is zero when Allowed; otherwise the time until this cost
	// would fit, or RetryNever when it never can (cost > Burst).
	RetryAfter time.Duration
	// Delay is how long the caller must wait before acting on an allowed
	// decision: the time until its slot in a LeakyBucket's queue (zero for
	// every other algorithm, and when refused).
	Delay time.Duration
	// At is the store's clock at the decision, in microseconds since the
	// Unix epoch. Pass it back as Request.At when settling with Adjust.
	At int64
}

// Never reports whether the request was refused because its cost exceeds the
// limit's burst, so that no amount of waiting admits it.
func (d Decision) Never() bool { return d.RetryAfter == RetryNever }

// LimitUnit returns the unit of the decided limit, d.Limit.Unit(), or ""
// when d.Limit is nil. It reads the field in place: Limit's accessors have
// value receivers, so d.Limit.Unit() copies the whole Limit (about 250
// bytes) at every call, which a HeaderWriter outside this package would
// pay for every decision of every response.
func (d *Decision) LimitUnit() Unit {
	if d.Limit == nil {
		return ""
	}
	return d.Limit.unit
}

// LimitBurst returns the capacity of the decided limit in its units,
// d.Limit.Burst(), or 0 when d.Limit is nil, read in place (see
// LimitUnit).
func (d *Decision) LimitBurst() int64 {
	if d.Limit == nil {
		return 0
	}
	if d.Limit.burst == 0 {
		return d.Limit.quota
	}
	return d.Limit.burst
}

// LimitIsShadow reports whether the decided limit is a shadow limit,
// d.Limit.IsShadow(), false when d.Limit is nil, read in place (see
// LimitUnit).
func (d *Decision) LimitIsShadow() bool { return d.Limit != nil && d.Limit.shadow }

// Store keeps the state of every (key, limit) pair and decides requests
// against it. Implementations must be safe for concurrent use and must pass
// the conformance suite in package storetest.
//
// A Store that wraps another (a decorator: a guard, an instrumented store)
// should expose it with a method Unwrap() Store, as store/resilient and
// metrics/prometheus's InstrumentStore do, so that code given the outer
// store can find what is inside, as errors.Unwrap does for errors.
type Store interface {
	// Take decides reqs atomically, all or nothing: if every limit has room
	// for its cost, every one is charged and every Decision is Allowed;
	// otherwise nothing is charged, the refusing limits report Allowed
	// false with their RetryAfter, and the others report their uncharged
	// state. Decisions are written to out[i] for reqs[i]; len(out) must be
	// at least len(reqs). A non-nil error (a malformed request wrapping
	// ErrInvalidRequest, a context deadline, a store failure) means no
	// decision was made and, when the store can know it, nothing was
	// charged. A store keeps neither slice and writes nothing to out
	// once it has returned: the Limiter reuses them for other calls.
	Take(ctx context.Context, reqs []Request, out []Decision) error

	// Adjust charges (Cost > 0) or refunds (Cost < 0) usage without a
	// check, to settle an estimate against the real usage once it is
	// known. A charge may push a limit into debt, which later requests
	// wait out; a refund never raises a limit above its full capacity.
	// The state after the adjustment is written to out as in Take, with
	// Allowed true.
	Adjust(ctx context.Context, reqs []Request, out []Decision) error
}

// CheckRequests validates a Store call. Store implementations call it first
// so that every store rejects the same malformed input with the same error.
// take selects Take's rule that costs be non-negative.
func CheckRequests(reqs []Request, out []Decision, take bool) error {
	if len(out) < len(reqs) {
		return fmt.Errorf("%w: %d decisions for %d requests", ErrInvalidRequest, len(out), len(reqs))
	}
	for i := range reqs {
		r := &reqs[i]
		switch {
		case r.Key == "":
			return fmt.Errorf("%w: request %d: empty key", ErrInvalidRequest, i)
		case r.Limit == nil:
			return fmt.Errorf("%w: request %d: nil limit", ErrInvalidRequest, i)
		case take && r.Cost < 0:
			return fmt.Errorf("%w: request %d: negative cost %d in Take (use Adjust to refund)", ErrInvalidRequest, i, r.Cost)
		}
		// The fields Err reads, read in place: Err's value receiver
		// would copy the whole Limit on every store call.
		if r.Limit.err != nil || r.Limit.id == "" {
			return wrap(ErrInvalidRequest, fmt.Sprintf("request %d", i), r.Limit.Err())
		}
	}
	return nil
}

// State is the stored state of one (key, limit) pair, as the algorithms'
// pure functions read and write it. The zero State is a key never seen (or
// idle long enough to be forgotten). Its fields mean different things per
// algorithm:
//
//	algorithm                  Level                         Updated              Prev             Log
//	TokenBucket, LeakyBucket   capacity in use, scaled (1)   µs of last update    -                -
//	GCRA                       TAT: theoretical arrival, µs  µs of last change    -                -
//	FixedWindow                units used in the window      window start, µs     -                -
//	SlidingWindow              units used in the window      window start, µs     previous window  -
//	SlidingLog                 -                             -                    -                admission times, µs
//	Concurrency                -                             -                    -                held slots' start times, µs
//	CalendarWindow             units used in the period      period start, µs     period end, µs   -
//
// (1) In internal units (see Limit.Params): 0 is a full bucket, Burst×scale
// an empty one, more is debt left by Adjust; it drains at drain internal
// units per microsecond.
//
// Each state's last change (Updated for the buckets and GCRA, whose
// Updated is 0 in a state written before it was kept; the window's start;
// the newest entry of a log) is what a clock that steps backwards is
// measured against: see ClockStepTolerance.
type State struct {
	// Level is the level, TAT or count of the current window: see the table.
	Level int64
	// Updated is the time of the last update (buckets, GCRA) or the
	// window's start (windows), in µs.
	Updated int64
	// Prev is the previous window's count (SlidingWindow), or the end of
	// the period (CalendarWindow, whose periods vary in length).
	Prev int64
	// Log holds one admission time (µs since the Unix epoch) per admitted
	// unit, oldest first. The pure functions never modify a Log they are
	// given: they return a new slice when it changes, so a store can
	// discard a working copy without corrupting the stored state.
	Log []int64
}

// Micros converts t to microseconds since the Unix epoch, the time unit of
// State and of the stores.
func Micros(t time.Time) int64 { return t.UnixMicro() }

// SingleTaker is an optional interface of a Store: TakeOne decides one
// request exactly as Take(ctx, []Request{r}, out) would (the same checks,
// the same errors, the same Decision), but takes and returns values: the
// fields of the Decision one by one, in Decision's order and units
// (remaining in the limit's units, reset, retryAfter and delay as
// durations, at in µs since the Unix epoch), all but Limit, which is
// r.Limit (on an error, zeros). The Limiter calls it for a request of one limit
// (Limiter.Take and the middleware), so that no slice crosses the
// interface: a slice passed through an interface method escapes, which
// costs an allocation per call unless the caller keeps scratch. The
// fields come back in registers; a returned Decision, a struct too large
// for the compiler to keep in registers, would be stored to memory by the
// caller and copied once more, 16 bytes at a time, reading back the 8-byte
// fields just stored, which defeats the CPU's store-to-load forwarding
// (a tenth of a Limiter.Take). store/memory implements it, and store/lease
// (for its LocalTaker's TryTakeOne). A wrapper store should implement it
// only when the store it wraps does.
type SingleTaker interface {
	TakeOne(ctx context.Context, r Request) (allowed bool, remaining int64, reset, retryAfter, delay time.Duration, at int64, err error)
}

// PairTaker is an optional interface of a Store: TakeTwo decides the
// stack of the two requests a = {keyA, limitA, costA} and b = {keyB,
// limitB, costB} exactly as Take(ctx, []Request{a, b}, out) would (the
// same checks, the same errors, the same Decisions, all or nothing), but
// takes and returns values: the requests' fields, and the fields of a's
// Decision and then b's one by one, in Decision's order and units (see
// SingleTaker), all but Limit, which is the request's (on an error,
// zeros). The Limiter calls it for a request of two limits
// (Limiter.Take and the middleware), so that no slice crosses the
// interface (see SingleTaker), and so that no Request or Decision is
// copied through memory on the way: the values travel in registers or
// as 8-byte words on the stack, where structs would be copied 16 bytes
// at a time over 8-byte stores (see SingleTaker). store/memory
// implements it, and store/lease (for its LocalTaker's TryTakeTwo). A
// wrapper store should implement it only when the store it wraps does.
type PairTaker interface {
	TakeTwo(ctx context.Context, keyA string, limitA *Limit, costA int64, keyB string, limitB *Limit, costB int64) (allowedA bool, remainingA int64, resetA, retryAfterA, delayA time.Duration, atA int64, allowedB bool, remainingB int64, resetB, retryAfterB, delayB time.Duration, atB int64, err error)
}

// SingleAdjuster is an optional interface of a Store: AdjustOne charges
// (r.Cost > 0) or refunds (r.Cost < 0) one request exactly as
// Adjust(ctx, []Request{r}, out) would (the same checks, the same errors,
// the same state afterwards, window refunds placed by r.At), but takes and
// returns values: the fields of the Decision one by one, in Decision's
// order and units (see SingleTaker; allowed is true on success), all but
// Limit, which is r.Limit (on an error, zeros). The Limiter calls it when
// a request's settlement adjusts one limit (the usage reported for one
// limit of the stack), so that no slice crosses the interface and the
// Limiter needs no scratch for the call (see SingleTaker). store/memory
// implements it. A wrapper store should implement it only when the store
// it wraps does.
type SingleAdjuster interface {
	AdjustOne(ctx context.Context, r Request) (allowed bool, remaining int64, reset, retryAfter, delay time.Duration, at int64, err error)
}

// NonBlocking is an optional interface of a Store. NonBlocking returning
// true promises that Take and Adjust never wait for anything but a short
// in-process lock (no I/O, no network, no sleep), so that a deadline can
// never interrupt them: the Limiter then calls the store with the caller's
// context as is, without the store timeout (WithStoreTimeout). Any other
// store's calls get a child context with the store timeout (one small
// allocation per call), whose timer starts only if the store asks for
// Done; a Take that a LocalTaker decides at once gets none. A store that
// checks ctx.Err on entry still sees the caller's cancellation.
// store/memory implements it; a wrapper store should forward the answer
// of the store it wraps (false when it adds a wait of its own).
type NonBlocking interface {
	NonBlocking() bool
}

// LocalTaker is an optional interface of a Store that decides some calls
// in memory and makes others wait (for a backing store over the network,
// or for another call), such as store/lease, which decides a hot key's
// calls from its lease and refills the lease from Redis.
//
// TryTake decides reqs exactly as Take(ctx, reqs, out) would have decided
// them at that moment (the same decisions written to out[i] for reqs[i],
// the same charges, the same effect on the store's state and statistics),
// when it can do so without waiting for anything but a short in-process
// lock and without calling another store, and then returns true: the
// call is done, as a Take that returned nil. Otherwise it returns false
// and has done nothing: nothing charged, nothing counted (not even as
// demand), nothing written to out; the caller then makes the call with
// Take, once. It returns false for every call that Take would answer with
// an error (a malformed call, whose ErrInvalidRequest Take reports) and
// for every call it cannot decide at once. It reads no context: a caller
// whose context has ended calls Take, which reports it. It keeps neither
// slice, and should allocate nothing (that is its point).
//
// TryTakeOne is TryTake of the one request r, taking and returning values
// as SingleTaker's TakeOne does: the fields of the Decision one by one, in
// Decision's order and units (remaining in the limit's units, reset,
// retryAfter and delay as durations, at in µs since the Unix epoch), all
// but Limit, which is r.Limit; all zero when decided is false. TryTakeTwo
// is TryTake of the stack of the two requests a = {keyA, limitA, costA}
// and b = {keyB, limitB, costB} (all or nothing), taking and returning
// values as PairTaker's TakeTwo does: a's Decision's fields and then b's,
// all zero when decided is false.
//
// The Limiter tries them for every Take it makes (TryTakeOne when the
// store is also a SingleTaker and the Take is of one limit, TryTakeTwo
// when it is also a PairTaker and the Take is of two, TryTake
// otherwise), before it builds the call's context with the store timeout
// (see NonBlocking), as long as the caller's context has not ended. A call
// they decide costs no context and no allocation, and is reported as a
// successful store call (Hooks.OnStoreCall, Op "take"); a call they do not
// decide goes on as if they had not been tried: the context, then Take
// (or TakeOne, TakeTwo). Adjust is never tried. A NonBlocking store gains nothing
// from them. store/lease implements LocalTaker.
//
// A wrapper store should implement it only when its own methods do all
// that its Take does around the wrapped store's: store/resilient (whose
// circuit breaker and fallback choose the store that decides) and
// metrics/prometheus's InstrumentStore (which measures every Take) do not
// implement it, so a Limiter over them calls Take with the store timeout
// even when the store they wrap could decide at once. (A struct that
// embeds a LocalTaker's concrete type gets its methods, which bypass the
// wrapper's Take: such a wrapper must define its own.)
type LocalTaker interface {
	TryTake(reqs []Request, out []Decision) (decided bool)
	TryTakeOne(r Request) (decided, allowed bool, remaining int64, reset, retryAfter, delay time.Duration, at int64)
	TryTakeTwo(keyA string, limitA *Limit, costA int64, keyB string, limitB *Limit, costB int64) (decided, allowedA bool, remainingA int64, resetA, retryAfterA, delayA time.Duration, atA int64, allowedB bool, remainingB int64, resetB, retryAfterB, delayB time.Duration, atB int64)
}
