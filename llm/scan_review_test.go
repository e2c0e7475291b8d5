package llm

// Review tests (issue 10, the aipath branch): the branch's scanner (keys
// matched without a fold copy, strings scanned eight bytes at a time) and
// ReadOpenAIBody (the body read into its cachedBody's allocation) against
// main's scanner (scanold_review_test.go) and the encoding/json reference.

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

// rvCheck holds the branch's scanner to main's on raw: both hand over
// alike, and where they parse they fill the same OpenAIBody, with the same
// token estimate; the whole parse also equals the reference (checkParse).
func rvCheck(t *testing.T, raw []byte) {
	t.Helper()
	data := bytes.TrimSpace(raw)
	var got, want OpenAIBody
	gotOK := scanOpenAIBody(data, &got, nil)
	wantOK := rvScanOpenAIBody(data, &want, nil)
	if gotOK != wantOK {
		t.Fatalf("%q: the scanner returns %v, main's %v", raw, gotOK, wantOK)
	}
	if gotOK {
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\n got %#v\nwant %#v (main's scanner)", raw, got, want)
		}
		c, err := newEstimateConfig("review", nil)
		if err != nil {
			t.Fatal(err)
		}
		gp, gout := got.estimate(&c)
		wp, wout := want.estimate(&c)
		if gp != wp || gout != wout {
			t.Fatalf("%q: estimate %d+%d, main's %d+%d", raw, gp, gout, wp, wout)
		}
	}
	checkParse(t, raw)
}

// rvFieldNames are the keys the scanner reads, at the top level, in items
// and in stream_options.
var rvFieldNames = []string{
	"system", "messages", "input", "prompt", "model", "stream", "stream_options",
	"include_usage", "instructions", "tools", "functions", "max_tokens",
	"max_completion_tokens", "max_output_tokens", "n", "content", "output",
	"text", "arguments", "role", "type",
}

// rvKey spells name as a client might: in any case, with \u escapes (of
// either hex case) for some of its letters, or with a rune that folds to
// an ASCII letter (U+017F ſ for s, U+212A Kelvin sign for k), raw or
// escaped.
func rvKey(rng *rand.Rand, name string) string {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		if rng.IntN(3) == 0 && 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		switch x := rng.IntN(12); {
		case x == 0:
			fmt.Fprintf(&b, `\u%04x`, c)
		case x == 1:
			fmt.Fprintf(&b, `\u%04X`, c)
		case x == 2 && (c == 's' || c == 'S'):
			b.WriteString([]string{"ſ", `\u017f`, `\u017F`}[rng.IntN(3)])
		case x == 2 && (c == 'k' || c == 'K'):
			b.WriteString([]string{"\u212a", `\u212a`, `\u212A`}[rng.IntN(3)])
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// rvString is a valid JSON string's content of about n bytes, with
// special bytes (escapes, non-ASCII runes, invalid UTF-8) at random
// offsets of its eight-byte words.
func rvString(rng *rand.Rand, n int) string {
	specials := []string{`\"`, `\\`, `\/`, `\n`, `\u0022`, `\u005c`, `\ud83d\ude00`, `\ud83d`, "é", "\xff", "\xe2\x82", "\x7f", " ", "€"}
	var b strings.Builder
	for b.Len() < n {
		if rng.IntN(6) == 0 {
			b.WriteString(specials[rng.IntN(len(specials))])
		} else {
			b.WriteByte(byte('a' + rng.IntN(26)))
		}
	}
	return b.String()
}

// TestReviewScanString puts each special byte at each position of strings
// of up to 40 bytes, as a content, a key and the model.
func TestReviewScanString(t *testing.T) {
	specials := []string{`\"`, `\\`, `\n`, `\u0041`, "é", "\xff", "\x01", "\x1f", "\x7f", "\x80", `"`, "\\"}
	for n := 0; n <= 40; n++ {
		for p := 0; p <= n; p++ {
			for _, sp := range specials {
				s := strings.Repeat("a", p) + sp + strings.Repeat("b", n-p)
				for _, body := range []string{
					`{"messages":[{"role":"user","content":"` + s + `"}],"model":"m"}`,
					`{"model":"` + s + `","prompt":"x"}`,
					`{"` + s + `":1,"prompt":"x"}`,
					`{"prompt":"` + s + `"}`,
				} {
					rvCheck(t, []byte(body))
				}
			}
		}
	}
}

// TestReviewScanKeys spells every field name in every way rvKey has, at
// the top level, in messages and items, and nested deeper (where the
// same names mean nothing), with values of the right and of wrong types.
func TestReviewScanKeys(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 2))
	values := []string{`"text"`, `1`, `true`, `null`, `[]`, `{}`, `["a","b"]`, `[1,2]`,
		`[{"type":"text","text":"hi"}]`, `{"include_usage":true}`, `{"INCLUDE_USAGE":true}`, `-1`, `1.5`, `3`}
	for range 20000 {
		var b strings.Builder
		b.WriteString("{")
		for j := range 1 + rng.IntN(5) {
			if j > 0 {
				b.WriteString(",")
			}
			name := rvFieldNames[rng.IntN(len(rvFieldNames))]
			fmt.Fprintf(&b, `"%s":`, rvKey(rng, name))
			switch rng.IntN(4) {
			case 0: // a message or item with the names inside, and deeper
				inner := rvFieldNames[rng.IntN(len(rvFieldNames))]
				fmt.Fprintf(&b, `[{"%s":%s,"%s":{"%s":%s}}]`, rvKey(rng, "content"), values[rng.IntN(len(values))],
					rvKey(rng, inner), rvKey(rng, inner), values[rng.IntN(len(values))])
			case 1:
				fmt.Fprintf(&b, `{"%s":%s}`, rvKey(rng, "include_usage"), values[rng.IntN(len(values))])
			default:
				b.WriteString(values[rng.IntN(len(values))])
			}
		}
		b.WriteString("}")
		rvCheck(t, []byte(b.String()))
	}
}

