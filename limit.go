package ratelimit

import (
	"errors"
	"fmt"
	"math/bits"
	"net/http"
	"strconv"
	"time"
)

// ErrInvalidLimit is wrapped by every error that reports a Limit which cannot
// be enforced: a quota, period or burst that is zero or negative, a period
// shorter than one microsecond, or magnitudes that would overflow the exact
// integer arithmetic the stores share.
var ErrInvalidLimit = errors.New("ratelimit: invalid limit")

// Algorithm selects the rule a Limit is enforced with.
type Algorithm uint8

const (
	// TokenBucket is a bucket of Burst units refilled continuously at
	// Quota/Period units per second (the default). A key may spend a full
	// bucket at once, then Quota per Period on average. It is exactly
	// equivalent to GCRA (ITU-T I.371, "virtual scheduling") with the
	// emission interval Period/Quota and a tolerance of Burst intervals.
	TokenBucket Algorithm = iota
	// GCRA is the generic cell rate algorithm (ITU-T I.371): the same
	// admissions as TokenBucket, from one stored number per key, the
	// theoretical arrival time (TAT). It requires the emission interval
	// Period/Quota to be a whole number of microseconds (PerSecond(10),
	// PerMinute(60) and PerDay(100_000) qualify; Every(7, 3*time.Second)
	// does not: use TokenBucket, which admits the same).
	GCRA
	// LeakyBucket is the leaky bucket as a queue: a queue of Burst units
	// draining at Quota/Period. An admitted request's Decision.Delay is the
	// time until its slot; a caller that waits it out (Limiter.Wait does)
	// sends at exactly the rate, with no bursts. Read as a meter (ignoring
	// Delay) it is the token bucket.
	LeakyBucket
	// SlidingWindow is the sliding-window counter: the previous window's
	// count weighted by its share of the sliding window, plus the current
	// window's count, at most Quota. Two counters per key. It assumes the
	// previous window's requests were spread evenly, so it can admit
	// somewhat more or less than Quota in some Period-long spans; the log
	// is exact. The period must be a whole number of milliseconds.
	SlidingWindow
	// SlidingLog admits at most Quota units in any Period-long span,
	// exactly, by keeping one timestamp per admitted unit (so Quota is
	// bounded by MaxLogQuota).
	SlidingLog
	// FixedWindow counts at most Quota units per window of Period, windows
	// aligned to the Unix epoch (or to a key's first hit, with
	// AlignToFirstHit). The naive baseline: around a window boundary a key
	// can spend 2×Quota within a short span.
	FixedWindow
	// Concurrency caps the requests in flight per key: at most Quota slots
	// are held at once, each from its admission until it is released (an
	// Adjust of −1 dated at the admission, see Concurrent) or until Period,
	// the maximum hold, has passed since it was taken, whichever comes
	// first. Build it with Concurrent.
	Concurrency
	// CalendarWindow counts at most Quota units per calendar day or month
	// in a time zone (PerCalendarDay, PerCalendarMonth, the only way to
	// build one): a fixed window whose boundaries are local midnights, so
	// its length varies (28 to 31 days; 23 or 25 hours on a day when
	// daylight saving time starts or ends). Its exactness rules are
	// FixedWindow's.
	CalendarWindow
)

// MaxLogQuota is the largest Quota a SlidingLog limit accepts: it stores one
// timestamp per admitted unit, per key.
const MaxLogQuota = 10_000

// MaxConcurrent is the largest cap a Concurrency limit accepts: it stores
// one start time per held slot, per key.
const MaxConcurrent = 10_000

// ConcurrencyRetryAfter bounds the RetryAfter of a refusal by a
// Concurrency limit. A held slot returns when its request finishes, which
// no store can foresee; the time until the oldest slot's maximum hold ends
// is only an upper bound, usually far too long (minutes, for a stream). So
// a refusal says to retry after that time or after one second, whichever
// is sooner: Retry-After: 1. The wait it gives is therefore a hint, not a
// promise: a retry after it is admitted only if a slot was released
// meanwhile (or the oldest one's hold ended).
const ConcurrencyRetryAfter = time.Second

