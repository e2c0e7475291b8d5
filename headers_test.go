package ratelimit_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/rampmeter/ratelimit"
)

func TestHeaderStyleSerialisation(t *testing.T) {
	rpm := ratelimit.PerMinute(60).Named("requests")
	tpd := ratelimit.PerDay(100_000).Named("tokens").CostFrom(estimateTokens)
	upload := ratelimit.Every(1<<20, 10*time.Second).Named("upload").WithUnit("content-bytes").WithAlgorithm(ratelimit.FixedWindow)
	fast := ratelimit.Every(5, 500*time.Millisecond).Named("burst.guard")
	odd := ratelimit.Every(10, 1500*time.Millisecond).Named("odd_period").WithUnit("credits").WithAlgorithm(ratelimit.SlidingLog)
	big := ratelimit.PerMinute(60).WithBurst(120).Named("burst120")
	dark := ratelimit.PerMinute(1).Named("dark").Shadow()

	// Decisions as the stores make them.
	res := ratelimit.Result{Allowed: true, Decisions: []ratelimit.Decision{
		// 47.5 units in use: 12 whole units left; full in 47.5 s.
		{Limit: &rpm, Allowed: true, Remaining: 12, Reset: 47500 * time.Millisecond},
		// 96,600 tokens in use: full in 96,600 × 0.864 s = 83,462.4 s.
		{Limit: &tpd, Allowed: true, Remaining: 3400, Reset: 83462400 * time.Millisecond},
		// A fixed window ending in 3.2 s.
		{Limit: &upload, Allowed: true, Remaining: 1000, Reset: 3200 * time.Millisecond},
		// Full: nothing to refill.
		{Limit: &fast, Allowed: true, Remaining: 5},
		// A sliding log whose newest entry leaves the window in 150 ms.
		{Limit: &odd, Allowed: true, Remaining: 9, Reset: 150 * time.Millisecond},
		// One of a 120 burst spent: full in 1 s.
		{Limit: &big, Allowed: true, Remaining: 119, Reset: time.Second},
		{Limit: &dark, Allowed: false, RetryAfter: 30 * time.Second, Reset: time.Minute},
	}}
	h := http.Header{}
	(ratelimit.HeadersIETF | ratelimit.HeadersXRateLimit).WriteHeaders(h, res)

	// q and w: the quota and the period in seconds; 5 per 500ms is sent
	// as 10 per second and 10 per 1.5 s as 20 per 3 s (whole seconds,
	// the same rate), each with its burst (rampmeter-burst) because it is
	// not q; so is burst120's. content-bytes is a registered unit (qu);
	// "tokens" and "credits" are not (rampmeter-unit). The shadow limit
	// is left out.
	assert.Equal(t, `"requests";q=60;w=60, "tokens";q=100000;w=86400;rampmeter-unit="tokens", `+
		`"upload";q=1048576;w=10;qu="content-bytes", "burst.guard";q=10;w=1;rampmeter-burst=5, `+
		`"odd_period";q=20;w=3;rampmeter-unit="credits";rampmeter-burst=10, "burst120";q=60;w=60;rampmeter-burst=120`,
		h.Get("RateLimit-Policy"))
	// t, the effective window, in whole seconds rounded up:
	//   - requests: the next unit beyond the 12 comes when 47.5 s minus the
	//     refill of the 47 after it (1 s each) have passed: 0.5 s → 1;
	//   - tokens: 83,462.4 s − 96,599 × 0.864 s = 0.864 s → 1;
	//   - upload: the end of the fixed window, 3.2 s → 4;
	//   - burst.guard: full, so one interval (100 ms) after r is spent → 1;
	//   - odd_period: until the log's newest entry leaves, 150 ms → 1;
	//   - burst120: r capped at q = 60 (119 left), t = w = 60.
	assert.Equal(t, `"requests";r=12;t=1, "tokens";r=3400;t=1, "upload";r=1000;t=4, "burst.guard";r=5;t=1, `+
		`"odd_period";r=9;t=1, "burst120";r=60;t=60`, h.Get("RateLimit"))

	// X-RateLimit-* describe the binding decision; when allowed, the one
	// with the least fraction left: upload 1000/1048576 ≈ 0.001 (tokens
	// 0.034, requests 0.2, odd_period 0.9, burst120 0.99, burst.guard 1),
	// with its Reset rounded up.
	assert.Equal(t, "1048576", h.Get("X-RateLimit-Limit"))
	assert.Equal(t, "1000", h.Get("X-RateLimit-Remaining"))
	assert.Equal(t, "4", h.Get("X-RateLimit-Reset"))

	// HeadersShadow lists the shadow limit, marked: it refuses (the
	// request passed), so its t is its own wait.
	h = http.Header{}
	(ratelimit.HeadersIETF | ratelimit.HeadersShadow).WriteHeaders(h, ratelimit.Result{Allowed: true, Decisions: res.Decisions[6:]})
	assert.Equal(t, `"dark";q=1;w=60;rampmeter-shadow`, h.Get("RateLimit-Policy"))
	assert.Equal(t, `"dark";r=0;t=30`, h.Get("RateLimit"))
	// Without it, a Result of shadow limits only has no IETF fields (the
	// draft's Lists must not be empty).
	h = http.Header{}
	ratelimit.HeadersIETF.WriteHeaders(h, ratelimit.Result{Allowed: true, Decisions: res.Decisions[6:]})
	assert.Empty(t, h)

	// Nothing for a Result without decisions.
	h = http.Header{}
	ratelimit.HeadersIETF.WriteHeaders(h, ratelimit.Result{Allowed: true, Bypassed: true})
	assert.Empty(t, h)
}

