package ratelimit_test

import (
	"context"
	"net/http"
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
)

// nestedLimiters returns a per-IP Limiter named "ip" and a per-key one
// named "key" on one store, both sending the IETF and X-RateLimit fields.
func nestedLimiters(t *testing.T, ip ratelimit.Limit, key ...ratelimit.Limit) (outer, inner *ratelimit.Limiter, store *recordingStore) {
	t.Helper()
	store = &recordingStore{Store: newStore(t, newClock().Now)}
	headers := ratelimit.WithHeaders(ratelimit.HeadersIETF | ratelimit.HeadersXRateLimit)
	outer, err := ratelimit.New(store, ratelimit.WithName("ip"), ratelimit.WithKey(ratelimit.KeyByIP()), ratelimit.WithLimits(ip), headers)
	require.NoError(t, err)
	inner, err = ratelimit.New(store, ratelimit.WithName("key"), ratelimit.WithLimits(key...), headers)
	require.NoError(t, err)
	return outer, inner, store
}

func TestNestedLimitersListEveryMember(t *testing.T) {
	outer, inner, store := nestedLimiters(t, ratelimit.PerMinute(100),
		ratelimit.PerMinute(60).Named("requests"), ratelimit.PerDay(100_000).Named("tokens").CostFrom(estimateTokens))
	h := outer.Handler(inner.Handler(reporting(t, 400, nil)))

	w := serve(h, request("POST", "/", "k", 1000))
	require.Equal(t, http.StatusOK, w.Code)
	// Each Limiter's members, the outer's first, named after their
	// Limiter; one field line each.
	assert.Equal(t, []string{`"ip/requests";q=100;w=60, "key/requests";q=60;w=60, "key/tokens";q=100000;w=86400;rampmeter-unit="tokens"`},
		w.Header().Values("RateLimit-Policy"))
	assert.Equal(t, []string{`"ip/requests";r=99;t=1, "key/requests";r=59;t=1, "key/tokens";r=99000;t=1`},
		w.Header().Values("RateLimit"))
	// The binding limit across both: key/requests has 59/60 ≈ 0.983 of
	// its capacity left, ip/requests 0.99, key/tokens 0.99.
	assert.Equal(t, "60", w.Header().Get("X-RateLimit-Limit"))
	assert.Equal(t, "59", w.Header().Get("X-RateLimit-Remaining"))
	assert.Equal(t, "1", w.Header().Get("X-RateLimit-Reset"))

	// ReportUsage still takes the plain limit name; the stored state is
	// the named Limiter's: its ID starts with "key/".
	adj := singleAdjust(t, store)
	assert.Equal(t, int64(400-1000), adj.Cost)
	assert.Equal(t, "tokens", adj.Limit.Name())
	assert.Equal(t, "key/tokens:tb:100000:86400000000:100000", adj.Limit.ID())
	assert.Equal(t, "key", inner.Name())
	assert.Equal(t, "key/requests:tb:60:60000000:60", inner.Limits()[0].ID())
}

