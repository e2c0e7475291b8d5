package llm_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/llm"
	"github.com/rampmeter/ratelimit/store/memory"
)

// Example is the README's "AI APIs" example (TestREADMEPrograms, in the
// root package, keeps the two identical): plans, token estimates from the request body,
// reserve-then-settle, OpenAI-compatible headers and errors, 403 for a
// spent daily quota.
func Example() {
	store, err := memory.New() // store/redisstore for many instances
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	// Prompt tokens from the body (bytes/4) plus the largest declared
	// output cap (max_tokens, max_completion_tokens, max_output_tokens).
	estimate := llm.EstimateOpenAITokens(llm.WithDefaultOutputTokens(256))
	plans, err := ratelimit.NewPlans(map[string][]ratelimit.Limit{
		"free": {ratelimit.PerMinute(60).Named("requests"), ratelimit.PerDay(100_000).Named("tokens").CostFrom(estimate)},
		"pro":  {ratelimit.PerMinute(600).Named("requests"), ratelimit.PerDay(2_000_000).Named("tokens").CostFrom(estimate)},
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
			return plans.Lookup(plan, "") // or the model: llm.ReadOpenAIBody(r, 0)
		}),
		ratelimit.WithReserveClamp(0.5), // one huge max_tokens cannot lock a key out
		ratelimit.WithQuotaExhaustedStatus(24*time.Hour, http.StatusForbidden),
		ratelimit.WithHeaders(ratelimit.HeadersIETF, llm.OpenAIHeaders()),
		ratelimit.WithErrorFormat(llm.OpenAIErrors()),
	)
	if err != nil {
		log.Fatal(err)
	}

	r := chi.NewRouter()
	r.Use(lim.Handler)
	r.Post("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		body, _ := llm.ReadOpenAIBody(r, 0) // parsed once already, by the estimator
		// A real handler sends body.Raw to the model (through
		// IncludeStreamUsage when streaming) and reports the usage it
		// returns. This fake model uses every token it may.
		used := int64(len(body.Texts[0])+3)/4 + body.MaxOutputTokens
		if err := ratelimit.ReportUsage(r.Context(), "tokens", used); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(w, `{"usage":{"total_tokens":%d}}`, used)
	})

	call := func(key, content string, maxTokens int) {
		body := fmt.Sprintf(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":%q}],"max_tokens":%d}`, content, maxTokens)
		req := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		fmt.Println(w.Code, "remaining-tokens:", w.Header().Get("x-ratelimit-remaining-tokens"))
		if w.Code != http.StatusOK {
			fmt.Printf("Retry-After: %q %s", w.Header().Get("Retry-After"), w.Body.String())
		}
	}
	call("sk-free-alice", "Hello, world!", 100) // 4 + 100 tokens reserved, then used
	call("sk-free-bob", "Hi", 99_000)           // 99,001 estimated, 50,000 reserved (clamp), 99,001 used
	call("sk-free-bob", "Hi", 1000)             // 1,001 > 999 left of the daily quota: 403
	call("sk-free-alice", "Hello, world!", 150_000)
	call("sk-pro-carol", "Hello, world!", 150_000)
	fmt.Printf("%+v\n", lim.Stats())

	// Output:
	// 200 remaining-tokens: 99896
	// 200 remaining-tokens: 50000
	// 403 remaining-tokens: 999
	// Retry-After: "2" {"error":{"message":"You exceeded your quota for \"tokens\" on tokens per day (TPD): Limit 100000, Used 99001, Requested 1001. Please try again in 2s.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}
	// 413 remaining-tokens: 99896
	// Retry-After: "" {"error":{"message":"Request too large for \"tokens\" on tokens per day (TPD): Limit 100000, Requested 150004. The input or output tokens must be reduced in order to run successfully.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}
	// 200 remaining-tokens: 1849996
	// {Allowed:3 Limited:1 TooLarge:1 Bypassed:0 StoreErrors:0 KeyErrors:0 CostErrors:0 Settled:1 ShadowLimited:0 Released:0 PlanErrors:0}
}
