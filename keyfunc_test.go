package ratelimit_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
)

// statusOf returns the status code a key error asks for, or 0.
func statusOf(err error) int {
	var se *ratelimit.StatusError
	if errors.As(err, &se) {
		return se.StatusCode()
	}
	return 0
}

func TestKeyByAPIKey(t *testing.T) {
	long := strings.Repeat("a", ratelimit.MaxKeyLength)
	tests := []struct {
		name    string
		headers map[string][]string
		want    string
		status  int // expected error status, 0 for success
	}{
		{"bearer", map[string][]string{"Authorization": {"Bearer sk-123"}}, "sk-123", 0},
		{"scheme case-insensitive", map[string][]string{"Authorization": {"bEaReR sk-123"}}, "sk-123", 0},
		{"spaces trimmed", map[string][]string{"Authorization": {"  Bearer   sk-123  "}}, "sk-123", 0},
		{"x-api-key", map[string][]string{"X-Api-Key": {" sk-456 "}}, "sk-456", 0},
		{"bearer wins over x-api-key", map[string][]string{"Authorization": {"Bearer a"}, "X-Api-Key": {"b"}}, "a", 0},
		{"basic auth falls back to x-api-key", map[string][]string{"Authorization": {"Basic dXNlcg=="}, "X-Api-Key": {"b"}}, "b", 0},
		{"longest accepted", map[string][]string{"X-Api-Key": {long}}, long, 0},
		{"missing", nil, "", 401},
		{"empty bearer", map[string][]string{"Authorization": {"Bearer "}}, "", 401},
		{"bare scheme", map[string][]string{"Authorization": {"Bearer"}}, "", 401},
		{"empty x-api-key", map[string][]string{"X-Api-Key": {"  "}}, "", 401},
		{"basic auth only", map[string][]string{"Authorization": {"Basic dXNlcg=="}}, "", 401},
		{"inner space", map[string][]string{"Authorization": {"Bearer a b"}}, "", 401},
		{"control character", map[string][]string{"X-Api-Key": {"a\x00b"}}, "", 401},
		{"too long", map[string][]string{"X-Api-Key": {long + "a"}}, "", 401},
		{"two authorization headers", map[string][]string{"Authorization": {"Bearer a", "Bearer b"}}, "", 401},
		{"two x-api-key headers", map[string][]string{"X-Api-Key": {"a", "b"}}, "", 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			for k, vs := range tt.headers {
				r.Header[k] = vs
			}
			got, err := ratelimit.KeyByAPIKey()(r)
			if tt.status == 0 {
				require.NoError(t, err)
				assert.Equal(t, tt.want, got)
				return
			}
			assert.Empty(t, got)
			assert.ErrorIs(t, err, ratelimit.ErrMissingKey)
			assert.Equal(t, tt.status, statusOf(err))
			assert.NotContains(t, err.Error(), "dXNlcg", "errors never echo credentials")
		})
	}
}

func TestKeyByHeader(t *testing.T) {
	fn := ratelimit.KeyByHeader("x-tenant")
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-Tenant", " acme ")
	got, err := fn(r)
	require.NoError(t, err)
	assert.Equal(t, "header X-Tenant acme", got)

	_, err = fn(httptest.NewRequest("GET", "/", nil))
	assert.ErrorIs(t, err, ratelimit.ErrMissingKey)
	assert.Equal(t, 400, statusOf(err))
	assert.EqualError(t, err, "ratelimit: no rate-limit key: missing X-Tenant header")

	r.Header.Add("X-Tenant", "other")
	_, err = fn(r)
	assert.Equal(t, 400, statusOf(err))

	_, err = ratelimit.KeyByHeader("")(r)
	assert.Equal(t, 500, statusOf(err))
}

