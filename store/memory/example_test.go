package memory_test

import (
	"context"
	"fmt"
	"time"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/memory"
)

// A stacked Take decides a request against two limits at once: 60 requests
// per minute and 100,000 AI tokens per day. Either both are charged or
// neither is.
func ExampleNew() {
	// A stopped clock makes the output exact; omit WithClock in production.
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	store, err := memory.New(memory.WithClock(func() time.Time { return now }))
	if err != nil {
		panic(err)
	}
	defer store.Close()

	requests := ratelimit.PerMinute(60).Named("requests")
	tokens := ratelimit.PerDay(100_000).Named("tokens").WithUnit(ratelimit.Tokens)
	decide := func(estimate int64) {
		reqs := []ratelimit.Request{
			{Key: "alice", Limit: &requests, Cost: 1},
			{Key: "alice", Limit: &tokens, Cost: estimate},
		}
		out := make([]ratelimit.Decision, len(reqs))
		if err := store.Take(context.Background(), reqs, out); err != nil {
			panic(err)
		}
		admitted := true
		for _, d := range out {
			admitted = admitted && d.Allowed
		}
		if admitted {
			fmt.Println("admitted")
		} else {
			fmt.Println("refused, nothing charged")
		}
		for _, d := range out {
			switch {
			case d.Allowed:
				fmt.Printf("  %s: %d left, full again in %v\n", d.Limit.Name(), d.Remaining, d.Reset)
			case d.Never():
				fmt.Printf("  %s: cost above the burst, never fits\n", d.Limit.Name())
			default:
				fmt.Printf("  %s: %d left, retry in %v\n", d.Limit.Name(), d.Remaining, d.RetryAfter)
			}
		}
	}

	// One token refills every 86400s/100000 = 864ms.
	decide(99_500) // 500 tokens left; 99,500 × 864ms to refill
	// 1,000 tokens exceed the 500 left by 500 (500 × 864ms = 7m12s). The
	// request limit had room but is not charged: still 59 left.
	decide(1_000)
	decide(100_001) // more than the whole day's quota
	// Output:
	// admitted
	//   requests: 59 left, full again in 1s
	//   tokens: 500 left, full again in 23h52m48s
	// refused, nothing charged
	//   requests: 59 left, full again in 1s
	//   tokens: 500 left, retry in 7m12s
	// refused, nothing charged
	//   requests: 59 left, full again in 1s
	//   tokens: cost above the burst, never fits
}
