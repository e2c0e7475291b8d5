package llm

import (
	"math"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/internal/fieldbuf"
)

// OpenAIHeaders writes the same fields with the request's field storage
// (WriteHeadersBuf, as the middleware calls it) as without it, whatever
// room the storage has left (values beyond it go to their own array,
// string slots beyond it to their own block), and leaves what the storage
// handed out before unchanged.
func TestOpenAIHeadersFieldBuf(t *testing.T) {
	req := ratelimit.PerMinute(60).Named("requests")
	tok := ratelimit.Every(1_000_000_000_000, time.Minute).Named("tokens").WithUnit(ratelimit.Tokens)
	for _, l := range []ratelimit.Limit{req, tok} {
		if err := l.Err(); err != nil {
			t.Fatal(err)
		}
	}
	results := []ratelimit.Result{
		{Allowed: true, Decisions: []ratelimit.Decision{{Limit: &req, Allowed: true, Remaining: 59, Reset: time.Second}, {Limit: &tok, Allowed: true, Remaining: 999_999_999_000, Reset: 1500 * time.Millisecond}}},
		{Allowed: true, Decisions: []ratelimit.Decision{{Limit: &tok, Allowed: true, Remaining: math.MaxInt64, Reset: math.MaxInt64}}},
		{Allowed: true, Decisions: []ratelimit.Decision{{Limit: &req, Allowed: true, Remaining: math.MinInt64, Reset: 100 * time.Hour}, {Limit: &tok, Allowed: true, Remaining: math.MaxInt64, Reset: 7*time.Hour + 3*time.Millisecond}}},
		{Allowed: false, RetryAfter: 3 * time.Second, Decisions: []ratelimit.Decision{{Limit: &req, Allowed: false, RetryAfter: 3 * time.Second}, {Limit: &tok, Allowed: true, Remaining: 5}}},
	}
	w := OpenAIHeaders().(openAIHeaders)
	for i, res := range results {
		want := http.Header{}
		w.WriteHeaders(want, res)
		for _, used := range []int{0, 10, 60, 100, fieldbuf.Size - 1, fieldbuf.Size} {
			for _, slots := range []int{0, fieldbuf.Strings - 6, fieldbuf.Strings - 3, fieldbuf.Strings} {
				var fb fieldbuf.Buf
				_ = fb.Values(slots)
				before := fb.Take(append(fb.Bytes(), strings.Repeat("x", used)...))
				got := http.Header{}
				w.WriteHeadersBuf(got, res, &fb)
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("result %d, %d bytes and %d slots used:\n got %v\nwant %v", i, used, slots, got, want)
				}
				if before != strings.Repeat("x", used) {
					t.Fatalf("result %d: a value handed out before changed: %q", i, before)
				}
			}
		}
	}
}