// String returns the algorithm's name as used in documentation and storage
// identifiers ("token-bucket").
func (a Algorithm) String() string {
	switch a {
	case TokenBucket:
		return "token-bucket"
	case GCRA:
		return "gcra"
	case LeakyBucket:
		return "leaky-bucket"
	case SlidingWindow:
		return "sliding-window"
	case SlidingLog:
		return "sliding-log"
	case FixedWindow:
		return "fixed-window"
	case Concurrency:
		return "concurrency"
	case CalendarWindow:
		return "calendar-window"
	default:
		return "algorithm(" + strconv.Itoa(int(a)) + ")"
	}
}

// Unit names what a Limit counts. The IETF RateLimit-Policy field
// (draft-ietf-httpapi-ratelimit-headers-11, section 3.1) defines only
// "requests" as a quota unit; other units are reported through a vendor
// parameter (see HeadersIETF).
type Unit string

const (
	// Requests counts one unit per request unless a cost function says
	// otherwise.
	Requests Unit = "requests"
	// Tokens counts AI tokens (prompt plus completion). Its cost comes from
	// a cost function and is usually settled after the response with
	// ReportUsage.
	Tokens Unit = "tokens"
	// ConcurrentRequests counts requests in flight, the unit of a
	// Concurrency limit (Concurrent). It is the quota unit
	// "concurrent-requests" of the IETF RateLimit-Policy field
	// (draft-ietf-httpapi-ratelimit-headers-11, §3.1), sent as qu.
	ConcurrentRequests Unit = "concurrent-requests"
)

// CostFunc returns the cost of one HTTP request in a Limit's unit, before
// the handler runs. For AI tokens this is an estimate that the handler
// corrects with ReportUsage. It must be non-negative. An error that
// implements interface{ StatusCode() int } is answered with that status
// (for example 400 for malformed JSON or 413 for an oversized body);
// any other error is answered with 400. Nothing is charged when any cost
// function fails.
type CostFunc func(r *http.Request) (int64, error)

// Exact-arithmetic bounds. Every number the algorithms compute stays below
// 2^53 so that the Go code and the Redis Lua script (whose numbers are
// IEEE-754 doubles) produce identical integers.
const (
	// maxScaled bounds a limit's capacity in internal units
	// (Burst × Period/gcd(Period, Quota) in microseconds).
	maxScaled = int64(1) << 51
	// maxLevel bounds the stored fill level, including debt left by
	// Adjust; it is at least twice any capacity.
	maxLevel = int64(1) << 52
	// maxPeriod is the longest period accepted: about 100 years.
	maxPeriod = 100 * 365 * 24 * time.Hour
)

// Limit is one policy: a quota of units per period, enforced per key with an
// algorithm. The zero Limit is invalid; build one with PerSecond,
// PerMinute, PerHour, PerDay or Every and refine it with the With... and
// Named methods, each of which returns a modified copy:
//
//	ratelimit.PerMinute(60).Named("requests")
//	ratelimit.PerDay(100_000).Named("tokens").CostFrom(estimate)
//
// Configuration errors are reported by Err (and by New) rather than by the
// builder methods, so a chain never panics.
type Limit struct {
	name      string
	quota     int64
	period    time.Duration
	burst     int64 // 0 means "equal to quota"
	algorithm Algorithm
	firstHit  bool // FixedWindow: windows open at a key's first hit
	unit      Unit
	cost      CostFunc
	shadow    bool   // decided and charged, never refuses (see Shadow)
	ns        string // the Limiter's name (WithName), or "": see inNamespace

	calendar CalendarPeriod // CalendarWindow: day or month (calendar.go)
	loc      *time.Location // CalendarWindow: the zone of its boundaries
	refusal  int            // WithRefusalStatus, 0: the Limiter's default
	calSpans *calCache      // CalendarWindow: the last period computed

	// Derived by finish; the rate Quota/Period expressed as an exact
	// ratio: refilling one unit takes scale/drain microseconds.
	scale    int64 // microseconds-per-unit numerator: Period(µs)/g
	drain    int64 // units-per-microsecond numerator: Quota/g
	capacity int64 // Burst × scale, the capacity in internal units
	// scaleBy and drainBy divide by scale and by drain without a
	// division instruction (see divisor): a bucket's decision divides by
	// both.
	scaleBy, drainBy divisor
	periodUS         int64 // Period in µs
	// The quota and window announced in RateLimit-Policy (q and w, see
	// HeadersIETF): Quota and Period in seconds, or both scaled when the
	// period is not a whole number of seconds.
	wireQ, wireW int64
	id           string
	buildErr     error // first error from a builder method; sticks
	err          error // buildErr, or the result of validation
}

