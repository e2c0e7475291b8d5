// Package hooks provides ratelimit.Hooks for structured logging with
// log/slog, and Join to run several Hooks (say, logs and Prometheus
// metrics from package metrics/prometheus) on one Limiter.
//
//	m, _ := rmprom.New(prometheus.DefaultRegisterer)
//	lim, err := ratelimit.New(store,
//		ratelimit.WithHooks(hooks.Join(m.Hooks(), hooks.Slog(slog.Default()))),
//		...)
//
// No hook receives a rate-limit key: Hooks get the request's context, a
// Result (decisions and their limits, no key) or an error, and the errors
// of the built-in key functions and stores do not contain keys either. So
// these hooks never log an API key in clear. An error returned by your own
// KeyFunc or Store is logged as it is: keep keys out of its message.
package hooks

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/rampmeter/ratelimit"
)

// Error kinds returned by ErrorKind, used as log attribute and metric label
// values.
const (
	// KindTimeout is a store call that missed its deadline
	// (ratelimit.WithStoreTimeout): the error wraps
	// ratelimit.ErrStoreTimeout or context.DeadlineExceeded.
	KindTimeout = "timeout"
	// KindCanceled is a store call ended by a canceled context.
	KindCanceled = "canceled"
	// KindOther is every other failure: a refused connection, a Redis
	// error reply, a malformed state.
	KindOther = "other"
)

// ErrorKind classifies a store error (as Hooks.OnStoreError and
// StoreCall.Err give it) as KindTimeout, KindCanceled or KindOther (also
// for a nil error), by errors.Is.
func ErrorKind(err error) string {
	switch {
	case err == nil:
		return KindOther
	case errors.Is(err, ratelimit.ErrStoreTimeout), errors.Is(err, context.DeadlineExceeded):
		return KindTimeout
	case errors.Is(err, context.Canceled):
		return KindCanceled
	default:
		return KindOther
	}
}

// Causes of a bypass returned by BypassCause, used as log attribute and
// metric label values.
const (
	// CauseStore is a request let through because the store failed
	// under ratelimit.FailOpen: the reason wraps ratelimit.ErrStoreFailed.
	CauseStore = "store"
	// CauseKey is a request let through because its key function failed
	// under ratelimit.WithSkipOnKeyError.
	CauseKey = "key"
)

// BypassCause classifies the reason given to Hooks.OnBypass: CauseStore
// when it wraps ratelimit.ErrStoreFailed, else CauseKey.
func BypassCause(reason error) string {
	if errors.Is(reason, ratelimit.ErrStoreFailed) {
		return CauseStore
	}
	return CauseKey
}

// SlowStoreCall is the duration from which Slog logs a store call at Debug:
// a fifth of ratelimit.DefaultStoreTimeout, and far more than a Redis round
// trip within a data centre (well under a millisecond).
const SlowStoreCall = 10 * time.Millisecond

