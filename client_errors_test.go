package ratelimit_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/llm"
)

// TestClientErrorMessages: what a client is told when the limiter cannot
// decide its request — no usable key, an unknown plan, a malformed body —
// says in plain words what to do, and is the same sentence in the RFC 9457
// problem details and in the OpenAI error shape; no Go error chain
// ("ratelimit: no rate-limit key: …") reaches the client. The developer's
// error (the key function's, as a KeyErrorHandler gets it) names the
// package once.
func TestClientErrorMessages(t *testing.T) {
	const apiKeyHint = `send your API key as "Authorization: Bearer <key>" or "X-API-Key: <key>".`
	plans, err := ratelimit.NewPlans(map[string][]ratelimit.Limit{
		"free":     {ratelimit.PerMinute(60)},
		"pro/gpt4": {ratelimit.PerMinute(60)},
	})
	require.NoError(t, err)
	byPlan := ratelimit.WithLimitsFunc(func(r *http.Request, key string) (*ratelimit.PolicySet, error) {
		plan, model, _ := strings.Cut(key, ":")
		return plans.Lookup(plan, model)
	})
	tokens := ratelimit.WithLimits(ratelimit.PerDay(100_000).Named("tokens").CostFrom(llm.EstimateOpenAITokens(llm.WithMaxBodyBytes(64))))
	perMinute := ratelimit.WithLimits(ratelimit.PerMinute(60))
	apiKey := ratelimit.KeyByAPIKey()

	tests := []struct {
		name   string
		key    ratelimit.KeyFunc
		limits ratelimit.Option
		header http.Header
		path   string
		body   string
		status int
		msg    string // the client's message, in both formats
		devErr string // the key function's error; "" when the key function succeeds
	}{
		{"no API key", apiKey, perMinute, nil, "/x", "",
			401, "This request has no API key: " + apiKeyHint,
			`ratelimit: no rate-limit key: send an API key as "Authorization: Bearer <key>" or "X-API-Key: <key>"`},
		{"empty bearer token", apiKey, perMinute, http.Header{"Authorization": {"Bearer  "}}, "/x", "",
			401, "The bearer token is empty: " + apiKeyHint, "ratelimit: no rate-limit key: empty bearer token"},
		{"Basic credentials", apiKey, perMinute, http.Header{"Authorization": {"Basic YTpi"}}, "/x", "",
			401, "The Authorization header is not a Bearer token: " + apiKeyHint,
			"ratelimit: no rate-limit key: Authorization header is not a Bearer token"},
		{"two Authorization headers", apiKey, perMinute, http.Header{"Authorization": {"Bearer a", "Bearer b"}}, "/x", "",
			401, "The request has more than one Authorization header: send one.",
			"ratelimit: no rate-limit key: more than one Authorization header"},
		{"malformed X-API-Key", apiKey, perMinute, http.Header{"X-Api-Key": {"a\x01b"}}, "/x", "",
			401, "The X-API-Key header contains spaces or control characters: " + apiKeyHint,
			"ratelimit: no rate-limit key: malformed X-API-Key header (spaces or control characters)"},
		{"missing header", ratelimit.KeyByHeader("x-tenant"), perMinute, nil, "/x", "",
			400, "The request has no X-Tenant header: send one.", "ratelimit: no rate-limit key: missing X-Tenant header"},
		{"no route", ratelimit.KeyByRoute(), perMinute, nil, "/nowhere", "",
			404, "No route matches this POST request.", "ratelimit: no rate-limit key: no route pattern: POST matches no route"},
		{"unknown plan", apiKey, byPlan, http.Header{"X-Api-Key": {"gold"}}, "/x", "",
			403, "Your API key's plan does not include this API.", ""},
		{"model outside the plan", apiKey, byPlan, http.Header{"X-Api-Key": {"pro:gpt5"}}, "/x", "",
			403, "Your API key's plan does not include this model; use another model.", ""},
		{"malformed body", apiKey, tokens, http.Header{"X-Api-Key": {"k"}}, "/x", `{"max_tokens":"lots"}`,
			400, `The request body is invalid: "max_tokens" must be an integer, not a JSON string.`, ""},
		{"body too large", apiKey, tokens, http.Header{"X-Api-Key": {"k"}}, "/x", strings.Repeat(" ", 65),
			413, "The request body is larger than 64 bytes; send a smaller one.", ""},
	}
	for _, tt := range tests {
		for _, format := range []string{"problem", "openai"} {
			t.Run(tt.name+"/"+format, func(t *testing.T) {
				opts := []ratelimit.Option{ratelimit.WithKey(tt.key), tt.limits}
				if format == "openai" {
					opts = append(opts, ratelimit.WithErrorFormat(llm.OpenAIErrors()))
				}
				lim, err := ratelimit.New(newStore(t, newClock().Now), opts...)
				require.NoError(t, err)
				r := chi.NewRouter()
				r.Use(lim.Handler)
				r.Post("/x", func(http.ResponseWriter, *http.Request) {})
				req := httptest.NewRequest("POST", tt.path, strings.NewReader(tt.body))
				for k, vs := range tt.header {
					req.Header[k] = vs
				}
				w := serve(r, req)
				require.Equal(t, tt.status, w.Code)

				var body struct {
					Detail string
					Error  struct{ Message, Code string }
				}
				require.NoError(t, json.Unmarshal(w.Body.Bytes(), &body))
				got := body.Detail
				if format == "openai" {
					got = body.Error.Message
				}
				assert.Equal(t, tt.msg, got)
				assert.NotContains(t, w.Body.String(), "ratelimit:")
				assert.NotContains(t, w.Body.String(), "llm:")
				if tt.status == http.StatusUnauthorized {
					assert.Equal(t, "Bearer", w.Header().Get("WWW-Authenticate"))
				}
			})
		}
		if tt.devErr != "" {
			req := httptest.NewRequest("POST", tt.path, nil)
			for k, vs := range tt.header {
				req.Header[k] = vs
			}
			// Inside a chi router, for KeyByRoute; the middleware runs for
			// unrouted paths too.
			rt := chi.NewRouter()
			rt.Use(func(http.Handler) http.Handler {
				return http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
					_, err := tt.key(r)
					assert.EqualError(t, err, tt.devErr, tt.name)
					assert.ErrorIs(t, err, ratelimit.ErrMissingKey, tt.name)
				})
			})
			rt.Post("/x", func(http.ResponseWriter, *http.Request) {})
			serve(rt, req)
		}
	}
}

