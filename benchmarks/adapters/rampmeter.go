package adapters

// Every rampmeter adapter lives in this one file, so that an API change of
// the root module is fixed here and nowhere else.

import (
	"context"
	"net/http"

	rm "github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/llm"
	"github.com/rampmeter/ratelimit/store/memory"
	"github.com/rampmeter/ratelimit/store/redisstore"

	"github.com/rampmeter/ratelimit/benchmarks/decider"
)

const rampmeterModule = "github.com/rampmeter/ratelimit"

// rmLimit is the configured limit as a rampmeter Limit named "requests".
// The harness's "never denies" limit (decider.HighLimit, 2^40 per minute)
// is clamped to 10^9 per period, within rampmeter's exact-integer bounds
// and still more than any run here takes from one key.
func rmLimit(c decider.Config) rm.Limit {
	return rm.Every(min(c.Limit, 1_000_000_000), c.Period).Named("requests")
}

// rmTokens is the second limit of the stacked adapters, named "tokens": a
// million tokens per request of the configured limit (at most 10^12 per
// period), so that in the smoke tests the requests limit binds first.
func rmTokens(c decider.Config) rm.Limit {
	return rm.Every(min(c.Limit, 1_000_000)*1_000_000, c.Period).Named("tokens")
}

// rmStore drives the ratelimit.Store interface directly, as the Limiter
// does: one Take of len(limits) Requests for the key, all or nothing. Each
// worker's handle (Fork) owns its Request and Decision slices, allocated
// once, so allocs/op are the store's own and not the caller's.
type rmStore struct {
	s      rm.Store
	limits []rm.Limit
	req    []rm.Request
	out    []rm.Decision
	close  func() error
}

func newRMStore(s rm.Store, closeFn func() error, limits ...rm.Limit) (*rmStore, error) {
	for _, l := range limits {
		if err := l.Err(); err != nil {
			return nil, err
		}
	}
	a := &rmStore{s: s, limits: limits, close: closeFn}
	a.req, a.out = make([]rm.Request, len(limits)), make([]rm.Decision, len(limits))
	return a, nil
}

func (a *rmStore) Fork() decider.Decider {
	return &rmStore{s: a.s, limits: a.limits, req: make([]rm.Request, len(a.limits)), out: make([]rm.Decision, len(a.limits))}
}

func (a *rmStore) Allow(ctx context.Context, key string) (bool, error) {
	for i := range a.req {
		a.req[i] = rm.Request{Key: key, Limit: &a.limits[i], Cost: 1}
	}
	if err := a.s.Take(ctx, a.req, a.out); err != nil {
		return false, err
	}
	for i := range a.out {
		if !a.out[i].Allowed {
			return false, nil
		}
	}
	return true, nil
}

func (a *rmStore) Close() error {
	if a.close != nil {
		return a.close()
	}
	return nil
}

// rmLimiter drives Limiter.Take, the API users call outside HTTP (store
// deadline, failure mode, stats, hooks).
type rmLimiter struct {
	l     *rm.Limiter
	close func() error
}

func (a *rmLimiter) Allow(ctx context.Context, key string) (bool, error) {
	res, err := a.l.Take(ctx, key)
	return res.Allowed, err
}

func (a *rmLimiter) Close() error { return a.close() }

func newRMLimiter(limits ...rm.Limit) (decider.Decider, error) {
	s, err := memory.New()
	if err != nil {
		return nil, err
	}
	l, err := rm.New(s, rm.WithLimits(limits...))
	if err != nil {
		return nil, err
	}
	return &rmLimiter{l: l, close: s.Close}, nil
}

// newRMRedis is the Redis store every Redis adapter uses: the harness's
// shared client has no ContextTimeoutEnabled (the load generator passes no
// deadline), which the store must be told it may accept.
func newRMRedis(c decider.Config, opts ...redisstore.Option) (*redisstore.Store, error) {
	opts = append([]redisstore.Option{redisstore.WithPrefix(c.KeyPrefix), redisstore.AllowContextTimeoutDisabled()}, opts...)
	return redisstore.New(c.Redis, opts...)
}

// rmMiddleware returns Limiter.Handler on a memory store built with opts
// (after WithKey(KeyByIP())), wrapping next in wrap when wrap is non-nil.
func rmMiddleware(wrap func(http.Handler) http.Handler, opts ...rm.Option) (func(http.Handler) http.Handler, func(), error) {
	s, err := memory.New()
	if err != nil {
		return nil, nil, err
	}
	l, err := rm.New(s, append([]rm.Option{rm.WithKey(rm.KeyByIP())}, opts...)...)
	if err != nil {
		return nil, nil, err
	}
	mw := l.Handler
	if wrap != nil {
		mw = func(next http.Handler) http.Handler { return l.Handler(wrap(next)) }
	}
	return mw, func() { _ = s.Close() }, nil
}

// aiChatBody is a typical OpenAI chat request (249 bytes, 256 output
// tokens declared), the body of every request through rampmeter-ai.
var aiChatBody = []byte(`{"model":"gpt-4o-mini","messages":[{"role":"system","content":"You are a helpful assistant."},` +
	`{"role":"user","content":[{"type":"text","text":"Summarise the following paragraph in one sentence, please."}]}],` +
	`"max_completion_tokens":256,"stream":true}`)

