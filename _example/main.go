// Command _example is a small OpenAI-compatible AI API protected by
// rampmeter: every API key has a plan, named by its prefix — sk-free-…
// gets -rpm requests per minute and -tpd AI tokens per day, sk-pro-…
// gets -pro-rpm and -pro-tpd, any other key is an invalid API key (401) — and
// a monthly budget in micro-dollars (-budget, -pro-budget; $1 and $50 by
// default) per calendar month in America/New_York, priced by the model's
// price table (llm.Prices), all decided atomically in one shared store by
// every instance, with at most -concurrent (-pro-concurrent) calls of one
// key in flight at once across the instances (a concurrency cap: 429 with
// Retry-After: 1 beyond it). Token estimates come
// from the request body (llm.EstimateOpenAITokens), are reserved
// before the model runs (at most half the daily quota per request) and
// settled to the real usage after it; failed model calls are refunded; a
// spent daily quota is a 403, a spent monthly budget a 402 Payment Required
// (until the 1st of the next month), a spent per-minute rate a 429; headers and
// errors follow the OpenAI API.
//
//	go run ./_example                 # one instance on 127.0.0.1:8080, embedded Redis
//	go run ./_example -instances 5    # five instances on 8080..8084 sharing one store
//	go run ./_example -redis redis://127.0.0.1:6379/0
//	go run ./_example -demo           # a scripted check: bursts from 10 keys at 5 instances; exits 0 only if every limit held exactly
//
// Without -redis the store is an embedded miniredis, so the real Lua path
// runs with no setup.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
	_ "time/tzdata" // the budget's zone, America/New_York, loads on any machine

	"github.com/alicebob/miniredis/v2"
	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/llm"
	rmprom "github.com/rampmeter/ratelimit/metrics/prometheus"
	"github.com/rampmeter/ratelimit/store/redisstore"
)

type options struct {
	addr         string
	redisURL     string
	rpm          int64
	tpd          int64
	proRPM       int64
	proTPD       int64
	concurrent   int64 // calls in flight per key, free plan
	proConc      int64 // calls in flight per key, pro plan
	budget       int64 // micro-dollars per calendar month, free plan
	proBudget    int64
	instances    int
	demo         bool
	storeTimeout time.Duration
	hooks        ratelimit.Hooks // metrics when serving; none in -demo
}

func main() {
	var o options
	flag.StringVar(&o.addr, "addr", "127.0.0.1:8080", "listen address of the first instance; others take the following ports")
	flag.StringVar(&o.redisURL, "redis", "", "Redis URL (redis://host:port/db); default: an embedded miniredis")
	flag.Int64Var(&o.rpm, "rpm", 60, "requests per minute per API key of the free plan (sk-free-…)")
	flag.Int64Var(&o.tpd, "tpd", 100_000, "AI tokens per day per API key of the free plan")
	flag.Int64Var(&o.proRPM, "pro-rpm", 600, "requests per minute per API key of the pro plan (sk-pro-…)")
	flag.Int64Var(&o.proTPD, "pro-tpd", 2_000_000, "AI tokens per day per API key of the pro plan")
	flag.Int64Var(&o.concurrent, "concurrent", 10, "calls in flight at once per API key of the free plan, across the instances")
	flag.Int64Var(&o.proConc, "pro-concurrent", 50, "calls in flight at once per API key of the pro plan")
	flag.Int64Var(&o.budget, "budget", 1_000_000, "micro-dollars per calendar month (America/New_York) per API key of the free plan ($1)")
	flag.Int64Var(&o.proBudget, "pro-budget", 50_000_000, "micro-dollars per calendar month per API key of the pro plan ($50)")
	flag.DurationVar(&o.storeTimeout, "store-timeout", 0, "deadline of each store call, then FailOpen applies (default: the library's 50ms with -redis; 1s for the embedded miniredis, which runs Lua interpreted in this process and queues a burst)")
	flag.IntVar(&o.instances, "instances", 1, "number of instances to serve, on consecutive ports, sharing one store")
	flag.BoolVar(&o.demo, "demo", false, "send bursts from several API keys to 5 instances sharing one store, print what each got, and exit (0 only if every limit held exactly)")
	flag.Parse()

	var err error
	if o.demo {
		err = runDemo(os.Stdout, o)
	} else {
		err = serve(o)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

// newRedisClient connects to -redis, or starts an embedded miniredis. The
// returned stop function closes both.
func newRedisClient(url string) (redis.UniversalClient, *miniredis.Miniredis, func(), error) {
	if url != "" {
		opt, err := redis.ParseURL(url)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("-redis: %w", err)
		}
		// A timed-out script is never retried (replaying it could charge
		// twice), and the limiter's deadline reaches the socket.
		opt.MaxRetries = -1
		opt.ContextTimeoutEnabled = true
		c := redis.NewClient(opt)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := c.Ping(ctx).Err(); err != nil {
			_ = c.Close()
			return nil, nil, nil, fmt.Errorf("-redis %s: %w", url, err)
		}
		return c, nil, func() { _ = c.Close() }, nil
	}
	m, err := miniredis.Run()
	if err != nil {
		return nil, nil, nil, err
	}
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	return c, m, func() { _ = c.Close(); m.Close() }, nil
}

// pingStore checks, before serving, that the store can decide (see
// redisstore.Store.Ping): otherwise every request would pass unlimited.
func pingStore(s *redisstore.Store) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.Ping(ctx)
}

