package resilient_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/memory"
	"github.com/rampmeter/ratelimit/store/resilient"
)

// down is a shared store that is unreachable.
type down struct{}

func (down) Take(context.Context, []ratelimit.Request, []ratelimit.Decision) error {
	return errors.New("dial tcp 10.0.0.7:6379: connection refused")
}

func (down) Adjust(context.Context, []ratelimit.Request, []ratelimit.Decision) error {
	return errors.New("dial tcp 10.0.0.7:6379: connection refused")
}

// While the shared store is down, each of 4 instances decides on its own
// with a quarter of every limit: 20 requests per minute become 5.
func ExampleWithFallback() {
	local, err := memory.New()
	if err != nil {
		panic(err)
	}
	store, err := resilient.New(down{},
		resilient.WithTimeout(40*time.Millisecond),
		resilient.WithFallback(local, resilient.EvenShare(4)),
		resilient.WithHooks(resilient.Hooks{
			OnCircuitChange: func(from, to resilient.State) { fmt.Println("circuit:", from, "->", to) },
		}),
	)
	if err != nil {
		panic(err)
	}
	lim, err := ratelimit.New(store, ratelimit.WithLimits(ratelimit.PerMinute(20).Named("requests")))
	if err != nil {
		panic(err)
	}
	admitted := 0
	for range 8 {
		res, err := lim.Take(context.Background(), "alice")
		if err != nil {
			panic(err)
		}
		if res.Allowed {
			admitted++
		}
	}
	fmt.Println("admitted:", admitted, "of 8; fallback decisions:", store.Stats().Fallbacks)
	// Output:
	// circuit: closed -> open
	// admitted: 5 of 8; fallback decisions: 8
}
