package ratelimit_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/redisstore"
)

// The quick start's limiter shared by every instance through Redis, with
// the start-up check: the README's second program (TestREADMEPrograms
// keeps the two identical). An embedded miniredis stands in for the
// server at 127.0.0.1:6379, and instead of serving it sends the router
// eleven requests from one address (sendEleven).
func Example_redis() {
	mr := startMiniredis() // not in the README: a Redis server for the example
	defer mr.Close()       // not in the README
	rdb := redis.NewClient(&redis.Options{
		Addr:                  mr.Addr(), // README: Addr: "127.0.0.1:6379",
		ContextTimeoutEnabled: true,      // required: the limiter's deadline ends a call to a hung Redis
	})
	defer rdb.Close()
	store, err := redisstore.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := store.Ping(ctx); err != nil {
		log.Fatal(err) // the store cannot decide: better not to serve unlimited
	}
	lim, err := ratelimit.New(store, ratelimit.WithLimits(ratelimit.PerMinute(10)))
	if err != nil {
		log.Fatal(err)
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
