package llm

import (
	"bytes"
	"encoding/binary"
	"io"
	"math/bits"
	"math/rand/v2"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"unsafe"
)

// TestSpecialBytes holds specialBytes' lowest set bit to the first byte
// that strSpecial marks: every byte value at every position, after
// ordinary bytes and before random ones, and random words.
func TestSpecialBytes(t *testing.T) {
	first := func(w [8]byte) int {
		for i, c := range w {
			if strSpecial[c] {
				return i
			}
		}
		return 8
	}
	got := func(w [8]byte) int {
		m := specialBytes(binary.LittleEndian.Uint64(w[:]))
		if m == 0 {
			return 8
		}
		return bits.TrailingZeros64(m) / 8
	}
	rng := rand.New(rand.NewPCG(1, 2))
	check := func(w [8]byte) {
		t.Helper()
		if g, want := got(w), first(w); g != want {
			t.Fatalf("%q: first special byte at %d, specialBytes says %d", w[:], want, g)
		}
	}
	for pos := range 8 {
		for c := range 256 {
			var w [8]byte
			for i := range w {
				w[i] = 'a'
			}
			w[pos] = byte(c)
			check(w)
			for i := pos + 1; i < 8; i++ {
				w[i] = byte(rng.UintN(256))
			}
			check(w)
		}
	}
	for range 1_000_000 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], rng.Uint64())
		check(w)
		// Mostly printable ASCII, as bodies are.
		for i := range w {
			w[i] = byte(0x20 + rng.UintN(0x60))
		}
		check(w)
	}
}

// TestCachedBodySize holds each cachedBody with its room to exactly the
// size class it is meant to fill, on any architecture.
func TestCachedBodySize(t *testing.T) {
	for _, c := range []struct {
		got, want uintptr
	}{
		{unsafe.Sizeof(cachedBody512{}), 512},
		{unsafe.Sizeof(cachedBody1024{}), 1024},
		{unsafe.Sizeof(cachedBody2048{}), 2048},
		{unsafe.Sizeof(cachedBody4096{}), 4096},
	} {
		if c.got != c.want {
			t.Errorf("a cachedBody with its room is %d bytes, not the size class %d", c.got, c.want)
		}
	}
}

// TestReadOpenAIBodyInline reads bodies of sizes around the cachedBody
// size classes, announced truly, too small, too large or not at all, and
// gets what the reference reads, with the body left in r.Body.
func TestReadOpenAIBodyInline(t *testing.T) {
	for _, n := range []int{30, 200, 279, 280, 281, 791, 792, 793, 1815, 1816, 1817, 3863, 3864, 3865, 10000} {
		body := []byte(`{"messages":[{"content":"` + strings.Repeat("a", n-len(`{"messages":[{"content":""}]}`)) + `"}]}`)
		if len(body) != n {
			t.Fatalf("body of %d bytes, want %d", len(body), n)
		}
		for _, size := range []int64{-1, 0, 1, int64(n) - 1, int64(n), int64(n) + 1, 2 * int64(n)} {
			for _, maxBytes := range []int64{int64(n) - 1, int64(n), DefaultMaxBodyBytes} {
				r := httptest.NewRequest("POST", "/", bytes.NewReader(body))
				r.ContentLength = size
				ref := httptest.NewRequest("POST", "/", bytes.NewReader(body))
				got, err := ReadOpenAIBody(r, maxBytes)
				if size > maxBytes { // announced too large: refused unread
					if err == nil {
						t.Fatalf("n %d, size %d, max %d: no error, want 413", n, size, maxBytes)
					}
					continue
				}
				want, wantErr := refReadOpenAIBody(ref, maxBytes)
				if wantErr != nil {
					if err == nil {
						t.Fatalf("n %d, size %d, max %d: no error, want one", n, size, maxBytes)
					}
					continue
				}
				if err != nil || !reflect.DeepEqual(got, want) {
					t.Fatalf("n %d, size %d, max %d: %v, %v; want %v", n, size, maxBytes, got, err, want)
				}
				again, err := io.ReadAll(r.Body)
				if err != nil || !bytes.Equal(again, body) {
					t.Fatalf("n %d, size %d: r.Body reads %d bytes, %v", n, size, len(again), err)
				}
			}
		}
	}
}