// newPlans validates the plans once: requests per minute, tokens per day
// and a monthly budget, stacked, per plan.
func newPlans(o options) (*ratelimit.Plans, error) {
	if o.rpm < 1 || o.tpd < 1 || o.proRPM < 1 || o.proTPD < 1 {
		return nil, fmt.Errorf("-rpm, -tpd, -pro-rpm and -pro-tpd must be at least 1")
	}
	if o.concurrent < 1 || o.proConc < 1 || max(o.concurrent, o.proConc) > ratelimit.MaxConcurrent {
		return nil, fmt.Errorf("-concurrent and -pro-concurrent must be 1..%d", ratelimit.MaxConcurrent)
	}
	if o.budget < 1 || o.proBudget < 1 {
		return nil, fmt.Errorf("-budget and -pro-budget must be at least 1")
	}
	// The budgets' months begin at midnight on the 1st in New York (the
	// zone database is embedded: time/tzdata).
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		return nil, err
	}
	return withConcurrencyCaps(o, map[string][]ratelimit.Limit{
		"free": {ratelimit.PerMinute(o.rpm).Named("requests"), ratelimit.PerDay(o.tpd).Named("tokens").CostFrom(estimateTokens), budgetLimit(o.budget, ny)},
		"pro":  {ratelimit.PerMinute(o.proRPM).Named("requests"), ratelimit.PerDay(o.proTPD).Named("tokens").CostFrom(estimateTokens), budgetLimit(o.proBudget, ny)},
	})
}

// budgetLimit is a plan's monthly budget of microUSD micro-dollars: each
// call reserves its estimated price (llm.EstimateOpenAICost) and settles
// to the price of what the model used; a spent budget is answered with
// 402 Payment Required and a Retry-After until the next month begins.
func budgetLimit(microUSD int64, loc *time.Location) ratelimit.Limit {
	return ratelimit.PerCalendarMonth(microUSD, loc).Named("budget").
		CostFrom(estimateCost).WithUnit("usd-micros").
		WithRefusalStatus(http.StatusPaymentRequired)
}

// maxHold is the concurrency caps' maximum hold: longer than any call of
// the fake model (a stream included), so a slot returns early only when its
// call ends; a slot whose instance died returns by itself after it.
const maxHold = 5 * time.Minute

