package ratelimit

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
)

// KeyFunc names who pays for a request: the rate-limit key. It must return
// a non-empty key or an error. An error that implements
// interface{ StatusCode() int } (such as *StatusError) is answered with
// that status; any other error with 400 Bad Request (see Limiter.Handler).
// Keys may be secrets (API keys): the Limiter never logs them, never puts
// them in a response, and the stores never keep them in clear.
//
// The built-in key functions' keys carry their kind, so that keys of
// different kinds never compare equal, even when two Limiters with the
// same limits share a store (see WithName): an API key is the credential
// as presented, which never contains a space (KeyByAPIKey refuses it);
// every other key begins with its kind and a space: "ip 203.0.113.7",
// "ip 2001:db8:1:2::/64", "route GET /users/{id}", "header X-Tenant acme",
// "const global", "compose 2:…". So the IP 10.0.0.1 and a client that
// sends the API key "10.0.0.1" never share a budget. A key function of
// your own should do the same: begin with a kind of its own and a space.
type KeyFunc func(r *http.Request) (string, error)

// ErrMissingKey is wrapped by the errors of the built-in key functions when
// the request carries no usable key: a missing, empty, malformed, ambiguous
// (repeated) or oversized credential header, an unparsable client address,
// or a request that matches no route.
var ErrMissingKey = errors.New("ratelimit: no rate-limit key")

// MaxKeyLength is the longest key, in bytes, that KeyByAPIKey and
// KeyByHeader accept. Longer values are refused rather than stored, so a
// client cannot make the limiter hash or keep megabytes per request.
const MaxKeyLength = 4096

// StatusError is an error with the HTTP status a client should receive for
// it, and what to tell the client. Key, cost and WithLimitsFunc functions
// return it to choose the response: the middleware answers with that
// status and an RFC 9457 problem (or the WithErrorFormat shape) whose
// detail is ClientMessage, so Message, or Err's message when Message is
// empty, must be fit for clients: plain words saying what to do, no
// secrets, no Go error chain.
//
// The errors of the built-in key functions, of Plans.Lookup and of
// package llm's estimator are StatusErrors with both: Message for the
// client ("This request has no API key: send it as …") and Err for
// developers, wrapping the sentinel (ErrMissingKey, ErrUnknownPlan, …).
type StatusError struct {
	// Code is the HTTP status, 400 to 599. Other values are answered with
	// 500, since they cannot describe a refused request.
	Code int
	// Message is what the client is told: a sentence in plain words that
	// says what is wrong and what to do. When empty, the client is told
	// Err's message.
	Message string
	// Err is the cause, for developers (logs, errors.Is); when Message is
	// empty its message is also the client's. It may be nil.
	Err error
}

// Error returns Err's message, or Message when Err is nil, or the status
// text when both are empty.
func (e *StatusError) Error() string {
	switch {
	case e.Err != nil:
		return e.Err.Error()
	case e.Message != "":
		return e.Message
	}
	return http.StatusText(e.StatusCode())
}

// ClientMessage returns what the client is told about e: Message, else
// Err's message, else the status text.
func (e *StatusError) ClientMessage() string {
	if e.Message != "" {
		return e.Message
	}
	return e.Error()
}

// Unwrap returns Err, so errors.Is(err, ErrMissingKey) sees through.
func (e *StatusError) Unwrap() error { return e.Err }

// StatusCode returns Code, or 500 when Code is outside 400 to 599.
func (e *StatusError) StatusCode() int {
	if e.Code < 400 || e.Code > 599 {
		return http.StatusInternalServerError
	}
	return e.Code
}

// statusOf returns the status an error of a key, cost or WithLimitsFunc
// function is answered with, and the message for the client: only errors
// that chose their status (a StatusCode method, as *StatusError has) are
// written for clients, and then the message is their ClientMessage if
// they have one (*StatusError), else their message. For other errors it
// returns fallback and "", and the caller says something generic.
func statusOf(err error, fallback int) (int, string) {
	var sc interface{ StatusCode() int }
	if !errors.As(err, &sc) {
		return fallback, ""
	}
	code := sc.StatusCode()
	if code < 400 || code > 599 {
		code = http.StatusInternalServerError
	}
	if cm, ok := sc.(interface{ ClientMessage() string }); ok {
		return code, cm.ClientMessage()
	}
	return code, err.Error()
}