func TestKeyByIP(t *testing.T) {
	tests := []struct {
		name   string
		remote string
		opts   []ratelimit.IPOption
		want   string
		status int
	}{
		{"ipv4", "192.0.2.7:1234", nil, "ip 192.0.2.7", 0},
		{"ipv4 bare", "192.0.2.7", nil, "ip 192.0.2.7", 0},
		{"ipv6 grouped by /64", "[2001:db8:1:2:3:4:5:6]:443", nil, "ip 2001:db8:1:2::/64", 0},
		{"same /64, same key", "[2001:db8:1:2:ffff::1]:443", nil, "ip 2001:db8:1:2::/64", 0},
		{"ipv6 /48", "[2001:db8:1:2:3:4:5:6]:443", []ratelimit.IPOption{ratelimit.IPv6Prefix(48)}, "ip 2001:db8:1::/48", 0},
		{"ipv6 /128", "[2001:db8:1:2:3:4:5:6]:443", []ratelimit.IPOption{ratelimit.IPv6Prefix(128)}, "ip 2001:db8:1:2:3:4:5:6", 0},
		{"mapped ipv4 is ipv4", "[::ffff:192.0.2.7]:80", nil, "ip 192.0.2.7", 0},
		{"zone stripped", "[fe80::1%eth0]:80", []ratelimit.IPOption{ratelimit.IPv6Prefix(128)}, "ip fe80::1", 0},
		{"link-local not grouped", "[fe80::1%eth0]:80", nil, "ip fe80::1", 0},
		{"link-local, other host of the link", "[fe80::2]:80", nil, "ip fe80::2", 0},
		{"NAT64 keyed as its IPv4", "[64:ff9b::192.0.2.7]:80", nil, "ip 192.0.2.7", 0},
		{"NAT64 with IPv4 prefix", "[64:ff9b::192.0.2.7]:80", []ratelimit.IPOption{ratelimit.IPv4Prefix(24)}, "ip 192.0.2.0/24", 0},
		{"NAT64 local-use prefix is grouped", "[64:ff9b:1::c000:207]:80", nil, "ip 64:ff9b:1::/64", 0},
		{"IPv4-compatible keyed as its IPv4", "[::198.51.100.9]:80", nil, "ip 198.51.100.9", 0},
		{"loopback ::1 stays IPv6", "[::1]:80", nil, "ip ::/64", 0},
		{"::/112 stays IPv6", "[::ab]:80", []ratelimit.IPOption{ratelimit.IPv6Prefix(128)}, "ip ::ab", 0},
		{"later valid option wins", "[2001:db8:1:2::1]:1", []ratelimit.IPOption{ratelimit.IPv6Prefix(0), ratelimit.IPv6Prefix(48)}, "ip 2001:db8:1::/48", 0},
		{"later invalid option wins", "192.0.2.7:1", []ratelimit.IPOption{ratelimit.IPv4Prefix(24), ratelimit.IPv4Prefix(0)}, "", 500},
		{"ipv4 /24", "192.0.2.7:1", []ratelimit.IPOption{ratelimit.IPv4Prefix(24)}, "ip 192.0.2.0/24", 0},
		{"unparsable", "not-an-ip:80", nil, "", 400},
		{"empty", "", nil, "", 400},
		{"bad ipv6 prefix", "192.0.2.7:1", []ratelimit.IPOption{ratelimit.IPv6Prefix(0)}, "", 500},
		{"bad ipv4 prefix", "192.0.2.7:1", []ratelimit.IPOption{ratelimit.IPv4Prefix(33)}, "", 500},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tt.remote
			r.Header.Set("X-Forwarded-For", "203.0.113.99") // never read by KeyByIP itself
			got, err := ratelimit.KeyByIP(tt.opts...)(r)
			if tt.status == 0 {
				require.NoError(t, err)
				assert.Equal(t, tt.want, got)
				return
			}
			assert.Equal(t, tt.status, statusOf(err))
		})
	}
}

