package adapters

import (
	"context"
	"errors"
	"time"

	"github.com/mennanov/limiters"

	"github.com/rampmeter/ratelimit/benchmarks/decider"
)

const mennanovModule = "github.com/mennanov/limiters"

// mennanov/limiters is one TokenBucket object per key, found through its
// Registry (mutex + heap for GC), as in the project's examples. Each bucket
// serialises its own callers with a mutex and takes a DistLocker; here
// LockNoop (the in-memory recommendation; for Redis it means NOT safe across
// instances -- a real deployment adds a distributed lock = more round trips).
type mennanov struct {
	reg   *limiters.Registry
	clock limiters.Clock
	newTB func(key string) *limiters.TokenBucket
	ttl   time.Duration
}

func (a *mennanov) Allow(ctx context.Context, key string) (bool, error) {
	b := a.reg.GetOrCreate(key, func() any { return a.newTB(key) }, a.ttl, a.clock.Now()).(*limiters.TokenBucket)
	_, err := b.Limit(ctx)
	if errors.Is(err, limiters.ErrLimitExhausted) {
		return false, nil
	}
	return err == nil, err
}

func refill(c decider.Config) time.Duration {
	d := c.Period / time.Duration(c.Limit)
	if d <= 0 {
		d = 1
	}
	return d
}

func init() {
	decider.Register(decider.Spec{
		Name: "mennanov-mem", Kind: decider.Memory, Module: mennanovModule,
		Note: "Registry.GetOrCreate + TokenBucket(LockNoop, TokenBucketInMemory).Limit",
		New: func(c decider.Config) (decider.Decider, error) {
			clock, logger := limiters.NewSystemClock(), limiters.NewStdLogger()
			return &mennanov{reg: limiters.NewRegistry(), clock: clock, ttl: time.Hour,
				newTB: func(string) *limiters.TokenBucket {
					return limiters.NewTokenBucket(c.Limit, refill(c), limiters.NewLockNoop(), limiters.NewTokenBucketInMemory(), clock, logger)
				}}, nil
		},
	})
	decider.Register(decider.Spec{
		Name: "mennanov-redis", Kind: decider.Redis, Module: mennanovModule,
		Note: "as mennanov-mem with TokenBucketRedis(raceCheck=false), LockNoop: GET + SET(JSON), 2 round trips, not multi-instance safe",
		New: func(c decider.Config) (decider.Decider, error) {
			clock, logger := limiters.NewSystemClock(), limiters.NewStdLogger()
			return &mennanov{reg: limiters.NewRegistry(), clock: clock, ttl: time.Hour,
				newTB: func(key string) *limiters.TokenBucket {
					return limiters.NewTokenBucket(c.Limit, refill(c), limiters.NewLockNoop(),
						limiters.NewTokenBucketRedis(c.Redis, c.KeyPrefix+"mennanov:"+key, c.Period, false), clock, logger)
				}}, nil
		},
	})
}