// apiKeyHint says how to send an API key, for KeyByAPIKey's messages.
const apiKeyHint = `send your API key as "Authorization: Bearer <key>" or "X-API-Key: <key>"`

// missingKey returns the error of a built-in key function that found no
// usable key: status code, client the client's message, and a developer's
// message (format, args) after ErrMissingKey's.
func missingKey(code int, client, format string, args ...any) error {
	return &StatusError{Code: code, Message: client, Err: fmt.Errorf("%w: "+format, append([]any{ErrMissingKey}, args...)...)}
}

// msgMisconfigured is what a client is told when the server's rate limiter
// is set up wrong (the developer's error says how).
const msgMisconfigured = "The server's rate limiter is misconfigured; this is not a problem with your request."

// misconfigured is the key function of a built-in constructor that got
// invalid arguments. KeyFunc constructors cannot return errors, but New
// recognises such a function (isMisconfigured) and fails with its error,
// so the mistake never reaches a request; a key function that calls one
// inside its own code answers 500 with a generic message.
func misconfigured(format string, args ...any) KeyFunc {
	err := &StatusError{Code: http.StatusInternalServerError, Message: msgMisconfigured,
		Err: fmt.Errorf("ratelimit: misconfigured key function: "+format, args...)}
	return func(*http.Request) (string, error) { return "", err }
}

// misconfiguredPC is the code pointer of every KeyFunc misconfigured
// returns (the closures of one function literal share their code).
var misconfiguredPC = reflect.ValueOf(misconfigured("")).Pointer()

// misconfiguration returns the error of fn when fn was made by
// misconfigured (calling it then has no effect but returning it), else
// nil. Other functions are not called.
func misconfiguration(fn KeyFunc) error {
	if fn == nil || reflect.ValueOf(fn).Pointer() != misconfiguredPC {
		return nil
	}
	_, err := fn(nil)
	var se *StatusError
	if errors.As(err, &se) && se.Err != nil {
		return se.Err
	}
	return err
}

// KeyByAPIKey keys requests by the API key they present, in this order:
//
//   - "Authorization: Bearer <key>" (RFC 6750 §2.1; the scheme is matched
//     case-insensitively, per RFC 9110 §11.1), or, when there is no
//     Authorization header or it is not a Bearer credential,
//   - "X-API-Key: <key>".
//
// Surrounding spaces are trimmed. A request with neither header, an empty
// key, a key containing spaces or control characters, a key longer than
// MaxKeyLength bytes, or a repeated header (ambiguous: which key pays?) is
// refused with a *StatusError of 401 Unauthorized wrapping ErrMissingKey.
// The rate-limit key is the API key itself (no space in it: the other
// kinds of key have one; see KeyFunc), which costs no allocation.
//
// KeyByAPIKey only reads the key; it does not authenticate it. Run it after
// your authentication middleware, or accept that unknown keys get their own
// (fresh) budgets until authentication rejects them.
func KeyByAPIKey() KeyFunc {
	return func(r *http.Request) (string, error) {
		if vs := r.Header.Values("Authorization"); len(vs) > 0 {
			if len(vs) > 1 {
				return "", missingKey(http.StatusUnauthorized, "The request has more than one Authorization header: send one.",
					"more than one Authorization header")
			}
			if scheme, token, _ := strings.Cut(strings.TrimSpace(vs[0]), " "); strings.EqualFold(scheme, "Bearer") {
				return checkKey(http.StatusUnauthorized, "bearer token", apiKeyHint, token)
			}
			// Another scheme (Basic, ...): the API key may still come in
			// X-API-Key; if it does not, say what was wrong.
			if len(r.Header.Values("X-API-Key")) == 0 {
				return "", missingKey(http.StatusUnauthorized, "The Authorization header is not a Bearer token: "+apiKeyHint+".",
					"Authorization header is not a Bearer token")
			}
		}
		vs := r.Header.Values("X-API-Key")
		switch len(vs) {
		case 0:
			return "", missingKey(http.StatusUnauthorized, "This request has no API key: "+apiKeyHint+".",
				`send an API key as "Authorization: Bearer <key>" or "X-API-Key: <key>"`)
		case 1:
			return checkKey(http.StatusUnauthorized, "X-API-Key header", apiKeyHint, vs[0])
		default:
			return "", missingKey(http.StatusUnauthorized, "The request has more than one X-API-Key header: send one.",
				"more than one X-API-Key header")
		}
	}
}

