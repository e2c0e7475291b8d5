package ratelimit

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/bits"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Transport is an http.RoundTripper for outbound calls to a vendor API with
// its own quota (an AI provider, a payment API): every call first waits for
// its slot (Limiter.Wait) under the key Key names, so calls leave at the
// Limiter's rate; with a shared store (store/redisstore) the schedule is
// fleet-wide, and every process sharing the key stays within one quota.
//
// When the vendor still answers 429 Too Many Requests, or 503 Service
// Unavailable with a wait, the Transport pauses the key for every process
// until the wait the vendor names has passed (see RoundTrip), and returns
// the response to the caller; RetryOn429 makes it retry instead.
//
// Configure it before first use and do not copy it afterwards. It is safe
// for concurrent use.
//
//	client := &http.Client{Transport: &ratelimit.Transport{Limiter: lim}}
type Transport struct {
	// Base sends the requests; nil means http.DefaultTransport.
	Base http.RoundTripper
	// Limiter schedules the calls. It is required: RoundTrip returns an
	// error wrapping ErrInvalidConfig without it.
	Limiter *Limiter
	// Key names the key a request is charged to; nil means the request's
	// host (req.URL.Host, with its port if any). Several Transports (or
	// processes) that share a key and a store share its quota. An empty
	// key is an error wrapping ErrInvalidRequest.
	Key func(req *http.Request) string
	// Cost returns a request's cost for each of the Limiter's limits, in
	// order (for example tokens estimated from headers); nil means 1 per
	// limit. It must not consume req.Body, which is sent afterwards: read
	// it through req.GetBody if at all. An error is returned by RoundTrip,
	// wrapped; nothing is sent or charged.
	Cost func(req *http.Request) ([]int64, error)
	// RetryOn429 is how many times a request answered 429 is sent again,
	// each time after Waiting for a new slot (so after the pause the 429
	// set). 0, the default, returns the 429 to the caller. A request whose
	// body cannot be replayed (a Body without GetBody) is never retried.
	// The Wait before a retry charges the Limiter again, as the vendor
	// counts the retry too. Must be ≥ 0.
	RetryOn429 int
	// PauseLimit names the limit the pause after a 429 is charged to;
	// empty means the first LeakyBucket limit, else the TokenBucket or
	// GCRA limit whose burst refills soonest, else the window limit with
	// the shortest period (shadow limits are never chosen). One limit is
	// enough to hold every call back; pausing a long-period limit (tokens
	// per day) would throw away its budget. An unknown name is an error
	// wrapping ErrUnknownLimit.
	PauseLimit string
	// MaxPause bounds how long one vendor answer can pause the key: a
	// longer wait (a Retry-After of 99999999999 seconds, say, from a
	// misbehaving or hostile vendor) is clamped to it, so that one
	// response cannot stop every worker sharing the store for years.
	// Zero, the default, means the longer of DefaultMaxPause (one hour)
	// and the pause limit's Period. Must be ≥ 0. After the pause, a call
	// that still gets a 429 pauses the key again, so a clamp that is too
	// short costs one call per MaxPause, while one that is too long
	// stops the fleet for nothing.
	MaxPause time.Duration

	mu  sync.Mutex       // serialises pauses, so concurrent 429s do not add up
	now func() time.Time // the clock for HTTP-date waits; nil: time.Now
}