// TestReviewScanShapes runs the shape generator of FuzzParseOpenAIBodyShapes
// on random seeds against main's scanner.
func TestReviewScanShapes(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 3))
	for range 30000 {
		seed := make([]byte, rng.IntN(200))
		for i := range seed {
			seed[i] = byte(rng.Uint32())
		}
		g := &bodyGen{seed: seed}
		var sb strings.Builder
		g.object(&sb, 0, true)
		rvCheck(t, []byte(sb.String()))
	}
}

// FuzzReviewScanMatchesMain holds the scanner to main's on fuzzed bodies:
//
//	go test -run '^$' -fuzz '^FuzzReviewScanMatchesMain$' -fuzztime 2m ./llm
func FuzzReviewScanMatchesMain(f *testing.F) {
	for _, body := range trickyBodies {
		if len(body) < 4096 {
			f.Add([]byte(body))
		}
	}
	f.Add([]byte(`{"MESSAGES":[{"Content":"a\"b\\c"}],"mod\u0065l":"x"}`))
	f.Fuzz(func(t *testing.T, raw []byte) { rvCheck(t, raw) })
}

// FuzzReviewScanShapesMatchesMain is FuzzParseOpenAIBodyShapes against
// main's scanner.
func FuzzReviewScanShapesMatchesMain(f *testing.F) {
	f.Add([]byte("chat completions"))
	f.Fuzz(func(t *testing.T, seed []byte) {
		g := &bodyGen{seed: seed}
		var sb strings.Builder
		g.object(&sb, 0, true)
		rvCheck(t, []byte(sb.String()))
	})
}