// KeyByHeader keys requests by the value of the named request header
// (trimmed of surrounding spaces): "header " + the canonical name + " " +
// the value ("header X-Tenant acme"). A missing or empty header, a repeated
// one, a value with control characters or longer than MaxKeyLength bytes
// is refused with a *StatusError of 400 Bad Request wrapping ErrMissingKey.
// An empty or invalid name makes every request fail with 500.
func KeyByHeader(name string) KeyFunc {
	if !validFieldName(name) {
		return misconfigured("KeyByHeader(%q): invalid header name", name)
	}
	canonical := http.CanonicalHeaderKey(name)
	prefix := "header " + canonical + " "
	return func(r *http.Request) (string, error) {
		vs := r.Header[canonical]
		switch len(vs) {
		case 0:
			return "", missingKey(http.StatusBadRequest, "The request has no "+canonical+" header: send one.",
				"missing %s header", canonical)
		case 1:
			v, err := checkKey(http.StatusBadRequest, canonical+" header", "send a valid "+canonical+" header", vs[0])
			if err != nil {
				return "", err
			}
			return prefix + v, nil
		default:
			return "", missingKey(http.StatusBadRequest, "The request has more than one "+canonical+" header: send one.",
				"more than one %s header", canonical)
		}
	}
}

// validFieldName reports whether name is a field name as RFC 9110 §5.1
// defines it: a non-empty token. No request can carry a field of another
// name, so KeyByHeader would refuse every request with a 400 that blames
// the client.
func validFieldName(name string) bool {
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return name != ""
}

// checkKey trims v, the value of what ("bearer token", "X-Tenant header"),
// and refuses empty, oversized or malformed values; hint says what the
// client should do instead.
func checkKey(code int, what, hint, v string) (string, error) {
	v = strings.TrimSpace(v)
	switch {
	case v == "":
		return "", missingKey(code, "The "+what+" is empty: "+hint+".", "empty %s", what)
	case len(v) > MaxKeyLength:
		return "", missingKey(code, "The "+what+" is longer than "+strconv.Itoa(MaxKeyLength)+" bytes: "+hint+".",
			"%s longer than %d bytes", what, MaxKeyLength)
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c <= ' ' || c == 0x7f {
			return "", missingKey(code, "The "+what+" contains spaces or control characters: "+hint+".",
				"malformed %s (spaces or control characters)", what)
		}
	}
	return v, nil
}

// IPOption configures KeyByIP.
type IPOption func(*ipConfig)

type ipConfig struct {
	v4Bits, v6Bits int
	v4Err, v6Err   string // the last IPv4Prefix / IPv6Prefix option's error
}

// IPv6Prefix groups IPv6 clients by their first bits bits, 1 to 128
// (default 64): one customer usually holds a whole /64 and can pick any
// address in it, so per-address limits would be no limits. 128 keys each
// address separately. Other values make every request fail with 500.
func IPv6Prefix(bits int) IPOption {
	return func(c *ipConfig) {
		c.v6Bits, c.v6Err = bits, ""
		if bits < 1 || bits > 128 {
			c.v6Err = fmt.Sprintf("IPv6Prefix(%d): bits must be 1 to 128", bits)
		}
	}
}

