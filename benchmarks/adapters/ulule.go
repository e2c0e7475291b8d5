package adapters

import (
	"context"
	"net/http"

	"github.com/ulule/limiter/v3"
	"github.com/ulule/limiter/v3/drivers/middleware/stdlib"
	"github.com/ulule/limiter/v3/drivers/store/memory"
	ululeredis "github.com/ulule/limiter/v3/drivers/store/redis"

	"github.com/rampmeter/ratelimit/benchmarks/decider"
)

const ululeModule = "github.com/ulule/limiter/v3"

// ulule: fixed-window counter. Limiter.Get increments by one and reports
// Reached.
type ulule struct{ l *limiter.Limiter }

func (a *ulule) Allow(ctx context.Context, key string) (bool, error) {
	lc, err := a.l.Get(ctx, key)
	if err != nil {
		return false, err
	}
	return !lc.Reached, nil
}

func ululeRate(c decider.Config) limiter.Rate {
	return limiter.Rate{Period: c.Period, Limit: c.Limit}
}

func init() {
	decider.Register(decider.Spec{
		Name: "ulule-mem", Kind: decider.Memory, Module: ululeModule,
		Note: "memory.NewStore() + Limiter.Get (fixed window; sync.Map + per-counter mutex)",
		New: func(c decider.Config) (decider.Decider, error) {
			return &ulule{l: limiter.New(memory.NewStore(), ululeRate(c))}, nil
		},
	})
	decider.Register(decider.Spec{
		Name: "ulule-redis", Kind: decider.Redis, Module: ululeModule,
		Note: "redis.NewStoreWithOptions + Limiter.Get: EVALSHA of INCRBY(+PEXPIRE|PTTL) script, 1 round trip",
		New: func(c decider.Config) (decider.Decider, error) {
			s, err := ululeredis.NewStoreWithOptions(c.Redis, limiter.StoreOptions{Prefix: c.KeyPrefix + "ulule"})
			if err != nil {
				return nil, err
			}
			return &ulule{l: limiter.New(s, ululeRate(c))}, nil
		},
	})
	decider.RegisterMiddleware(decider.MiddlewareSpec{
		Name: "ulule-stdlib", Module: ululeModule,
		Note: "stdlib.NewMiddleware(limiter.New(memory.NewStore(), rate)) keyed by IP",
		New: func(c decider.Config) (func(http.Handler) http.Handler, func(), error) {
			m := stdlib.NewMiddleware(limiter.New(memory.NewStore(), ululeRate(c)))
			return m.Handler, nil, nil
		},
	})
}