// withConcurrencyCaps adds each plan's cap on calls in flight per key
// (named "concurrent-requests") to its limits, and validates the plans.
func withConcurrencyCaps(o options, plans map[string][]ratelimit.Limit) (*ratelimit.Plans, error) {
	plans["free"] = append(plans["free"], ratelimit.Concurrent(o.concurrent, maxHold))
	plans["pro"] = append(plans["pro"], ratelimit.Concurrent(o.proConc, maxHold))
	return ratelimit.NewPlans(plans)
}

// planOf names the plan of an API key: "sk-pro-alice" is on "pro". A real
// API looks the key up in its account table.
func planOf(key string) string {
	_, rest, _ := strings.Cut(key, "-")
	plan, _, _ := strings.Cut(rest, "-")
	return plan
}

// invalidAPIKey is the message of a key of no known plan.
const invalidAPIKey = `Invalid API key: API keys start with "sk-free-" or "sk-pro-".`

// limitsOf is the limiters' WithLimitsFunc: the limits of the key's plan.
// A key of no known plan is no valid key here (a real API would not find
// it in its account table), so the answer is 401, not the 403 that
// Plans.Lookup gives a known key without access.
func limitsOf(plans *ratelimit.Plans) ratelimit.LimitsFunc {
	return func(_ *http.Request, key string) (*ratelimit.PolicySet, error) {
		set, err := plans.Lookup(planOf(key), "")
		if errors.Is(err, ratelimit.ErrUnknownPlan) {
			return nil, &ratelimit.StatusError{Code: http.StatusUnauthorized, Message: invalidAPIKey, Err: err}
		}
		return set, err
	}
}

// newLimiter builds one instance's limiter on store.
func newLimiter(store ratelimit.Store, plans *ratelimit.Plans, o options) (*ratelimit.Limiter, error) {
	return ratelimit.New(store,
		ratelimit.WithKey(ratelimit.KeyByAPIKey()),
		ratelimit.WithLimitsFunc(limitsOf(plans)),
		ratelimit.WithReserveClamp(0.5),
		ratelimit.WithQuotaExhaustedStatus(24*time.Hour, http.StatusForbidden),
		ratelimit.WithHeaders(ratelimit.HeadersIETF|ratelimit.HeadersXRateLimit, llm.OpenAIHeaders()),
		ratelimit.WithErrorFormat(llm.OpenAIErrors()),
		ratelimit.WithFailureMode(ratelimit.FailOpen),
		ratelimit.WithStoreTimeout(o.storeTimeout),
		ratelimit.WithHooks(o.hooks),
	)
}

// newRouter is one instance of the API.
func newRouter(lim *ratelimit.Limiter, metrics http.Handler) http.Handler {
	r := chi.NewRouter()
	r.Use(middleware.Recoverer)
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	if metrics != nil {
		r.Handle("/metrics", metrics)
	}
	r.Group(func(r chi.Router) {
		r.Use(lim.Handler)
		r.Post("/v1/chat/completions", completions)
	})
	return r
}

