package llm_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"
	_ "time/tzdata" // the budget's zone loads on any machine

	"github.com/go-chi/chi/v5"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/llm"
	"github.com/rampmeter/ratelimit/store/memory"
)

// Example_gateway is the program proposed for the README's "AI APIs"
// section: per-key limits on requests in flight, requests, input tokens and
// output tokens per minute, and a monthly budget in micro-dollars that resets at midnight on
// the 1st in New York, each reserved on its own estimate and settled to
// its own share of the usage; a spent budget is a 402 with a Retry-After
// until the next month. The clock is fixed at Jan 31, 2026, 12:00 EST, 12
// hours before February.
func Example_gateway() {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		log.Fatal(err)
	}
	noon := time.Date(2026, 1, 31, 12, 0, 0, 0, ny)                              // not in the README
	store, err := memory.New(memory.WithClock(func() time.Time { return noon })) // README: store, err := memory.New() // store/redisstore for many instances
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	// GPT-4.1's list prices in micro-dollars per million tokens: $2 in,
	// $0.50 cached, $8 out.
	prices, err := llm.NewPrices(map[string]llm.Price{"gpt-4.1": {Input: 2_000_000, CacheRead: 500_000, Output: 8_000_000}})
	if err != nil {
		log.Fatal(err)
	}
	plan := func(inFlight, rpm, inputTPM, outputTPM, microUSD int64) []ratelimit.Limit {
		return []ratelimit.Limit{
			// A slot per call while it runs (a stream included), back when
			// the handler returns; one held by a dead instance returns
			// after 5 minutes.
			ratelimit.Concurrent(inFlight, 5*time.Minute),
			ratelimit.PerMinute(rpm).Named("requests"),
			// Cached prompt reads do not count toward the input limit.
			ratelimit.PerMinute(inputTPM).Named("input-tokens").
				CostFrom(llm.EstimateOpenAITokens(llm.Counting(llm.Input | llm.CacheWrite))).WithUnit(llm.InputTokens),
			ratelimit.PerMinute(outputTPM).Named("output-tokens").
				CostFrom(llm.EstimateOpenAITokens(llm.Counting(llm.Output))).WithUnit(llm.OutputTokens),
			ratelimit.PerCalendarMonth(microUSD, ny).Named("budget").
				CostFrom(llm.EstimateOpenAICost(prices)).WithUnit("usd-micros").
				WithRefusalStatus(http.StatusPaymentRequired),
		}
	}
	plans, err := ratelimit.NewPlans(map[string][]ratelimit.Limit{
		"free": plan(2, 60, 30_000, 10_000, 50_000),        // $0.05 a month
		"pro":  plan(20, 600, 300_000, 10_000, 50_000_000), // $50 a month
	})
	if err != nil {
		log.Fatal(err) // every plan's limits are validated here, once
	}
	lim, err := ratelimit.New(store,
		ratelimit.WithKey(ratelimit.KeyByAPIKey()),
		ratelimit.WithLimitsFunc(func(r *http.Request, key string) (*ratelimit.PolicySet, error) {
			plan := "free" // look the key's plan up in your account table
			if strings.HasPrefix(key, "sk-pro-") {
				plan = "pro"
			}
			return plans.Lookup(plan, "")
		}),
		ratelimit.WithHeaders(ratelimit.HeadersIETF, llm.OpenAIHeaders()),
		ratelimit.WithErrorFormat(llm.OpenAIErrors()),
	)
	if err != nil {
		log.Fatal(err)
	}

	r := chi.NewRouter()
	r.Use(lim.Handler)
	r.Post("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		body, _ := llm.ReadOpenAIBody(r, 0) // parsed once already, by the estimators
		// A real handler sends body.Raw to the model and parses the usage
		// it returns (llm.ParseOpenAIUsage, or llm.CopyStream for a
		// stream). This fake model writes every token it may.
		u := llm.Usage{Input: int64(len(body.Texts[0])+3) / 4, Output: body.MaxOutputTokens}
		cost, _ := prices.Cost(body.Model, u)
		for _, report := range []struct {
			limit string
			n     int64
		}{{"input-tokens", u.Count(llm.Input | llm.CacheWrite)}, {"output-tokens", u.Count(llm.Output)}, {"budget", cost}} {
			if err := ratelimit.ReportUsage(r.Context(), report.limit, report.n); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		fmt.Fprintf(w, `{"usage":{"prompt_tokens":%d,"completion_tokens":%d}}`, u.Input, u.Output)
	})

	call := func(key string, promptBytes, maxTokens int) {
		body := fmt.Sprintf(`{"model":"gpt-4.1","messages":[{"role":"user","content":%q}],"max_tokens":%d}`,
			strings.Repeat("x", promptBytes), maxTokens)
		req := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		fmt.Println(w.Code, w.Header().Get("RateLimit"))
		if w.Code != http.StatusOK {
			fmt.Printf("Retry-After: %q %s", w.Header().Get("Retry-After"), w.Body.String())
		}
	}
	// 1000 prompt tokens and 2000 output tokens: 1000 × $2/M + 2000 ×
	// $8/M = $0.018, 18,000 micro-dollars, of the free plan's 50,000.
	call("sk-free-alice", 4000, 2000)
	call("sk-free-alice", 4000, 2000)
	call("sk-free-alice", 4000, 2000) // 18,000 > 14,000 left: 402 until February
	call("sk-pro-bob", 4000, 9000)    // 9000 of the 10,000 output tokens a minute
	call("sk-pro-bob", 40, 2000)      // 2000 > 1000 left: 429, for 6 seconds
	fmt.Printf("%+v\n", lim.Stats())

	// Output:
	// 200 "concurrent-requests";r=1;t=1, "requests";r=59;t=1, "input-tokens";r=29000;t=1, "output-tokens";r=8000;t=1, "budget";r=32000;t=43200
	// 200 "concurrent-requests";r=1;t=1, "requests";r=58;t=1, "input-tokens";r=28000;t=1, "output-tokens";r=6000;t=1, "budget";r=14000;t=43200
	// 402 "concurrent-requests";r=2;t=0, "requests";r=58;t=1, "input-tokens";r=28000;t=1, "output-tokens";r=6000;t=1, "budget";r=14000;t=43200
	// Retry-After: "43200" {"error":{"message":"You exceeded your quota for \"budget\" on usd-micros per calendar month in America/New_York: Limit 50000, Used 36000, Requested 18000. The quota resets at 2026-02-01T00:00:00-05:00. Please try again in 12h0m0s.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}
	// 200 "concurrent-requests";r=19;t=1, "requests";r=599;t=1, "input-tokens";r=299000;t=1, "output-tokens";r=1000;t=1, "budget";r=49926000;t=43200
	// 429 "concurrent-requests";r=20;t=0, "requests";r=599;t=1, "input-tokens";r=299000;t=1, "output-tokens";r=1000;t=6, "budget";r=49926000;t=43200
	// Retry-After: "6" {"error":{"message":"Rate limit reached for \"output-tokens\" on output-tokens per min: Limit 10000, Used 9000, Requested 2000. Please try again in 6s.","type":"output-tokens","param":null,"code":"rate_limit_exceeded"}}
	// {Allowed:3 Limited:2 TooLarge:0 Bypassed:0 StoreErrors:0 KeyErrors:0 CostErrors:0 Settled:3 ShadowLimited:0 Released:0 PlanErrors:0}
}
