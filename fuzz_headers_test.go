package ratelimit_test

// FuzzHeaderFields: the rate-limit fields the middleware writes
// (HeadersIETF, HeadersXRateLimit) must always be valid RFC 9651 Lists
// that say exactly what the limits and decisions are, whatever they are.
// Run it for ten minutes with:
//
//	go test -run '^$' -fuzz '^FuzzHeaderFields$' -fuzztime 10m -parallel 1 .
//
// Findings are kept as regression cases under testdata/fuzz/FuzzHeaderFields.

import (
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rampmeter/ratelimit"
)

// sfParser is a strict parser of RFC 9651 Lists (§4.2.1) of Items (no
// Inner Lists: the rate-limit fields use none) whose bare items are
// Integers, Decimals, Strings, Tokens or Booleans.
type sfParser struct {
	s string
	i int
}

type sfItem struct {
	bare   any // int64, float64 (decimal), sfString, sfToken, bool
	params []sfParam
}

type sfParam struct {
	key   string
	value any
}

type (
	sfString string
	sfToken  string
)

func (p *sfParser) errorf(format string, args ...any) error {
	return errors.New("at byte " + strconv.Itoa(p.i) + " of " + strconv.Quote(p.s) + ": " + fmt.Sprintf(format, args...))
}

func (p *sfParser) peek() byte {
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

func (p *sfParser) eof() bool { return p.i >= len(p.s) }

// parseSFList parses field value s (RFC 9651 §4.2 with §4.2.1).
func parseSFList(s string) ([]sfItem, error) {
	p := &sfParser{s: s}
	// §4.2 step 2: discard leading SP. A serializer emits none, so be
	// stricter: none at all.
	if strings.HasPrefix(s, " ") || strings.HasSuffix(s, " ") {
		return nil, p.errorf("leading or trailing space")
	}
	var items []sfItem
	for !p.eof() {
		it, err := p.item()
		if err != nil {
			return nil, err
		}
		items = append(items, it)
		for p.peek() == ' ' || p.peek() == '\t' {
			p.i++
		}
		if p.eof() {
			return items, nil
		}
		if p.peek() != ',' {
			return nil, p.errorf("expected ','")
		}
		p.i++
		for p.peek() == ' ' || p.peek() == '\t' {
			p.i++
		}
		if p.eof() {
			return nil, p.errorf("trailing comma")
		}
	}
	return items, nil
}

func (p *sfParser) item() (sfItem, error) {
	bare, err := p.bareItem()
	if err != nil {
		return sfItem{}, err
	}
	it := sfItem{bare: bare}
	for p.peek() == ';' {
		p.i++
		for p.peek() == ' ' {
			p.i++
		}
		key, err := p.key()
		if err != nil {
			return sfItem{}, err
		}
		var v any = true
		if p.peek() == '=' {
			p.i++
			if v, err = p.bareItem(); err != nil {
				return sfItem{}, err
			}
		}
		it.params = append(it.params, sfParam{key, v})
	}
	return it, nil
}

func (p *sfParser) key() (string, error) {
	start := p.i
	if c := p.peek(); !(c >= 'a' && c <= 'z' || c == '*') {
		return "", p.errorf("bad key start")
	}
	for !p.eof() {
		c := p.peek()
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' || c == '*') {
			break
		}
		p.i++
	}
	return p.s[start:p.i], nil
}

func (p *sfParser) bareItem() (any, error) {
	switch c := p.peek(); {
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	case c == '"':
		return p.str()
	case c == '?':
		p.i++
		switch p.peek() {
		case '0', '1':
			p.i++
			return p.s[p.i-1] == '1', nil
		}
		return nil, p.errorf("bad boolean")
	case c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c == '*':
		start := p.i
		p.i++
		for !p.eof() {
			c := p.peek()
			if !(isTChar(c) || c == ':' || c == '/') {
				break
			}
			p.i++
		}
		return sfToken(p.s[start:p.i]), nil
	default:
		return nil, p.errorf("unsupported bare item")
	}
}

func isTChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// number parses an Integer or Decimal (§4.2.4).
func (p *sfParser) number() (any, error) {
	neg := false
	if p.peek() == '-' {
		neg = true
		p.i++
	}
	start := p.i
	if c := p.peek(); c < '0' || c > '9' {
		return nil, p.errorf("no digit")
	}
	for !p.eof() && p.peek() >= '0' && p.peek() <= '9' {
		p.i++
	}
	intPart := p.s[start:p.i]
	if p.peek() != '.' {
		if len(intPart) > 15 {
			return nil, p.errorf("integer of %d digits (at most 15)", len(intPart))
		}
		n, _ := strconv.ParseInt(intPart, 10, 64)
		if neg {
			n = -n
		}
		return n, nil
	}
	if len(intPart) > 12 {
		return nil, p.errorf("decimal with %d integer digits (at most 12)", len(intPart))
	}
	p.i++
	fs := p.i
	for !p.eof() && p.peek() >= '0' && p.peek() <= '9' {
		p.i++
	}
	if n := p.i - fs; n < 1 || n > 3 {
		return nil, p.errorf("decimal with %d fraction digits", n)
	}
	v, _ := strconv.ParseFloat(p.s[start:p.i], 64)
	if neg {
		v = -v
	}
	return v, nil
}

// str parses a String (§4.2.5).
func (p *sfParser) str() (any, error) {
	p.i++ // '"'
	var b strings.Builder
	for !p.eof() {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '\\':
			if p.eof() || p.peek() != '"' && p.peek() != '\\' {
				return nil, p.errorf("bad escape")
			}
			b.WriteByte(p.s[p.i])
			p.i++
		case c == '"':
			return sfString(b.String()), nil
		case c < 0x20 || c > 0x7e:
			return nil, p.errorf("byte %#x in a string", c)
		default:
			b.WriteByte(c)
		}
	}
	return nil, p.errorf("unterminated string")
}

// sfParams returns it's parameters as a map, failing on duplicates.
func sfParams(t *testing.T, field string, it sfItem) map[string]any {
	t.Helper()
	m := map[string]any{}
	for _, kv := range it.params {
		if _, dup := m[kv.key]; dup {
			t.Fatalf("%s: duplicate parameter %q", field, kv.key)
		}
		m[kv.key] = kv.value
	}
	return m
}

// sfMaxInteger is the largest RFC 9651 Integer (15 digits).
const sfMaxInteger = 999_999_999_999_999

func fzCeilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d-1)/time.Second) + 1
}