func TestKeyByIPWithChiClientIP(t *testing.T) {
	// chi resolves the client IP from X-Forwarded-For only when the peer
	// is a trusted proxy (10.0.0.0/8 here); KeyByIP uses its answer.
	var got string
	h := middleware.ClientIPFromXFF("10.0.0.0/8")(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var err error
		got, err = ratelimit.KeyByIP()(r)
		require.NoError(t, err)
	}))
	for _, tt := range []struct {
		name, remote, xff, want string
	}{
		{"trusted proxy", "10.1.2.3:5555", "203.0.113.7", "ip 203.0.113.7"},
		{"trusted proxy chain", "10.1.2.3:5555", "198.51.100.1, 203.0.113.7, 10.9.9.9", "ip 203.0.113.7"},
		{"spoofed from untrusted peer", "198.51.100.9:5555", "203.0.113.7", "ip 198.51.100.9"},
		{"ipv6 client via proxy, grouped", "10.1.2.3:5555", "2001:db8:aa:bb::1", "ip 2001:db8:aa:bb::/64"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tt.remote
			r.Header.Set("X-Forwarded-For", tt.xff)
			h.ServeHTTP(httptest.NewRecorder(), r)
			assert.Equal(t, tt.want, got)
		})
	}
}

// captureKey returns a middleware that records fn's answer.
func captureKey(fn ratelimit.KeyFunc, key *string, err *error) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			*key, *err = fn(r)
			next.ServeHTTP(w, r)
		})
	}
}

func TestKeyByRouteChi(t *testing.T) {
	var key string
	var err error
	capture := captureKey(ratelimit.KeyByRoute(), &key, &err)
	r := chi.NewRouter()
	r.Use(capture) // top level: chi has not routed the request yet
	r.Get("/users/{id}", okHandler)
	r.Post("/users/{id}", okHandler)
	r.With(capture).Get("/with/{x}", okHandler)
	r.Route("/api", func(sr chi.Router) {
		sr.Use(capture)
		sr.Get("/items/{id}/parts/{part}", okHandler)
		sr.Route("/v2", func(v2 chi.Router) { v2.Get("/things/{id}", okHandler) })
	})
	r.Handle("/files/*", okHandler)

	for _, tt := range []struct {
		method, path, want string
	}{
		{"GET", "/users/42", "route GET /users/{id}"},
		{"POST", "/users/42", "route POST /users/{id}"},
		{"GET", "/with/1", "route GET /with/{x}"},
		{"GET", "/api/items/7/parts/9", "route GET /api/items/{id}/parts/{part}"},
		{"GET", "/api/v2/things/3", "route GET /api/v2/things/{id}"},
		{"GET", "/files/a/b/c.txt", "route GET /files/*"},
		{"HEAD", "/users/42", "route HEAD /users/{id}"},
	} {
		key, err = "", nil
		serve(r, httptest.NewRequest(tt.method, tt.path, nil))
		require.NoError(t, err, tt.path)
		assert.Equal(t, tt.want, key, tt.path)
	}

	for _, tt := range []struct{ method, path string }{{"GET", "/nowhere"}, {"DELETE", "/users/42"}} {
		key, err = "", nil
		serve(r, httptest.NewRequest(tt.method, tt.path, nil))
		assert.ErrorIs(t, err, ratelimit.ErrNoRoute)
		assert.ErrorIs(t, err, ratelimit.ErrMissingKey)
		assert.Equal(t, http.StatusNotFound, statusOf(err))
	}
}

