package llm

// A review test (issue 10, the aipath branch): the scanner of main before
// the branch (llm/scan.go at main 6acec70), copied with every top-level
// identifier prefixed "rv", is the oracle of the branch's scanner: on
// every body both must hand over (return false) alike, and, where they
// parse, fill identical OpenAIBody values (so every token estimate is the
// same). The copy is generated; do not edit it by hand.

import (
	"math"
	"slices"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// The scanner parses an OpenAI-style body in one pass without
// encoding/json: it validates the JSON as encoding/json does, matches keys
// as encoding/json matches struct fields (exactly, else case-insensitively
// with Unicode simple folding), decodes strings as encoding/json does
// (escapes, surrogate pairs, invalid UTF-8 replaced by U+FFFD), and keeps
// the last of duplicate keys. Its strings point into the body (or, for
// strings with escapes or invalid UTF-8, into one buffer of decoded
// bytes), so a typical body costs no allocation beyond the storage it is
// given.
//
// It gives up (scanOpenAIBody returns false) on every body that
// encoding/json would refuse — malformed JSON, a field of the wrong type,
// a negative output cap, n < 1, content nested too deep — and on a few
// legal but rare shapes (a repeated "messages", token IDs sent as strings,
// nesting deeper than maxScanDepth); parseOpenAIBodyJSON then parses the
// body, so every error keeps encoding/json's words, and every result is
// the one parseOpenAIBodyJSON gives. The differential tests and the fuzz
// test in scan_test.go hold the two equal.

// maxScanDepth bounds the nesting the scanner follows (encoding/json
// follows 10,000 levels); deeper bodies go to encoding/json.
const rvMaxScanDepth = 512

// strSpecial marks the bytes that end the scanner's fast loop in a string:
// the quote, the backslash, control characters and non-ASCII bytes.
var rvStrSpecial = func() (t [256]bool) {
	for c := range 256 {
		t[c] = c == '"' || c == '\\' || c < 0x20 || c >= utf8.RuneSelf
	}
	return t
}()

// String flags, from scanString.
const (
	rvStrEscaped  = 1 << iota // has a backslash escape
	rvStrNonASCII             // has a byte ≥ 0x80
	rvStrBadUTF8              // has invalid UTF-8 (replaced by U+FFFD when decoded)
)

// strTok is a string token: the bytes between its quotes and its flags.
type rvStrTok struct {
	start, end int
	flags      uint8
}

// seg is the range texts[start:end] that one field's value added.
type rvSeg struct{ start, end int }

type rvScanner struct {
	data  []byte // the body, trimmed
	i     int    // the next byte to read
	depth int    // objects and arrays open
	texts []string
	arena []byte // decoded strings that have escapes or invalid UTF-8
}

// Top-level fields; the first four add texts, in this order (the order of
// OpenAIBody.Texts).
const (
	rvFSystem = iota
	rvFMessages
	rvFInput
	rvFPrompt
	rvFModel
	rvFStream
	rvFStreamOptions
	rvFInstructions
	rvFTools
	rvFFunctions
	rvFMaxTokens
	rvFMaxCompletionTokens
	rvFMaxOutputTokens
	rvFN
	rvFUnknown
)

// Item fields (wireItem).
const (
	rvIContent = iota // adds texts, before iOutput's
	rvIOutput
	rvIText
	rvIArguments
	rvIUnknown
)

// scanOpenAIBody parses data (the body, trimmed of white space) into dst,
// with texts as the storage for dst.Texts, and reports whether it could; see
// the comment at the top of this file.
func rvScanOpenAIBody(data []byte, dst *OpenAIBody, texts []string) bool {
	if len(data) == 0 || data[0] != '{' {
		return false
	}
	s := rvScanner{data: data, texts: texts}
	var (
		segs          [4]rvSeg
		ids           [4]int64 // token IDs of input and prompt
		sawMessages   bool
		model, instr  string
		stream, usage bool
		tools, funcs  string
		hasTools      bool
		hasFuncs      bool
		ints          [4]int64 // max_tokens, max_completion_tokens, max_output_tokens, n
		hasInt        [4]bool
	)
	s.depth = 1
	s.i = 1
	for first := true; ; first = false {
		k, more, ok := s.nextKey(first)
		if !ok {
			return false
		}
		if !more {
			break
		}
		switch f := s.topField(k); f {
		case rvFSystem, rvFInput, rvFPrompt:
			s.drop(segs[:], f)
			start := len(s.texts)
			if f == rvFSystem {
				ok = s.content(0)
			} else {
				ids[f], ok = s.input()
			}
			segs[f] = rvSeg{start, len(s.texts)}
		case rvFMessages:
			if sawMessages {
				return false // encoding/json merges repeated arrays of structs element by element
			}
			sawMessages = true
			start := len(s.texts)
			ok = s.messages()
			segs[f] = rvSeg{start, len(s.texts)}
		case rvFModel:
			ok = s.keepString(&model)
		case rvFInstructions:
			ok = s.keepString(&instr)
		case rvFStream:
			ok = s.keepBool(&stream)
		case rvFStreamOptions:
			usage = false
			ok = s.streamOptions(&usage)
		case rvFTools:
			tools, hasTools, ok = s.rawText()
		case rvFFunctions:
			funcs, hasFuncs, ok = s.rawText()
		case rvFMaxTokens, rvFMaxCompletionTokens, rvFMaxOutputTokens, rvFN:
			j := f - rvFMaxTokens
			ints[j], hasInt[j], ok = s.count()
		default:
			ok = s.skipValue()
		}
		if !ok {
			return false
		}
	}
	if s.i != len(s.data) {
		return false // bytes after the object
	}
	b := OpenAIBody{Raw: data, Model: model, Stream: stream, IncludeUsage: usage, N: 1}
	for j := range 3 {
		if hasInt[j] {
			b.MaxOutputTokens = max(b.MaxOutputTokens, ints[j]) // each ≥ 0: count refuses negatives
			b.HasMaxOutput = true
		}
	}
	if hasInt[3] {
		if ints[3] < 1 {
			return false
		}
		b.N = ints[3]
	}
	b.TokenIDs = ids[rvFInput] + ids[rvFPrompt]
	s.order(0, segs[:])
	if instr != "" {
		s.texts = slices.Insert(s.texts, 0, instr)
	}
	if hasTools {
		s.texts = append(s.texts, tools)
	}
	if hasFuncs {
		s.texts = append(s.texts, funcs)
	}
	if len(s.texts) > 0 {
		b.Texts = s.texts
	}
	*dst = b
	return true
}

// drop removes the texts that an earlier occurrence of field k added (a
// duplicate key: the last one counts).
func (s *rvScanner) drop(segs []rvSeg, k int) {
	g := segs[k]
	segs[k] = rvSeg{}
	n := g.end - g.start
	if n == 0 {
		return
	}
	s.texts = slices.Delete(s.texts, g.start, g.end)
	for j := range segs {
		if segs[j].end > segs[j].start && segs[j].start >= g.end {
			segs[j].start -= n
			segs[j].end -= n
		}
	}
}

// order rearranges texts[base:], which the non-empty segments in segs
// tile in body order, into the order of segs.
func (s *rvScanner) order(base int, segs []rvSeg) {
	last := -1 // the start of the last non-empty segment: in order so far?
	for _, g := range segs {
		if g.end > g.start {
			if g.start < last {
				goto reorder
			}
			last = g.start
		}
	}
	return // the common case: the fields came in this order
reorder:
	pos := base
	for i := range segs {
		g := segs[i]
		n := g.end - g.start
		if n == 0 {
			continue
		}
		if g.start != pos {
			// texts[pos:g.start] holds later segments: move g before them.
			before := g.start - pos
			t := s.texts[pos:g.end]
			slices.Reverse(t[:before])
			slices.Reverse(t[before:])
			slices.Reverse(t)
			for j := i + 1; j < len(segs); j++ {
				if h := &segs[j]; h.end > h.start && h.start >= pos && h.start < g.start {
					h.start += n
					h.end += n
				}
			}
		}
		pos += n
	}
}

func (s *rvScanner) peek() byte {
	if s.i < len(s.data) {
		return s.data[s.i]
	}
	return 0
}

func (s *rvScanner) skipWS() {
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// open consumes the '{' or '[' at s.i.
func (s *rvScanner) open() bool {
	s.depth++
	s.i++
	return s.depth <= rvMaxScanDepth
}

// nextKey moves to the next member of the object being read (first: its
// first member): it returns the key and leaves s.i at the value, or
// consumes the closing brace and returns more false.
func (s *rvScanner) nextKey(first bool) (k rvStrTok, more, ok bool) {
	s.skipWS()
	c := s.peek()
	if c == '}' { // after "{" or a value: "," then "}" fails below
		s.i++
		s.depth--
		return k, false, true
	}
	if !first {
		if c != ',' {
			return k, false, false
		}
		s.i++
		s.skipWS()
		c = s.peek()
	}
	if c != '"' {
		return k, false, false
	}
	if k, ok = s.scanString(); !ok {
		return k, false, false
	}
	s.skipWS()
	if s.peek() != ':' {
		return k, false, false
	}
	s.i++
	s.skipWS()
	return k, true, true
}

// nextElem moves to the next element of the array being read (first: its
// first element), leaving s.i at it, or consumes the closing bracket and
// returns more false.
func (s *rvScanner) nextElem(first bool) (more, ok bool) {
	s.skipWS()
	c := s.peek()
	if c == ']' { // after "[" or a value: "," then "]" fails in the value
		s.i++
		s.depth--
		return false, true
	}
	if !first {
		if c != ',' {
			return false, false
		}
		s.i++
		s.skipWS()
	}
	return true, true
}

// scanString reads the string at s.i (its opening quote), validating it.
func (s *rvScanner) scanString() (sp rvStrTok, ok bool) {
	d := s.data
	i := s.i + 1
	sp.start = i
	for {
		for i < len(d) && !rvStrSpecial[d[i]] {
			i++
		}
		if i >= len(d) {
			return sp, false
		}
		switch c := d[i]; {
		case c == '"':
			sp.end = i
			s.i = i + 1
			return sp, true
		case c == '\\':
			sp.flags |= rvStrEscaped
			if i+1 >= len(d) {
				return sp, false
			}
			switch d[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(d) || !rvIsHex(d[i+2]) || !rvIsHex(d[i+3]) || !rvIsHex(d[i+4]) || !rvIsHex(d[i+5]) {
					return sp, false
				}
				i += 6
			default:
				return sp, false
			}
		case c < 0x20:
			return sp, false
		default:
			sp.flags |= rvStrNonASCII
			if sp.flags&rvStrBadUTF8 != 0 {
				i++
				continue
			}
			r, size := utf8.DecodeRune(d[i:])
			if r == utf8.RuneError && size == 1 {
				sp.flags |= rvStrBadUTF8
			}
			i += size
		}
	}
}

func rvIsHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// str returns the decoded string sp, as encoding/json decodes it.
func (s *rvScanner) str(sp rvStrTok) string {
	if sp.end == sp.start {
		return ""
	}
	if sp.flags&(rvStrEscaped|rvStrBadUTF8) == 0 {
		return unsafe.String(&s.data[sp.start], sp.end-sp.start)
	}
	if s.arena == nil {
		// Decoding shrinks escapes and grows only invalid bytes (to
		// three): the rest of the body is room enough for most bodies.
		s.arena = make([]byte, 0, len(s.data)-sp.start+8)
	}
	n := len(s.arena)
	s.arena = rvAppendUnquoted(s.arena, s.data[sp.start:sp.end])
	if len(s.arena) == n {
		return ""
	}
	// The arena only grows by append: the bytes of this string are
	// never written again, even when a later append moves the arena.
	return unsafe.String(&s.arena[n], len(s.arena)-n)
}

// appendUnquoted appends the decoded bytes of a validated JSON string's
// contents to b, as encoding/json's unquote decodes them.
func rvAppendUnquoted(b, s []byte) []byte {
	for r := 0; r < len(s); {
		switch c := s[r]; {
		case c == '\\':
			switch s[r+1] {
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				rr := rvGetu4(s[r:])
				r += 6
				if utf16.IsSurrogate(rr) {
					if dec := utf16.DecodeRune(rr, rvGetu4(s[r:])); dec != unicode.ReplacementChar {
						r += 6 // a valid pair
						b = utf8.AppendRune(b, dec)
						continue
					}
					rr = unicode.ReplacementChar
				}
				b = utf8.AppendRune(b, rr)
				continue
			default: // '"', '\\', '/'
				b = append(b, s[r+1])
			}
			r += 2
		case c < utf8.RuneSelf:
			b = append(b, c)
			r++
		default:
			rr, size := utf8.DecodeRune(s[r:])
			r += size
			b = utf8.AppendRune(b, rr)
		}
	}
	return b
}

// getu4 decodes the \uXXXX escape at the start of s, or returns -1.
func rvGetu4(s []byte) rune {
	if len(s) < 6 || s[0] != '\\' || s[1] != 'u' {
		return -1
	}
	var r rune
	for _, c := range s[2:6] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}

// foldKey writes to buf the key k folded as encoding/json folds names
// (ASCII letters to one case, other runes to the smallest rune of their
// Unicode simple folding orbit), in lower case, and returns it; or nil for a
// key that folds to no field name (longer, or with a rune that folds to no
// ASCII byte).
func (s *rvScanner) foldKey(k rvStrTok, buf *[32]byte) []byte {
	const longest = len("max_completion_tokens")
	raw := s.data[k.start:k.end]
	out := buf[:0]
	if k.flags == 0 {
		if len(raw) > longest {
			return nil
		}
		for _, c := range raw {
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			out = append(out, c)
		}
		return out
	}
	// A name's rune is at most a 6-byte \u escape.
	if len(raw) > 6*longest {
		return nil
	}
	var tmp [6 * longest * 3]byte // invalid bytes decode to 3 each
	dec := rvAppendUnquoted(tmp[:0], raw)
	for i := 0; i < len(dec); {
		c := dec[i]
		if c >= utf8.RuneSelf {
			r, n := utf8.DecodeRune(dec[i:])
			i += n
			f := rvFoldRune(r)
			if f >= utf8.RuneSelf {
				return nil
			}
			c = byte(f)
		} else {
			i++
		}
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if len(out) == longest {
			return nil
		}
		out = append(out, c)
	}
	return out
}

// foldRune is encoding/json's: the smallest rune of r's simple folding
// orbit.
func rvFoldRune(r rune) rune {
	for {
		r2 := unicode.SimpleFold(r)
		if r2 <= r {
			return r2
		}
		r = r2
	}
}

func (s *rvScanner) topField(k rvStrTok) int {
	var buf [32]byte
	switch string(s.foldKey(k, &buf)) {
	case "system":
		return rvFSystem
	case "messages":
		return rvFMessages
	case "input":
		return rvFInput
	case "prompt":
		return rvFPrompt
	case "model":
		return rvFModel
	case "stream":
		return rvFStream
	case "stream_options":
		return rvFStreamOptions
	case "instructions":
		return rvFInstructions
	case "tools":
		return rvFTools
	case "functions":
		return rvFFunctions
	case "max_tokens":
		return rvFMaxTokens
	case "max_completion_tokens":
		return rvFMaxCompletionTokens
	case "max_output_tokens":
		return rvFMaxOutputTokens
	case "n":
		return rvFN
	}
	return rvFUnknown
}

func (s *rvScanner) itemField(k rvStrTok) int {
	var buf [32]byte
	switch string(s.foldKey(k, &buf)) {
	case "content":
		return rvIContent
	case "output":
		return rvIOutput
	case "text":
		return rvIText
	case "arguments":
		return rvIArguments
	}
	return rvIUnknown
}

// lit reads the literal word at s.i.
func (s *rvScanner) lit(word string) bool {
	if len(s.data)-s.i < len(word) || string(s.data[s.i:s.i+len(word)]) != word {
		return false
	}
	s.i += len(word)
	return true
}

// scanNumber reads the number at s.i; integer says it has no fraction and
// no exponent.
func (s *rvScanner) scanNumber() (start int, integer, ok bool) {
	d, i := s.data, s.i
	start = i
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && '1' <= d[i] && d[i] <= '9':
		for i++; i < len(d) && '0' <= d[i] && d[i] <= '9'; i++ {
		}
	default:
		return start, false, false
	}
	integer = true
	if i < len(d) && d[i] == '.' {
		integer = false
		i++
		if i >= len(d) || d[i] < '0' || d[i] > '9' {
			return start, false, false
		}
		for ; i < len(d) && '0' <= d[i] && d[i] <= '9'; i++ {
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		integer = false
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= len(d) || d[i] < '0' || d[i] > '9' {
			return start, false, false
		}
		for ; i < len(d) && '0' <= d[i] && d[i] <= '9'; i++ {
		}
	}
	s.i = i
	return start, integer, true
}

// skipValue reads and validates any value.
func (s *rvScanner) skipValue() bool {
	switch s.peek() {
	case '"':
		_, ok := s.scanString()
		return ok
	case '{':
		if !s.open() {
			return false
		}
		for first := true; ; first = false {
			_, more, ok := s.nextKey(first)
			if !ok {
				return false
			}
			if !more {
				return true
			}
			if !s.skipValue() {
				return false
			}
		}
	case '[':
		if !s.open() {
			return false
		}
		for first := true; ; first = false {
			more, ok := s.nextElem(first)
			if !ok {
				return false
			}
			if !more {
				return true
			}
			if !s.skipValue() {
				return false
			}
		}
	case 't':
		return s.lit("true")
	case 'f':
		return s.lit("false")
	case 'n':
		return s.lit("null")
	default:
		_, _, ok := s.scanNumber()
		return ok
	}
}

// keepString reads a string into *dst; null leaves *dst as it is (a Go
// string field).
func (s *rvScanner) keepString(dst *string) bool {
	switch s.peek() {
	case '"':
		sp, ok := s.scanString()
		if ok {
			*dst = s.str(sp)
		}
		return ok
	case 'n':
		return s.lit("null")
	}
	return false
}

// optString reads a string or null into *dst and *has (a *string field:
// null sets it to nil).
func (s *rvScanner) optString(dst *string, has *bool) bool {
	switch s.peek() {
	case '"':
		sp, ok := s.scanString()
		if ok {
			*dst, *has = s.str(sp), true
		}
		return ok
	case 'n':
		*has = false
		return s.lit("null")
	}
	return false
}

// keepBool reads a boolean into *dst; null leaves *dst as it is.
func (s *rvScanner) keepBool(dst *bool) bool {
	switch s.peek() {
	case 't':
		*dst = true
		return s.lit("true")
	case 'f':
		*dst = false
		return s.lit("false")
	case 'n':
		return s.lit("null")
	}
	return false
}

// count reads an output cap or n (a *int64 field): a non-negative integer,
// or null (has false). It gives up on a negative number, which
// parseOpenAIBodyJSON refuses.
func (s *rvScanner) count() (n int64, has, ok bool) {
	if s.peek() == 'n' {
		return 0, false, s.lit("null")
	}
	start, integer, ok := s.scanNumber()
	if !ok || !integer {
		return 0, false, false // a fraction or exponent: encoding/json's type error
	}
	d := s.data[start:s.i]
	if d[0] == '-' {
		return 0, true, string(d) == "-0"
	}
	var u uint64
	for _, c := range d {
		v := uint64(c - '0')
		if u > (math.MaxInt64-v)/10 {
			return 0, false, false // beyond int64: encoding/json's type error
		}
		u = u*10 + v
	}
	return int64(u), true, true
}

// rawText reads "tools" or "functions": their JSON text, unless null.
func (s *rvScanner) rawText() (text string, has, ok bool) {
	start := s.i
	if !s.skipValue() {
		return "", false, false
	}
	raw := s.data[start:s.i]
	if string(raw) == "null" {
		return "", false, true
	}
	return unsafe.String(&raw[0], len(raw)), true, true
}

// streamOptions reads "stream_options": an object or null; *usage is its
// "include_usage".
func (s *rvScanner) streamOptions(usage *bool) bool {
	switch s.peek() {
	case 'n':
		return s.lit("null")
	case '{':
	default:
		return false
	}
	if !s.open() {
		return false
	}
	for first := true; ; first = false {
		k, more, ok := s.nextKey(first)
		if !ok {
			return false
		}
		if !more {
			return true
		}
		var buf [32]byte
		if string(s.foldKey(k, &buf)) == "include_usage" {
			ok = s.keepBool(usage)
		} else {
			ok = s.skipValue()
		}
		if !ok {
			return false
		}
	}
}

// appendString reads a string and adds it to the texts.
func (s *rvScanner) appendString() bool {
	sp, ok := s.scanString()
	if ok {
		s.texts = append(s.texts, s.str(sp))
	}
	return ok
}

// messages reads "messages": null, or an array of items and nulls.
func (s *rvScanner) messages() bool {
	switch s.peek() {
	case 'n':
		return s.lit("null")
	case '[':
	default:
		return false
	}
	if !s.open() {
		return false
	}
	for first := true; ; first = false {
		more, ok := s.nextElem(first)
		if !ok {
			return false
		}
		if !more {
			return true
		}
		switch s.peek() {
		case '{':
			ok = s.item(0)
		case 'n':
			ok = s.lit("null") // a zero item: no text
		default:
			ok = false
		}
		if !ok {
			return false
		}
	}
}

// content reads a "content", "output" or "system" at depth, as addContent
// does: null, a string, or an array of strings and items.
func (s *rvScanner) content(depth int) bool {
	switch s.peek() {
	case 'n':
		return s.lit("null")
	case '"':
		return s.appendString()
	case '[':
	default:
		return false
	}
	if depth >= maxNesting || !s.open() {
		return false
	}
	for first := true; ; first = false {
		more, ok := s.nextElem(first)
		if !ok {
			return false
		}
		if !more {
			return true
		}
		switch s.peek() {
		case '"':
			ok = s.appendString()
		case '{':
			ok = s.item(depth + 1)
		default:
			ok = false
		}
		if !ok {
			return false
		}
	}
}

// item reads a message, content part or input item at depth, as addItem
// does: its "text", its "arguments", the texts of its "content", then of
// its "output".
func (s *rvScanner) item(depth int) bool {
	if !s.open() {
		return false
	}
	base := len(s.texts)
	var segs [2]rvSeg
	var text, args string
	var hasText, hasArgs bool
	for first := true; ; first = false {
		k, more, ok := s.nextKey(first)
		if !ok {
			return false
		}
		if !more {
			break
		}
		switch f := s.itemField(k); f {
		case rvIContent, rvIOutput:
			s.drop(segs[:], f)
			start := len(s.texts)
			ok = s.content(depth)
			segs[f] = rvSeg{start, len(s.texts)}
		case rvIText:
			ok = s.optString(&text, &hasText)
		case rvIArguments:
			ok = s.optString(&args, &hasArgs)
		default:
			ok = s.skipValue()
		}
		if !ok {
			return false
		}
	}
	s.order(base, segs[:])
	switch {
	case hasText && hasArgs:
		s.texts = slices.Insert(s.texts, base, text, args)
	case hasText:
		s.texts = slices.Insert(s.texts, base, text)
	case hasArgs:
		s.texts = slices.Insert(s.texts, base, args)
	}
	return true
}

// input reads "input" or "prompt", as addInput does: null, a string, or an
// array of strings, token IDs, arrays of token IDs and items. It returns
// the number of token IDs.
func (s *rvScanner) input() (ids int64, ok bool) {
	switch s.peek() {
	case 'n':
		return 0, s.lit("null")
	case '"':
		return 0, s.appendString()
	case '[':
	default:
		return 0, false
	}
	if !s.open() {
		return 0, false
	}
	for first := true; ; first = false {
		more, ok := s.nextElem(first)
		if !ok {
			return 0, false
		}
		if !more {
			return ids, true
		}
		switch c := s.peek(); {
		case c == '"':
			ok = s.appendString()
		case c == '-' || '0' <= c && c <= '9':
			_, _, ok = s.scanNumber()
			ids++
		case c == '[':
			var n int64
			n, ok = s.tokenIDs()
			ids += n
		case c == '{':
			ok = s.item(0)
		default:
			ok = false
		}
		if !ok {
			return 0, false
		}
	}
}

// tokenIDs reads an array of token IDs (a []json.Number: numbers and
// nulls; strings holding numbers are left to encoding/json).
func (s *rvScanner) tokenIDs() (n int64, ok bool) {
	if !s.open() {
		return 0, false
	}
	for first := true; ; first = false {
		more, ok := s.nextElem(first)
		if !ok {
			return 0, false
		}
		if !more {
			return n, true
		}
		if s.peek() == 'n' {
			ok = s.lit("null")
		} else {
			_, _, ok = s.scanNumber()
		}
		if !ok {
			return 0, false
		}
		n++
	}
}