// RoundTrip waits for the request's slot, sends it with Base and returns
// the response. It implements http.RoundTripper: it does not modify req,
// and it closes req.Body, even on errors.
//
// Errors before sending: a nil Limiter, negative RetryOn429 or negative
// MaxPause (wrapping ErrInvalidConfig), an unknown PauseLimit (ErrUnknownLimit), an empty key
// or costs that do not match the limits (ErrInvalidRequest), a Cost error,
// a cost above a limit's burst (ErrNeverFits), the end of req's context,
// or a store failure under FailClosed. Under FailOpen a failing store lets
// the request go unscheduled.
//
// When the response is 429 or 503, RoundTrip reads how long the vendor
// asks to wait, in order of precedence:
//
//   - retry-after-ms: milliseconds, possibly fractional (OpenAI, Azure);
//   - Retry-After (RFC 9110 §10.2.3): delay-seconds, or an HTTP-date,
//     measured from the response's Date field when it has one (so that
//     the two clocks' skew does not matter), else from the local clock;
//   - for a 429 without those, OpenAI's x-ratelimit-reset-requests and
//     x-ratelimit-reset-tokens: Go-style durations ("6m0s", "1.5s",
//     "12ms") or plain seconds; the longest of those whose
//     x-ratelimit-remaining-* is 0 or absent, else the longest of all.
//
// The wait is clamped to MaxPause (by default the longer of
// DefaultMaxPause and the pause limit's Period).
// With a positive wait it pauses the key for every worker sharing the
// store: it reads the pause limit's state (a Take of cost 0) and charges it
// (Adjust) with the least debt that holds the key's next call back until
// the wait has passed, measured from that read:
//
//   - LeakyBucket: the queue is made to end no earlier than now + wait:
//     ceil((wait × drain − level) / scale) units, the level being the
//     queue's at the read (a lower bound from the rounded-up Reset). The
//     debt equals the calls the pause forbids, so no budget is lost, and
//     a pause is idempotent: a second 429 naming the same moment adds
//     nothing.
//   - TokenBucket and GCRA: the bucket is made to hold less than one unit
//     until now + wait: the same with the level target Burst − 1 units +
//     wait × rate. The burst saved up before the 429 is spent.
//   - Window algorithms: the current window is filled (Remaining units):
//     the pause lasts until the window frees room, which may be before or
//     after the vendor's wait.
//
// Debt is bounded by the stores (at least twice the burst), so a very long
// wait pauses a fast limit for less. Calls that already had their slot
// before the pause keep it: their own 429s are returned (or retried after
// the pause). Pauses from one Transport are serialised; pauses by
// different processes within one store round trip of each other may add
// up. A pause that fails at the store is counted in Stats.StoreErrors and
// does not change the response.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	sent := false
	defer func() {
		if !sent && req.Body != nil {
			_ = req.Body.Close()
		}
	}()
	l := t.Limiter
	switch {
	case l == nil:
		return nil, fmt.Errorf("%w: Transport without a Limiter", ErrInvalidConfig)
	case t.RetryOn429 < 0:
		return nil, fmt.Errorf("%w: Transport.RetryOn429 is %d, must be ≥ 0", ErrInvalidConfig, t.RetryOn429)
	case t.MaxPause < 0:
		return nil, fmt.Errorf("%w: Transport.MaxPause is %v, must be ≥ 0", ErrInvalidConfig, t.MaxPause)
	}
	pauseAt, err := t.pauseLimit()
	if err != nil {
		return nil, err
	}
	key := req.URL.Host
	if t.Key != nil {
		key = t.Key(req)
	}
	if key == "" {
		return nil, fmt.Errorf("%w: Transport: empty key for %s %s", ErrInvalidRequest, req.Method, req.URL.Redacted())
	}
	var costs []int64
	if t.Cost != nil {
		if costs, err = t.Cost(req); err != nil {
			return nil, fmt.Errorf("ratelimit: Transport: cost of %s %s: %w", req.Method, req.URL.Redacted(), err)
		}
	}
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	ctx := req.Context()
	for attempt := 0; ; attempt++ {
		res, err := l.wait(ctx, key, costs)
		if err != nil {
			return nil, err
		}
		release := l.slotReleaser(ctx, key, res, costs) // nil without a concurrency cap
		out := req
		if attempt > 0 {
			if out, err = replay(req); err != nil {
				if release != nil {
					release()
				}
				return nil, err
			}
		}
		sent = true
		resp, err := base.RoundTrip(out)
		if release != nil {
			if err != nil {
				release()
				return nil, err
			}
			resp = bodyReleasing(resp, release)
		}
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable {
			return resp, nil
		}
		if wait, ok := vendorWait(resp.StatusCode, resp.Header, t.clock()); ok && wait > 0 && pauseAt >= 0 {
			_ = t.pause(ctx, key, &l.limits[pauseAt], wait)
		}
		if resp.StatusCode != http.StatusTooManyRequests || attempt >= t.RetryOn429 || !replayable(req) {
			return resp, nil
		}
		// Let the connection be reused.
		_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)
		_ = resp.Body.Close()
	}
}