// IPv4Prefix groups IPv4 clients by their first bits bits, 1 to 32
// (default 32: each address separately). Other values make every request
// fail with 500.
func IPv4Prefix(bits int) IPOption {
	return func(c *ipConfig) {
		c.v4Bits, c.v4Err = bits, ""
		if bits < 1 || bits > 32 {
			c.v4Err = fmt.Sprintf("IPv4Prefix(%d): bits must be 1 to 32", bits)
		}
	}
}

// KeyByIP keys requests by the client's IP address.
//
// The address is the one stored by chi's ClientIPFrom* middlewares
// (middleware.GetClientIPAddr) when one of them ran before the limiter:
// they read X-Forwarded-For, X-Real-IP and the like only from the trusted
// proxy prefixes you configure. Otherwise it is the connection's address,
// r.RemoteAddr. KeyByIP never reads forwarding headers itself: a client
// could write any address there.
//
// The key is "ip " and the address or prefix: "ip 192.0.2.1",
// "ip 2001:db8:1:2::/64". IPv4-mapped IPv6 addresses (::ffff:192.0.2.1) are keyed as the IPv4
// address and IPv6 zones are dropped, so one client has one key. IPv6
// addresses are grouped by prefix (see IPv6Prefix; the key is then the
// prefix, e.g. "2001:db8:1:2::/64"); IPv4 addresses are keyed exactly
// unless IPv4Prefix says otherwise. Three kinds of IPv6 address are not
// grouped, because a /64 of them holds many unrelated clients: addresses
// of the well-known NAT64 prefix 64:ff9b::/96 (RFC 6052 §2.1) and
// IPv4-compatible addresses ::a.b.c.d (RFC 4291 §2.5.5.1) are keyed as
// the IPv4 address they embed, and link-local addresses (fe80::/10, RFC
// 4291 §2.5.6; every host of a link shares fe80::/64) as the whole
// address. An address that does not parse is
// refused with a *StatusError of 400 wrapping ErrMissingKey.
//
// Behind a proxy without a ClientIPFrom* middleware every client shares
// the proxy's address, and so one budget.
func KeyByIP(opts ...IPOption) KeyFunc {
	cfg := ipConfig{v4Bits: 32, v6Bits: 64}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if cfg.v4Err != "" || cfg.v6Err != "" {
		return misconfigured("KeyByIP: %s", strings.TrimSpace(cfg.v4Err+" "+cfg.v6Err))
	}
	return func(r *http.Request) (string, error) {
		ip := middleware.GetClientIPAddr(r.Context())
		if !ip.IsValid() {
			if cfg.v4Bits == 32 {
				if host, ok := plainIPv4Host(r.RemoteAddr); ok {
					return "ip " + host, nil // what ipKey would make: one allocation
				}
			}
			host, _, err := net.SplitHostPort(r.RemoteAddr)
			if err != nil {
				host = r.RemoteAddr // a bare address, as some tests and proxies set
			}
			if ip, err = netip.ParseAddr(host); err != nil {
				return "", missingKey(http.StatusBadRequest, "The server could not read this request's client address.",
					"unparsable client address (RemoteAddr)")
			}
		}
		return ipKey(ip, cfg.v4Bits, cfg.v6Bits), nil
	}
}

// plainIPv4Host returns the host of a RemoteAddr of the usual shape
// "a.b.c.d:port" (a decimal port) when the host is an IPv4 address in the
// one text form netip.ParseAddr accepts (four decimal fields of 0 to 255
// without leading zeros), which is also the form netip.Addr.String writes:
// the key is then "ip " and the host, unparsed and unformatted. Anything
// else (IPv6, a bare address, odd ports) reports false and takes the
// general path, SplitHostPort and ParseAddr.
func plainIPv4Host(addr string) (string, bool) {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 || i == len(addr)-1 {
		return "", false
	}
	for j := i + 1; j < len(addr); j++ {
		if c := addr[j]; c < '0' || c > '9' {
			return "", false
		}
	}
	host := addr[:i]
	fields, v, digits := 0, 0, 0
	for j := 0; j < len(host); j++ {
		switch c := host[j]; {
		case c >= '0' && c <= '9':
			if digits == 1 && v == 0 { // a leading zero
				return "", false
			}
			v, digits = v*10+int(c-'0'), digits+1
			if v > 255 {
				return "", false
			}
		case c == '.' && digits > 0:
			fields, v, digits = fields+1, 0, 0
		default:
			return "", false
		}
	}
	return host, fields == 3 && digits > 0
}