func FuzzHeaderFields(f *testing.F) {
	// name, quota, period, burst, unit, shadow (×2), remaining, reset, at
	f.Add("requests", int64(60), int64(time.Minute), int64(0), "requests", false,
		"tokens", int64(100_000), int64(24*time.Hour), int64(0), "tokens", true,
		int64(12), int64(41*time.Second), int64(3400), int64(30211*time.Second), int64(1767323045000000))
	f.Add("a", int64(1)<<51, int64(time.Hour), int64(0), "requests", false,
		"b", int64(7), int64(3*time.Second), int64(1)<<40, "content-bytes", false,
		int64(1)<<51, int64(1)<<62, int64(-5), int64(-1), int64(0))
	f.Add("big", int64(1)<<51, int64(1<<20*time.Microsecond), int64(0), "requests", false,
		"small", int64(1), int64(time.Second), int64(0), "requests", false,
		int64(1)<<51, int64(time.Second), int64(0), int64(0), int64(0))
	f.Add("x", int64(1), int64(time.Microsecond), int64(1), "caf\xc3\xa9", false,
		"y", int64(3), int64(1500*time.Millisecond), int64(2), "we\"ird\\unit", true,
		int64(-1), int64(1), int64(1), int64(999*time.Millisecond), int64(1))
	f.Fuzz(func(t *testing.T,
		n1 string, q1, p1, b1 int64, u1 string, s1 bool,
		n2 string, q2, p2, b2 int64, u2 string, s2 bool,
		rem1, reset1, rem2, reset2, at int64) {
		build := func(name string, q, p, b int64, u string, shadow bool, fallback string) (ratelimit.Limit, bool) {
			l := ratelimit.Every(q, time.Duration(p)).Named(name)
			if b != 0 {
				l = l.WithBurst(b)
			}
			if u != "" {
				l = l.WithUnit(ratelimit.Unit(u))
			}
			if shadow {
				l = l.Shadow()
			}
			if l.Err() != nil {
				l = l.Named(fallback)
			}
			return l, l.Err() == nil
		}
		l1, ok1 := build(n1, q1, p1, b1, u1, s1, "l1")
		l2, ok2 := build(n2, q2, p2, b2, u2, s2, "l2")
		if !ok1 || !ok2 || l1.Name() == l2.Name() {
			return
		}
		// Decisions as a store makes them, with fuzzed numbers: Reset
		// within twice the longest period, At between 1970 and 3000.
		clampReset := func(d int64) time.Duration {
			const limit = int64(2 * 100 * 365 * 24 * time.Hour)
			return time.Duration(min(max(d, -limit), limit))
		}
		at = min(max(at, 0), time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro())
		ds := []ratelimit.Decision{
			{Limit: &l1, Allowed: rem1 >= 0, Remaining: rem1, Reset: clampReset(reset1), At: at},
			{Limit: &l2, Allowed: rem2 >= 0, Remaining: rem2, Reset: clampReset(reset2), At: at},
		}
		res := ratelimit.Result{Allowed: true, Decisions: ds}
		for i := range ds {
			if !ds[i].Allowed {
				ds[i].RetryAfter = max(time.Second, ds[i].Reset)
				if !ds[i].Limit.IsShadow() {
					res.Allowed = false
					res.RetryAfter = max(res.RetryAfter, ds[i].RetryAfter)
				}
			}
		}
		h := http.Header{}
		(ratelimit.HeadersIETF | ratelimit.HeadersXRateLimit).WriteHeaders(h, res)
		for name, vs := range h {
			for _, v := range vs {
				for i := 0; i < len(v); i++ {
					if v[i] < 0x20 || v[i] > 0x7e {
						t.Fatalf("%s: byte %#x", name, v[i])
					}
				}
			}
		}
		// Shadow limits are left out; with none left, so are the fields.
		var limits []*ratelimit.Limit
		var listed []*ratelimit.Decision
		for i := range ds {
			if !ds[i].Limit.IsShadow() {
				limits, listed = append(limits, ds[i].Limit), append(listed, &ds[i])
			}
		}
		if len(limits) == 0 {
			if len(h["Ratelimit-Policy"]) != 0 || len(h["Ratelimit"]) != 0 {
				t.Fatalf("fields for shadow limits only: %v", h)
			}
			return
		}
		policy, err := parseSFList(h.Get("RateLimit-Policy"))
		if err != nil {
			t.Fatalf("RateLimit-Policy: %v", err)
		}
		rl, err := parseSFList(h.Get("RateLimit"))
		if err != nil {
			t.Fatalf("RateLimit: %v", err)
		}
		if len(policy) != len(limits) || len(rl) != len(limits) {
			t.Fatalf("%d policy items, %d RateLimit items; want %d", len(policy), len(rl), len(limits))
		}
		var binding *ratelimit.Decision // the refusal's
		if !res.Allowed {
			binding = res.Binding()
		}
		for i, l := range limits {
			d := listed[i]
			if policy[i].bare != sfString(l.Name()) || rl[i].bare != sfString(l.Name()) {
				t.Fatalf("item %d names %v / %v, want %q", i, policy[i].bare, rl[i].bare, l.Name())
			}
			pp := sfParams(t, "RateLimit-Policy", policy[i])
			q, w := fzCheckWire(t, l, pp)
			if b, ok := pp["rampmeter-burst"]; ok != (l.Burst() != q) || ok && b != min(l.Burst(), sfMaxInteger) {
				t.Fatalf("rampmeter-burst=%v for burst %d, q %d", b, l.Burst(), q)
			}
			rp := sfParams(t, "RateLimit", rl[i])
			r, ok := rp["r"].(int64)
			if want := min(max(0, d.Remaining), q); !ok || r != want {
				t.Fatalf("r=%v for remaining %d, q %d; want %d", rp["r"], d.Remaining, q, want)
			}
			tt, ok := rp["t"].(int64)
			if !ok || tt < 0 {
				t.Fatalf("t=%v", rp["t"])
			}
			switch {
			case d == binding:
				// The same point in time as Retry-After (draft -11 §6).
				if want := max(1, fzCeilSeconds(res.RetryAfter)); tt != want {
					t.Fatalf("binding t=%d, Retry-After %d", tt, want)
				}
			case !d.Allowed:
				if want := fzCeilSeconds(d.RetryAfter); tt != want {
					t.Fatalf("refusing t=%d for a wait of %v", tt, d.RetryAfter)
				}
			case r < max(0, d.Remaining):
				if tt != w {
					t.Fatalf("t=%d for r capped at q: want w=%d", tt, w)
				}
			default:
				// A token bucket: the next unit beyond r comes Reset minus
				// the refill of the Burst − r − 1 units after it, each
				// Period/Quota; a full one, one interval after r is spent.
				// Exact rationals; the writer may be up to 1µs late.
				exact := new(big.Rat).SetFrac64(int64(d.Reset), int64(time.Second))
				interval := new(big.Rat).SetFrac64(int64(l.Period()), l.Quota()*int64(time.Second))
				if r >= l.Burst() {
					exact.Add(exact, interval)
				} else {
					exact.Sub(exact, new(big.Rat).Mul(interval, new(big.Rat).SetInt64(l.Burst()-r-1)))
				}
				lo := fzCeilRat(exact)
				if tt != lo && tt != lo+1 {
					t.Fatalf("t=%d, want %d (%s s) for remaining %d, reset %v of %v", tt, lo, exact.FloatString(6), d.Remaining, d.Reset, l)
				}
			}
		}
		for _, name := range []string{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"} {
			if v := h.Get(name); v != "" {
				if n, err := strconv.ParseInt(v, 10, 64); err != nil || n < 0 {
					t.Fatalf("%s: %q", name, v)
				}
			}
		}
	})
}