func (t *Transport) clock() time.Time {
	if t.now != nil {
		return t.now()
	}
	return time.Now()
}

// replayable reports whether req can be sent again.
func replayable(req *http.Request) bool {
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

// replay returns a copy of req with a fresh body.
func replay(req *http.Request) (*http.Request, error) {
	out := req.Clone(req.Context())
	if req.Body != nil && req.Body != http.NoBody {
		body, err := req.GetBody()
		if err != nil {
			return nil, fmt.Errorf("ratelimit: Transport: replaying the body of %s %s: %w", req.Method, req.URL.Redacted(), err)
		}
		out.Body = body
	}
	return out, nil
}

// pauseLimit returns the index of the limit pauses are charged to, or -1
// when there is none.
func (t *Transport) pauseLimit() (int, error) {
	ls := t.Limiter.limits
	if t.PauseLimit != "" {
		i := t.Limiter.index(t.PauseLimit)
		if i < 0 {
			return -1, fmt.Errorf("%w: Transport.PauseLimit %q", ErrUnknownLimit, t.PauseLimit)
		}
		return i, nil
	}
	best := -1
	rank := func(l *Limit) int {
		switch l.Algorithm() {
		case LeakyBucket:
			return 0
		case TokenBucket, GCRA:
			return 1
		default:
			return 2
		}
	}
	for i := range ls {
		l := &ls[i]
		if l.IsShadow() {
			continue
		}
		if best < 0 {
			best = i
			continue
		}
		b := &ls[best]
		switch rb, rl := rank(b), rank(l); {
		case rl < rb:
			best = i
		case rl > rb || rl == 0:
		case rl == 1 && refillsSooner(l, b):
			best = i
		case rl == 2 && l.Period() < b.Period():
			best = i
		}
	}
	return best, nil
}

// refillsSooner reports whether bucket a's burst refills in less time than
// b's: Burst×scale/drain µs, compared exactly (each product < 2^102).
func refillsSooner(a, b *Limit) bool {
	_, ad, ac := a.Params()
	_, bd, bc := b.Params()
	h1, l1 := bits.Mul64(uint64(ac), uint64(bd))
	h2, l2 := bits.Mul64(uint64(bc), uint64(ad))
	return h1 < h2 || h1 == h2 && l1 < l2
}

// pause charges limit lim of key with the debt that holds the key's next
// call back for wait, clamped to maxPause (see RoundTrip).
func (t *Transport) pause(ctx context.Context, key string, lim *Limit, wait time.Duration) error {
	wait = min(wait, t.maxPause(lim))
	l := t.Limiter
	ctx = context.WithoutCancel(ctx) // the fleet must learn of the pause
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Decision, 1)
	if err := l.call(ctx, OpTake, []Request{{Key: key, Limit: lim}}, out); err != nil {
		return err
	}
	units := pauseUnits(lim, &out[0], ceilDiv(int64(wait), int64(time.Microsecond)))
	if units <= 0 {
		return nil
	}
	return l.call(ctx, OpAdjust, []Request{{Key: key, Limit: lim, Cost: units}}, out)
}

// DefaultMaxPause is the bound on the pause one vendor answer may cause
// when Transport.MaxPause is zero (raised to the pause limit's Period when
// that is longer). Vendors' own waits are bounded by their windows, which
// the client does not know: an hour covers the per-minute and per-hour
// windows that Retry-After and OpenAI's x-ratelimit-reset-* fields
// usually name (waits of seconds to minutes, as 1m30s), and the pause
// limit's Period covers a quota we hold per day: one full period of our
// own limit grants the key its quota afresh. A longer legitimate wait
// (a vendor's daily quota exhausted) costs one call per hour, each
// answered 429 and pausing the key again.
const DefaultMaxPause = time.Hour

