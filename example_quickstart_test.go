package ratelimit_test

import (
	"fmt"
	"log"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/memory"
)

// Per client IP, 10 requests per minute, on a chi router with the memory
// store: the README's first program (TestREADMEPrograms keeps the two
// identical). Instead of serving on :8080 it sends the router eleven
// requests from one address (sendEleven); the README's program serves.
func Example_quickStart() {
	store, err := memory.New()
	if err != nil {
		log.Fatal(err)
	}
	lim, err := ratelimit.New(store,
		ratelimit.WithKey(ratelimit.KeyByIP()), // the default; KeyByAPIKey() for API keys
		ratelimit.WithLimits(ratelimit.PerMinute(10)),
	)
	if err != nil {
		log.Fatal(err) // an invalid limit fails here, not on a request
	}
	r := chi.NewRouter()
	r.Use(lim.Handler)
	r.Get("/", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })
	sendEleven(r) // README: log.Fatal(http.ListenAndServe(":8080", r))
	// Output:
	// requests 1-10: 200 hello
	// request 11: 429 Retry-After: 6
	// {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429,"detail":"quota exceeded: the \"requests\" limit allows 10 requests per minute; retry after 6 seconds","violated-policies":["requests"],"retry-after-seconds":6}
}
