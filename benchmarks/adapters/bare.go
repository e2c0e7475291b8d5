package adapters

import (
	"net/http"

	"github.com/rampmeter/ratelimit/benchmarks/decider"
)

// The baseline: no middleware at all.
func init() {
	decider.RegisterMiddleware(decider.MiddlewareSpec{
		Name: "bare", Reference: true,
		Note: "no middleware (baseline)",
		New: func(decider.Config) (func(http.Handler) http.Handler, func(), error) {
			return func(h http.Handler) http.Handler { return h }, nil, nil
		},
	})
}