func TestHeaderFieldsOfARefusal(t *testing.T) {
	rpm := ratelimit.PerMinute(60).Named("requests")
	tpm := ratelimit.PerMinute(1000).Named("tokens").CostFrom(estimateTokens)
	rpd := ratelimit.PerDay(1000).Named("daily")
	// tokens refuses for 2.5 s, requests for 1.2 s: tokens binds, and the
	// client is told 2.7 s (jitter), so Retry-After is 3 and so is the
	// binding t; requests' t is its own wait, 2; daily admitted and has
	// 400 left: its next unit is 86.4 s (one interval) beyond the 600
	// used, a full day less the 599 after it.
	res := ratelimit.Result{RetryAfter: 2700 * time.Millisecond, Decisions: []ratelimit.Decision{
		{Limit: &rpm, RetryAfter: 1200 * time.Millisecond, Reset: 60 * time.Second},
		{Limit: &tpm, Remaining: 30, RetryAfter: 2500 * time.Millisecond, Reset: 58200 * time.Millisecond},
		{Limit: &rpd, Allowed: true, Remaining: 400, Reset: 600 * 86400 * time.Millisecond},
	}}
	h := http.Header{}
	(ratelimit.HeadersIETF | ratelimit.HeadersXRateLimit).WriteHeaders(h, res)
	assert.Equal(t, `"requests";r=0;t=2, "tokens";r=30;t=3, "daily";r=400;t=87`, h.Get("RateLimit"))
	// X-RateLimit-* follow the binding refusal: tokens, full in 58.2 s.
	assert.Equal(t, "1000", h.Get("X-RateLimit-Limit"))
	assert.Equal(t, "30", h.Get("X-RateLimit-Remaining"))
	assert.Equal(t, "59", h.Get("X-RateLimit-Reset"))
}

func TestHeaderStyleString(t *testing.T) {
	assert.Equal(t, "None", ratelimit.HeadersNone.String())
	assert.Equal(t, "IETF", ratelimit.HeadersIETF.String())
	assert.Equal(t, "IETF|XRateLimit", (ratelimit.HeadersIETF | ratelimit.HeadersXRateLimit).String())
	assert.Equal(t, "XRateLimit|HeaderStyle(0x100)", (ratelimit.HeadersXRateLimit | 1<<8).String())
	assert.Equal(t, "IETF|Shadow", (ratelimit.HeadersIETF | ratelimit.HeadersShadow).String())
	assert.Equal(t, "HeaderStyle(0x18)", ratelimit.HeaderStyle(1<<3|1<<4).String())
	assert.Equal(t, "FailOpen", ratelimit.FailOpen.String())
	assert.Equal(t, "FailClosed", ratelimit.FailClosed.String())
	assert.Equal(t, "FailureMode(9)", ratelimit.FailureMode(9).String())
}
