package ratelimit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/memory"
)

// estimateChatTokens is a CostFunc for an OpenAI-style chat request: about
// one token per four characters of prompt, plus the completion cap. It
// puts the body back for the handler.
func estimateChatTokens(r *http.Request) (int64, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return 0, &ratelimit.StatusError{Code: http.StatusBadRequest, Err: err}
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	var req struct {
		Prompt    string `json:"prompt"`
		MaxTokens int64  `json:"max_tokens"`
	}
	if err := json.Unmarshal(body, &req); err != nil || req.MaxTokens < 0 {
		return 0, &ratelimit.StatusError{Code: http.StatusBadRequest, Err: fmt.Errorf("invalid request body")}
	}
	return int64(len(req.Prompt)+3)/4 + req.MaxTokens, nil
}

func chatRequest(apiKey, body string) *http.Request {
	r := httptest.NewRequest("POST", "/v1/completions", strings.NewReader(body))
	r.Header.Set("Authorization", "Bearer "+apiKey)
	return r
}

func ExampleNew() {
	store, err := memory.New()
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	// 60 requests per minute and 100,000 tokens per day, per API key,
	// charged together or not at all.
	lim, err := ratelimit.New(store,
		ratelimit.WithKey(ratelimit.KeyByAPIKey()),
		ratelimit.WithLimits(
			ratelimit.PerMinute(60).Named("requests"),
			ratelimit.PerDay(100_000).Named("tokens").CostFrom(estimateChatTokens),
		),
		ratelimit.WithHeaders(ratelimit.HeadersIETF),
		ratelimit.WithFailureMode(ratelimit.FailOpen),
	)
	if err != nil {
		log.Fatal(err)
	}

	r := chi.NewRouter()
	r.Use(lim.Handler)
	r.Post("/v1/completions", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "a completion")
	})

	// 12 prompt characters → 3 tokens, plus up to 497 completion tokens:
	// 500 reserved.
	w := httptest.NewRecorder()
	r.ServeHTTP(w, chatRequest("sk-demo", `{"prompt":"Hello, world","max_tokens":497}`))
	fmt.Println(w.Code)
	fmt.Println("RateLimit-Policy:", w.Header().Get("RateLimit-Policy"))
	fmt.Println("RateLimit:", w.Header().Get("RateLimit"))

	// A request that can never fit the daily budget is refused for good.
	w = httptest.NewRecorder()
	r.ServeHTTP(w, chatRequest("sk-demo", `{"prompt":"","max_tokens":150000}`))
	fmt.Println(w.Code, w.Header().Get("Content-Type"))
	fmt.Print(w.Body.String())

	// Output:
	// 200
	// RateLimit-Policy: "requests";q=60;w=60, "tokens";q=100000;w=86400;rampmeter-unit="tokens"
	// RateLimit: "requests";r=59;t=1, "tokens";r=99500;t=1
	// 413 application/problem+json
	// {"type":"https://pkg.go.dev/github.com/rampmeter/ratelimit#ProblemRequestTooLarge","title":"Request Too Large","status":413,"detail":"request too large: estimated 150000 tokens exceeds the \"tokens\" limit's capacity of 100000; do not retry it unchanged","violated-policies":["tokens"]}
}

func ExampleReportUsage() {
	store, err := memory.New()
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	lim, err := ratelimit.New(store, ratelimit.WithLimits(
		ratelimit.PerMinute(60).Named("requests"),
		ratelimit.PerDay(100_000).Named("tokens").CostFrom(estimateChatTokens),
	))
	if err != nil {
		log.Fatal(err)
	}

	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// ... call the model; its answer reports the real usage:
		usage := struct{ TotalTokens int64 }{TotalTokens: 120}
		if err := ratelimit.ReportUsage(r.Context(), "tokens", usage.TotalTokens); err != nil {
			log.Print(err)
		}
		fmt.Fprintln(w, "a completion")
	}))

	// 500 tokens reserved; the handler reports 120, so 380 are refunded
	// when it returns.
	w := httptest.NewRecorder()
	h.ServeHTTP(w, chatRequest("sk-demo", `{"prompt":"Hello, world","max_tokens":497}`))
	fmt.Println("reserved:", w.Header().Get("RateLimit"))

	// The next request (4 tokens: 1 for "Hi", 3 max) sees 120 + 4 spent.
	w = httptest.NewRecorder()
	h.ServeHTTP(w, chatRequest("sk-demo", `{"prompt":"Hi","max_tokens":3}`))
	fmt.Println("settled: ", w.Header().Get("RateLimit"))
	fmt.Printf("%+v\n", lim.Stats())

	// Output:
	// reserved: "requests";r=59;t=1, "tokens";r=99500;t=1
	// settled:  "requests";r=58;t=1, "tokens";r=99876;t=1
	// {Allowed:2 Limited:0 TooLarge:0 Bypassed:0 StoreErrors:0 KeyErrors:0 CostErrors:0 Settled:2 ShadowLimited:0 Released:0 PlanErrors:0}
}

func ExampleLimiter_Take() {
	store, err := memory.New()
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	// Outbound calls to a vendor that allows 2 requests per second.
	lim, err := ratelimit.New(store, ratelimit.WithLimits(ratelimit.PerSecond(2)))
	if err != nil {
		log.Fatal(err)
	}
	for range 3 {
		res, err := lim.Take(context.Background(), "vendor-api")
		if err != nil {
			log.Print(err) // the store failed; res says what the failure mode decided
		}
		fmt.Println(res.Allowed, res.RetryAfter > 0)
	}
	// Output:
	// true false
	// true false
	// false true
}

func ExampleCompose() {
	// One budget per API key and route: "GET /users/{id}" for every id.
	// Each part carries its kind ("route "; an API key is bare).
	key := ratelimit.Compose(ratelimit.KeyByAPIKey(), ratelimit.KeyByRoute())

	r := chi.NewRouter()
	r.Use(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			k, err := key(r)
			fmt.Printf("%q %v\n", k, err)
			next.ServeHTTP(w, r)
		})
	})
	r.Get("/users/{id}", func(http.ResponseWriter, *http.Request) {})

	req := httptest.NewRequest("GET", "/users/42", nil)
	req.Header.Set("X-API-Key", "sk-1")
	r.ServeHTTP(httptest.NewRecorder(), req)
	// Output:
	// "compose 4:sk-1|21:route GET /users/{id}" <nil>
}

func ExampleLimiter_Wait() {
	store, err := memory.New()
	if err != nil {
		log.Fatal(err)
	}
	// A vendor allows 2 calls per second: send them evenly, one every
	// 500 ms, never two at once.
	lim, err := ratelimit.New(store, ratelimit.WithLimits(
		ratelimit.PerSecond(2).WithAlgorithm(ratelimit.LeakyBucket)))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	// The first call on an idle key goes at once.
	fmt.Println(lim.Wait(ctx, "vendor"))

	// The next slot is 500 ms away. A context that ends sooner fails at
	// once instead of waiting in vain, and its slot is given back.
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	err = lim.Wait(short, "vendor")
	fmt.Println(errors.Is(err, context.DeadlineExceeded))

	// A cost above the burst never fits: Wait says so instead of waiting
	// forever.
	err = lim.Wait(ctx, "vendor", 3)
	fmt.Println(errors.Is(err, ratelimit.ErrNeverFits))
	fmt.Println(err)
	// Output:
	// <nil>
	// true
	// true
	// ratelimit: cost can never fit: a cost of 3 requests exceeds the "requests" limit's burst of 2
}
