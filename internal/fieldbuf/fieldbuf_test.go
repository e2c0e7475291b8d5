package fieldbuf

import (
	"strings"
	"testing"
)

// Values hand out each slot once; Bytes and Take hand out each byte once,
// values that outgrow the room move to their own array, and nothing handed
// out changes afterwards.
func TestBuf(t *testing.T) {
	var b Buf
	if vs := b.Values(3); len(vs) != 3 || cap(vs) != 3 {
		t.Fatalf("Values(3): len %d cap %d", len(vs), cap(vs))
	}
	if vs := b.Values(Strings - 2); vs != nil {
		t.Fatalf("Values beyond the slots: %d slots, want nil", len(vs))
	}
	if vs := b.Values(Strings - 3); len(vs) != Strings-3 {
		t.Fatalf("Values(the rest): %d slots", len(vs))
	}
	if vs := b.Values(1); vs != nil {
		t.Fatal("Values(1) on a full Buf: not nil")
	}

	var got []string
	var want []string
	for i := 0; i < 2*Size/7+3; i++ {
		v := strings.Repeat(string(rune('a'+i%26)), 7)
		got = append(got, b.Take(append(b.Bytes(), v...)))
		want = append(want, v)
	}
	if b.nb != Size-Size%7 {
		t.Fatalf("bytes used: %d, want %d", b.nb, Size-Size%7)
	}
	long := strings.Repeat("z", Size)
	got = append(got, b.Take(append(b.Bytes(), long...)))
	want = append(want, long)
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("value %d: %q, want %q", i, got[i], want[i])
		}
	}
	if b.Take(b.Bytes()) != "" {
		t.Fatal("Take of nothing: not empty")
	}

	var nb *Buf
	if nb.Values(1) != nil || nb.Bytes() != nil {
		t.Fatal("a nil Buf hands out storage")
	}
	if s := nb.Take(append(nb.Bytes(), "abc"...)); s != "abc" {
		t.Fatalf("nil Buf: Take %q", s)
	}
}