func TestNestedLimitersBindAcrossBoth(t *testing.T) {
	t.Run("the inner one refuses", func(t *testing.T) {
		outer, inner, _ := nestedLimiters(t, ratelimit.PerMinute(100), ratelimit.PerMinute(2))
		h := outer.Handler(inner.Handler(okHandler))
		for range 2 {
			require.Equal(t, http.StatusOK, serve(h, request("GET", "/", "k", -1)).Code)
		}
		// The third: the outer admits (97 left), the inner refuses for one
		// interval of 2 per minute, 30 s: Retry-After, its t and the
		// X-RateLimit-* are the inner's, the binding limit.
		w := serve(h, request("GET", "/", "k", -1))
		require.Equal(t, http.StatusTooManyRequests, w.Code)
		assert.Equal(t, "30", w.Header().Get("Retry-After"))
		assert.Equal(t, `"ip/requests";r=97;t=1, "key/requests";r=0;t=30`, w.Header().Get("RateLimit"))
		assert.Equal(t, "2", w.Header().Get("X-RateLimit-Limit"))
		assert.Equal(t, "0", w.Header().Get("X-RateLimit-Remaining"))
		assert.Equal(t, "60", w.Header().Get("X-RateLimit-Reset"))
		assert.JSONEq(t, `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429,`+
			`"detail":"quota exceeded: the \"requests\" limit allows 2 requests per minute; retry after 30 seconds",`+
			`"violated-policies":["key/requests"],"retry-after-seconds":30}`, w.Body.String())
	})
	t.Run("the outer one binds", func(t *testing.T) {
		outer, inner, _ := nestedLimiters(t, ratelimit.PerMinute(3), ratelimit.PerMinute(60))
		h := outer.Handler(inner.Handler(okHandler))
		require.Equal(t, http.StatusOK, serve(h, request("GET", "/", "k", -1)).Code)
		// After two: ip/requests has 1/3 left, key/requests 58/60: the
		// outer's X-RateLimit-* stay (full again in 2 × 20 s).
		w := serve(h, request("GET", "/", "k", -1))
		require.Equal(t, http.StatusOK, w.Code)
		assert.Equal(t, "3", w.Header().Get("X-RateLimit-Limit"))
		assert.Equal(t, "1", w.Header().Get("X-RateLimit-Remaining"))
		assert.Equal(t, "40", w.Header().Get("X-RateLimit-Reset"))
		// 20 s per unit for ip/requests: its next unit 20 s after r.
		assert.Equal(t, `"ip/requests";r=1;t=20, "key/requests";r=58;t=1`, w.Header().Get("RateLimit"))
		// The outer refuses the fourth: the inner never runs.
		serve(h, request("GET", "/", "k", -1))
		w = serve(h, request("GET", "/", "k", -1))
		require.Equal(t, http.StatusTooManyRequests, w.Code)
		assert.Equal(t, `"ip/requests";r=0;t=20`, w.Header().Get("RateLimit"))
	})
}

func TestUnnamedLimitersOnOneStoreMustNotShareALimitName(t *testing.T) {
	store := newStore(t, newClock().Now)
	perIP, err := ratelimit.New(store, ratelimit.WithKey(ratelimit.KeyByIP()), ratelimit.WithLimits(ratelimit.PerMinute(100)))
	require.NoError(t, err)
	assert.Equal(t, "", perIP.Name())

	// The per-key one would nest behind it with a second "requests".
	_, err = ratelimit.New(store, ratelimit.WithLimits(ratelimit.PerMinute(60), ratelimit.PerDay(1000).Named("daily")))
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	assert.EqualError(t, err, `ratelimit: invalid configuration: another Limiter on this store already has a limit named "requests", `+
		`and would share its state for equal keys and its RateLimit member: give each Limiter its own WithName (the same name only to share state on purpose)`)
	// The failed New claimed nothing: "daily" is free.
	_, err = ratelimit.New(store, ratelimit.WithLimits(ratelimit.PerDay(1000).Named("daily")))
	require.NoError(t, err)

	// Other names, or a name of its own, are fine; so is another store.
	_, err = ratelimit.New(store, ratelimit.WithLimits(ratelimit.PerMinute(60).Named("per-key")))
	require.NoError(t, err)
	_, err = ratelimit.New(store, ratelimit.WithName("key"), ratelimit.WithLimits(ratelimit.PerMinute(60)))
	require.NoError(t, err)
	_, err = ratelimit.New(newStore(t, newClock().Now), ratelimit.WithLimits(ratelimit.PerMinute(60)))
	require.NoError(t, err)

	// A wrapper that exposes what it wraps (Unwrap() Store) is the same
	// store.
	_, err = ratelimit.New(&recordingStoreUnwrap{recordingStore{Store: store}}, ratelimit.WithLimits(ratelimit.PerMinute(7)))
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)

	// Named alike on purpose, two Limiters share a store and limit names
	// (the processes of one deployment); a named one and an unnamed one
	// never meet.
	for range 2 {
		_, err = ratelimit.New(store, ratelimit.WithName("api"), ratelimit.WithLimits(ratelimit.PerMinute(60)))
		require.NoError(t, err)
	}
	_, err = ratelimit.New(store, ratelimit.WithName("api"), ratelimit.WithLimits(ratelimit.PerMinute(60).Named("per-key")))
	require.NoError(t, err)

	// A store that cannot be told apart from another (no pointer) is not
	// checked.
	for range 2 {
		_, err = ratelimit.New(valueStore{}, ratelimit.WithLimits(ratelimit.PerMinute(60)))
		require.NoError(t, err)
	}

	for _, bad := range []string{"", "a/b", "é", string(make([]byte, 65))} {
		_, err = ratelimit.New(store, ratelimit.WithName(bad), ratelimit.WithLimits(ratelimit.PerMinute(1)))
		assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig, "%q", bad)
	}
}

