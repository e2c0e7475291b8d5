package ratelimit_test

// Fuzz targets of the key functions, for everything a client controls: the
// credential and proxy headers they read, the method and path KeyByRoute
// reads, and the parts Compose joins (fuzz_headers_test.go fuzzes the
// rate-limit fields the middleware writes, fuzz_transport_test.go the
// vendor fields a Transport parses).
//
// Invariants checked on every input: no panic; a refusal is a *StatusError
// with a 4xx code wrapping ErrMissingKey; a key is bounded in length and
// free of control characters; and, run through a Limiter whose store fails
// with slog hooks attached, the key never appears in the log or the
// response.
//
// Run one for ten minutes with, for example:
//
//	go test -run '^$' -fuzz '^FuzzKeyByAPIKey$' -fuzztime 10m -parallel 1 .
//
// Findings are kept as regression cases under testdata/fuzz/<FuzzName>.

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/hooks"
)

// fzPadSizes are the lengths fuzzPad appends, picked by a fuzzed byte:
// mostly nothing, sometimes just below, at and above MaxKeyLength, and a
// megabyte.
var fzPadSizes = [...]int{0, 0, 0, 0, 0, 0, 0, 0, 1, ratelimit.MaxKeyLength - 8, ratelimit.MaxKeyLength,
	ratelimit.MaxKeyLength + 1, 1 << 20}

// fzPad returns s followed by fzPadSizes[sel] copies of its last byte ('A'
// if s is empty), so that the fuzzer reaches oversized values cheaply.
func fzPad(s string, sel uint8) string {
	n := fzPadSizes[int(sel)%len(fzPadSizes)]
	if n == 0 {
		return s
	}
	c := byte('A')
	if s != "" {
		c = s[len(s)-1]
	}
	return s + strings.Repeat(string(c), n)
}

// fzCheckRefusal checks that err is a *StatusError with code wrapping
// ErrMissingKey whose message is short and does not echo the input.
func fzCheckRefusal(t *testing.T, err error, code int, inputs ...string) {
	t.Helper()
	var se *ratelimit.StatusError
	if !errors.As(err, &se) {
		t.Fatalf("error %v (%T) is not a *StatusError", err, err)
	}
	if se.StatusCode() != code {
		t.Fatalf("status %d, want %d (%v)", se.StatusCode(), code, err)
	}
	if !errors.Is(err, ratelimit.ErrMissingKey) {
		t.Fatalf("error %v does not wrap ErrMissingKey", err)
	}
	msg := err.Error()
	if len(msg) > 256 {
		t.Fatalf("error message of %d bytes: %.100q...", len(msg), msg)
	}
	for _, in := range inputs {
		if v := strings.TrimSpace(in); len(v) >= 8 && strings.Contains(msg, v) {
			t.Fatalf("error message %q echoes the input", msg)
		}
	}
}

// fzCheckKey checks a key from KeyByAPIKey or KeyByHeader: non-empty, at
// most MaxKeyLength bytes, no spaces or control characters, and taken from
// one of the header values.
func fzCheckKey(t *testing.T, key string, values ...string) {
	t.Helper()
	if key == "" || len(key) > ratelimit.MaxKeyLength {
		t.Fatalf("key of %d bytes", len(key))
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c <= ' ' || c == 0x7f {
			t.Fatalf("key contains byte %#x", c)
		}
	}
	for _, v := range values {
		if strings.Contains(v, key) {
			return
		}
	}
	t.Fatalf("key %.60q is in none of the header values", key)
}

// fzErrStore fails every call, so that a Limiter under FailOpen logs a
// store error and a bypass for every request.
type fzErrStore struct{}

var errFzInjected = errors.New("injected store failure")

func (fzErrStore) Take(context.Context, []ratelimit.Request, []ratelimit.Decision) error {
	return errFzInjected
}

func (fzErrStore) Adjust(context.Context, []ratelimit.Request, []ratelimit.Decision) error {
	return errFzInjected
}

// fzLogLimiter is a Limiter with key function kf on a failing store, whose
// slog hooks log (at Debug and above) into a buffer.
type fzLogLimiter struct {
	mu  sync.Mutex
	buf bytes.Buffer
	h   http.Handler
}