// rvBody returns a valid chat body of exactly n bytes (n >= 64), its
// content made of random strings with special bytes.
func rvBody(rng *rand.Rand, n int) []byte {
	head, tail := `{"model":"gpt-4o","messages":[{"role":"user","content":"`, `"}]}`
	s := rvString(rng, n-len(head)-len(tail))
	// Trim to fit exactly: cut whole runs and pad with letters.
	for len(head)+len(s)+len(tail) > n {
		s = s[:len(s)-1]
		// Do not leave a dangling backslash (an escape cut in half).
		for strings.HasSuffix(s, `\`) && (len(s)-len(strings.TrimRight(s, `\`)))%2 == 1 {
			s = s[:len(s)-1]
		}
		// Nor half a \u escape.
		if i := strings.LastIndex(s, `\u`); i >= 0 && len(s)-i < 6 && (i == 0 || s[i-1] != '\\') {
			s = s[:i]
		}
	}
	for len(head)+len(s)+len(tail) < n {
		s += "z"
	}
	return []byte(head + s + tail)
}

// TestReviewReadOpenAIBodySizes reads bodies of sizes around each of the
// cachedBody's size classes (3863 bytes fit the largest with room for
// io.EOF, 3864 do not), announced exactly, not at all (chunked), too
// short and too long, in one read and one byte at a time: the parse must
// equal the reference's, and the handler must read the very bytes sent,
// which a later request must not change.
func TestReviewReadOpenAIBodySizes(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 4))
	var sizes []int
	for _, class := range []int{512, 1024, 2048, 4096} {
		room := class - cachedBodySize
		for d := -2; d <= 2; d++ {
			sizes = append(sizes, room+d)
		}
	}
	sizes = append(sizes, 64, 65, 3863, 3864, 3865, 8000, 64<<10, 64<<10+1)
	type kept struct {
		raw, want []byte
	}
	var keep []kept
	for _, n := range sizes {
		body := rvBody(rng, n)
		if len(body) != n {
			t.Fatalf("body of %d bytes, want %d", len(body), n)
		}
		for _, announced := range []int64{int64(n), -1, 0, int64(n) - 1, int64(n) / 2, int64(n) + 1, int64(n) + 4000} {
			for name, wrap := range map[string]func(io.Reader) io.Reader{
				"plain": func(r io.Reader) io.Reader { return r }, "one byte": iotest.OneByteReader, "half": iotest.HalfReader,
			} {
				for _, maxBytes := range []int64{0, int64(n), int64(n) - 1, int64(n) + 1} {
					r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", wrap(bytes.NewReader(body)))
					r.ContentLength = announced
					ref := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(body))
					ref.ContentLength = announced
					mb := maxBytes
					if mb < 1 {
						mb = DefaultMaxBodyBytes
					}
					got, err := ReadOpenAIBody(r, maxBytes)
					tooLarge := announced > mb || int64(n) > mb
					if tooLarge {
						if err == nil {
							t.Fatalf("%d bytes, announced %d, max %d, %s: no error", n, announced, maxBytes, name)
						}
						continue
					}
					want, wantErr := refReadOpenAIBody(ref, mb)
					if fmt.Sprint(err) != fmt.Sprint(wantErr) || !reflect.DeepEqual(got, want) {
						t.Fatalf("%d bytes, announced %d, max %d, %s: %v, %v\nwant %v, %v", n, announced, maxBytes, name, got, err, want, wantErr)
					}
					// The handler reads the body, in full, twice over
					// (a copy of the request made before reading).
					cp := r.WithContext(r.Context())
					again, err := ReadOpenAIBody(cp, maxBytes)
					if err != nil || again != got {
						t.Fatalf("%d bytes: a second ReadOpenAIBody gave %p, %v; want %p", n, again, err, got)
					}
					read, err := io.ReadAll(r.Body)
					if err != nil || !bytes.Equal(read, body) {
						t.Fatalf("%d bytes, announced %d, %s: the handler read %d bytes (%v), want the %d sent", n, announced, name, len(read), err, n)
					}
					if !bytes.Equal(got.Raw, body) {
						t.Fatalf("%d bytes: Raw is not the body", n)
					}
					keep = append(keep, kept{got.Raw, bytes.Clone(body)})
				}
			}
		}
	}
	// Later requests must not have written into an earlier body.
	for i, k := range keep {
		if !bytes.Equal(k.raw, k.want) {
			t.Fatalf("body %d changed after later requests", i)
		}
	}
}

// TestReviewReadOpenAIBodyOverHTTP sends bodies around the size classes
// through a real server, with a Content-Length and chunked: the cost
// function's parse and the handler's read agree with what was sent.
func TestReviewReadOpenAIBodyOverHTTP(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 5))
	type seen struct {
		raw  []byte
		read []byte
		err  error
	}
	ch := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := ReadOpenAIBody(r, 0)
		var s seen
		s.err = err
		if err == nil {
			s.raw = b.Raw
			s.read, s.err = io.ReadAll(r.Body)
		}
		ch <- s
	}))
	defer srv.Close()
	for _, n := range []int{279, 280, 281, 791, 792, 1815, 1816, 3862, 3863, 3864, 3865, 5000} {
		body := rvBody(rng, n)
		for _, chunked := range []bool{false, true} {
			var rd io.Reader = bytes.NewReader(body)
			if chunked {
				rd = io.MultiReader(bytes.NewReader(body[:n/3]), bytes.NewReader(body[n/3:])) // no length: chunked
			}
			req, err := http.NewRequest(http.MethodPost, srv.URL, rd)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			s := <-ch
			if s.err != nil || !bytes.Equal(s.raw, body) || !bytes.Equal(s.read, body) {
				t.Fatalf("%d bytes, chunked %v: %v; raw equal %v, read equal %v", n, chunked, s.err, bytes.Equal(s.raw, body), bytes.Equal(s.read, body))
			}
		}
	}
}