func serve(o options) error {
	if o.instances < 1 || o.instances > 64 {
		return fmt.Errorf("-instances must be 1..64, got %d", o.instances)
	}
	host, portStr, err := net.SplitHostPort(o.addr)
	if err != nil {
		return fmt.Errorf("-addr: %w", err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return fmt.Errorf("-addr port: %w", err)
	}
	if o.storeTimeout == 0 {
		o.storeTimeout = ratelimit.DefaultStoreTimeout
		if o.redisURL == "" {
			o.storeTimeout = time.Second
		}
	}
	client, _, stop, err := newRedisClient(o.redisURL)
	if err != nil {
		return err
	}
	defer stop()
	rstore, err := redisstore.New(client)
	if err != nil {
		return err
	}
	if err := pingStore(rstore); err != nil {
		return err
	}
	// Prometheus metrics for the whole process at /metrics on every
	// instance: decisions by policy and outcome, bypasses, store errors
	// and latency (the hooks measure every store call; the store needs no
	// InstrumentStore wrapper).
	reg := prometheus.NewRegistry()
	m, err := rmprom.New(reg)
	if err != nil {
		return err
	}
	var store ratelimit.Store = rstore
	o.hooks = m.Hooks()
	metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	plans, err := newPlans(o)
	if err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	errc := make(chan error, o.instances)
	var servers []*http.Server
	for i := range o.instances {
		lim, err := newLimiter(store, plans, o)
		if err != nil {
			return err
		}
		addr := net.JoinHostPort(host, strconv.Itoa(port+i))
		srv := &http.Server{Addr: addr, Handler: newRouter(lim, metrics), ReadHeaderTimeout: 5 * time.Second}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return err
		}
		servers = append(servers, srv)
		go func() { errc <- srv.Serve(ln) }()
		log.Printf("instance %d listening on http://%s", i+1, addr)
	}
	where := "embedded miniredis"
	if o.redisURL != "" {
		where = o.redisURL
	}
	first := net.JoinHostPort(host, strconv.Itoa(port))
	fmt.Printf(`
rampmeter demo API: %d instance(s), shared store: %s
plans: sk-free-… %d requests/min and %d tokens/day; sk-pro-… %d requests/min and %d tokens/day;
       budgets of %d and %d micro-dollars per calendar month (America/New_York);
       at most %d (free) and %d (pro) calls of one key in flight at once

Try it:
  curl -si http://%[11]s/v1/chat/completions -H 'Authorization: Bearer sk-free-alice' \
       -d '{"model":"demo","messages":[{"role":"user","content":"Hello there"}],"max_tokens":16}'
  curl -sN http://%[11]s/v1/chat/completions -H 'Authorization: Bearer sk-pro-alice' \
       -d '{"model":"demo","messages":[{"role":"user","content":"Stream please"}],"stream":true}'
  curl -si http://%[11]s/v1/chat/completions -H 'Authorization: Bearer sk-free-alice' \
       -d '{"model":"demo-fail","messages":[{"role":"user","content":"hi"}]}'        # 502: reservation refunded
  curl -si http://%[11]s/v1/chat/completions -H 'Authorization: Bearer sk-free-alice' \
       -d '{"model":"demo","messages":[{"role":"user","content":"hi"}],"max_tokens":200000}'  # 413: never fits
  curl -si http://%[11]s/v1/chat/completions -H 'Authorization: Bearer sk-gold-x' -d '{}' # 401: invalid API key
  curl -si http://%[11]s/v1/chat/completions -d '{}'                                   # 401: no API key
  curl -s http://%[11]s/metrics | grep '^rampmeter_'                                   # Prometheus metrics
  seq 70 | xargs -P 8 -I{} curl -s -o /dev/null -w '%%{http_code}\n' http://%[11]s/v1/chat/completions \
       -H 'Authorization: Bearer sk-free-bob' -d '{"model":"demo","messages":[{"role":"user","content":"hi"}]}' \
       | sort | uniq -c                                                               # 70 calls, 8 at a time: 60 × 200, 10 × 429
  seq 12 | xargs -P 12 -I{} curl -s -o /dev/null -w '%%{http_code}\n' http://%[11]s/v1/chat/completions \
       -H 'Authorization: Bearer sk-free-carol' -d '{"model":"demo-slow","messages":[{"role":"user","content":"hi"}]}' \
       | sort | uniq -c                                                               # 12 slow calls at once: 10 × 200, 2 × 429 (the cap)

Ctrl-C stops.
`, o.instances, where, o.rpm, o.tpd, o.proRPM, o.proTPD, o.budget, o.proBudget, o.concurrent, o.proConc, first)

	select {
	case <-ctx.Done():
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	shutdownCtx, cancelShutdown := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelShutdown()
	for _, s := range servers {
		_ = s.Shutdown(shutdownCtx)
	}
	return nil
}