func newFzLogLimiter(t testing.TB, kf ratelimit.KeyFunc) *fzLogLimiter {
	f := &fzLogLimiter{}
	logger := slog.New(slog.NewTextHandler(&f.buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	lim, err := ratelimit.New(fzErrStore{}, ratelimit.WithKey(kf),
		ratelimit.WithLimits(ratelimit.PerMinute(1).Named("requests")),
		ratelimit.WithHooks(hooks.Slog(logger)))
	if err != nil {
		t.Fatal(err)
	}
	f.h = lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("ok"))
	}))
	return f
}

// check serves r and fails t if key (when long enough not to occur in the
// log's fixed text by chance) appears in the log or the response.
func (f *fzLogLimiter) check(t *testing.T, r *http.Request, key string) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.buf.Reset()
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, r)
	if len(key) < 24 {
		return
	}
	if bytes.Contains(f.buf.Bytes(), []byte(key)) {
		t.Fatalf("the key appears in the log: %.200s", f.buf.String())
	}
	if strings.Contains(rec.Body.String(), key) {
		t.Fatalf("the key appears in the response body")
	}
	for name, vs := range rec.Header() {
		for _, v := range vs {
			if strings.Contains(v, key) {
				t.Fatalf("the key appears in response field %s", name)
			}
		}
	}
}

// fzRequest returns a bare GET request with header h, cheaper than
// httptest.NewRequest and free of its validation.
func fzRequest(h http.Header, remoteAddr string) *http.Request {
	return &http.Request{Method: http.MethodGet, URL: &url.URL{Path: "/"}, Header: h,
		RemoteAddr: remoteAddr, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
}

func fzRepeat(h http.Header, name, v string, n uint8) {
	for range int(n % 3) {
		h[name] = append(h[name], v)
	}
}

func FuzzKeyByAPIKey(f *testing.F) {
	f.Add("Bearer sk-live-0123456789abcdef0123456789", "", uint8(1), uint8(0), uint8(0))
	f.Add("", "key-0123456789abcdef0123456789", uint8(0), uint8(1), uint8(0))
	f.Add("Basic dXNlcjpwYXNz", "key-0123456789abcdef01234567890", uint8(1), uint8(1), uint8(0))
	f.Add("bearer   padded-key-0123456789abcdef  ", "", uint8(1), uint8(0), uint8(0))
	f.Add("Bearer a b", "", uint8(1), uint8(0), uint8(0))
	f.Add("Bearer \xff\xfe\xfd-invalid-utf8", "", uint8(1), uint8(0), uint8(0))
	f.Add("Bearer k1", "k2", uint8(2), uint8(2), uint8(0))
	f.Add("Bearer tab\tinside", "nul\x00inside", uint8(1), uint8(1), uint8(0))
	f.Add("Bearer ", "", uint8(1), uint8(1), uint8(0))
	f.Add("Bearer A", "", uint8(1), uint8(0), uint8(12))                               // 1 MB key
	f.Add("", "B", uint8(0), uint8(1), uint8(10))                                      // exactly MaxKeyLength
	f.Add("", "C", uint8(0), uint8(1), uint8(11))                                      // one byte over
	f.Add("Bearer\u00a0nbsp-not-a-space-key-012345", "", uint8(1), uint8(0), uint8(0)) // U+00A0 is not a space to HTTP
	kf := ratelimit.KeyByAPIKey()
	lim := newFzLogLimiter(f, kf)
	f.Fuzz(func(t *testing.T, authz, xkey string, nAuth, nKey, pad uint8) {
		if pad&1 == 0 {
			authz = fzPad(authz, pad>>1)
		} else {
			xkey = fzPad(xkey, pad>>1)
		}
		h := http.Header{}
		fzRepeat(h, "Authorization", authz, nAuth)
		fzRepeat(h, "X-Api-Key", xkey, nKey)
		r := fzRequest(h, "192.0.2.1:1234")
		key, err := kf(r)
		if err != nil {
			fzCheckRefusal(t, err, http.StatusUnauthorized, authz, xkey)
			return
		}
		fzCheckKey(t, key, authz, xkey)
		if key2, err2 := kf(r); key2 != key || err2 != nil {
			t.Fatalf("not deterministic: %q, %v", key2, err2)
		}
		lim.check(t, r, key)
	})
}

func FuzzKeyByHeader(f *testing.F) {
	f.Add("X-Tenant", "tenant-0123456789abcdef0123456789", uint8(1), uint8(0))
	f.Add("x-tenant", "  spaced-tenant-0123456789abcdefgh  ", uint8(1), uint8(0))
	f.Add("X-Tenant", "a", uint8(2), uint8(0))
	f.Add("X-Tenant", "", uint8(1), uint8(0))
	f.Add("X-Tenant", "\xc3\x28-invalid-utf8-0123456789abcdef", uint8(1), uint8(0))
	f.Add("X-Tenant", "x", uint8(1), uint8(12))
	f.Add("", "v", uint8(1), uint8(0))
	f.Add("Bad Name", "v", uint8(1), uint8(0))
	f.Add("X:Colon", "v", uint8(1), uint8(0))
	f.Add("X-Ténant", "v", uint8(1), uint8(0))
	f.Fuzz(func(t *testing.T, name, value string, n, pad uint8) {
		if len(name) > 256 {
			return // header names are configuration, not input
		}
		value = fzPad(value, pad)
		kf := ratelimit.KeyByHeader(name)
		h := http.Header{}
		fzRepeat(h, http.CanonicalHeaderKey(name), value, n)
		r := fzRequest(h, "192.0.2.1:1234")
		key, err := kf(r)
		if err != nil {
			var se *ratelimit.StatusError
			if errors.As(err, &se) && se.StatusCode() == http.StatusInternalServerError {
				// Only a name KeyByHeader refuses as misconfigured.
				if fzValidToken(name) {
					t.Fatalf("500 for header name %q: %v", name, err)
				}
				return
			}
			fzCheckRefusal(t, err, http.StatusBadRequest, value)
			return
		}
		// The key is its kind, the header's name and the value.
		kind := "header " + http.CanonicalHeaderKey(name) + " "
		v, ok := strings.CutPrefix(key, kind)
		if !ok {
			t.Fatalf("key %.60q does not start with %q", key, kind)
		}
		fzCheckKey(t, v, value)
	})
}

// fzValidToken reports whether s is an RFC 9110 token (a valid field
// name).
func fzValidToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isTChar(s[i]) {
			return false
		}
	}
	return s != ""
}

