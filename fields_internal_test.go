package ratelimit

import (
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/rampmeter/ratelimit/internal/fieldbuf"
)

// TestStateSizes holds the request states to the allocator's size
// classes they were sized for (an object of more than 512 bytes with
// pointers carries an 8-byte header): statesOf2 in 640 bytes and
// statesOf2F (with the field storage of an AI path's response) in 896,
// statesOf4 in 768 and statesOf4F in 1024, so that the field storage
// costs no allocation of its own.
func TestStateSizes(t *testing.T) {
	const header = 8
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"statesOf2", unsafe.Sizeof(statesOf2{}), 640},
		{"statesOf2F", unsafe.Sizeof(statesOf2F{}), 896},
		{"statesOf4", unsafe.Sizeof(statesOf4{}), 768},
		{"statesOf4F", unsafe.Sizeof(statesOf4F{}), 1024},
	} {
		if c.got+header > c.want {
			t.Errorf("%s is %d bytes (+%d of header), more than the %d of its size class", c.name, c.got, header, c.want)
		}
	}
}

// writeOwn writes the same IETF fields with the request's field storage
// as without it, whatever room the storage has left (values beyond it go
// to their own array), and leaves what the storage handed out before
// unchanged.
func TestWriteOwnFieldBuf(t *testing.T) {
	req := PerMinute(60).Named("requests")
	tok := Every(1_000_000_000_000, time.Minute).Named("tokens").WithUnit(Tokens)
	for _, l := range []*Limit{&req, &tok} {
		if err := l.Err(); err != nil {
			t.Fatal(err)
		}
	}
	limits := []*Limit{&req, &tok}
	policy := policyField(limits, false)
	results := []Result{
		{Allowed: true, Decisions: []Decision{{Limit: &req, Allowed: true, Remaining: 59, Reset: time.Second}, {Limit: &tok, Allowed: true, Remaining: 999_999_999_000, Reset: time.Hour}}},
		{Allowed: true, Decisions: []Decision{{Limit: &req, Allowed: true, Remaining: 0, Reset: 59 * time.Second}, {Limit: &tok, Allowed: true, Remaining: 1_000_000_000_000, Reset: 0}}},
		{Allowed: false, RetryAfter: 3 * time.Second, Decisions: []Decision{{Limit: &req, Allowed: false, Remaining: 0, RetryAfter: 3 * time.Second}, {Limit: &tok, Allowed: true, Remaining: 5}}},
	}
	w := &styleWriter{style: HeadersIETF | HeadersXRateLimit}
	for i, res := range results {
		want := http.Header{}
		w.writeOwn(want, &res, policy, nil)
		for _, used := range []int{0, 10, 60, 100, fieldbuf.Size - 1, fieldbuf.Size} {
			for _, slots := range []int{0, fieldbuf.Strings - 2, fieldbuf.Strings - 1} {
				var fb fieldbuf.Buf
				_ = fb.Values(slots)
				before := fb.Take(append(fb.Bytes(), strings.Repeat("x", used)...))
				got := http.Header{}
				w.writeOwn(got, &res, policy, &fb)
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("result %d, %d bytes and %d slots used: %v, want %v", i, used, slots, got, want)
				}
				if before != strings.Repeat("x", used) {
					t.Fatalf("result %d: a value handed out before changed: %q", i, before)
				}
			}
		}
	}
}
