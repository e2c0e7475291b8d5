package redisstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/redisstore"
)

// A stacked Take for one API key: 60 requests per minute and 100,000 tokens
// per day, decided in one round trip. A request whose token estimate
// exceeds the daily burst can never pass, and charges nothing to the other
// limit either.
func Example() {
	mr, err := miniredis.Run() // stands in for a real Redis
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	mr.SetTime(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)) // its TIME, which the store reads
	client := redis.NewClient(&redis.Options{
		Addr:                  mr.Addr(),
		ContextTimeoutEnabled: true, // the deadline below ends the call
	})
	defer client.Close()
	store, err := redisstore.New(client, redisstore.WithPrefix("demo:"))
	if err != nil {
		panic(err)
	}

	rpm := ratelimit.PerMinute(60).Named("requests")
	tpd := ratelimit.PerDay(100_000).Named("tokens")
	out := make([]ratelimit.Decision, 2)
	for _, tokens := range []int64{2_000, 150_000} {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		err := store.Take(ctx, []ratelimit.Request{
			{Key: "api-key-1", Limit: &rpm, Cost: 1},
			{Key: "api-key-1", Limit: &tpd, Cost: tokens},
		}, out)
		cancel()
		if err != nil {
			fmt.Println("store failed:", err) // apply the failure mode
			continue
		}
		for _, d := range out {
			fmt.Printf("%s: allowed=%v remaining=%d never=%v\n", d.Limit.Name(), d.Allowed, d.Remaining, d.Never())
		}
	}
	// Output:
	// requests: allowed=true remaining=59 never=false
	// tokens: allowed=true remaining=98000 never=false
	// requests: allowed=true remaining=59 never=false
	// tokens: allowed=false remaining=98000 never=true
}