// fzTrusted are the proxy prefixes the KeyByIP fuzzer trusts.
var fzTrusted = []string{"10.0.0.0/8", "127.0.0.1/32", "::1/128", "fd00::/8", "192.168.0.0/16"}

var fzTrustedPrefixes = func() []netip.Prefix {
	var ps []netip.Prefix
	for _, s := range fzTrusted {
		ps = append(ps, netip.MustParsePrefix(s))
	}
	return ps
}()

func fzIsTrusted(a netip.Addr) bool {
	for _, p := range fzTrustedPrefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// fzPeer parses r.RemoteAddr as KeyByIP does when no middleware set the
// client address: host of host:port, else the whole string.
func fzPeer(remote string) (netip.Addr, bool) {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	a, err := netip.ParseAddr(host)
	return a, err == nil
}

// fzModelKey is the key of address a grouped by v4 and v6 prefix lengths,
// derived from the documentation of KeyByIP: mapped addresses count as
// IPv4, zones are dropped, a full-length prefix is the address itself.
func fzModelKey(a netip.Addr, v4, v6 int) string {
	a = a.Unmap().WithZone("")
	bits := v6
	if a.Is6() {
		s := a.StringExpanded()
		switch {
		case strings.HasPrefix(s, "0064:ff9b:0000:0000:0000:0000:"), // NAT64, RFC 6052
			strings.HasPrefix(s, "0000:0000:0000:0000:0000:0000:") && !strings.HasPrefix(s[30:], "0000:"): // IPv4-compatible
			b := a.As16()
			a = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
		case strings.HasPrefix(s, "fe8"), strings.HasPrefix(s, "fe9"), strings.HasPrefix(s, "fea"), strings.HasPrefix(s, "feb"): // link-local fe80::/10
			bits = 128
		}
	}
	if a.Is4() {
		bits = v4
	}
	if bits == a.BitLen() {
		return a.String()
	}
	p, err := a.Prefix(bits)
	if err != nil {
		panic(err)
	}
	return p.String()
}

var (
	fzV4Bits = [...]int{32, 24, 16, 8, 1}
	fzV6Bits = [...]int{64, 128, 48, 56, 1}
)

func FuzzKeyByIP(f *testing.F) {
	// remote, xff1, xff2, x-real-ip, forwarded, mode, v4, v6
	f.Add("203.0.113.7:443", "", "", "", "", uint8(0), uint8(0), uint8(0))
	f.Add("10.0.0.1:80", "198.51.100.2, 10.0.0.3", "", "", "", uint8(1), uint8(0), uint8(0))
	f.Add("10.0.0.1:80", "1.1.1.1", "198.51.100.2", "", "", uint8(1), uint8(0), uint8(0))           // duplicated XFF
	f.Add("203.0.113.7:443", "1.1.1.1", "", "2.2.2.2", "for=3.3.3.3", uint8(1), uint8(0), uint8(0)) // forged from outside
	f.Add("10.0.0.1:80", "garbage, 198.51.100.2", "", "", "", uint8(1), uint8(0), uint8(0))
	f.Add("10.0.0.1:80", "::ffff:10.0.0.9, ::ffff:198.51.100.2", "", "", "", uint8(1), uint8(0), uint8(0))
	f.Add("[::1]:80", "fe80::1%eth0", "", "", "", uint8(1), uint8(0), uint8(1))
	f.Add("[fe80::1%25eth0]:80", "", "", "", "", uint8(3), uint8(0), uint8(0))
	f.Add("[fe80::1%eth0]:80", "", "", "", "", uint8(0), uint8(0), uint8(0))
	f.Add("127.0.0.1:1", "", "", "2001:db8::1", "", uint8(2), uint8(0), uint8(0))
	f.Add("127.0.0.1:1", "", "", "2001:db8::1%zone", "", uint8(2), uint8(0), uint8(2))
	f.Add("127.0.0.1:1", "", "", "not-an-ip", "", uint8(2), uint8(0), uint8(0))
	f.Add("127.0.0.1:1", "", "", "", `for="[2001:db8::1]:80";proto=https, for=unknown`, uint8(1), uint8(0), uint8(0))
	f.Add("::ffff:198.51.100.9", "", "", "", "", uint8(0), uint8(1), uint8(0))
	f.Add("[::ffff:10.1.2.3]:9", "198.51.100.1", "", "", "", uint8(1), uint8(0), uint8(0)) // mapped trusted peer
	f.Add("1.2.3.4:5:6", "", "", "", "", uint8(0), uint8(0), uint8(0))
	f.Add("", "", "", "", "", uint8(1), uint8(0), uint8(0))
	f.Add("\xff\xfe", "\xff", "", "\xff", "", uint8(2), uint8(0), uint8(0))
	f.Add("10.0.0.1:80", strings.Repeat("10.0.0.2, ", 1000)+"198.51.100.2", "", "", "", uint8(1), uint8(0), uint8(0))
	handlers := [4]func(http.Handler) http.Handler{
		func(h http.Handler) http.Handler { return h },
		middleware.ClientIPFromXFF(fzTrusted...),
		middleware.ClientIPFromHeader("X-Real-IP", fzTrusted...),
		middleware.ClientIPFromRemoteAddr,
	}
	f.Fuzz(func(t *testing.T, remote, xff1, xff2, realIP, fwd string, mode, v4s, v6s uint8) {
		v4, v6 := fzV4Bits[int(v4s)%len(fzV4Bits)], fzV6Bits[int(v6s)%len(fzV6Bits)]
		kf := ratelimit.KeyByIP(ratelimit.IPv4Prefix(v4), ratelimit.IPv6Prefix(v6))
		mode %= uint8(len(handlers))
		run := func(withForwarded bool) (key string, err error) {
			h := http.Header{}
			for _, v := range []string{xff1, xff2} {
				if v != "" {
					h["X-Forwarded-For"] = append(h["X-Forwarded-For"], v)
				}
			}
			if realIP != "" {
				h["X-Real-Ip"] = []string{realIP}
			}
			if withForwarded && fwd != "" {
				h["Forwarded"] = []string{fwd}
			}
			called := false
			handlers[mode](http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
				called = true
				key, err = kf(r)
			})).ServeHTTP(httptest.NewRecorder(), fzRequest(h, remote))
			if !called {
				t.Fatal("the client-IP middleware did not call the limiter")
			}
			return key, err
		}
		key, err := run(true)
		if key2, err2 := run(false); key2 != key || (err2 == nil) != (err == nil) {
			t.Fatalf("the Forwarded field changed the key: %q/%v vs %q/%v", key, err, key2, err2)
		}
		peer, peerOK := fzPeer(remote)
		if err != nil {
			fzCheckRefusal(t, err, http.StatusBadRequest)
			if peerOK && (mode == 0 || mode == 3 || !fzIsTrusted(peer.Unmap().WithZone(""))) {
				t.Fatalf("refused although the peer %v is the client: %v", peer, err)
			}
			return
		}
		// The key is its kind, "ip ", and an address or a prefix, short,
		// without zone or IPv4-mapped form.
		key, ok := strings.CutPrefix(key, "ip ")
		if !ok {
			t.Fatalf("key %q does not start with \"ip \"", key)
		}
		if len(key) > len("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128") {
			t.Fatalf("key %q too long", key)
		}
		var addr netip.Addr
		if p, perr := netip.ParsePrefix(key); perr == nil {
			addr = p.Addr()
			if p != p.Masked() {
				t.Fatalf("prefix key %q is not masked", key)
			}
		} else if a, aerr := netip.ParseAddr(key); aerr == nil {
			addr = a
		} else {
			t.Fatalf("key %q is neither an address nor a prefix", key)
		}
		if addr.Zone() != "" || addr.Is4In6() {
			t.Fatalf("key %q has a zone or is IPv4-mapped", key)
		}
		// Anti-spoofing: without a proxy middleware, or from an
		// untrusted peer, the headers do not matter.
		if peerOK && (mode == 0 || mode == 3 || !fzIsTrusted(peer.Unmap().WithZone(""))) {
			if want := fzModelKey(peer, v4, v6); key != want {
				t.Fatalf("key %q, want the peer's %q (mode %d)", key, want, mode)
			}
		}
		if !peerOK && (mode == 0 || mode == 3) {
			t.Fatalf("key %q for an unparsable peer %q", key, remote)
		}
	})
}

