// Package fieldbuf is the storage of a response's rate-limit field values
// that the middleware keeps in a request's state, shared by the header
// writers of the root package and of llm, so that the fields of a request
// with a reservation cost no allocation of their own.
package fieldbuf

import "unsafe"

// Size is the number of bytes a Buf holds for field values: a Buf is 256
// bytes, which keep a request's state with it (up to two limits, or four)
// in a size class of the allocator (896 or 1024 bytes; see the root
// package's TestStateSizes).
const Size = 126

// Strings is the number of strings a Buf holds.
const Strings = 8

// Buf holds field values: strings, and the bytes they point to. Each
// string slot and each byte is handed out at most once and never written
// again, so the strings handed out stay immutable. The zero Buf is empty
// and ready; a nil *Buf hands out nothing (Values returns nil, Bytes an
// empty slice) and Take copies nothing. A Buf is not safe for concurrent
// use.
type Buf struct {
	vs [Strings]string
	b  [Size]byte
	nv uint8 // string slots handed out
	nb uint8 // bytes handed out
}

// Values returns n string slots of b (a slice of length and capacity n),
// or nil when fewer than n are left.
func (b *Buf) Values(n int) []string {
	if b == nil || n > Strings-int(b.nv) {
		return nil
	}
	vs := b.vs[b.nv : int(b.nv)+n : int(b.nv)+n]
	b.nv += uint8(n)
	return vs
}

// Bytes returns the room left in b as an empty slice: append a value to
// it, then hand the result to Take. An append beyond the room moves the
// value to a new array, which Take keeps as it is.
func (b *Buf) Bytes() []byte {
	if b == nil || b.nb == Size {
		return nil
	}
	return b.b[b.nb:b.nb:Size]
}

// Take returns p, a slice from Bytes that appends extended (or any slice
// that nobody writes again), as a string without copying, and keeps the
// bytes of b it uses from being handed out again.
func (b *Buf) Take(p []byte) string {
	if len(p) == 0 {
		return ""
	}
	if b != nil && b.nb < Size && unsafe.SliceData(p) == &b.b[b.nb] {
		b.nb += uint8(min(len(p), Size-int(b.nb)))
	}
	return unsafe.String(unsafe.SliceData(p), len(p))
}
