// Package decider defines the one interface every rate-limiter adapter of
// the comparison implements, plus a small registry so that the benchmarks,
// the Redis load generator (cmd/redisbench) and the HTTP server for wrk
// (cmd/httpserve) iterate over "all adapters" without knowing them.
//
// To measure another implementation, add ONE file to ../adapters that calls
// Register (and RegisterMiddleware if it ships an HTTP middleware) from an
// init function. Nothing else needs to change.
package decider

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Decider answers "may one more request for key proceed?". It must be safe
// for concurrent use unless it also implements Forker.
type Decider interface {
	Allow(ctx context.Context, key string) (bool, error)
}

// Forker is optional. Adapters that need per-goroutine scratch state (for
// example a ResponseWriter, because a library only exposes an
// http-shaped decision API) return an independent handle per worker. The
// handles still share the limiter state.
type Forker interface {
	Fork() Decider
}

// Closer is optional: stop background goroutines, close clients.
type Closer interface {
	Close() error
}

// Kind says which benchmark family an adapter belongs to.
type Kind string

const (
	Memory   Kind = "memory"   // in-process store
	Redis    Kind = "redis"    // decision made against Redis
	RedisRef Kind = "redisref" // not a limiter: physical reference through the same client
)

// Config is the limit every adapter is configured with: Limit events per
// Period per key, burst (where the algorithm has one) = Limit. The harness
// uses a huge Limit so that nothing is denied and only the cost of an
// allow decision is measured.
type Config struct {
	Limit  int64
	Period time.Duration

	// Redis is set for Redis kinds. All Redis adapters share the same client
	// settings so that differences come from the library, not the pool.
	Redis *redis.Client
	// KeyPrefix namespaces Redis keys per run.
	KeyPrefix string
}

// Spec describes one adapter.
type Spec struct {
	Name   string // short, unique, used in benchmark names: no spaces, no '/'
	Kind   Kind
	Module string // module path, version is taken from the build info
	Note   string // how the library is driven, caveats
	// SingleKey is true for limiters that have no notion of a key (a bare
	// rate.Limiter): the distinct-keys case is skipped for them.
	SingleKey bool
	// LowerBound is true when the adapter drives only part of a library's
	// path (its counter without the limiter around it, a limiter without a
	// key): a floor to read other rows against, never "the best peer" of
	// the report's summary.
	LowerBound bool
	New        func(cfg Config) (Decider, error)
}

// MiddlewareSpec describes one HTTP middleware under test. Key is by client
// IP (RemoteAddr) unless the note says otherwise.
type MiddlewareSpec struct {
	Name   string
	Module string
	Note   string
	// Reference is true for what is not a library's middleware (the bare
	// handler, hand-written floors): never "the best peer" of the summary.
	Reference bool
	// Body, when set, is the body of every request (POST, Content-Type
	// application/json) the benchmarks, smoke tests and wrk send through
	// this middleware, for middlewares that read it (a token estimator).
	// Others get GET requests without a body.
	Body []byte
	// New returns the middleware plus an optional closer.
	New func(cfg Config) (func(http.Handler) http.Handler, func(), error)
}

var (
	mu    sync.Mutex
	specs = map[string]Spec{}
	mws   = map[string]MiddlewareSpec{}
)

// Register adds an adapter; call it from init().
func Register(s Spec) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := specs[s.Name]; dup || strings.ContainsAny(s.Name, " /") {
		panic(fmt.Sprintf("decider: bad or duplicate adapter name %q", s.Name))
	}
	specs[s.Name] = s
}

// RegisterMiddleware adds an HTTP middleware; call it from init().
func RegisterMiddleware(s MiddlewareSpec) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := mws[s.Name]; dup || strings.ContainsAny(s.Name, " /") {
		panic(fmt.Sprintf("decider: bad or duplicate middleware name %q", s.Name))
	}
	mws[s.Name] = s
}

// Specs returns the registered adapters of the given kinds (all kinds if
// none given), in a stable order.
func Specs(kinds ...Kind) []Spec {
	mu.Lock()
	defer mu.Unlock()
	var out []Spec
	for _, s := range specs {
		if len(kinds) == 0 {
			out = append(out, s)
			continue
		}
		for _, k := range kinds {
			if s.Kind == k {
				out = append(out, s)
				break
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Lookup returns one adapter by name.
func Lookup(name string) (Spec, bool) {
	mu.Lock()
	defer mu.Unlock()
	s, ok := specs[name]
	return s, ok
}

// Middlewares returns the registered middlewares in a stable order.
func Middlewares() []MiddlewareSpec {
	mu.Lock()
	defer mu.Unlock()
	var out []MiddlewareSpec
	for _, s := range mws {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// LookupMiddleware returns one middleware by name.
func LookupMiddleware(name string) (MiddlewareSpec, bool) {
	mu.Lock()
	defer mu.Unlock()
	s, ok := mws[name]
	return s, ok
}

// ForWorker returns the handle a worker goroutine should use.
func ForWorker(d Decider) Decider {
	if f, ok := d.(Forker); ok {
		return f.Fork()
	}
	return d
}

// Close closes d if it implements Closer.
func Close(d Decider) {
	if c, ok := d.(Closer); ok {
		_ = c.Close()
	}
}

// Keys returns n distinct keys "k000000".. (pre-built so that benchmarks do
// not measure key formatting).
func Keys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%06d", i)
	}
	return keys
}

// HighLimit is a limit high enough that no benchmark ever hits it.
func HighLimit() Config {
	return Config{Limit: 1 << 40, Period: time.Minute}
}
