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
	bytes := ratelimit.Every(1<<20, 10*time.Second).Named("upload").WithUnit("content-bytes")
	fast := ratelimit.Every(5, 500*time.Millisecond).Named("burst.guard")
	odd := ratelimit.Every(10, 1500*time.Millisecond).Named("odd_period").WithUnit("tökens")

	res := ratelimit.Result{Allowed: true, Decisions: []ratelimit.Decision{
		{Limit: &rpm, Allowed: true, Remaining: 12, Reset: 40*time.Second + time.Microsecond},
		{Limit: &tpd, Allowed: true, Remaining: 3400, Reset: 30211 * time.Second},
		{Limit: &bytes, Allowed: true, Remaining: 1000, Reset: 0},
		{Limit: &fast, Allowed: true, Remaining: 5, Reset: 1},
		{Limit: &odd, Allowed: true, Remaining: 9, Reset: 150 * time.Millisecond},
	}}
	h := http.Header{}
	(ratelimit.HeadersIETF | ratelimit.HeadersXRateLimit).WriteHeaders(h, res)

	// w: ceil(period) ≥ 1 (500ms → 1, 1.5s → 2); t: ceil(Reset) (40.000001s
	// → 41, 1ns → 1). content-bytes is a registered unit (qu); "tokens" is
	// not (rampmeter-unit); "tökens" is not an sf-string (left out).
	assert.Equal(t, `"requests";q=60;w=60, "tokens";q=100000;w=86400;rampmeter-unit="tokens", `+
		`"upload";q=1048576;w=10;qu="content-bytes", "burst.guard";q=5;w=1, "odd_period";q=10;w=2`,
		h.Get("RateLimit-Policy"))
	assert.Equal(t, `"requests";r=12;t=41, "tokens";r=3400;t=30211, "upload";r=1000;t=0, "burst.guard";r=5;t=1, "odd_period";r=9;t=1`,
		h.Get("RateLimit"))

	// X-RateLimit-* describe the binding decision; when allowed, the one
	// with the least fraction left: upload 1000/1048576 ≈ 0.001 (tokens
	// 0.034, requests 0.2, odd_period 0.9, burst.guard 1).
	assert.Equal(t, "1048576", h.Get("X-RateLimit-Limit"))
	assert.Equal(t, "1000", h.Get("X-RateLimit-Remaining"))
	assert.Equal(t, "0", h.Get("X-RateLimit-Reset"))

	// Nothing for a Result without decisions.
	h = http.Header{}
	ratelimit.HeadersIETF.WriteHeaders(h, ratelimit.Result{Allowed: true, Bypassed: true})
	assert.Empty(t, h)
}

func TestHeaderStyleString(t *testing.T) {
	assert.Equal(t, "None", ratelimit.HeadersNone.String())
	assert.Equal(t, "IETF", ratelimit.HeadersIETF.String())
	assert.Equal(t, "IETF|XRateLimit", (ratelimit.HeadersIETF | ratelimit.HeadersXRateLimit).String())
	assert.Equal(t, "XRateLimit|HeaderStyle(0x100)", (ratelimit.HeadersXRateLimit | 1<<8).String())
	assert.Equal(t, "HeaderStyle(0xc)", ratelimit.HeaderStyle(1<<2|1<<3).String())
	assert.Equal(t, "FailOpen", ratelimit.FailOpen.String())
	assert.Equal(t, "FailClosed", ratelimit.FailClosed.String())
	assert.Equal(t, "FailureMode(9)", ratelimit.FailureMode(9).String())
}
