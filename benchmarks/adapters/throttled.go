package adapters

import (
	"context"
	"net/http"

	"github.com/throttled/throttled/v2"
	goredisstore "github.com/throttled/throttled/v2/store/goredisstore.v9"
	"github.com/throttled/throttled/v2/store/memstore"

	"github.com/rampmeter/ratelimit/benchmarks/decider"
)

const throttledModule = "github.com/throttled/throttled/v2"

// throttled: GCRA over a CAS store. RateLimitCtx returns limited=true when
// denied.
type throttledGCRA struct{ rl *throttled.GCRARateLimiterCtx }

func (a *throttledGCRA) Allow(ctx context.Context, key string) (bool, error) {
	limited, _, err := a.rl.RateLimitCtx(ctx, key, 1)
	return !limited, err
}

func throttledQuota(c decider.Config) throttled.RateQuota {
	n := burstInt(c.Limit)
	return throttled.RateQuota{MaxRate: throttled.PerDuration(n, c.Period), MaxBurst: n - 1}
}

// README default: memstore.NewCtx(65536) = LRU (hashicorp/golang-lru) capped at 65536 keys.
const throttledMaxKeys = 65536

func init() {
	decider.Register(decider.Spec{
		Name: "throttled-mem", Kind: decider.Memory, Module: throttledModule,
		Note: "GCRA + memstore.NewCtx(65536) (LRU, global lock) as in the README",
		New: func(c decider.Config) (decider.Decider, error) {
			st, err := memstore.NewCtx(throttledMaxKeys)
			if err != nil {
				return nil, err
			}
			rl, err := throttled.NewGCRARateLimiterCtx(st, throttledQuota(c))
			if err != nil {
				return nil, err
			}
			return &throttledGCRA{rl: rl}, nil
		},
	})
	decider.Register(decider.Spec{
		Name: "throttled-redis", Kind: decider.Redis, Module: throttledModule,
		Note: "GCRA + store/goredisstore.v9: pipeline(TIME,GET) then EVAL (full script text) CAS; 2 round trips",
		New: func(c decider.Config) (decider.Decider, error) {
			st, err := goredisstore.NewCtx(c.Redis, c.KeyPrefix+"throttled:")
			if err != nil {
				return nil, err
			}
			rl, err := throttled.NewGCRARateLimiterCtx(st, throttledQuota(c))
			if err != nil {
				return nil, err
			}
			return &throttledGCRA{rl: rl}, nil
		},
	})
	decider.RegisterMiddleware(decider.MiddlewareSpec{
		Name: "throttled", Module: throttledModule,
		Note: "HTTPRateLimiterCtx{GCRA+memstore(65536), VaryBy{RemoteAddr:true}}",
		New: func(c decider.Config) (func(http.Handler) http.Handler, func(), error) {
			st, err := memstore.NewCtx(throttledMaxKeys)
			if err != nil {
				return nil, nil, err
			}
			rl, err := throttled.NewGCRARateLimiterCtx(st, throttledQuota(c))
			if err != nil {
				return nil, nil, err
			}
			h := &throttled.HTTPRateLimiterCtx{RateLimiter: rl, VaryBy: &throttled.VaryBy{RemoteAddr: true}}
			return h.RateLimit, nil, nil
		},
	})
}
