package ratelimit

import (
	"context"
	"net/http"
	"time"
)

// SetSleep replaces every wait of l: before a LeakyBucket request runs
// (Handler) and in Wait (so in a Transport using l), so tests need not
// sleep.
func SetSleep(l *Limiter, f func(ctx context.Context, d time.Duration) error) { l.sleep = f }

// SetClock replaces the clock l measures store calls with
// (StoreCall.Duration).
func SetClock(l *Limiter, now func() time.Time) { l.now = now }

// SetTransportClock replaces the clock a Transport measures an HTTP-date
// Retry-After from when the response has no Date field.
func SetTransportClock(t *Transport, now func() time.Time) { t.now = now }

// VendorWait exposes the parser of a vendor's 429/503 wait fields.
func VendorWait(status int, h http.Header, now time.Time) (time.Duration, bool) {
	return vendorWait(status, h, now)
}

// SetRetryRandom replaces the random source of l's retry jitter
// (WithRetryJitter): f returns a number in [0, 1).
func SetRetryRandom(l *Limiter, f func() float64) { l.jitter.random = f }

// WireWindow exposes the q and w of RateLimit-Policy for a quota per
// period.
func WireWindow(quota int64, period time.Duration) (q, w int64) {
	return wireWindow(quota, period.Microseconds())
}
