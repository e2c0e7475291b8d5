package adapters

import (
	"context"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5/middleware"
	"github.com/go-chi/httprate"

	"github.com/rampmeter/ratelimit/benchmarks/decider"
)

const httprateModule = "github.com/go-chi/httprate"

// httprate has no header-free decision API: RateLimiter.OnLimit(w, r, key)
// is the decision the middleware makes (sliding-window counter, one global
// mutex per RateLimiter around read+increment, sets 3 response headers).
// Each worker gets its own scratch writer/request (Forker).
type httprateOnLimit struct {
	rl *httprate.RateLimiter
	w  *scratchWriter
	r  *http.Request
}

func (a *httprateOnLimit) Fork() decider.Decider {
	return &httprateOnLimit{rl: a.rl, w: newScratchWriter(), r: &http.Request{}}
}

func (a *httprateOnLimit) Allow(ctx context.Context, key string) (bool, error) {
	clear(a.w.h)
	limited := a.rl.OnLimit(a.w, a.r, key)
	if a.w.code == http.StatusPreconditionRequired {
		a.w.code = 0
		return false, errLimiter
	}
	return !limited, nil
}

// httprateCounter drives only the exported LimitCounter (the store):
// Get(curr, prev windows) -> sliding-window estimate -> IncrementBy. It has
// no global RateLimiter mutex, so it is a lower bound of httprate's store
// cost, not httprate's exact semantics.
type httprateCounter struct {
	c      httprate.LimitCounter
	limit  int64
	window time.Duration
}

func (a *httprateCounter) Allow(_ context.Context, key string) (bool, error) {
	now := time.Now().UTC()
	cur := now.Truncate(a.window)
	prev := cur.Add(-a.window)
	currCount, prevCount, err := a.c.Get(key, cur, prev)
	if err != nil {
		return false, err
	}
	elapsed := float64(now.Sub(cur)) / float64(a.window)
	est := float64(prevCount)*(1-elapsed) + float64(currCount)
	if est+1 > float64(a.limit) {
		return false, nil
	}
	return true, a.c.IncrementBy(key, cur, 1)
}

func init() {
	decider.Register(decider.Spec{
		Name: "httprate", Kind: decider.Memory, Module: httprateModule,
		Note: "NewRateLimiter(...).OnLimit(w, r, key): global mutex + local counter + 3 headers",
		New: func(c decider.Config) (decider.Decider, error) {
			rl := httprate.NewRateLimiter(int(c.Limit), c.Period)
			return &httprateOnLimit{rl: rl, w: newScratchWriter(), r: &http.Request{}}, nil
		},
	})
	decider.Register(decider.Spec{
		Name: "httprate-localcounter", Kind: decider.Memory, Module: httprateModule, LowerBound: true,
		Note: "NewLocalLimitCounter: Get + IncrementBy only (store cost, no RateLimiter mutex/headers)",
		New: func(c decider.Config) (decider.Decider, error) {
			lc := httprate.NewLocalLimitCounter(c.Period)
			lc.Config(int(c.Limit), c.Period)
			return &httprateCounter{c: lc, limit: c.Limit, window: c.Period}, nil
		},
	})
	decider.RegisterMiddleware(decider.MiddlewareSpec{
		Name: "httprate-LimitByIP", Module: httprateModule,
		Note: "httprate.LimitByIP (deprecated in v0.16 but the common form)",
		New: func(c decider.Config) (func(http.Handler) http.Handler, func(), error) {
			//lint:ignore SA1019 measured on purpose: deprecated in v0.16, still the form most code uses
			return httprate.LimitByIP(int(c.Limit), c.Period), nil, nil
		},
	})
	decider.RegisterMiddleware(decider.MiddlewareSpec{
		Name: "httprate-LimitBy+chiIP", Module: httprateModule,
		Note: "chi middleware.ClientIPFromRemoteAddr + httprate.LimitBy(GetClientIP) (the v0.16 recommended form)",
		New: func(c decider.Config) (func(http.Handler) http.Handler, func(), error) {
			lim := httprate.LimitBy(int(c.Limit), c.Period, func(r *http.Request) (string, error) {
				return httprate.CanonicalizeIP(middleware.GetClientIP(r.Context())), nil
			})
			return func(next http.Handler) http.Handler {
				return middleware.ClientIPFromRemoteAddr(lim(next))
			}, nil, nil
		},
	})
}