// Every returns a limit of quota units per period, for example
// Every(100, 10*time.Second). The burst defaults to quota, the algorithm to
// TokenBucket, the unit to Requests and the name to the unit's name
// ("requests"; "tokens" after CostFrom): see Name.
func Every(quota int64, period time.Duration) Limit {
	l := Limit{quota: quota, period: period, unit: Requests}
	return l.finish()
}

// PerSecond returns a limit of quota units per second.
func PerSecond(quota int64) Limit { return Every(quota, time.Second) }

// PerMinute returns a limit of quota units per minute.
func PerMinute(quota int64) Limit { return Every(quota, time.Minute) }

// PerHour returns a limit of quota units per hour.
func PerHour(quota int64) Limit { return Every(quota, time.Hour) }

// PerDay returns a limit of quota units per 24 hours (a rolling day, not a
// calendar day).
func PerDay(quota int64) Limit { return Every(quota, 24*time.Hour) }

// Named returns a copy of l with the given name. Names identify a policy in
// headers, problem details, ReportUsage and storage keys; they must be
// 1 to 64 characters from [A-Za-z0-9_.-] and unique within one Limiter.
func (l Limit) Named(name string) Limit { l.name = name; return l.finish() }

// WithBurst returns a copy of l whose capacity is burst units: the most a key
// can spend at one instant after being idle. It must be at least 1.
func (l Limit) WithBurst(burst int64) Limit {
	if burst <= 0 && l.buildErr == nil {
		l.buildErr = fmt.Errorf("%w: burst must be at least 1, got %d", ErrInvalidLimit, burst)
	}
	l.burst = burst
	return l.finish()
}

// WithAlgorithm returns a copy of l enforced with algorithm a.
func (l Limit) WithAlgorithm(a Algorithm) Limit { l.algorithm = a; return l.finish() }

// AlignToFirstHit returns a copy of l whose fixed windows open at each key's
// first hit after the previous window closed, instead of at multiples of
// Period since the Unix epoch. A window that counts nothing (refunded in
// full by Adjust) is closed: the next hit opens a new one, as on a key
// never seen. Only FixedWindow accepts it.
func (l Limit) AlignToFirstHit() Limit { l.firstHit = true; return l.finish() }

// AlignsToFirstHit reports whether AlignToFirstHit was applied.
func (l Limit) AlignsToFirstHit() bool { return l.firstHit }

// CostFrom returns a copy of l that counts Tokens, with each request's cost
// (its estimate, before the handler runs) given by fn. Use ReportUsage in
// the handler to settle the real usage.
func (l Limit) CostFrom(fn CostFunc) Limit {
	l.cost = fn
	l.unit = Tokens
	if fn == nil && l.buildErr == nil {
		l.buildErr = fmt.Errorf("%w: nil cost function", ErrInvalidLimit)
	}
	return l.finish()
}

// Shadow returns a copy of l in shadow (dry-run) mode, to dark-launch a
// limit: the Limiter decides it with every request and charges it when it
// admits, reports it in Stats.ShadowLimited and to Hooks.OnDecision, but
// never refuses a request because of it. It is left out of the rate-limit
// fields, so that clients do not slow down for it (HeadersShadow lists it). A
// refusal by a shadow limit does not block the charge of the enforced
// limits, and a request it refuses is not charged to it, so its state is
// exactly what it would be if it were enforced on the admitted traffic.
//
// Shadow does not change ID: a shadow limit and its enforced twin share
// their stored state, so an operator can flip a limit between shadow and
// enforced without resetting its keys.
func (l Limit) Shadow() Limit { l.shadow = true; return l.finish() }

