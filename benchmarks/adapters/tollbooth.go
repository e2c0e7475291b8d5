package adapters

import (
	"context"
	"net/http"

	"github.com/didip/tollbooth/v8"
	"github.com/didip/tollbooth/v8/limiter"

	"github.com/rampmeter/ratelimit/benchmarks/decider"
)

const tollboothModule = "github.com/didip/tollbooth/v8"

// tollbooth: a token bucket (its internal copy of x/time/rate) per key in an
// expirable cache behind the Limiter's global mutex.
type tollboothLim struct{ l *limiter.Limiter }

func (a *tollboothLim) Allow(_ context.Context, key string) (bool, error) {
	return !a.l.LimitReached(key), nil
}

func newTollbooth(c decider.Config) *limiter.Limiter {
	return tollbooth.NewLimiter(perSecond(c.Limit, c.Period), nil).SetBurst(burstInt(c.Limit))
}

func init() {
	decider.Register(decider.Spec{
		Name: "tollbooth", Kind: decider.Memory, Module: tollboothModule,
		Note: "limiter.LimitReached(key): global mutex + expirable cache + token bucket",
		New: func(c decider.Config) (decider.Decider, error) {
			return &tollboothLim{l: newTollbooth(c)}, nil
		},
	})
	decider.RegisterMiddleware(decider.MiddlewareSpec{
		Name: "tollbooth", Module: tollboothModule,
		Note: "tollbooth.HTTPMiddleware (RemoteAddr lookup; key = IP+path; sets X-Rate-Limit headers)",
		New: func(c decider.Config) (func(http.Handler) http.Handler, func(), error) {
			return tollbooth.HTTPMiddleware(newTollbooth(c)), nil, nil
		},
	})
}
