package ratelimit_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
)

// testPlans: free 2 requests per minute, pro 5, and pro's "big" model 1
// under its own name (so its own budget); every plan counts tokens.
func testPlans(t testing.TB) *ratelimit.Plans {
	t.Helper()
	tokens := ratelimit.PerDay(100_000).Named("tokens").CostFrom(estimateTokens)
	plans, err := ratelimit.NewPlans(map[string][]ratelimit.Limit{
		"free":    {ratelimit.PerMinute(2).Named("requests"), tokens},
		"pro":     {ratelimit.PerMinute(5).Named("requests"), tokens.WithBurst(1_000_000)},
		"pro/big": {ratelimit.PerMinute(1).Named("requests-big"), tokens.WithBurst(1_000_000)},
	})
	require.NoError(t, err)
	return plans
}

// planOf is the demo's plan lookup: the plan is the API key's second
// dash-separated field ("sk-pro-alice" → "pro"), the model the request's
// X-Model header.
func planOf(plans *ratelimit.Plans) ratelimit.LimitsFunc {
	return func(r *http.Request, key string) (*ratelimit.PolicySet, error) {
		_, rest, _ := strings.Cut(key, "-")
		plan, _, _ := strings.Cut(rest, "-")
		return plans.Lookup(plan, r.Header.Get("X-Model"))
	}
}

func TestNewPlansValidation(t *testing.T) {
	ok := []ratelimit.Limit{ratelimit.PerMinute(1)}
	for name, plans := range map[string]map[string][]ratelimit.Limit{
		"none":            {},
		"bad plan name":   {"a b": ok},
		"empty plan name": {"/m": ok},
		"empty model":     {"pro/": ok},
		"no limits":       {"free": nil},
		"invalid limit":   {"free": {ratelimit.PerMinute(0)}},
		"duplicate names": {"free": {ratelimit.PerMinute(1), ratelimit.PerHour(10)}},
	} {
		_, err := ratelimit.NewPlans(plans)
		assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig, name)
	}
	_, err := ratelimit.NewPlans(map[string][]ratelimit.Limit{"free": {ratelimit.PerMinute(0)}})
	assert.ErrorIs(t, err, ratelimit.ErrInvalidLimit)
	// The package's prefix appears once in the chain.
	assert.EqualError(t, err, `ratelimit: invalid configuration: NewPlans: plan "free": limit 0: invalid limit: quota must be at least 1, got 0`)

	_, err = ratelimit.NewPolicySet()
	assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
}

func TestPlansLookup(t *testing.T) {
	plans := testPlans(t)
	assert.Equal(t, []string{"free", "pro", "pro/big"}, plans.Names())

	free, err := plans.Lookup("free", "")
	require.NoError(t, err)
	assert.Equal(t, int64(2), free.Limits()[0].Quota())
	same, _ := plans.Lookup("free", "big") // free has no "big" entry: the plan's own
	assert.Same(t, free, same)
	big, _ := plans.Lookup("pro", "big")
	assert.Equal(t, "requests-big", big.Limits()[0].Name())

	_, err = plans.Lookup("enterprise", "")
	var se *ratelimit.StatusError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, http.StatusForbidden, se.StatusCode())
	assert.ErrorIs(t, err, ratelimit.ErrUnknownPlan)
	assert.EqualError(t, err, `ratelimit: unknown plan: "enterprise"`)
	// The client is told in plain words, without the plan's name.
	assert.Equal(t, "Your API key's plan does not include this API.", se.ClientMessage())

	only, err := ratelimit.NewPlans(map[string][]ratelimit.Limit{"team/gpt": {ratelimit.PerMinute(1)}})
	require.NoError(t, err)
	_, err = only.Lookup("team", "other")
	assert.EqualError(t, err, `ratelimit: unknown plan: plan "team" has no limits for model "other"`)
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "Your API key's plan does not include this model; use another model.", se.ClientMessage())

	// Resolution allocates nothing.
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := plans.Lookup("pro", "big"); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs)
}