// The claims on a store do not keep it alive.
func TestClaimsHoldTheStoreWeakly(t *testing.T) {
	store := &recordingStore{Store: newStore(t, newClock().Now)}
	_, err := ratelimit.New(store, ratelimit.WithLimits(ratelimit.PerMinute(1)))
	require.NoError(t, err)
	wp := weak.Make(store)
	store = nil
	runtime.GC()
	runtime.GC()
	assert.Nil(t, wp.Value(), "the store was garbage-collected")
}

func TestWithLimitsFuncSetsGetTheLimitersName(t *testing.T) {
	set, err := ratelimit.NewPolicySet(ratelimit.PerMinute(1).Named("requests"), ratelimit.PerMinute(1).Named("dark").Shadow())
	require.NoError(t, err)
	store := &takeRecorder{Store: newStore(t, newClock().Now)}
	plans := ratelimit.WithLimitsFunc(func(*http.Request, string) (*ratelimit.PolicySet, error) { return set, nil })
	a, err := ratelimit.New(store, ratelimit.WithName("a"), plans)
	require.NoError(t, err)
	b, err := ratelimit.New(store, ratelimit.WithName("b"), plans, ratelimit.WithHeaders(ratelimit.HeadersIETF|ratelimit.HeadersShadow))
	require.NoError(t, err)
	c, err := ratelimit.New(store, plans) // unnamed: the set as it is
	require.NoError(t, err)
	for _, tt := range []struct {
		lim               *ratelimit.Limiter
		policy, limit, id string
	}{
		{a, `"a/requests";q=1;w=60`, `"a/requests";r=0;t=60`, "a/requests:tb:1:60000000:1"},
		{b, `"b/requests";q=1;w=60, "b/dark";q=1;w=60;rampmeter-shadow`, `"b/requests";r=0;t=60, "b/dark";r=0;t=60`, "b/requests:tb:1:60000000:1"},
		{c, `"requests";q=1;w=60`, `"requests";r=0;t=60`, "requests:tb:1:60000000:1"},
	} {
		// Each Limiter keeps its own state of the shared set: the first
		// request of each is admitted (one per minute; next in 60 s).
		for range 2 { // the second uses the kept copy
			w := serve(tt.lim.Handler(okHandler), request("GET", "/", "k", -1))
			assert.Equal(t, tt.policy, w.Header().Get("RateLimit-Policy"))
			if w.Code == http.StatusOK {
				assert.Equal(t, tt.limit, w.Header().Get("RateLimit"))
			}
			assert.Equal(t, tt.id, store.last[0].Limit.ID())
		}
	}
}

// takeRecorder wraps a Store and keeps the requests of its last Take.
type takeRecorder struct {
	ratelimit.Store
	last []ratelimit.Request
}

func (s *takeRecorder) Take(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	s.last = append(s.last[:0], reqs...)
	return s.Store.Take(ctx, reqs, out)
}

// recordingStoreUnwrap is a wrapping store that says what it wraps.
type recordingStoreUnwrap struct{ recordingStore }

func (s *recordingStoreUnwrap) Unwrap() ratelimit.Store { return s.Store }

// valueStore is a Store that is not a pointer: every decision admits.
type valueStore struct{}

func (valueStore) Take(_ context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	for i := range reqs {
		out[i] = ratelimit.Decision{Limit: reqs[i].Limit, Allowed: true, Remaining: reqs[i].Limit.Burst(), At: time.Now().UnixMicro()}
	}
	return nil
}

func (s valueStore) Adjust(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	return s.Take(ctx, reqs, out)
}
