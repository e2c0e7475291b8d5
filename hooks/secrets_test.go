package hooks_test

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/hooks"
	"github.com/rampmeter/ratelimit/llm"
	"github.com/rampmeter/ratelimit/store/redisstore"
)

// TestAPIKeysNeverInClear runs a Limiter keyed by API key on the Redis
// store (miniredis) with slog hooks at Debug, through admissions,
// refusals, settlements and store failures, then scans every Redis key and
// value, the log and every response for the raw API keys (and their hex
// and base64 encodings).
func TestAPIKeysNeverInClear(t *testing.T) {
	mr := miniredis.RunT(t)
	mr.SetTime(epoch)
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	store, err := redisstore.New(client)
	require.NoError(t, err)

	var logs bytes.Buffer
	// The counts below are exact only if no call misses the store timeout:
	// with the default 50 ms, a miniredis round trip under -race on a
	// loaded machine did, and FailOpen turned an admission into a bypass.
	// The one store failure the test wants, it injects (SetError).
	lim, err := ratelimit.New(store,
		ratelimit.WithStoreTimeout(time.Minute),
		ratelimit.WithKey(ratelimit.KeyByAPIKey()),
		ratelimit.WithLimits(
			ratelimit.PerMinute(2).Named("requests"),
			ratelimit.PerDay(1000).Named("tokens").CostFrom(func(*http.Request) (int64, error) { return 10, nil }),
		),
		ratelimit.WithHeaders(ratelimit.HeadersIETF|ratelimit.HeadersXRateLimit, llm.OpenAIHeaders(), llm.AnthropicHeaders()),
		ratelimit.WithHooks(hooks.Slog(textLogger(&logs, slog.LevelDebug))),
		// Far above any miniredis round trip, even the first (dial and
		// script load) under the race detector on a loaded machine, which
		// took 169ms once against the default 50ms: the one store failure
		// below is scripted (SetError), never a timeout.
		ratelimit.WithStoreTimeout(10*time.Second),
	)
	require.NoError(t, err)
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ratelimit.ReportUsage(r.Context(), "tokens", 7) // settled: refund of 3
		_, _ = w.Write([]byte("ok"))
	}))

	secrets := []string{"sk-live-7f3a9c2e4b1d8f6a0c5e3b7d9f1a2c4e", "key_2c4e1a9f7d3b5e0c6a8f1d4b2e9c7a3f"}
	var responses []string
	send := func(header, value string) int {
		r := httptest.NewRequest("POST", "/v1/chat/completions", nil)
		r.Header.Set(header, value)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		var b strings.Builder
		for name, vs := range rec.Header() {
			b.WriteString(name + ": " + strings.Join(vs, ", ") + "\n")
		}
		b.WriteString(rec.Body.String())
		responses = append(responses, b.String())
		return rec.Code
	}
	// Two admissions and a refusal for the first key (2 per minute, and
	// miniredis's clock stands still), one admission for the second.
	assert.Equal(t, 200, send("Authorization", "Bearer "+secrets[0]))
	assert.Equal(t, 200, send("Authorization", "Bearer "+secrets[0]))
	assert.Equal(t, 429, send("Authorization", "Bearer "+secrets[0]))
	assert.Equal(t, 200, send("X-API-Key", secrets[1]))
	// Redis fails: FailOpen lets the request through, logging the store
	// error and the bypass.
	mr.SetError("LOADING Redis is loading the dataset in memory")
	assert.Equal(t, 200, send("X-API-Key", secrets[1]))
	mr.SetError("")
	st := lim.Stats()
	require.Equal(t, uint64(3), st.Allowed)
	require.Equal(t, uint64(1), st.Limited)
	require.Equal(t, uint64(1), st.Bypassed)
	require.Equal(t, uint64(3), st.Settled)

	keys := mr.Keys()
	require.Len(t, keys, 4, "two limits for each of two callers")
	var stored strings.Builder
	for _, k := range keys {
		v, err := mr.Get(k)
		require.NoError(t, err)
		stored.WriteString(k + " = " + v + "\n")
	}
	require.Contains(t, logs.String(), "store call failed")
	for _, s := range secrets {
		for _, form := range []string{s, hex.EncodeToString([]byte(s)), base64.StdEncoding.EncodeToString([]byte(s)),
			base64.RawURLEncoding.EncodeToString([]byte(s)), s[:16], s[len(s)-16:]} {
			assert.NotContains(t, stored.String(), form, "Redis keys or values")
			assert.NotContains(t, logs.String(), form, "the log")
			for i, resp := range responses {
				assert.NotContains(t, resp, form, "response %d", i)
			}
		}
	}
	t.Logf("Redis holds:\n%s", stored.String())
}