// IsShadow reports whether Shadow was applied.
func (l Limit) IsShadow() bool { return l.shadow }

// WithUnit returns a copy of l that reports its quota in unit u. It changes
// how the limit is described (headers, errors), not what is counted. A limit
// without a Named name is named after its unit, so WithUnit then renames it
// too (and so its ID and storage keys): name limits explicitly when the
// unit may change. u must be 1 to 64 printable ASCII characters (%x20-7E)
// other than '"' and '\', since it is sent in the RateLimit-Policy field
// as an RFC 9651 String (§3.3.3, which allows nothing else); Err, and so
// New, report any other unit (such as "tökens") as invalid.
func (l Limit) WithUnit(u Unit) Limit { l.unit = u; return l.finish() }

// Name returns the policy name: the one given to Named, or else the unit's
// name ("requests", or "tokens" after CostFrom).
func (l Limit) Name() string {
	if l.name == "" {
		return string(l.unit)
	}
	return l.name
}

// nameOf and burstOf are Name and Burst for the hot paths: a pointer
// receiver reads a field or two, where the value receivers of the
// exported accessors copy the whole Limit at every call.
func (l *Limit) nameOf() string {
	if l.name == "" {
		return string(l.unit)
	}
	return l.name
}

func (l *Limit) burstOf() int64 {
	if l.burst == 0 {
		return l.quota
	}
	return l.burst
}

// Quota returns the number of units granted per Period.
func (l Limit) Quota() int64 { return l.quota }

// Period returns the period over which Quota units are granted.
func (l Limit) Period() time.Duration { return l.period }

// Burst returns the capacity in units: the most one key can spend at once.
func (l Limit) Burst() int64 {
	if l.burst == 0 {
		return l.quota
	}
	return l.burst
}

// Algorithm returns the algorithm the limit is enforced with.
func (l Limit) Algorithm() Algorithm { return l.algorithm }

// Unit returns what the limit counts.
func (l Limit) Unit() Unit { return l.unit }

// Cost returns the limit's cost function, or nil when each request costs 1.
func (l Limit) Cost() CostFunc { return l.cost }

// ID returns a string that identifies the limit's name, algorithm and
// parameters, and the name of the Limiter it belongs to (WithName: a
// limit of Limiter.Limits of a Limiter named "ip" has an ID starting with
// "ip/"). Stores use it in storage keys, so changing a limit's quota,
// period or burst starts its keys afresh instead of misreading old state,
// and Limiters with different names never share state.
func (l Limit) ID() string { return l.id }

// Err returns nil if the limit can be enforced, or an error wrapping
// ErrInvalidLimit that says why not.
func (l Limit) Err() error {
	if l.err == nil && l.id == "" {
		return fmt.Errorf("%w: zero Limit (build one with PerMinute, Every, ...)", ErrInvalidLimit)
	}
	return l.err
}

// String describes the limit, e.g. `"requests" 60/1m0s burst 60 token-bucket`
// or `"concurrent-requests" 10 in flight, max hold 5m0s, concurrency` (with
// " shadow" appended for a shadow limit).
func (l Limit) String() string {
	if l.calendar != 0 {
		return l.calendarString()
	}
	s := fmt.Sprintf("%q %d/%v burst %d %v", l.Name(), l.quota, l.period, l.Burst(), l.algorithm)
	if l.algorithm == Concurrency {
		s = fmt.Sprintf("%q %d in flight, max hold %v, %v", l.Name(), l.quota, l.period, l.algorithm)
	}
	if l.shadow {
		s += " shadow"
	}
	return s
}