// fzCeilRat returns ⌈max(0, x)⌉.
func fzCeilRat(x *big.Rat) int64 {
	if x.Sign() <= 0 {
		return 0
	}
	q, m := new(big.Int).QuoRem(x.Num(), x.Denom(), new(big.Int))
	if m.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}

// fzCheckWire checks q and w of RateLimit-Policy for l against a model
// computed by brute force: a whole-second period as it is; otherwise the
// smallest window of whole seconds, from the period rounded up to
// max(60, twice that), for which q = Quota × w / Period is whole, else the
// period rounded up with q rounded down. It returns q and w.
func fzCheckWire(t *testing.T, l *ratelimit.Limit, pp map[string]any) (q, w int64) {
	t.Helper()
	q, okq := pp["q"].(int64)
	w, okw := pp["w"].(int64)
	if !okq || !okw || q < 0 || w < 1 {
		t.Fatalf("q=%v w=%v for %v", pp["q"], pp["w"], l)
	}
	p := int64(l.Period())
	if p%int64(time.Second) == 0 {
		if q != min(l.Quota(), sfMaxInteger) || w != p/int64(time.Second) {
			t.Fatalf("q=%d w=%d for %v", q, w, l)
		}
		return q, w
	}
	c := fzCeilSeconds(l.Period())
	qFor := func(w int64) (*big.Int, bool) {
		n := new(big.Int).Mul(big.NewInt(l.Quota()), big.NewInt(w))
		n.Mul(n, big.NewInt(int64(time.Second)))
		quo, rem := new(big.Int).QuoRem(n, big.NewInt(p), new(big.Int))
		return quo, rem.Sign() == 0
	}
	capped := func(n *big.Int) int64 {
		if n.Cmp(big.NewInt(sfMaxInteger)) > 0 {
			return sfMaxInteger
		}
		return n.Int64()
	}
	bound := max(60, 2*c)
	if bound-c > 100_000 {
		// Too far to search: check only that the rate is not overstated.
		if n, _ := qFor(w); w < c || q > capped(n) {
			t.Fatalf("q=%d w=%d for %v", q, w, l)
		}
		return q, w
	}
	wantW, wantQ := c, int64(-1)
	for cand := c; cand <= bound; cand++ {
		if n, exact := qFor(cand); exact {
			wantW, wantQ = cand, capped(n)
			break
		}
	}
	if wantQ < 0 {
		n, _ := qFor(c)
		wantQ = capped(n)
	}
	if q != wantQ || w != wantW {
		t.Fatalf("q=%d w=%d for %v, want q=%d w=%d", q, w, l, wantQ, wantW)
	}
	return q, w
}