// Slog returns Hooks that log to logger (slog.Default() when nil):
//
//   - every failed store call at Warn: msg "ratelimit: store call failed",
//     attributes kind (ErrorKind) and error;
//   - every store call that took SlowStoreCall or longer, failed or not,
//     at Debug: msg "ratelimit: slow store call", attributes op ("take" or
//     "adjust"), requests (the number of limits in the call), duration
//     and, for a failed call, error;
//   - every request let through without a decision (FailOpen, or
//     WithSkipOnKeyError) at Warn: msg "ratelimit: request not limited",
//     attributes cause (BypassCause: "store" or "key") and reason (the
//     store or key error);
//   - every refusal at Debug: msg "ratelimit: request refused", attributes
//     policies (the names of the refusing limits, comma-separated),
//     retry_after (a duration; -1ns for ratelimit.RetryNever) and shadow
//     (true when only shadow limits refused, so the request was admitted).
//     Admissions are not logged.
//
// Records carry the hook's context, so a handler can add request-scoped
// attributes (a trace ID). A flood of refusals logs at Debug only, so
// enabling Warn does not let clients fill the logs. No record contains a
// rate-limit key (see the package documentation). The Limiter's own
// store-failure alert (ratelimit.WithStoreAlert: a line when the store
// starts failing, then at most one a minute) stays on beside these hooks;
// pass ratelimit.WithoutStoreAlert() to log store failures only here.
func Slog(logger *slog.Logger) ratelimit.Hooks {
	if logger == nil {
		logger = slog.Default()
	}
	return ratelimit.Hooks{
		OnStoreError: func(ctx context.Context, err error) {
			logger.LogAttrs(ctx, slog.LevelWarn, "ratelimit: store call failed",
				slog.String("kind", ErrorKind(err)), slog.String("error", errString(err)))
		},
		OnBypass: func(ctx context.Context, reason error) {
			logger.LogAttrs(ctx, slog.LevelWarn, "ratelimit: request not limited",
				slog.String("cause", BypassCause(reason)), slog.String("reason", errString(reason)))
		},
		OnStoreCall: func(ctx context.Context, call ratelimit.StoreCall) {
			if call.Duration < SlowStoreCall || !logger.Enabled(ctx, slog.LevelDebug) {
				return
			}
			attrs := []slog.Attr{slog.String("op", string(call.Op)), slog.Int("requests", call.Requests),
				slog.Duration("duration", call.Duration)}
			if call.Err != nil {
				attrs = append(attrs, slog.String("error", call.Err.Error()))
			}
			logger.LogAttrs(ctx, slog.LevelDebug, "ratelimit: slow store call", attrs...)
		},
		OnDecision: func(ctx context.Context, res ratelimit.Result) {
			shadow := res.Allowed && res.ShadowLimited()
			if res.Allowed && !shadow || !logger.Enabled(ctx, slog.LevelDebug) {
				return
			}
			var names strings.Builder
			for i := range res.Decisions {
				d := &res.Decisions[i]
				if d.Allowed || d.Limit == nil {
					continue
				}
				if names.Len() > 0 {
					names.WriteByte(',')
				}
				names.WriteString(d.Limit.Name())
			}
			logger.LogAttrs(ctx, slog.LevelDebug, "ratelimit: request refused",
				slog.String("policies", names.String()), slog.Duration("retry_after", res.RetryAfter),
				slog.Bool("shadow", shadow))
		},
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Join returns Hooks that call each of hs's non-nil callbacks in order. A
// callback of the result is nil when no element of hs sets it, so a Limiter
// skips it at no cost.
func Join(hs ...ratelimit.Hooks) ratelimit.Hooks {
	var decision []func(context.Context, ratelimit.Result)
	var storeErr, bypass []func(context.Context, error)
	var storeCall []func(context.Context, ratelimit.StoreCall)
	for _, h := range hs {
		if h.OnStoreCall != nil {
			storeCall = append(storeCall, h.OnStoreCall)
		}
		if h.OnDecision != nil {
			decision = append(decision, h.OnDecision)
		}
		if h.OnStoreError != nil {
			storeErr = append(storeErr, h.OnStoreError)
		}
		if h.OnBypass != nil {
			bypass = append(bypass, h.OnBypass)
		}
	}
	var out ratelimit.Hooks
	if len(decision) > 0 {
		out.OnDecision = func(ctx context.Context, res ratelimit.Result) {
			for _, f := range decision {
				f(ctx, res)
			}
		}
	}
	if len(storeCall) > 0 {
		out.OnStoreCall = func(ctx context.Context, call ratelimit.StoreCall) {
			for _, f := range storeCall {
				f(ctx, call)
			}
		}
	}
	out.OnStoreError = joinErr(storeErr)
	out.OnBypass = joinErr(bypass)
	return out
}

func joinErr(fs []func(context.Context, error)) func(context.Context, error) {
	if len(fs) == 0 {
		return nil
	}
	return func(ctx context.Context, err error) {
		for _, f := range fs {
			f(ctx, err)
		}
	}
}