func TestLimitsFuncPlans(t *testing.T) {
	onEachStore(t, func(t *testing.T, f storeFactory) {
		lim, store, _ := newLimiterOn(t, f, ratelimit.WithLimitsFunc(planOf(testPlans(t))))
		var reported []error
		h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			reported = append(reported, ratelimit.ReportUsage(r.Context(), "tokens", 10))
		}))
		send := func(key, model string) *http.Request {
			r := request("POST", "/", key, 100)
			if model != "" {
				r.Header.Set("X-Model", model)
			}
			return r
		}
		codes := func(key, model string, n int) []int {
			var out []int
			for range n {
				out = append(out, serve(h, send(key, model)).Code)
			}
			return out
		}
		assert.Equal(t, []int{200, 200, 429}, codes("sk-free-alice", "", 3))
		assert.Equal(t, []int{200, 200, 200, 200, 200, 429}, codes("sk-pro-bob", "small", 6))
		assert.Equal(t, []int{200, 429}, codes("sk-pro-bob", "big", 2), "the big model's own budget")

		w := serve(h, send("sk-free-carol", ""))
		assert.Equal(t, `"requests";q=2;w=60, "tokens";q=100000;w=86400;rampmeter-unit="tokens"`, w.Header().Get("RateLimit-Policy"))
		w = serve(h, send("sk-pro-carol", "big"))
		// The pro plans' tokens limit has a burst of 1,000,000 above its
		// quota: told in rampmeter-burst.
		assert.Equal(t, `"requests-big";q=1;w=60, "tokens";q=100000;w=86400;rampmeter-unit="tokens";rampmeter-burst=1000000`, w.Header().Get("RateLimit-Policy"))

		// Every admitted request settled against its own plan's limits:
		// 100 reserved, 10 used.
		for _, a := range store.Adjusts() {
			require.Len(t, a.Reqs, 1)
			assert.Equal(t, "tokens", a.Reqs[0].Limit.Name())
			assert.Equal(t, int64(-90), a.Reqs[0].Cost)
		}
		assert.Len(t, store.Adjusts(), 10)
		for _, err := range reported {
			assert.NoError(t, err)
		}

		// Unknown plan: 403, nothing asked of the store.
		takes := store.takes
		w = serve(h, send("sk-enterprise-dan", ""))
		require.Equal(t, http.StatusForbidden, w.Code)
		assert.Equal(t, `{"type":"about:blank","title":"Forbidden","status":403,"detail":"Your API key's plan does not include this API."}`+"\n", w.Body.String())
		assert.Equal(t, takes, store.takes)
		assert.Equal(t, ratelimit.Stats{Allowed: 10, Limited: 3, Settled: 10, PlanErrors: 1}, lim.Stats())
	})
}

func TestLimitsFuncErrors(t *testing.T) {
	for name, fn := range map[string]ratelimit.LimitsFunc{
		"plain error": func(*http.Request, string) (*ratelimit.PolicySet, error) {
			return nil, errors.New("db down: secret details")
		},
		"nil set": func(*http.Request, string) (*ratelimit.PolicySet, error) { return nil, nil },
	} {
		lim, store, _ := newLimiter(t, ratelimit.WithLimitsFunc(fn))
		w := serve(lim.Handler(okHandler), request("GET", "/", "k", -1))
		assert.Equal(t, http.StatusInternalServerError, w.Code, name)
		assert.Equal(t, `{"type":"about:blank","title":"Internal Server Error","status":500,`+
			`"detail":"The server could not determine the rate limits of this request."}`+"\n", w.Body.String(), name)
		assert.Equal(t, 0, store.takes)
		assert.Equal(t, ratelimit.Stats{PlanErrors: 1}, lim.Stats())

		// Without WithLimits there is nothing for Take to charge.
		_, err := lim.Take(t.Context(), "k")
		assert.ErrorIs(t, err, ratelimit.ErrInvalidRequest)
		assert.Empty(t, lim.Limits())
	}

	_, err := ratelimit.New(newStore(t, time.Now), ratelimit.WithLimitsFunc(nil))
	assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig)

	// With both, WithLimits serves Take and the function serves requests.
	set, err := ratelimit.NewPolicySet(ratelimit.PerMinute(1))
	require.NoError(t, err)
	lim, _, _ := newLimiter(t, ratelimit.WithLimits(ratelimit.PerMinute(5)),
		ratelimit.WithLimitsFunc(func(*http.Request, string) (*ratelimit.PolicySet, error) { return set, nil }))
	res, err := lim.Take(t.Context(), "k")
	require.NoError(t, err)
	assert.Equal(t, int64(4), res.Decisions[0].Remaining)
	h := lim.Handler(okHandler)
	assert.Equal(t, http.StatusOK, serve(h, request("GET", "/", "j", -1)).Code)
	assert.Equal(t, http.StatusTooManyRequests, serve(h, request("GET", "/", "j", -1)).Code)
}

// BenchmarkPlansLookup is a LimitsFunc's work per request.
func BenchmarkPlansLookup(b *testing.B) {
	plans := testPlans(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := plans.Lookup("pro", "big"); err != nil {
			b.Fatal(err)
		}
	}
}
