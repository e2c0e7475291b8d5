package adapters

import (
	"context"

	"github.com/go-redis/redis_rate/v10"

	"github.com/rampmeter/ratelimit/benchmarks/decider"
)

const redisRateModule = "github.com/go-redis/redis_rate/v10"

// redis_rate: GCRA in one Lua script (EVALSHA, EVAL fallback on NOSCRIPT).
type redisRate struct {
	l      *redis_rate.Limiter
	limit  redis_rate.Limit
	prefix string
}

func (a *redisRate) Allow(ctx context.Context, key string) (bool, error) {
	res, err := a.l.Allow(ctx, a.prefix+key, a.limit)
	if err != nil {
		return false, err
	}
	return res.Allowed > 0, nil
}

func init() {
	decider.Register(decider.Spec{
		Name: "redis_rate", Kind: decider.Redis, Module: redisRateModule,
		Note: "Limiter.Allow: GCRA Lua via EVALSHA, 1 round trip",
		New: func(c decider.Config) (decider.Decider, error) {
			n := burstInt(c.Limit)
			return &redisRate{
				l:      redis_rate.NewLimiter(c.Redis),
				limit:  redis_rate.Limit{Rate: n, Burst: n, Period: c.Period},
				prefix: c.KeyPrefix,
			}, nil
		},
	})
}
