package adapters

import (
	"context"
	"net/http"

	limiter "github.com/sethvargo/go-limiter"
	"github.com/sethvargo/go-limiter/httplimit"
	"github.com/sethvargo/go-limiter/memorystore"

	"github.com/rampmeter/ratelimit/benchmarks/decider"
)

const sethvargoModule = "github.com/sethvargo/go-limiter"

type sethvargoMem struct{ s limiter.Store }

func (a *sethvargoMem) Allow(ctx context.Context, key string) (bool, error) {
	_, _, _, ok, err := a.s.Take(ctx, key)
	return ok, err
}

func (a *sethvargoMem) Close() error { return a.s.Close(context.Background()) }

func newSethvargoStore(c decider.Config) (limiter.Store, error) {
	// Defaults otherwise (sweep every 6h, 4096 initial map size).
	return memorystore.New(&memorystore.Config{Tokens: uint64(c.Limit), Interval: c.Period})
}

func init() {
	decider.Register(decider.Spec{
		Name: "sethvargo-mem", Kind: decider.Memory, Module: sethvargoModule,
		Note: "memorystore.Take (RWMutex map + per-bucket mutex; bucket refills fully at each interval tick)",
		New: func(c decider.Config) (decider.Decider, error) {
			s, err := newSethvargoStore(c)
			if err != nil {
				return nil, err
			}
			return &sethvargoMem{s: s}, nil
		},
	})
	decider.RegisterMiddleware(decider.MiddlewareSpec{
		Name: "sethvargo-httplimit", Module: sethvargoModule,
		Note: "httplimit.NewMiddleware(memorystore, IPKeyFunc())",
		New: func(c decider.Config) (func(http.Handler) http.Handler, func(), error) {
			s, err := newSethvargoStore(c)
			if err != nil {
				return nil, nil, err
			}
			m, err := httplimit.NewMiddleware(s, httplimit.IPKeyFunc())
			if err != nil {
				return nil, nil, err
			}
			return m.Handle, func() { _ = s.Close(context.Background()) }, nil
		},
	})
}