// reportUsage is the AI handler's part of settlement: it reports the
// tokens the (imaginary) model used before the handler answers, and
// answers 500 if the report fails, which the smoke tests and the
// benchmarks (they want 200) catch.
func reportUsage(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := rm.ReportUsage(r.Context(), "tokens", 100); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func init() {
	decider.Register(decider.Spec{
		Name: "rampmeter-mem", Kind: decider.Memory, Module: rampmeterModule,
		Note: "store/memory Store.Take through the ratelimit.Store interface, one token-bucket Request; per-worker Request/Decision slices (Fork)",
		New: func(c decider.Config) (decider.Decider, error) {
			s, err := memory.New()
			if err != nil {
				return nil, err
			}
			return newRMStore(s, s.Close, rmLimit(c))
		},
	})
	decider.Register(decider.Spec{
		Name: "rampmeter-limiter-mem", Kind: decider.Memory, Module: rampmeterModule,
		Note: "Limiter.Take on store/memory, one token-bucket limit (store deadline, stats)",
		New:  func(c decider.Config) (decider.Decider, error) { return newRMLimiter(rmLimit(c)) },
	})
	decider.Register(decider.Spec{
		Name: "rampmeter-limiter-mem-stack2", Kind: decider.Memory, Module: rampmeterModule,
		Note: "Limiter.Take on store/memory, two stacked token-bucket limits (requests + tokens), all or nothing",
		New:  func(c decider.Config) (decider.Decider, error) { return newRMLimiter(rmLimit(c), rmTokens(c)) },
	})
	decider.Register(decider.Spec{
		Name: "rampmeter-redis", Kind: decider.Redis, Module: rampmeterModule,
		Note: "store/redisstore Store.Take, one limit: one FCALL (Redis Function; EVALSHA where FCALL is unavailable), Redis TIME; per-worker slices (Fork)",
		New: func(c decider.Config) (decider.Decider, error) {
			s, err := newRMRedis(c)
			if err != nil {
				return nil, err
			}
			return newRMStore(s, nil, rmLimit(c))
		},
	})
	decider.Register(decider.Spec{
		Name: "rampmeter-redis-stack2", Kind: decider.Redis, Module: rampmeterModule,
		Note: "store/redisstore Store.Take of 2 stacked limits (requests + tokens) in the one FCALL, all or nothing",
		New: func(c decider.Config) (decider.Decider, error) {
			s, err := newRMRedis(c)
			if err != nil {
				return nil, err
			}
			return newRMStore(s, nil, rmLimit(c), rmTokens(c))
		},
	})
	decider.Register(decider.Spec{
		Name: "rampmeter-redis-pipelined", Kind: decider.Redis, Module: rampmeterModule,
		Note: "store/redisstore Store.Take, one limit, WithPipelining: concurrent Takes share one batch script call (a key read once and written once per batch; go-redis AsyncAutoPipeline on a Cluster)",
		New: func(c decider.Config) (decider.Decider, error) {
			s, err := newRMRedis(c, redisstore.WithPipelining())
			if err != nil {
				return nil, err
			}
			return newRMStore(s, nil, rmLimit(c))
		},
	})
	decider.Register(decider.Spec{
		Name: "rampmeter-redis-pipelined-stack2", Kind: decider.Redis, Module: rampmeterModule,
		Note: "store/redisstore Store.Take of 2 stacked limits in the one FCALL, WithPipelining",
		New: func(c decider.Config) (decider.Decider, error) {
			s, err := newRMRedis(c, redisstore.WithPipelining())
			if err != nil {
				return nil, err
			}
			return newRMStore(s, nil, rmLimit(c), rmTokens(c))
		},
	})

	decider.RegisterMiddleware(decider.MiddlewareSpec{
		Name: "rampmeter", Module: rampmeterModule,
		Note: "Limiter.Handler, KeyByIP, store/memory, 1 limit, default headers (IETF RateLimit + RateLimit-Policy)",
		New: func(c decider.Config) (func(http.Handler) http.Handler, func(), error) {
			return rmMiddleware(nil, rm.WithLimits(rmLimit(c)))
		},
	})
	decider.RegisterMiddleware(decider.MiddlewareSpec{
		Name: "rampmeter-noheaders", Module: rampmeterModule,
		Note: "Limiter.Handler, KeyByIP, store/memory, 1 limit, WithHeaders(HeadersNone)",
		New: func(c decider.Config) (func(http.Handler) http.Handler, func(), error) {
			return rmMiddleware(nil, rm.WithLimits(rmLimit(c)), rm.WithHeaders(rm.HeadersNone))
		},
	})
	decider.RegisterMiddleware(decider.MiddlewareSpec{
		Name: "rampmeter-ai", Module: rampmeterModule, Body: aiChatBody,
		Note: "the AI path: Limiter.Handler, KeyByIP, store/memory, requests + tokens limits (llm.EstimateOpenAITokens reads each chat body), " +
			"WithReserveClamp(0.5), IETF + OpenAI headers, OpenAI errors; the handler reports 100 tokens (settled with one Adjust)",
		New: func(c decider.Config) (func(http.Handler) http.Handler, func(), error) {
			return rmMiddleware(reportUsage,
				rm.WithLimits(rmLimit(c), rmTokens(c).CostFrom(llm.EstimateOpenAITokens())),
				rm.WithReserveClamp(0.5),
				rm.WithHeaders(rm.HeadersIETF, llm.OpenAIHeaders()),
				rm.WithErrorFormat(llm.OpenAIErrors()))
		},
	})
}
