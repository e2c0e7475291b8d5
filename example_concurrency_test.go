package ratelimit_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/memory"
)

// At most 2 requests of one API key in flight at once, beside a rate: the
// third concurrent request is refused with 429 and Retry-After: 1, and
// nothing is charged on the rate for it. The handler's return gives the
// slot back.
func ExampleConcurrent() {
	store, err := memory.New()
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	lim, err := ratelimit.New(store,
		ratelimit.WithKey(ratelimit.KeyByAPIKey()),
		ratelimit.WithLimits(
			ratelimit.PerMinute(60).Named("requests"),
			// A slot whose holder died returns by itself after 5 minutes.
			ratelimit.Concurrent(2, 5*time.Minute).Named("inflight"),
		),
	)
	if err != nil {
		log.Fatal(err)
	}
	running, finish := make(chan struct{}), make(chan struct{})
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			running <- struct{}{}
			<-finish // a long completion, or a stream
		}
	}))
	call := func(path string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", path, nil)
		r.Header.Set("Authorization", "Bearer sk-alice")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	done := make(chan int, 2)
	for range 2 {
		go func() { done <- call("/slow").Code }()
		<-running
	}
	w := call("/fast")
	fmt.Println(w.Code, w.Header().Get("Retry-After"))
	fmt.Println(w.Header().Get("RateLimit-Policy"))
	fmt.Println(w.Header().Get("RateLimit"))
	close(finish)
	fmt.Println(<-done, <-done)
	fmt.Println(call("/fast").Header().Get("RateLimit"))
	// Output:
	// 429 1
	// "requests";q=60;w=60, "inflight";q=2;qu="concurrent-requests"
	// "requests";r=58;t=1, "inflight";r=0;t=1
	// 200 200
	// "requests";r=57;t=1, "inflight";r=1;t=1
}

// A worker holds a slot of a concurrency cap per job, and gives it back
// when the job ends.
func ExampleReservation_Release() {
	store, err := memory.New()
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	// At most 4 jobs at once across every worker sharing the store.
	lim, err := ratelimit.New(store, ratelimit.WithLimits(ratelimit.Concurrent(4, time.Hour)))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	r, err := lim.Reserve(ctx, "batch-jobs")
	if err != nil || !r.OK() {
		log.Fatal("no slot: ", err) // a refused reservation says when to retry: r.Delay()
	}
	fmt.Println(r.Result().Decisions[0].Remaining, "slots left during the job")
	// ... the job ...
	if err := r.Release(ctx); err != nil {
		log.Print(err) // the slot then returns after the hour
	}
	res, _ := lim.Take(ctx, "batch-jobs", 0) // a peek
	fmt.Println(res.Decisions[0].Remaining, "slots left after it")
	// Output:
	// 3 slots left during the job
	// 4 slots left after it
}