// finish validates l and computes its derived fields.
func (l Limit) finish() Limit {
	if l.algorithm == Concurrency && l.unit == Requests {
		l.unit = ConcurrentRequests // WithAlgorithm(Concurrency): what it counts
	}
	l.scale, l.drain, l.capacity, l.periodUS, l.id = 0, 0, 0, 0, ""
	l.scaleBy, l.drainBy = divisor{}, divisor{}
	l.wireQ, l.wireW = 0, 0
	l.err = l.buildErr
	if l.err == nil {
		l.err = l.validate()
	}
	if l.err == nil {
		l.err = l.calendarError()
	}
	if l.err != nil {
		return l
	}
	if l.algorithm == CalendarWindow {
		return l.finishCalendar()
	}
	periodMicros := l.period.Microseconds()
	g := gcd(periodMicros, l.quota)
	scale, drain := periodMicros/g, l.quota/g
	if l.Burst() > maxScaled/scale {
		l.err = fmt.Errorf("%w: %s: burst %d × %dµs per unit overflows exact arithmetic (lower the burst or raise the rate)",
			ErrInvalidLimit, l.Name(), l.Burst(), scale)
		return l
	}
	l.scale, l.drain, l.capacity, l.periodUS = scale, drain, l.Burst()*scale, periodMicros
	l.scaleBy, l.drainBy = newDivisor(scale), newDivisor(drain)
	if err := l.validateAlgorithm(drain); err != nil {
		l.err = err
		return l
	}
	code := algoCode(l.algorithm)
	if l.firstHit {
		code += "1"
	}
	l.id = l.Name() + ":" + code + ":" + strconv.FormatInt(l.quota, 10) + ":" +
		strconv.FormatInt(periodMicros, 10) + ":" + strconv.FormatInt(l.Burst(), 10)
	if l.ns != "" {
		l.id = l.ns + "/" + l.id
	}
	l.wireQ, l.wireW = wireWindow(l.quota, periodMicros)
	if l.algorithm == Concurrency {
		l.wireQ, l.wireW = l.quota, 0 // a cap has no window: see HeadersIETF
	}
	return l
}

// inNamespace returns a copy of l that belongs to the Limiter named ns
// (WithName; "" for an unnamed Limiter): its ID, and so its stored state,
// starts with "ns/", and its name in the rate-limit fields and problem
// details is "ns/" + Name (see policyName). Name, and so ReportUsage,
// is unchanged.
func (l Limit) inNamespace(ns string) Limit {
	if l.ns == ns {
		return l
	}
	l.ns = ns
	return l.finish()
}

// policyName returns the limit's name in the rate-limit fields and problem
// details: Name, prefixed by the Limiter's name and a slash when the
// Limiter has one (WithName). A slash cannot occur in either name, so
// distinct (Limiter, limit) pairs never share a policy name.
func (l *Limit) policyName() string {
	if l.ns == "" {
		return l.Name()
	}
	return l.ns + "/" + l.Name()
}

// maxExactWindow bounds the window, in seconds, that wireWindow chooses
// to state a sub-second rate exactly.
const maxExactWindow = 60

// wireWindow returns the q and w parameters of RateLimit-Policy for quota
// units per periodUS µs (draft-ietf-httpapi-ratelimit-headers-11 §3.1.1,
// §3.1.3: w is a positive whole number of seconds, "sub-second precision
// is not supported"). A whole-second period is sent as it is. Any other
// period is scaled to a window of w whole seconds with the same rate,
// q/w = quota/period: the smallest w ≥ the period, rounded up, for which
// q is a whole number, when that w is at most max(60, twice the rounded
// period) (Every(2, 500ms) → q=4;w=1; Every(10, 1500ms) → q=20;w=3;
// Every(3, 700ms) → q=30;w=7). Otherwise w is the period rounded up and
// q the quota for w rounded down, so the rate is never overstated
// (Every(1, 999999µs) → q=1;w=1). q is capped at the largest RFC 9651
// Integer.
func wireWindow(quota, periodUS int64) (q, w int64) {
	const second = int64(time.Second / time.Microsecond)
	if periodUS%second == 0 {
		return min(quota, maxSFInteger), periodUS / second
	}
	// q = quota × w × 10^6 / periodUS is whole iff w is a multiple of
	// w0 = periodUS / gcd(periodUS, quota × 10^6 mod periodUS).
	hi, lo := bits.Mul64(uint64(quota), uint64(second))
	_, rem := bits.Div64(hi%uint64(periodUS), lo, uint64(periodUS))
	w0 := periodUS / gcd(periodUS, int64(rem))
	c := ceilDiv(periodUS, second)
	w = ceilDiv(c, w0) * w0
	if w > max(maxExactWindow, 2*c) {
		w = c
	}
	hi, lo = bits.Mul64(uint64(quota), uint64(w*second))
	if hi >= uint64(periodUS) {
		return maxSFInteger, w // q ≥ 2^64: beyond any RFC 9651 Integer
	}
	n, _ := bits.Div64(hi, lo, uint64(periodUS))
	return int64(min(n, maxSFInteger)), w
}

