package ratelimit

import (
	"context"
	"time"
)

// SetSleep replaces the wait before a LeakyBucket request runs, so tests
// need not sleep.
func SetSleep(l *Limiter, f func(ctx context.Context, d time.Duration) error) { l.sleep = f }
