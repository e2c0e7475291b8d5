package ratelimit

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// WithRetryJitter lengthens the wait told to each client the middleware
// refuses (429, or the WithQuotaExhaustedStatus status) by a random
// amount, uniformly distributed in [0, fraction × wait), drawn per
// refusal, so that clients refused at the same instant do not all come
// back at the same instant (draft-ietf-httpapi-ratelimit-headers-11 §8.5
// recommends such jitter). fraction must be in [0, 1]. The default is 0,
// no jitter, so that every refusal tells the exact wait (rounded up) and
// tests see fixed values; 0.1 suits APIs whose clients retry by
// themselves, such as the OpenAI and Anthropic SDKs, which add no jitter
// of their own to a server's wait.
//
// The jitter only ever adds: the wait told is never shorter than the true
// wait, so a client that obeys it is not refused again for arriving
// early. The jittered wait is Result.RetryAfter as the RejectHandler and
// the HeaderWriters see it, and everything the client is told derives
// from it: Retry-After is it in whole seconds, rounded up; the binding
// limit's t in RateLimit equals Retry-After; the problem body's
// "retry-after-seconds" too; and writers such as llm.OpenAIHeaders send
// it in milliseconds, rounded up, as retry-after-ms (which the OpenAI and
// Anthropic SDKs prefer to Retry-After), so Retry-After is the ceiling of
// retry-after-ms in seconds. Because Retry-After is rounded up, a wait of
// exactly 1 s may be told as 2 s to clients that read only Retry-After.
// Hooks.OnDecision, Stats and Limiter.Take see the true wait.
func WithRetryJitter(fraction float64) Option {
	return func(c *config) error {
		if !(fraction >= 0 && fraction <= 1) {
			return fmt.Errorf("WithRetryJitter(%v): the fraction must be in [0, 1]", fraction)
		}
		c.jitterPPM = int64(math.Round(fraction * 1e6))
		return nil
	}
}

// retryJitter is the WithRetryJitter of a Limiter.
type retryJitter struct {
	fraction float64
	// random returns a number in [0, 1): rand.Float64, or a fixed
	// sequence in tests.
	random func() float64
}

// newRetryJitter returns the jitter of fraction ppm/10^6.
func newRetryJitter(ppm int64) retryJitter {
	return retryJitter{fraction: float64(ppm) / 1e6, random: rand.Float64}
}

// apply returns wait lengthened by the jitter: at least wait, less than
// wait × (1 + fraction). A wait of RetryNever, or ≤ 0, is returned as is.
func (j retryJitter) apply(wait time.Duration) time.Duration {
	if wait <= 0 || j.fraction == 0 {
		return wait
	}
	extra := float64(wait) * j.fraction * j.random()
	if extra >= float64(math.MaxInt64-wait) {
		return math.MaxInt64
	}
	return wait + time.Duration(extra)
}
