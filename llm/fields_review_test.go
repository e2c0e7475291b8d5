package llm_test

// A review test (issue 10, the aipath branch): the response's field values
// live in the request's state (internal/fieldbuf) without a copy; they
// must never change once written, whatever later requests do.

import (
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/llm"
	"github.com/rampmeter/ratelimit/store/memory"
)

// TestReviewFieldValuesNeverAlias serves many requests, admitted and
// refused, alone and through nested Limiters, with handlers that keep the
// response's header map; after all of them (and collections), every kept
// map must hold what it held when its request ended, and its values must
// differ from request to request as the decisions did.
func TestReviewFieldValuesNeverAlias(t *testing.T) {
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	newLim := func(opts ...ratelimit.Option) *ratelimit.Limiter {
		s, err := memory.New(memory.WithClock(func() time.Time { return now }))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		l, err := ratelimit.New(s, append([]ratelimit.Option{ratelimit.WithKey(ratelimit.KeyByHeader("X-Client")),
			ratelimit.WithHeaders(ratelimit.HeadersIETF, llm.OpenAIHeaders())}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	requests := ratelimit.PerMinute(7).Named("requests")
	tokens := ratelimit.Every(1000, time.Minute).Named("tokens").WithUnit(ratelimit.Tokens).
		CostFrom(func(r *http.Request) (int64, error) { return 37, nil })
	requests2 := ratelimit.PerMinute(9).Named("requests2")

	type kept struct {
		name string
		h    http.Header // the handler's map, as the handler left it
		snap http.Header // a deep copy taken then
	}
	var all []kept
	keep := func(name string, h http.Header) {
		snap := make(http.Header, len(h))
		for k, v := range h {
			// Copy the bytes too: a string aliasing reused memory would
			// change under a shallow copy as well.
			c := make([]string, len(v))
			for i, s := range v {
				c[i] = strings.Clone(s)
			}
			snap[k] = c
		}
		all = append(all, kept{name, h, snap})
	}
	handler := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if err := ratelimit.ReportUsage(r.Context(), "tokens", 11); err != nil {
				t.Errorf("%s: ReportUsage: %v", name, err)
			}
			w.WriteHeader(http.StatusOK)
		})
	}
	inner := newLim(ratelimit.WithLimits(requests2))
	outer := newLim(ratelimit.WithLimits(requests, tokens), ratelimit.WithReserveClamp(0.5))
	plain := outer.Handler(handler("plain"))
	nested := outer.Handler(inner.Handler(handler("nested")))

	for i := range 40 {
		for _, c := range []struct {
			name string
			h    http.Handler
		}{{"plain", plain}, {"nested", nested}} {
			r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(`{"model":"m","prompt":"hi"}`))
			r.Header.Set("X-Client", fmt.Sprintf("client-%d", i%3))
			w := httptest.NewRecorder()
			c.h.ServeHTTP(w, r)
			keep(fmt.Sprintf("%s %d (status %d)", c.name, i, w.Code), w.Header())
			if i%5 == 0 {
				runtime.GC()
			}
		}
		now = now.Add(700 * time.Millisecond)
	}
	runtime.GC()
	var withOpenAI, refused int
	for _, k := range all {
		if !maps.EqualFunc(k.h, k.snap, slices.Equal) {
			t.Fatalf("%s: the response's fields changed after the request:\n now %v\nthen %v", k.name, k.h, k.snap)
		}
		if k.h.Get("X-Ratelimit-Remaining-Requests") != "" {
			withOpenAI++
		}
		if k.h.Get("Retry-After") != "" {
			refused++
		}
	}
	if withOpenAI == 0 || refused == 0 {
		t.Fatalf("%d responses with OpenAI fields, %d refused: the test tests nothing", withOpenAI, refused)
	}
	// Consecutive responses of one client differ (the remaining count
	// moves): values shared between requests would not.
	if a, b := all[0].h.Get("X-Ratelimit-Remaining-Requests"), all[6].h.Get("X-Ratelimit-Remaining-Requests"); a == b {
		t.Fatalf("responses 0 and 6 (one client) both say %q remaining", a)
	}
}