// TestUnauthorizedFromLimitsFunc: a WithLimitsFunc function that answers
// 401 (an API key of no known plan is no valid key) gets the
// WWW-Authenticate field RFC 9110 §15.5.2 requires, in both formats, and
// in the OpenAI shape the code "invalid_api_key".
func TestUnauthorizedFromLimitsFunc(t *testing.T) {
	invalidKey := ratelimit.WithLimitsFunc(func(*http.Request, string) (*ratelimit.PolicySet, error) {
		return nil, &ratelimit.StatusError{Code: http.StatusUnauthorized, Message: "Invalid API key.", Err: errors.New("no such account")}
	})
	for format, want := range map[string]string{
		"problem": `{"type":"about:blank","title":"Unauthorized","status":401,"detail":"Invalid API key."}` + "\n",
		"openai":  `{"error":{"message":"Invalid API key.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}` + "\n",
	} {
		opts := []ratelimit.Option{invalidKey}
		if format == "openai" {
			opts = append(opts, ratelimit.WithErrorFormat(llm.OpenAIErrors()))
		}
		lim, _, _ := newLimiter(t, opts...)
		w := serve(lim.Handler(okHandler), request("POST", "/", "sk-unknown", -1))
		assert.Equal(t, http.StatusUnauthorized, w.Code, format)
		assert.Equal(t, "Bearer", w.Header().Get("WWW-Authenticate"), format)
		assert.Equal(t, want, w.Body.String(), format)
	}
}