// fzStdMethods are the methods of RFC 9110 §9 and RFC 5789.
var fzStdMethods = []string{"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"}

func FuzzKeyByRoute(f *testing.F) {
	f.Add("GET", "/users/42", "")
	f.Add("HEAD", "/users/42", "")
	f.Add("POST", "/v1/chat/completions", "")
	f.Add("GET", "/files/a/b/c", "")
	f.Add("GET", "/users/a%2Fb", "/users/a%2Fb")
	f.Add("get", "/users/42", "")
	f.Add("PURGE", "/any/thing", "")
	f.Add("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "/any/x", "")
	f.Add("GET", "/nowhere", "")
	f.Add("GET", "", "")
	f.Add("GET", "//users/../users/1", "")
	f.Add("\x00", "/\xff", "")
	chiPatterns := []string{"/", "/users/{id}", "/files/*", "/v1/chat/completions", "/items/{id:[0-9]+}", "/any/{x}"}
	muxPatterns := []string{"GET /users/{id}", "/any/{x}", "POST /v1/chat/completions", "/files/{rest...}", "PURGE /cache/{k}"}
	kf := ratelimit.KeyByRoute()
	var got struct {
		key    string
		err    error
		called bool
	}
	capture := http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		got.called = true
		got.key, got.err = kf(r)
	})
	cr := chi.NewRouter()
	cr.Use(func(http.Handler) http.Handler { return capture }) // the limiter's place
	for _, p := range chiPatterns {
		cr.Handle(p, http.NotFoundHandler())
	}
	cr.Post("/v1/chat/completions", http.NotFoundHandler().ServeHTTP)
	mux := http.NewServeMux()
	for _, p := range muxPatterns {
		mux.Handle(p, capture)
	}
	// allowed is every key a client may produce: a standard method and a
	// registered pattern (chi), or the method of a registered pattern
	// (ServeMux, where a pattern without a method accepts any).
	allowed := map[string]bool{}
	for _, m := range fzStdMethods {
		for _, p := range chiPatterns {
			allowed[m+" "+p] = true
		}
	}
	for _, p := range muxPatterns {
		if m, rest, ok := strings.Cut(p, " "); ok {
			allowed[m+" "+rest] = true
			if m == "GET" {
				allowed["HEAD "+rest] = true
			}
			continue
		}
		for _, m := range append(fzStdMethods, "OTHER") {
			allowed[m+" "+p] = true
		}
	}
	f.Fuzz(func(t *testing.T, method, path, rawPath string) {
		for _, router := range []http.Handler{cr, mux} {
			got.called, got.key, got.err = false, "", nil
			r := &http.Request{Method: method, URL: &url.URL{Path: path, RawPath: rawPath}, Header: http.Header{},
				Host: "example.com", RemoteAddr: "192.0.2.1:1", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
			r = r.WithContext(context.Background())
			router.ServeHTTP(httptest.NewRecorder(), r)
			if !got.called {
				continue // the router answered by itself (redirect, 404, 405)
			}
			if got.err != nil {
				fzCheckRefusal(t, got.err, http.StatusNotFound, path, method)
				if !errors.Is(got.err, ratelimit.ErrNoRoute) {
					t.Fatalf("refusal %v does not wrap ErrNoRoute", got.err)
				}
				continue
			}
			if !allowed[strings.TrimPrefix(got.key, "route ")] || !strings.HasPrefix(got.key, "route ") {
				t.Fatalf("key %.80q (method %.40q, path %.40q) is not a registered route", got.key, method, path)
			}
		}
	})
}

