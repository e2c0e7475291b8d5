package ratelimit

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The store-failure alert: the Limiter's own log of a failing store, so
// that a dead or misconfigured store never disables limiting silently.

// DefaultStoreAlertInterval is the least time between two lines of the
// store-failure alert (see WithStoreAlert) unless WithStoreAlert sets
// another.
const DefaultStoreAlertInterval = time.Minute

// WithStoreAlert sets where and how often the Limiter reports store
// failures by itself. The alert is on by default, with or without Hooks,
// logging to slog.Default() (as it is when a line is logged, so a later
// slog.SetDefault applies) every DefaultStoreAlertInterval; WithStoreAlert
// changes the logger (nil: slog.Default()) and the interval, which must be
// positive. WithoutStoreAlert turns it off.
//
// Every line is logged at slog.LevelWarn, with the message and attributes
// below and the store call's context (so a handler can add a trace ID). No
// line carries a rate-limit key: the attributes are counts, the failure
// mode and the store error, and neither the Limiter's errors nor those of
// the built-in stores contain keys (a Store of your own must keep them out
// of its errors too). The lines, for a store that fails from t0 to about
// t0 + 90 s with an interval of a minute:
//
//   - at the first failed store call (t0), at once: "ratelimit: the
//     rate-limit store failed; requests are let through unlimited while it
//     fails (FailOpen)" (under FailClosed: "…; requests are refused with
//     503 while it fails (FailClosed)"), with attributes op ("take" or
//     "adjust") and error;
//   - while it keeps failing, at the first failed call at least one
//     interval after the previous line (t0 + 60 s): "ratelimit: the
//     rate-limit store is still failing", with attributes store_errors
//     (failed store calls, Take and Adjust), bypassed (requests let
//     through; under FailClosed: refused, the requests answered 503),
//     since (the time since the previous line, to the millisecond) and
//     error (the last
//     failure's). The counts cover the calls from the one that triggered
//     the previous line up to this one, which counts in the next line;
//   - at the first successful call at least one interval after the
//     previous line (t0 + 120 s): "ratelimit: the rate-limit store answers
//     again", with store_errors, bypassed (or refused) and since, counted
//     as above. The next failure starts again with a first line.
//
// So a failing store logs at most one line per interval, however many
// requests fail, and a short blip logs two: the failure and, an interval
// later, the recovery. Store calls abandoned because the caller's own
// context ended are no store failures (see Stats.StoreErrors) and are not
// counted.
func WithStoreAlert(logger *slog.Logger, interval time.Duration) Option {
	return func(c *config) error {
		if interval <= 0 {
			return errors.New("WithStoreAlert: the interval must be positive, got " + interval.String() + " (WithoutStoreAlert turns the alert off)")
		}
		c.alertLogger, c.alertInterval, c.alertOff = logger, interval, false
		return nil
	}
}

// WithoutStoreAlert turns the Limiter's own store-failure alert (see
// WithStoreAlert) off: for example when hooks.Slog already logs every
// failed store call, or an alert on a metric (rampmeter_bypasses_total)
// watches for it. Stats and Hooks report store failures either way.
func WithoutStoreAlert() Option {
	return func(c *config) error {
		c.alertOff = true
		return nil
	}
}

// storeAlert is the state of a Limiter's store-failure alert. An episode
// starts at a failed store call when none is open (the first line) and
// ends at the first successful call an interval or more after the last
// line (the recovery line).
type storeAlert struct {
	logger   *slog.Logger // nil: slog.Default()
	interval time.Duration
	mode     FailureMode

	open atomic.Bool // an episode is open; read on every successful call

	mu       sync.Mutex
	last     time.Time // when the last line was logged
	errs     int64     // failed store calls since the last line
	requests int64     // requests the failure mode decided since the last line
	lastErr  error     // the last failure
}

// alertLine is one line to log, built under the mutex and logged outside.
type alertLine struct {
	msg   string
	attrs []slog.Attr
}

// failed records a failed store call of op at now, and returns the line it
// calls for, if any.
func (a *storeAlert) failed(now time.Time, op StoreOp, err error) *alertLine {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.open.Load() {
		a.open.Store(true)
		a.last, a.errs, a.requests, a.lastErr = now, 1, 0, err
		what := "requests are let through unlimited while it fails (FailOpen)"
		if a.mode == FailClosed {
			what = "requests are refused with 503 while it fails (FailClosed)"
		}
		return &alertLine{msg: "ratelimit: the rate-limit store failed; " + what,
			attrs: []slog.Attr{slog.String("op", string(op)), slog.String("error", errText(err))}}
	}
	if now.Sub(a.last) < a.interval {
		a.errs++
		a.lastErr = err
		return nil
	}
	line := a.summary("ratelimit: the rate-limit store is still failing", now)
	line.attrs = append(line.attrs, slog.String("error", errText(a.lastErr)))
	a.last, a.errs, a.requests, a.lastErr = now, 1, 0, err
	return line
}

// decided records a request that the failure mode decided (let through or
// refused) because the store failed.
func (a *storeAlert) decided() {
	a.mu.Lock()
	if a.open.Load() {
		a.requests++
	}
	a.mu.Unlock()
}

// succeeded records a successful store call at now while an episode is
// open, and returns the recovery line when it ends the episode.
func (a *storeAlert) succeeded(now time.Time) *alertLine {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.open.Load() || now.Sub(a.last) < a.interval {
		return nil
	}
	line := a.summary("ratelimit: the rate-limit store answers again", now)
	a.open.Store(false)
	a.errs, a.requests, a.lastErr = 0, 0, nil
	return line
}

// summary is a line with the counts since the last line.
func (a *storeAlert) summary(msg string, now time.Time) *alertLine {
	decided := "bypassed"
	if a.mode == FailClosed {
		decided = "refused"
	}
	return &alertLine{msg: msg, attrs: []slog.Attr{slog.Int64("store_errors", a.errs), slog.Int64(decided, a.requests),
		slog.Duration("since", now.Sub(a.last).Round(time.Millisecond))}}
}

// log writes line, if any, at Warn.
func (a *storeAlert) log(ctx context.Context, line *alertLine) {
	if line == nil {
		return
	}
	logger := a.logger
	if logger == nil {
		logger = slog.Default()
	}
	logger.LogAttrs(ctx, slog.LevelWarn, line.msg, line.attrs...)
}

// errText is err's message, on one line.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return strings.ReplaceAll(err.Error(), "\n", " ")
}