func TestKeyByRouteServeMux(t *testing.T) {
	var key string
	var err error
	capture := captureKey(ratelimit.KeyByRoute(), &key, &err)
	mux := http.NewServeMux()
	mux.Handle("GET /users/{id}", capture(okHandler))
	mux.Handle("/files/{path...}", capture(okHandler))
	mux.Handle("GET example.com/host/{id}", capture(okHandler))

	for _, tt := range []struct{ method, target, want string }{
		{"GET", "/users/42", "route GET /users/{id}"},
		{"HEAD", "/users/42", "route HEAD /users/{id}"},
		{"POST", "/files/a/b", "route POST /files/{path...}"},
		{"GET", "http://example.com/host/1", "route GET example.com/host/{id}"},
	} {
		key, err = "", nil
		serve(mux, httptest.NewRequest(tt.method, tt.target, nil))
		require.NoError(t, err, tt.target)
		assert.Equal(t, tt.want, key, tt.target)
	}

	// Wrapping the mux itself: the pattern is not known yet.
	_, err = ratelimit.KeyByRoute()(httptest.NewRequest("GET", "/users/42", nil))
	assert.ErrorIs(t, err, ratelimit.ErrNoRoute)
	assert.Equal(t, http.StatusInternalServerError, statusOf(err))
}

func TestKeyConst(t *testing.T) {
	got, err := ratelimit.KeyConst("global")(httptest.NewRequest("GET", "/", nil))
	require.NoError(t, err)
	assert.Equal(t, "const global", got)
	_, err = ratelimit.KeyConst("")(httptest.NewRequest("GET", "/", nil))
	assert.Equal(t, 500, statusOf(err))
}

func TestCompose(t *testing.T) {
	fn := ratelimit.Compose(ratelimit.KeyByHeader("X-A"), ratelimit.KeyByHeader("X-B"))
	key := func(a, b string) string {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-A", a)
		r.Header.Set("X-B", b)
		k, err := fn(r)
		require.NoError(t, err)
		return k
	}
	// Each part is "header X-A " (11 bytes) or "header X-B " and the value.
	assert.Equal(t, "compose 14:header X-A a|b|12:header X-B c", key("a|b", "c"))
	assert.Equal(t, "compose 12:header X-A a|14:header X-B b|c", key("a", "b|c"))
	assert.Equal(t, "compose 13:header X-A 1:|12:header X-B x", key("1:", "x"))
	assert.Equal(t, "compose 12:header X-A 1|13:header X-B :x", key("1", ":x"))

	// The first error is returned as it is.
	_, err := fn(httptest.NewRequest("GET", "/", nil))
	assert.EqualError(t, err, "ratelimit: no rate-limit key: missing X-A header")

	for _, bad := range []ratelimit.KeyFunc{ratelimit.Compose(), ratelimit.Compose(nil),
		ratelimit.Compose(func(*http.Request) (string, error) { return "", nil })} {
		_, err := bad(httptest.NewRequest("GET", "/", nil))
		assert.Equal(t, 500, statusOf(err))
	}
}

func TestStatusError(t *testing.T) {
	cause := errors.New("cause")
	e := &ratelimit.StatusError{Code: 429, Err: cause}
	assert.Equal(t, "cause", e.Error())
	assert.Equal(t, 429, e.StatusCode())
	assert.ErrorIs(t, e, cause)
	assert.Equal(t, "cause", e.ClientMessage(), "without a Message the client is told Err's message")
	assert.Equal(t, "Forbidden", (&ratelimit.StatusError{Code: 403}).Error())
	assert.Equal(t, "Forbidden", (&ratelimit.StatusError{Code: 403}).ClientMessage())
	assert.Equal(t, 500, (&ratelimit.StatusError{Code: 200}).StatusCode())
	assert.Equal(t, 500, (&ratelimit.StatusError{Code: 600}).StatusCode())

	// Message for the client, Err for developers.
	e = &ratelimit.StatusError{Code: 422, Message: "Send a prompt.", Err: cause}
	assert.Equal(t, "cause", e.Error())
	assert.Equal(t, "Send a prompt.", e.ClientMessage())
	assert.Equal(t, "Send a prompt.", (&ratelimit.StatusError{Code: 422, Message: "Send a prompt."}).Error())
}