// fzDecode splits a Compose key back into its parts, or fails.
func fzDecode(key string) ([]string, bool) {
	var parts []string
	for {
		colon := strings.IndexByte(key, ':')
		if colon <= 0 {
			return nil, false
		}
		n, err := strconv.Atoi(key[:colon])
		if err != nil || n <= 0 || strconv.Itoa(n) != key[:colon] || colon+1+n > len(key) {
			return nil, false
		}
		parts = append(parts, key[colon+1:colon+1+n])
		key = key[colon+1+n:]
		if key == "" {
			return parts, true
		}
		if key[0] != '|' {
			return nil, false
		}
		key = key[1:]
	}
}

func fzConst(s string) ratelimit.KeyFunc {
	return func(*http.Request) (string, error) { return s, nil }
}

func FuzzCompose(f *testing.F) {
	f.Add("a|b", "c", "", "a", "b|c", "", uint8(1+3*1))
	f.Add("1:a", "b", "", "1:a|1:b", "", "", uint8(1))
	f.Add("3:abc", "", "", "3:abc", "", "", uint8(0))
	f.Add("x", "y", "z", "x", "y", "z", uint8(2+3*2))
	f.Add("", "y", "z", "x", "", "z", uint8(2+3*2))
	f.Add("\xff", "|", ":", "\xff|", ":", "", uint8(2+3*1))
	f.Fuzz(func(t *testing.T, a1, a2, a3, b1, b2, b3 string, shape uint8) {
		ta := []string{a1, a2, a3}[:1+shape%3]
		tb := []string{b1, b2, b3}[:1+(shape/3)%3]
		compose := func(parts []string) (string, error) {
			fns := make([]ratelimit.KeyFunc, len(parts))
			for i, p := range parts {
				fns[i] = fzConst(p)
			}
			return ratelimit.Compose(fns...)(fzRequest(http.Header{}, "192.0.2.1:1"))
		}
		ka, ea := compose(ta)
		kb, eb := compose(tb)
		for _, c := range []struct {
			parts []string
			key   string
			err   error
		}{{ta, ka, ea}, {tb, kb, eb}} {
			if slices.Contains(c.parts, "") {
				var se *ratelimit.StatusError
				if !errors.As(c.err, &se) || se.StatusCode() != http.StatusInternalServerError {
					t.Fatalf("empty part: got %q, %v; want a 500", c.key, c.err)
				}
				continue
			}
			if c.err != nil {
				t.Fatalf("Compose(%q): %v", c.parts, c.err)
			}
			rest, ok := strings.CutPrefix(c.key, "compose ")
			back, ok2 := fzDecode(rest)
			if !ok || !ok2 || !slices.Equal(back, c.parts) {
				t.Fatalf("Compose(%q) = %q, which decodes to %q", c.parts, c.key, back)
			}
			total := len("compose ")
			for _, p := range c.parts {
				total += len(p) + len(strconv.Itoa(len(p))) + 2
			}
			if len(c.key) != total-1 {
				t.Fatalf("key of %d bytes for parts totalling %d", len(c.key), total-1)
			}
		}
		if ea == nil && eb == nil && (ka == kb) != slices.Equal(ta, tb) {
			t.Fatalf("Compose(%q) = %q, Compose(%q) = %q", ta, ka, tb, kb)
		}
	})
}