// validUnit reports whether u can be a Limit's unit: 1 to 64 printable
// ASCII characters (%x20-7E, what an RFC 9651 String may hold) other than
// '"' and '\', which need escaping in the fields and quoting in messages.
func validUnit(u Unit) bool {
	if len(u) == 0 || len(u) > 64 {
		return false
	}
	for i := 0; i < len(u); i++ {
		if c := u[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

func (l Limit) validate() error {
	switch {
	case l.quota <= 0:
		return fmt.Errorf("%w: quota must be at least 1, got %d", ErrInvalidLimit, l.quota)
	case l.period < time.Microsecond:
		return fmt.Errorf("%w: period must be at least 1µs, got %v", ErrInvalidLimit, l.period)
	case l.period > maxPeriod:
		return fmt.Errorf("%w: period must be at most %v, got %v", ErrInvalidLimit, maxPeriod, l.period)
	case l.period%time.Microsecond != 0:
		return fmt.Errorf("%w: period must be a whole number of microseconds, got %v", ErrInvalidLimit, l.period)
	case l.quota > maxScaled:
		return fmt.Errorf("%w: quota must be at most 2^51, got %d", ErrInvalidLimit, l.quota)
	case l.algorithm > CalendarWindow:
		return fmt.Errorf("%w: unknown algorithm %v", ErrInvalidLimit, l.algorithm)
	case l.name == "" && !validName(l.Name()):
		return fmt.Errorf("%w: unit %q cannot serve as the limit's name (1 to 64 characters from [A-Za-z0-9_.-]); name the limit with Named", ErrInvalidLimit, l.unit)
	case !validName(l.Name()):
		return fmt.Errorf("%w: name %q must be 1 to 64 characters from [A-Za-z0-9_.-]", ErrInvalidLimit, l.Name())
	case !validUnit(l.unit):
		return fmt.Errorf("%w: unit %q must be 1 to 64 printable ASCII characters without '\"' or '\\' (it is sent in the RateLimit-Policy field)", ErrInvalidLimit, l.unit)
	}
	return nil
}

// validateAlgorithm checks the rules specific to l's algorithm; drain is
// Quota/gcd(Period µs, Quota).
func (l Limit) validateAlgorithm(drain int64) error {
	window := l.algorithm == FixedWindow || l.algorithm == SlidingWindow || l.algorithm == SlidingLog
	switch {
	case l.firstHit && l.algorithm != FixedWindow:
		return fmt.Errorf("%w: %s: AlignToFirstHit applies only to FixedWindow, not %v", ErrInvalidLimit, l.Name(), l.algorithm)
	case window && l.burst != 0 && l.burst != l.quota:
		return fmt.Errorf("%w: %s: a %v admits Quota per window; it has no separate burst (got burst %d, quota %d)",
			ErrInvalidLimit, l.Name(), l.algorithm, l.burst, l.quota)
	case window && l.quota > maxScaled/4:
		return fmt.Errorf("%w: %s: quota %d too large for a %v (at most 2^49)", ErrInvalidLimit, l.Name(), l.quota, l.algorithm)
	case l.algorithm == GCRA && drain != 1:
		return fmt.Errorf("%w: %s: GCRA needs an emission interval of whole microseconds, but %v/%d is not; use TokenBucket, which admits exactly the same",
			ErrInvalidLimit, l.Name(), l.period, l.quota)
	case l.algorithm == SlidingWindow && l.period%time.Millisecond != 0:
		return fmt.Errorf("%w: %s: a sliding window's period must be a whole number of milliseconds, got %v", ErrInvalidLimit, l.Name(), l.period)
	case l.algorithm == SlidingWindow && l.quota > (maxScaled/2)/l.period.Milliseconds():
		return fmt.Errorf("%w: %s: quota %d × period %dms overflows exact arithmetic for a sliding window (at most 2^50)",
			ErrInvalidLimit, l.Name(), l.quota, l.period.Milliseconds())
	case l.algorithm == SlidingLog && l.quota > MaxLogQuota:
		return fmt.Errorf("%w: %s: a sliding log keeps one entry per unit, so its quota is at most %d, got %d",
			ErrInvalidLimit, l.Name(), MaxLogQuota, l.quota)
	case l.algorithm == Concurrency:
		return l.validateConcurrency()
	}
	return nil
}

func validName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

func algoCode(a Algorithm) string {
	switch a {
	case TokenBucket:
		return "tb"
	case GCRA:
		return "gcra"
	case LeakyBucket:
		return "lb"
	case SlidingWindow:
		return "sw"
	case SlidingLog:
		return "sl"
	case FixedWindow:
		return "fw"
	case Concurrency:
		return "cc"
	case CalendarWindow:
		return "cal"
	default:
		return "a" + strconv.Itoa(int(a))
	}
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// Params exposes a valid limit's exact rate for store implementations
// outside this package (the Redis Lua script mirrors the Go math and needs
// the same integers): refilling one unit takes scale/drain microseconds, and
// the capacity in internal units is capacity = Burst × scale. All three are
// below 2^51. Params returns zeros for an invalid limit.
func (l Limit) Params() (scale, drain, capacity int64) {
	if l.err != nil || l.id == "" { // Err() != nil, without its copy of l
		return 0, 0, 0
	}
	return l.scale, l.drain, l.capacity
}

// divisor divides a non-negative int64 by a constant d ≥ 1 exactly,
// with a multiplication and a shift instead of a division instruction
// (Granlund and Montgomery, "Division by Invariant Integers using
// Multiplication", PLDI 1994, theorem 4.2): with N = 63, the bits of a
// non-negative int64, and ℓ = ⌈log2 d⌉, the multiplier m = ⌈2^(N+ℓ)/d⌉
// satisfies 2^(N+ℓ) ≤ m×d < 2^(N+ℓ) + d ≤ 2^(N+ℓ) + 2^ℓ, so that
// ⌊n/d⌋ = ⌊m×n / 2^(N+ℓ)⌋ for every 0 ≤ n < 2^N: the high word of the
// 128-bit product m×n shifted right by ℓ−1. m < 2^64 because d > 2^(ℓ−1).
// d = 1 (ℓ = 0) would need m = 2^64: its divisor has m = 0, and the
// quotient is n. The zero divisor is invalid (it divides as d = 1).
type divisor struct {
	m     uint64 // ⌈2^(63+ℓ)/d⌉, or 0 for d = 1
	shift uint8  // ℓ−1
}

// newDivisor returns the divisor by d ≥ 1.
func newDivisor(d int64) divisor {
	if d <= 1 {
		return divisor{}
	}
	l := bits.Len64(uint64(d - 1)) // ⌈log2 d⌉ ≥ 1, and 2^(ℓ−1) < d ≤ 2^ℓ
	// 2^(63+ℓ) is the 128-bit number hi:0 with hi = 2^(ℓ−1) < d, so the
	// quotient fits in 64 bits.
	q, r := bits.Div64(uint64(1)<<(l-1), 0, uint64(d))
	if r != 0 {
		q++ // the ceiling; q < 2^64−1 since d > 2^(ℓ−1)
	}
	return divisor{m: q, shift: uint8(l - 1)}
}

// div returns ⌊n/d⌋ for 0 ≤ n.
func (v divisor) div(n int64) int64 {
	if v.m == 0 {
		return n
	}
	hi, _ := bits.Mul64(uint64(n), v.m)
	return int64(hi >> v.shift)
}

// ceil returns ⌈n/d⌉ for n ≥ 0, and 0 for n < 0, as ceilDiv does.
func (v divisor) ceil(n int64) int64 {
	if n <= 0 {
		return 0
	}
	return v.div(n-1) + 1
}

// ceilDiv returns ceil(a/b) for a ≥ 0, b > 0.
func ceilDiv(a, b int64) int64 {
	switch {
	case a <= 0:
		return 0
	case b == 1: // most rates have drain 1; skip the costly division
		return a
	}
	return (a-1)/b + 1
}

// Concurrent returns a concurrency cap: at most n requests of one key in
// flight at once (unit ConcurrentRequests, 1 ≤ n ≤ MaxConcurrent), with
// algorithm Concurrency, named "concurrent-requests" unless Named. Every
// admitted request holds one slot from its admission until it is released,
// or for at most maxHold (1µs ≤ maxHold ≤ about 100 years, a whole number
// of microseconds): a slot whose holder died (a crashed instance, a lost
// release) comes back on its own maxHold after it was taken, so choose a
// maxHold longer than the longest request (a stream included) and short
// enough that a crash does not lock a key out for long. A slot held beyond
// maxHold by a request still running is no longer counted.
//
// It is decided with the other limits in the same all-or-nothing
// Store.Take: a request refused by a rate limit holds no slot, and one
// refused by the cap is charged nothing on the rate limits. A refusal's
// RetryAfter is at most ConcurrencyRetryAfter (1 s), a hint: see there.
// Decision.Remaining is n minus the slots held after the decision, and
// Decision.Reset the time until every held slot's maxHold has passed.
//
// Release: the middleware (Limiter.Handler) releases the slot on every
// exit path, when the handler returns or panics (a stream holds its slot
// until the handler returns); Limiter.Reserve's Reservation.Release and
// Transport release it for outbound calls. A Store releases a slot with an
// Adjust of Cost −k (k slots, normally 1) and Request.At the At of the
// Take's Decision, which names the slot: the slots taken at that
// microsecond are released, at most k of them. A release of a slot that is
// no longer held (released already, or its maxHold has passed) releases
// nothing, so a counter can never go negative or leak; a release that fails
// at the store (counted in Stats.StoreErrors) leaves its slot held until
// maxHold. An Adjust with At 0 releases the most recently taken slots; one
// with Cost > 0 takes slots without a check (at most 2n held in all).
//
// A Concurrency limit has no burst other than n, no cost function (each
// request holds one slot) and no AlignToFirstHit: Err reports them.
// Every(n, maxHold).WithAlgorithm(Concurrency) builds the same limit (its
// unit Requests becomes ConcurrentRequests).
func Concurrent(n int64, maxHold time.Duration) Limit {
	l := Limit{quota: n, period: maxHold, algorithm: Concurrency, unit: ConcurrentRequests}
	return l.finish()
}

// MaxHold returns the longest a slot of a Concurrency limit is held before
// it returns by itself: its Period.
func (l Limit) MaxHold() time.Duration { return l.period }

// validateConcurrency checks the rules of a Concurrency limit.
func (l Limit) validateConcurrency() error {
	switch {
	case l.burst != 0 && l.burst != l.quota:
		return fmt.Errorf("%w: %s: a concurrency cap holds at most its cap; it has no separate burst (got burst %d, cap %d)",
			ErrInvalidLimit, l.Name(), l.burst, l.quota)
	case l.quota > MaxConcurrent:
		return fmt.Errorf("%w: %s: a concurrency cap keeps one start time per held slot, so it is at most %d, got %d",
			ErrInvalidLimit, l.Name(), MaxConcurrent, l.quota)
	case l.cost != nil:
		return fmt.Errorf("%w: %s: a concurrency cap holds one slot per request; it takes no cost function", ErrInvalidLimit, l.Name())
	}
	return nil
}