// TestDefaultKeyIsClientIP: a Limiter built without WithKey keys requests
// by client IP (KeyByIP), so a browser's plain GET, with no credentials,
// is limited like any other request instead of being refused with 401.
func TestDefaultKeyIsClientIP(t *testing.T) {
	store := newStore(t, newClock().Now)
	lim, err := ratelimit.New(store, ratelimit.WithLimits(ratelimit.PerMinute(2)))
	require.NoError(t, err)
	h := lim.Handler(okHandler)
	get := func(remoteAddr string) int {
		r := httptest.NewRequest("GET", "/", nil) // no Authorization, no X-API-Key
		r.RemoteAddr = remoteAddr
		return serve(h, r).Code
	}
	// 2 per minute per address, the clock stands still: the third request
	// from 192.0.2.1 is refused, whatever its port; 198.51.100.7 and the
	// IPv6 client (its /64) have budgets of their own.
	assert.Equal(t, []int{200, 200, 429}, []int{get("192.0.2.1:1234"), get("192.0.2.1:5678"), get("192.0.2.1:1234")})
	assert.Equal(t, 200, get("198.51.100.7:1234"))
	assert.Equal(t, []int{200, 200, 429}, []int{get("[2001:db8:1:2::1]:80"), get("[2001:db8:1:2::ffff]:80"), get("[2001:db8:1:2::2]:80")},
		"three addresses of 2001:db8:1:2::/64 share its budget")
	assert.Equal(t, 200, get("[2001:db8:1:3::1]:80"), "another /64 has its own")
	assert.Equal(t, ratelimit.Stats{Allowed: 6, Limited: 2}, lim.Stats())
}

// TestLimitersSharingAStoreNeverMeetByAccident: a per-IP and a per-key
// limiter on one store with equal limits (the attacker picks the API key
// "203.0.113.5", the victim's address) never share a budget. Unnamed, New
// refuses the second (WithName); named alike on purpose, they share state,
// but the keys carry their kind ("ip 203.0.113.5" is no API key); named
// apart, their IDs differ too.
func TestLimitersSharingAStoreNeverMeetByAccident(t *testing.T) {
	store := newStore(t, newClock().Now)
	_, err := ratelimit.New(store, ratelimit.WithKey(ratelimit.KeyByIP()), ratelimit.WithLimits(ratelimit.PerMinute(2)))
	require.NoError(t, err)
	_, err = ratelimit.New(store, ratelimit.WithKey(ratelimit.KeyByAPIKey()), ratelimit.WithLimits(ratelimit.PerMinute(2)))
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	assert.ErrorContains(t, err, `already has a limit named "requests"`)

	for _, tt := range []struct{ name, ipName, keyName string }{
		{"named alike", "api", "api"},
		{"named apart", "ip", "key"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			store := newStore(t, newClock().Now)
			perIP, err := ratelimit.New(store, ratelimit.WithName(tt.ipName), ratelimit.WithKey(ratelimit.KeyByIP()), ratelimit.WithLimits(ratelimit.PerMinute(2)))
			require.NoError(t, err)
			perKey, err := ratelimit.New(store, ratelimit.WithName(tt.keyName), ratelimit.WithKey(ratelimit.KeyByAPIKey()), ratelimit.WithLimits(ratelimit.PerMinute(2)))
			require.NoError(t, err)
			ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
			attacker := httptest.NewRequest("GET", "/", nil)
			attacker.RemoteAddr = "198.51.100.66:1"
			attacker.Header.Set("X-API-Key", "203.0.113.5") // the victim's address
			for range 2 {
				assert.Equal(t, http.StatusOK, serve(perKey.Handler(ok), attacker).Code)
			}
			victim := httptest.NewRequest("GET", "/", nil)
			victim.RemoteAddr = "203.0.113.5:1"
			assert.Equal(t, http.StatusOK, serve(perIP.Handler(ok), victim).Code)
		})
	}
}
