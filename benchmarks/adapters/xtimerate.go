package adapters

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/rampmeter/ratelimit/benchmarks/decider"
)

const xtimeModule = "golang.org/x/time"

// xtimeBare: one rate.Limiter, the key is ignored (lower bound of a token
// bucket decision).
type xtimeBare struct{ l *rate.Limiter }

func (x *xtimeBare) Allow(_ context.Context, _ string) (bool, error) { return x.l.Allow(), nil }

// xtimeMap: what a typical user writes: map[string]*rate.Limiter behind a
// sync.Mutex held only for the lookup/insert; Allow runs outside it (the
// Limiter has its own mutex).
type xtimeMap struct {
	mu    sync.Mutex
	m     map[string]*rate.Limiter
	r     rate.Limit
	burst int
}

func (x *xtimeMap) Allow(_ context.Context, key string) (bool, error) {
	return x.get(key).Allow(), nil
}

func (x *xtimeMap) get(key string) *rate.Limiter {
	x.mu.Lock()
	l, ok := x.m[key]
	if !ok {
		l = rate.NewLimiter(x.r, x.burst)
		x.m[key] = l
	}
	x.mu.Unlock()
	return l
}

// xtimeSyncMap: the same with sync.Map (lock-free reads), a performance-minded
// user's variant.
type xtimeSyncMap struct {
	m     sync.Map
	r     rate.Limit
	burst int
}

func (x *xtimeSyncMap) Allow(_ context.Context, key string) (bool, error) {
	v, ok := x.m.Load(key)
	if !ok {
		v, _ = x.m.LoadOrStore(key, rate.NewLimiter(x.r, x.burst))
	}
	return v.(*rate.Limiter).Allow(), nil
}

func init() {
	decider.Register(decider.Spec{
		Name: "xtime-bare", Kind: decider.Memory, Module: xtimeModule, SingleKey: true, LowerBound: true,
		Note: "one rate.Limiter, Allow(); no key lookup",
		New: func(c decider.Config) (decider.Decider, error) {
			return &xtimeBare{l: rate.NewLimiter(rate.Limit(perSecond(c.Limit, c.Period)), burstInt(c.Limit))}, nil
		},
	})
	decider.Register(decider.Spec{
		Name: "xtime-map", Kind: decider.Memory, Module: xtimeModule,
		Note: "map[string]*rate.Limiter + sync.Mutex (lookup only), then Limiter.Allow()",
		New: func(c decider.Config) (decider.Decider, error) {
			return &xtimeMap{m: make(map[string]*rate.Limiter), r: rate.Limit(perSecond(c.Limit, c.Period)), burst: burstInt(c.Limit)}, nil
		},
	})
	decider.Register(decider.Spec{
		Name: "xtime-syncmap", Kind: decider.Memory, Module: xtimeModule,
		Note: "sync.Map of *rate.Limiter, then Limiter.Allow()",
		New: func(c decider.Config) (decider.Decider, error) {
			return &xtimeSyncMap{r: rate.Limit(perSecond(c.Limit, c.Period)), burst: burstInt(c.Limit)}, nil
		},
	})
	// A hand-written middleware on top of xtime-map: the floor for any
	// keyed middleware (no headers, 429 on deny).
	decider.RegisterMiddleware(decider.MiddlewareSpec{
		Name: "handrolled-xtime-map", Module: xtimeModule, Reference: true,
		Note: "hand-written: SplitHostPort(RemoteAddr) -> xtime-map Allow -> 429; no headers",
		New: func(c decider.Config) (func(http.Handler) http.Handler, func(), error) {
			x := &xtimeMap{m: make(map[string]*rate.Limiter), r: rate.Limit(perSecond(c.Limit, c.Period)), burst: burstInt(c.Limit)}
			return func(next http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if ok, _ := x.Allow(r.Context(), remoteIP(r)); !ok {
						tooMany(w)
						return
					}
					next.ServeHTTP(w, r)
				})
			}, nil, nil
		},
	})
	// The same plus the three X-RateLimit-* headers most libraries set, written
	// the way they write them (Header().Set + strconv): isolates what the
	// headers cost. Note "X-RateLimit-*" is not in canonical form, so each Set
	// also allocates the canonicalised key.
	decider.RegisterMiddleware(decider.MiddlewareSpec{
		Name: "handrolled-xtime-map+headers", Module: xtimeModule, Reference: true,
		Note: "handrolled-xtime-map + X-RateLimit-Limit/Remaining/Reset via Header().Set(strconv...)",
		New: func(c decider.Config) (func(http.Handler) http.Handler, func(), error) {
			x := &xtimeMap{m: make(map[string]*rate.Limiter), r: rate.Limit(perSecond(c.Limit, c.Period)), burst: burstInt(c.Limit)}
			limit := strconv.FormatInt(c.Limit, 10)
			return func(next http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					l := x.get(remoteIP(r))
					ok := l.Allow()
					h := w.Header()
					h.Set("X-RateLimit-Limit", limit)
					h.Set("X-RateLimit-Remaining", strconv.FormatInt(int64(l.Tokens()), 10))
					h.Set("X-RateLimit-Reset", strconv.FormatInt(time.Now().Add(c.Period).Unix(), 10))
					if !ok {
						tooMany(w)
						return
					}
					next.ServeHTTP(w, r)
				})
			}, nil, nil
		},
	})
}