// TestErrorChainsNamePackageOnce: an error of this package that wraps
// another of its errors says "ratelimit:" once, at the start, and still
// wraps both sentinels.
func TestErrorChainsNamePackageOnce(t *testing.T) {
	store := newStore(t, newClock().Now)
	_, errLimit := ratelimit.New(store, ratelimit.WithLimits(ratelimit.PerMinute(0)))
	_, errGCRA := ratelimit.NewPolicySet(ratelimit.Every(7, 3e9).WithAlgorithm(ratelimit.GCRA))
	_, errPlans := ratelimit.NewPlans(map[string][]ratelimit.Limit{"free": {ratelimit.PerMinute(0)}})
	_, errKey := ratelimit.New(store, ratelimit.WithLimits(ratelimit.PerMinute(1)), ratelimit.WithKey(ratelimit.KeyConst("")))
	bad := ratelimit.PerMinute(0)
	errRequest := ratelimit.CheckRequests([]ratelimit.Request{{Key: "k", Limit: &bad}}, make([]ratelimit.Decision, 1), true)
	_, errRoute := ratelimit.KeyByRoute()(httptest.NewRequest("GET", "/", nil))
	for _, tt := range []struct {
		err       error
		want      string
		sentinels []error
	}{
		{errLimit, "ratelimit: invalid configuration: limit 0: invalid limit: quota must be at least 1, got 0",
			[]error{ratelimit.ErrInvalidConfig, ratelimit.ErrInvalidLimit}},
		{errGCRA, "ratelimit: invalid configuration: limit 0: invalid limit: requests: GCRA needs an emission interval of whole microseconds, " +
			"but 3s/7 is not; use TokenBucket, which admits exactly the same", []error{ratelimit.ErrInvalidConfig, ratelimit.ErrInvalidLimit}},
		{errPlans, `ratelimit: invalid configuration: NewPlans: plan "free": limit 0: invalid limit: quota must be at least 1, got 0`,
			[]error{ratelimit.ErrInvalidConfig, ratelimit.ErrInvalidLimit}},
		{errKey, `ratelimit: invalid configuration: WithKey: misconfigured key function: KeyConst(""): empty key`,
			[]error{ratelimit.ErrInvalidConfig}},
		{errRequest, "ratelimit: invalid store request: request 0: invalid limit: quota must be at least 1, got 0",
			[]error{ratelimit.ErrInvalidRequest, ratelimit.ErrInvalidLimit}},
		{errRoute, "ratelimit: no rate-limit key: no route pattern: KeyByRoute needs a chi router around the limiter, " +
			"or a Go 1.22+ ServeMux handler inside it (r.Pattern is empty)", []error{ratelimit.ErrMissingKey, ratelimit.ErrNoRoute}},
	} {
		require.Error(t, tt.err)
		assert.Equal(t, tt.want, tt.err.Error())
		assert.Equal(t, 1, strings.Count(tt.err.Error(), "ratelimit:"), tt.want)
		for _, s := range tt.sentinels {
			assert.ErrorIs(t, tt.err, s, tt.want)
		}
	}
}

// TestNewRefusesMisconfiguredKeyFunctions: a built-in key function made
// with invalid arguments fails New, also inside Compose, instead of
// answering every request with 500.
func TestNewRefusesMisconfiguredKeyFunctions(t *testing.T) {
	for _, tt := range []struct {
		key  ratelimit.KeyFunc
		want string
	}{
		{ratelimit.KeyConst(""), `KeyConst(""): empty key`},
		{ratelimit.KeyByHeader("bad header"), `KeyByHeader("bad header"): invalid header name`},
		{ratelimit.KeyByIP(ratelimit.IPv6Prefix(0)), "KeyByIP: IPv6Prefix(0): bits must be 1 to 128"},
		{ratelimit.KeyByIP(ratelimit.IPv4Prefix(33), ratelimit.IPv6Prefix(129)),
			"KeyByIP: IPv4Prefix(33): bits must be 1 to 32 IPv6Prefix(129): bits must be 1 to 128"},
		{ratelimit.Compose(), "Compose(): no key functions"},
		{ratelimit.Compose(ratelimit.KeyByAPIKey(), nil), "Compose: key function 1 is nil"},
		{ratelimit.Compose(ratelimit.KeyByAPIKey(), ratelimit.KeyConst("")), `Compose: key function 1: KeyConst(""): empty key`},
	} {
		// A store per case: unnamed Limiters with the same limit name may
		// not share one (WithName).
		store := newStore(t, newClock().Now)
		_, err := ratelimit.New(store, ratelimit.WithLimits(ratelimit.PerMinute(1)), ratelimit.WithKey(tt.key))
		assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig, tt.want)
		assert.EqualError(t, err, "ratelimit: invalid configuration: WithKey: misconfigured key function: "+tt.want)

		// Called anyway (wrapped in a function of one's own), it answers
		// 500 and tells the client nothing of the mistake.
		lim, err := ratelimit.New(store, ratelimit.WithLimits(ratelimit.PerMinute(1)),
			ratelimit.WithKey(func(r *http.Request) (string, error) { return tt.key(r) }))
		require.NoError(t, err)
		w := serve(lim.Handler(okHandler), httptest.NewRequest("GET", "/", nil))
		assert.Equal(t, http.StatusInternalServerError, w.Code)
		assert.Equal(t, fmt.Sprintf(`{"type":"about:blank","title":"Internal Server Error","status":500,"detail":%q}`+"\n",
			"The server's rate limiter is misconfigured; this is not a problem with your request."), w.Body.String())
	}
}
