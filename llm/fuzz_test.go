package llm_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/llm"
)

// FuzzProviderHeaders writes the OpenAI and Anthropic fields for fuzzed
// decisions of a requests limit and a tokens limit, and checks that every
// field is printable ASCII and says exactly what its documentation says:
// limit the Burst, remaining max(0, Remaining), the OpenAI reset a Go
// duration of Reset rounded up to milliseconds, the Anthropic reset the
// RFC 3339 time At + Reset rounded up to seconds. Run it with, for example:
//
//	go test -run '^$' -fuzz '^FuzzProviderHeaders$' -fuzztime 10m -parallel 1 ./llm
func FuzzProviderHeaders(f *testing.F) {
	// quota (requests, tokens), remaining, reset, shadow tokens, at
	f.Add(int64(60), int64(100_000), int64(59), int64(time.Second), int64(99_000), int64(864*time.Second), false, int64(1767323045000000))
	f.Add(int64(1)<<51, int64(1), int64(-5), int64(-1), int64(1)<<62, int64(863_999_999), true, int64(0))
	f.Add(int64(1), int64(7), int64(0), int64(0), int64(0), int64(1), false, int64(1))
	f.Fuzz(func(t *testing.T, qr, qt, remR, resetR, remT, resetT int64, shadowT bool, at int64) {
		lr := ratelimit.PerMinute(qr).Named("requests")
		lt := ratelimit.PerDay(qt).Named("tokens").WithUnit(ratelimit.Tokens)
		if shadowT {
			lt = lt.Shadow()
		}
		if lr.Err() != nil || lt.Err() != nil {
			return
		}
		// Reset within two centuries, At between 1970 and 3000, as a
		// store's decisions are.
		clampReset := func(d int64) time.Duration {
			const limit = int64(2 * 100 * 365 * 24 * time.Hour)
			return time.Duration(min(max(d, -limit), limit))
		}
		at = min(max(at, 0), time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro())
		ds := []ratelimit.Decision{
			{Limit: &lr, Allowed: remR >= 0, Remaining: remR, Reset: clampReset(resetR), At: at},
			{Limit: &lt, Allowed: remT >= 0, Remaining: remT, Reset: clampReset(resetT), At: at},
		}
		res := ratelimit.Result{Allowed: ds[0].Allowed && ds[1].Allowed, Decisions: ds}
		h := http.Header{}
		llm.OpenAIHeaders().WriteHeaders(h, res)
		llm.AnthropicHeaders().WriteHeaders(h, res)
		for name, vs := range h {
			for _, v := range vs {
				for i := 0; i < len(v); i++ {
					if v[i] < 0x20 || v[i] > 0x7e {
						t.Fatalf("%s: byte %#x", name, v[i])
					}
				}
			}
		}
		for i, unit := range []string{"Requests", "Tokens"} {
			d := &ds[i]
			if d.Limit.IsShadow() {
				for _, name := range []string{"X-Ratelimit-Limit-" + unit, "Anthropic-Ratelimit-" + unit + "-Limit"} {
					if v := h.Get(name); v != "" {
						t.Fatalf("%s: %q for a shadow limit", name, v)
					}
				}
				continue
			}
			burst, remaining := strconv.FormatInt(d.Limit.Burst(), 10), strconv.FormatInt(max(0, d.Remaining), 10)
			for _, kv := range [][2]string{
				{"X-Ratelimit-Limit-" + unit, burst}, {"X-Ratelimit-Remaining-" + unit, remaining},
				{"Anthropic-Ratelimit-" + unit + "-Limit", burst}, {"Anthropic-Ratelimit-" + unit + "-Remaining", remaining},
			} {
				if got := h.Get(kv[0]); got != kv[1] {
					t.Fatalf("%s: %q, want %q", kv[0], got, kv[1])
				}
			}
			reset, err := time.ParseDuration(h.Get("X-Ratelimit-Reset-" + unit))
			if want := max(0, (d.Reset+time.Millisecond-1)/time.Millisecond*time.Millisecond); err != nil || reset != want {
				t.Fatalf("X-Ratelimit-Reset-%s: %q (%v), want %v", unit, h.Get("X-Ratelimit-Reset-"+unit), err, want)
			}
			when, err := time.Parse(time.RFC3339, h.Get("Anthropic-Ratelimit-"+unit+"-Reset"))
			end := time.UnixMicro(d.At).Add(d.Reset)
			if err != nil || when.Before(end) || !when.Before(end.Add(time.Second)) || when.Nanosecond() != 0 {
				t.Fatalf("Anthropic-Ratelimit-%s-Reset: %q (%v) for %v", unit, h.Get("Anthropic-Ratelimit-"+unit+"-Reset"), err, end)
			}
		}
	})
}
