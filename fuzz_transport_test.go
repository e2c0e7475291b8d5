package ratelimit_test

// FuzzVendorWait: the wait a Transport reads from an upstream's 429 or 503
// (Retry-After, retry-after-ms, OpenAI's x-ratelimit-reset-*) is always
// in [0, 100 years], and an integral Retry-After is read exactly. Run it
// for ten minutes with:
//
//	go test -run '^$' -fuzz '^FuzzVendorWait$' -fuzztime 10m -parallel 1 .
//
// Findings are kept as regression cases under testdata/fuzz/FuzzVendorWait.

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/rampmeter/ratelimit"
)

func FuzzVendorWait(f *testing.F) {
	const maxWait = 100 * 365 * 24 * time.Hour
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f.Add(429, "", "120", "", "", "", "", "")
	f.Add(503, "1500.5", "1", "", "", "", "", "")
	f.Add(429, "", "Fri, 02 Jan 2026 03:05:05 GMT", "Fri, 02 Jan 2026 03:04:55 GMT", "", "", "", "")
	f.Add(429, "", "", "", "6m0s", "1.5s", "0", "10")
	f.Add(429, "NaN", "-1", "garbage", "-3s", "1e308", "", "")
	f.Add(429, "+Inf", "99999999999999999999999", "", "20", "", "", "")
	f.Add(200, "", "5", "", "", "", "", "")
	f.Fuzz(func(t *testing.T, status int, ms, ra, date, resetReq, resetTok, remReq, remTok string) {
		h := http.Header{}
		set := func(k, v string) {
			if v != "" {
				h[k] = []string{v}
			}
		}
		set("Retry-After-Ms", ms)
		set("Retry-After", ra)
		set("Date", date)
		set("X-Ratelimit-Reset-Requests", resetReq)
		set("X-Ratelimit-Reset-Tokens", resetTok)
		set("X-Ratelimit-Remaining-Requests", remReq)
		set("X-Ratelimit-Remaining-Tokens", remTok)
		wait, ok := ratelimit.VendorWait(status, h, now)
		if wait < 0 || wait > maxWait {
			t.Fatalf("wait %v out of [0, %v]", wait, maxWait)
		}
		if !ok && wait != 0 {
			t.Fatalf("wait %v without ok", wait)
		}
		if secs, err := strconv.ParseInt(ra, 10, 64); err == nil && ms == "" && secs >= 0 && secs < 1e9 && ra == strconv.FormatInt(secs, 10) {
			if !ok || wait != time.Duration(secs)*time.Second {
				t.Fatalf("Retry-After: %s gave %v, %v", ra, wait, ok)
			}
		}
	})
}