// maxPause returns the longest pause of limit lim one vendor answer may
// cause: MaxPause, or when it is zero, the longer of DefaultMaxPause and
// lim's Period.
func (t *Transport) maxPause(lim *Limit) time.Duration {
	if t.MaxPause > 0 {
		return t.MaxPause
	}
	return max(DefaultMaxPause, lim.Period())
}

// pauseUnits returns the units to charge lim, whose state d describes (a
// Take of cost 0), so that no call is admitted, or, for a LeakyBucket,
// scheduled, before wait µs from d.At.
func pauseUnits(lim *Limit, d *Decision, wait int64) int64 {
	switch lim.Algorithm() {
	case TokenBucket, GCRA, LeakyBucket:
		scale, drain, capacity := lim.Params()
		// The level is above (Reset−1)×drain: Reset is rounded up.
		level := int64(0)
		if r := d.Reset.Microseconds(); r > 0 {
			level = (r-1)*drain + 1
		}
		target := maxLevel
		if wait < maxLevel/drain {
			target = wait * drain
		}
		if lim.Algorithm() != LeakyBucket {
			target += capacity - scale // < 2^53: no overflow
		}
		return ceilDiv(target-level, scale)
	default:
		return d.Remaining
	}
}

// vendorWait reads how long a 429 or 503 response with header h asks the
// client to wait, as RoundTrip documents; now is the local clock, for an
// HTTP-date without a Date field. ok is false when h names no wait. A date
// in the past is a wait of 0; every wait is capped at 100 years (maxPeriod),
// so no header can overflow the arithmetic that follows (MaxPause bounds it
// further).
func vendorWait(status int, h http.Header, now time.Time) (wait time.Duration, ok bool) {
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && ms >= 0 && !math.IsInf(ms, 0) {
			return min(maxPeriod, floatDuration(ms*float64(time.Millisecond))), true
		}
	}
	if v := strings.TrimSpace(h.Get("Retry-After")); v != "" {
		if isDigits(v) {
			secs, err := strconv.ParseInt(v, 10, 64)
			if err != nil || secs > int64(maxPeriod/time.Second) {
				return maxPeriod, true // out of range: digits only, so huge
			}
			return time.Duration(secs) * time.Second, true
		}
		if at, err := http.ParseTime(v); err == nil {
			if date, err := http.ParseTime(h.Get("Date")); err == nil {
				now = date
			}
			return min(maxPeriod, max(0, at.Sub(now))), true // a date centuries ahead is "huge", like the digits
		}
	}
	if status != http.StatusTooManyRequests {
		return 0, false
	}
	var all, exhausted time.Duration
	found := false
	for _, res := range [...]string{"requests", "tokens"} {
		d, good := resetDuration(h.Get("X-Ratelimit-Reset-" + res))
		if !good {
			continue
		}
		found = true
		all = max(all, d)
		if rem := strings.TrimSpace(h.Get("X-Ratelimit-Remaining-" + res)); rem == "" || rem == "0" {
			exhausted = max(exhausted, d)
		}
	}
	switch {
	case !found:
		return 0, false
	case exhausted > 0:
		return min(maxPeriod, exhausted), true
	default:
		return min(maxPeriod, all), true
	}
}

// resetDuration parses an x-ratelimit-reset-* value: a Go duration
// ("6m0s", "1.5s", "12ms"; OpenAI) or plain seconds ("20"; Azure).
// Negative values (which Azure has been seen to send) are rejected.
func resetDuration(v string) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if d, err := time.ParseDuration(v); err == nil {
		return d, d >= 0
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil && secs >= 0 && !math.IsInf(secs, 0) {
		return floatDuration(secs * float64(time.Second)), true
	}
	return 0, false
}

// floatDuration converts ns to a Duration, rounded up to the nanosecond and
// capped at maxPeriod.
func floatDuration(ns float64) time.Duration {
	if ns >= float64(maxPeriod) {
		return maxPeriod
	}
	return time.Duration(math.Ceil(ns))
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

var _ http.RoundTripper = (*Transport)(nil)
