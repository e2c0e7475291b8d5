package adapters

import (
	"net/http"

	"github.com/go-chi/httprate"
	httprateredis "github.com/go-chi/httprate-redis"

	"github.com/rampmeter/ratelimit/benchmarks/decider"
)

const httprateRedisModule = "github.com/go-chi/httprate-redis"

func newHTTPRateRedisCounter(c decider.Config) httprate.LimitCounter {
	return httprateredis.NewCounter(&httprateredis.Config{
		Client:    c.Redis,
		PrefixKey: c.KeyPrefix + "httprate",
		// Surface Redis errors instead of silently switching to the local
		// in-memory counter (which would inflate throughput).
		FallbackDisabled: true,
		WindowLength:     c.Period,
	})
}

func init() {
	decider.Register(decider.Spec{
		Name: "httprate-redis", Kind: decider.Redis, Module: httprateRedisModule,
		Note: "httprate RateLimiter.OnLimit + httprate-redis counter: MGET then MULTI/INCRBY/EXPIRE/EXEC, both under httprate's global mutex",
		New: func(c decider.Config) (decider.Decider, error) {
			rl := httprate.NewRateLimiter(int(c.Limit), c.Period, httprate.WithLimitCounter(newHTTPRateRedisCounter(c)))
			return &httprateOnLimit{rl: rl, w: newScratchWriter(), r: &http.Request{}}, nil
		},
	})
	decider.Register(decider.Spec{
		Name: "httprate-redis-counter", Kind: decider.Redis, Module: httprateRedisModule, LowerBound: true,
		Note: "httprate-redis counter driven directly (Get + IncrementBy, no global mutex): the store's own cost",
		New: func(c decider.Config) (decider.Decider, error) {
			lc := newHTTPRateRedisCounter(c)
			lc.Config(int(c.Limit), c.Period)
			return &httprateCounter{c: lc, limit: c.Limit, window: c.Period}, nil
		},
	})
}