// nat64Prefix is the well-known NAT64 prefix of RFC 6052 §2.1, whose
// addresses embed an IPv4 address in their last 32 bits.
var nat64Prefix = netip.MustParsePrefix("64:ff9b::/96")

// ipKey returns the key of ip grouped by the given prefix lengths (see
// KeyByIP for the IPv6 addresses that are not grouped), after its kind,
// "ip ".
func ipKey(ip netip.Addr, v4Bits, v6Bits int) string {
	ip = ip.Unmap().WithZone("")
	bits := v6Bits
	if ip.Is6() {
		b := ip.As16()
		switch {
		case nat64Prefix.Contains(ip),
			// IPv4-compatible: ::a.b.c.d, except :: and ::1 (and the
			// rest of ::/112, which embeds no routable IPv4 address).
			[12]byte(b[:12]) == [12]byte{} && b[12]|b[13] != 0:
			ip = netip.AddrFrom4([4]byte(b[12:]))
		case ip.IsLinkLocalUnicast():
			bits = 128
		}
	}
	if ip.Is4() {
		bits = v4Bits
	}
	var buf [64]byte // "ip " and the longest IPv6 prefix (46 bytes)
	b := append(buf[:0], "ip "...)
	if bits == ip.BitLen() {
		return string(ip.AppendTo(b))
	}
	p, _ := ip.Prefix(bits) // bits is within range: checked by the options
	return string(p.AppendTo(b))
}

// ErrNoRoute is wrapped by the errors of KeyByRoute.
var ErrNoRoute = errors.New("ratelimit: no route pattern")

var routeCtxPool = sync.Pool{New: func() any { return chi.NewRouteContext() }}

// KeyByRoute keys requests by their method and route pattern, e.g.
// "route GET /users/{id}" — never by the raw path, which would give every id its
// own budget and let a client create keys without bound. Combine it with
// another key (Compose(KeyByAPIKey(), KeyByRoute())) for per-client,
// per-endpoint limits.
//
// The pattern comes from, in order:
//
//   - chi: the router in the request's chi.RouteContext resolves the full
//     request path with Routes.Find. This works wherever the limiter runs:
//     in a top-level r.Use (before chi has routed the request), in a
//     sub-router, in r.With or in a group.
//   - net/http.ServeMux (Go 1.22+): r.Pattern, which the mux sets before
//     calling the handler it matched; so wrap the handlers registered on
//     the mux (mux.Handle("GET /users/{id}", lim.Handler(h))), not the mux
//     itself. A method or host in the pattern is replaced by the request's
//     method. A pattern without a method serves any method, and clients
//     choose the method: a method other than the nine standard ones (RFC
//     9110 §9 and PATCH) is then keyed "OTHER", so that inventing methods
//     does not mint keys.
//
// A HEAD request without a HEAD route takes the pattern of the GET route
// (as chi's GetHead middleware serves it), keyed "route HEAD <pattern>".
//
// A request that chi cannot route (no such path or method) is refused with
// a *StatusError of 404 Not Found wrapping ErrNoRoute and ErrMissingKey:
// the router would answer 404 or 405 anyway, and an unrouted path must not
// mint keys. So put middlewares that answer requests chi has no route for
// (CORS preflight) before the limiter. Outside chi and without r.Pattern,
// the limiter is misplaced; every request fails with 500 and a message
// saying so.
func KeyByRoute() KeyFunc {
	return func(r *http.Request) (string, error) {
		if rctx := chi.RouteContext(r.Context()); rctx != nil && rctx.Routes != nil {
			path := r.URL.RawPath
			if path == "" {
				path = r.URL.Path
			}
			if path == "" {
				path = "/"
			}
			fresh := routeCtxPool.Get().(*chi.Context)
			fresh.Reset()
			pattern := rctx.Routes.Find(fresh, r.Method, path)
			if pattern == "" && r.Method == http.MethodHead {
				// chi's GetHead middleware, if it runs after the
				// limiter, serves HEAD with the GET route.
				fresh.Reset()
				pattern = rctx.Routes.Find(fresh, http.MethodGet, path)
			}
			routeCtxPool.Put(fresh)
			if pattern == "" {
				// Name the method only if it is a standard one: a client
				// may send any token as a method, and this message is
				// shown and may be logged.
				method, request := "the request method", "this request"
				if standardMethod(r.Method) {
					method, request = r.Method, "this "+r.Method+" request"
				}
				return "", &StatusError{Code: http.StatusNotFound, Message: "No route matches " + request + ".",
					Err: wrap(ErrMissingKey, "", fmt.Errorf("%w: %s matches no route", ErrNoRoute, method))}
			}
			return "route " + r.Method + " " + pattern, nil
		}
		if r.Pattern != "" {
			pattern, method := r.Pattern, r.Method
			if i := strings.IndexByte(pattern, ' '); i >= 0 { // "GET /x" or "GET host/x"
				pattern = strings.TrimLeft(pattern[i+1:], " \t")
			} else if !standardMethod(method) {
				// A pattern without a method serves every method, and a
				// client may send any token as one: keying by it would
				// let a client mint a fresh budget per invented method.
				method = "OTHER"
			}
			return "route " + method + " " + pattern, nil
		}
		return "", &StatusError{Code: http.StatusInternalServerError, Message: msgMisconfigured,
			Err: wrap(ErrMissingKey, "", fmt.Errorf("%w: KeyByRoute needs a chi router around the limiter, or a Go 1.22+ ServeMux handler inside it (r.Pattern is empty)",
				ErrNoRoute))}
	}
}

