package prometheus_test

import (
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/hooks"
	rmprom "github.com/rampmeter/ratelimit/metrics/prometheus"
	"github.com/rampmeter/ratelimit/store/memory"
)

// A Limiter whose decisions, bypasses, store errors and store latency go to
// a Prometheus registry served on /metrics, and whose store failures and
// bypasses are logged. The Hooks measure store latency themselves: the
// store needs no InstrumentStore wrapper.
func Example() {
	reg := prometheus.NewRegistry()
	m, err := rmprom.New(reg)
	if err != nil {
		log.Fatal(err)
	}
	store, _ := memory.New()
	lim, err := ratelimit.New(store,
		ratelimit.WithLimits(ratelimit.PerMinute(1).Named("requests")),
		ratelimit.WithHooks(hooks.Join(m.Hooks(), hooks.Slog(slog.Default()))),
	)
	if err != nil {
		log.Fatal(err)
	}
	api := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for range 2 {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-API-Key", "k1")
		api.ServeHTTP(httptest.NewRecorder(), r)
	}
	m.SetCircuitState("redis", false)

	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if strings.HasPrefix(line, "rampmeter_requests_total") || strings.HasPrefix(line, "rampmeter_circuit_open") {
			fmt.Println(line)
		}
	}
	// Output:
	// rampmeter_circuit_open{circuit="redis"} 0
	// rampmeter_requests_total{outcome="allowed"} 1
	// rampmeter_requests_total{outcome="bypassed"} 0
	// rampmeter_requests_total{outcome="limited"} 1
	// rampmeter_requests_total{outcome="too_large"} 0
}