// standardMethod reports whether m is one of the methods of RFC 9110 §9 or
// PATCH (RFC 5789).
func standardMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// KeyConst keys every request with "const " + s: one budget shared by all
// clients, for example a global cap in front of a fragile backend. An
// empty s makes every request fail with 500.
func KeyConst(s string) KeyFunc {
	if s == "" {
		return misconfigured("KeyConst(\"\"): empty key")
	}
	key := "const " + s
	return func(*http.Request) (string, error) { return key, nil }
}

// Compose keys requests by several key functions at once, for example
// Compose(KeyByAPIKey(), KeyByRoute()) for per-client, per-endpoint limits.
// The key is "compose " and the parts, each length-prefixed
// ("compose 3:abc|5:hello"), so the encoding is injective: parts ("a|b",
// "c") and ("a", "b|c") give different keys. The
// first error of a part is returned as it is. Compose with no functions or
// a nil one makes every request fail with 500.
func Compose(fns ...KeyFunc) KeyFunc {
	if len(fns) == 0 {
		return misconfigured("Compose(): no key functions")
	}
	for i, fn := range fns {
		if fn == nil {
			return misconfigured("Compose: key function %d is nil", i)
		}
		if err := misconfiguration(fn); err != nil {
			return misconfigured("Compose: key function %d: %s", i, strings.TrimPrefix(err.Error(), "ratelimit: misconfigured key function: "))
		}
	}
	fns = append([]KeyFunc(nil), fns...)
	return func(r *http.Request) (string, error) {
		var buf [256]byte
		b := append(buf[:0], "compose "...)
		for i, fn := range fns {
			part, err := fn(r)
			if err != nil {
				return "", err
			}
			if part == "" {
				return "", &StatusError{Code: http.StatusInternalServerError, Message: msgMisconfigured,
					Err: fmt.Errorf("%w: Compose: key function %d returned an empty key", ErrMissingKey, i)}
			}
			if i > 0 {
				b = append(b, '|')
			}
			b = strconv.AppendInt(b, int64(len(part)), 10)
			b = append(b, ':')
			b = append(b, part...)
		}
		return string(b), nil
	}
}
