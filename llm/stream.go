package llm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// IncludeStreamUsage returns body, an OpenAI request body for an upstream
// API, changed so that a streamed response ends with a usage chunk: when
// "stream" is true it sets "stream_options": {"include_usage": true}
// (OpenAI sends usage in streams only when asked). Other members of
// "stream_options" are kept. The body is edited in place — member order,
// spacing and every other byte stay as sent — and returned unchanged when
// "stream" is not true or include_usage is already true. Errors (wrapping
// ErrInvalidBody): body is not a JSON object, or "stream_options" is
// neither an object nor null.
func IncludeStreamUsage(body []byte) ([]byte, error) {
	members, closeAt, err := scanObject(body)
	if err != nil {
		return nil, err
	}
	stream, opts := members["stream"], members["stream_options"]
	if string(stream.value(body)) != "true" {
		return body, nil
	}
	if !opts.found() {
		return insertMember(body, closeAt, len(members) > 0, `"stream_options":{"include_usage":true}`), nil
	}
	v := opts.value(body)
	switch firstByte(v) {
	case 'n':
		return splice(body, opts.start, opts.end, `{"include_usage":true}`), nil
	case '{':
	default:
		return nil, fmt.Errorf("%w: \"stream_options\" must be an object", ErrInvalidBody)
	}
	inner, innerClose, err := scanObject(v)
	if err != nil {
		return nil, err
	}
	if iu := inner["include_usage"]; iu.found() {
		if string(iu.value(v)) == "true" {
			return body, nil
		}
		return splice(body, opts.start+iu.start, opts.start+iu.end, "true"), nil
	}
	newOpts := insertMember(v, innerClose, len(inner) > 0, `"include_usage":true`)
	return splice(body, opts.start, opts.end, string(newOpts)), nil
}

// span locates a member's value in a JSON text; the zero span is absent.
type span struct{ start, end int }

func (s span) found() bool           { return s.end > 0 }
func (s span) value(b []byte) []byte { return b[s.start:s.end] }

// scanObject returns the value spans of the members of the JSON object
// obj (the last one of a repeated name, as encoding/json decodes it) and
// the offset of its closing brace.
func scanObject(obj []byte) (map[string]span, int, error) {
	bad := func(why string) (map[string]span, int, error) {
		return nil, 0, fmt.Errorf("%w: %s", ErrInvalidBody, why)
	}
	dec := json.NewDecoder(bytes.NewReader(obj))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return bad("expected a JSON object")
	}
	members := map[string]span{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return bad("malformed JSON object")
		}
		name, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return bad("malformed JSON object")
		}
		end := int(dec.InputOffset())
		start := end - len(v)
		if start < 0 || !bytes.Equal(obj[start:end], v) {
			return bad("unexpected JSON layout")
		}
		members[name] = span{start, end}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return bad("malformed JSON object")
	}
	closeAt := int(dec.InputOffset()) - 1
	if _, err := dec.Token(); err != io.EOF {
		return bad("data after the JSON object")
	}
	if closeAt < 0 || obj[closeAt] != '}' {
		return bad("unexpected JSON layout")
	}
	return members, closeAt, nil
}

// insertMember inserts member before the closing brace at closeAt.
func insertMember(obj []byte, closeAt int, comma bool, member string) []byte {
	if comma {
		member = "," + member
	}
	return splice(obj, closeAt, closeAt, member)
}

// splice returns a new slice: b with b[start:end] replaced by s.
func splice(b []byte, start, end int, s string) []byte {
	out := make([]byte, 0, len(b)-(end-start)+len(s))
	out = append(out, b[:start]...)
	out = append(out, s...)
	return append(out, b[end:]...)
}

// DefaultMaxEventBytes is the largest server-sent event, in bytes, that
// CopyStream holds to parse unless StreamOptions.MaxEventBytes says
// otherwise: 1 MiB.
const DefaultMaxEventBytes = 1 << 20

// StreamOptions configure CopyStream. The zero value copies the stream
// unchanged and observes nothing.
type StreamOptions struct {
	// Usage, if not nil, observes the data of every event, in order (an
	// *OpenAIUsage or *AnthropicUsage), dropped ones included.
	Usage UsageObserver
	// DropUsageChunk drops the usage chunk of an OpenAI Chat Completions
	// or Completions stream — an event whose data is a JSON object with
	// an empty "choices" array and a "usage" object — from what the
	// client receives; Usage still observes it. Set it when the upstream
	// request asks for the usage (IncludeStreamUsage) but the client did
	// not (OpenAIBody.IncludeUsage is false): such a client does not
	// expect a chunk without choices, and the common
	// chunk.choices[0].delta crashes on it. A usage that rides on a chunk
	// with choices, as some OpenAI-compatible servers send it, is
	// forwarded; so are the "usage": null members of the other chunks.
	DropUsageChunk bool
	// MaxEventBytes bounds the bytes of one event that CopyStream holds
	// (0: DefaultMaxEventBytes). A longer event is forwarded as it
	// arrives, unparsed: neither observed nor dropped.
	MaxEventBytes int
}

// CopyStream copies a stream of server-sent events (the text/event-stream
// format of the WHATWG HTML standard, section 9.2) from upstream to w,
// event by event, until upstream ends: a proxy's pass-through for an AI
// API's streamed response that reads the usage on the way, so that the
// handler can report it:
//
//	upstreamBody, _ := llm.IncludeStreamUsage(body.Raw) // ask the upstream for the usage
//	resp, err := client.Post(upstreamURL, "application/json", bytes.NewReader(upstreamBody))
//	...
//	var usage llm.OpenAIUsage
//	err = llm.CopyStream(w, resp.Body, llm.StreamOptions{Usage: &usage, DropUsageChunk: !body.IncludeUsage})
//	if usage.Seen {
//		_ = ratelimit.ReportUsage(r.Context(), "tokens", usage.Total())
//	}
//
// Every byte is forwarded as received — line endings (LF, CRLF or CR),
// comments, "event", "id" and "retry" fields, "data: [DONE]", a leading
// byte order mark — except the events DropUsageChunk drops. An event is
// written once its blank line has arrived, whole, and w is flushed (when
// it is an http.Flusher, has FlushError, or is an http.ResponseWriter
// that http.ResponseController can flush) whenever CopyStream has written
// everything upstream has sent so far, so events reach the client as soon
// as they arrive. Bytes after the last blank line (an event cut short)
// are forwarded at the end, unparsed, as a client would discard them.
//
// It returns nil when upstream ends (io.EOF), else the first read or
// write error, wrapped; after a write error (the client left) upstream is
// not read further, so a usage chunk not yet received is not observed.
// Set the response's Content-Type (text/event-stream) before calling it.
func CopyStream(w io.Writer, upstream io.Reader, o StreamOptions) error {
	c := sseCopier{w: w, o: o, max: o.MaxEventBytes, first: true}
	if c.max <= 0 {
		c.max = DefaultMaxEventBytes
	}
	buf := make([]byte, 32<<10)
	for {
		n, rerr := upstream.Read(buf)
		if err := c.feed(buf[:n]); err != nil {
			return err
		}
		if rerr != nil {
			// The bytes of an unfinished event go out as they came.
			err := c.write(c.raw)
			c.raw = c.raw[:0]
			if err == nil {
				err = c.flush()
			}
			switch {
			case err != nil:
				return err
			case rerr == io.EOF:
				return nil
			default:
				return fmt.Errorf("llm: CopyStream: reading the upstream stream: %w", rerr)
			}
		}
		if err := c.flush(); err != nil {
			return err
		}
	}
}

// sseCopier is CopyStream's state: the current event's bytes, as received,
// and its data, as the WHATWG parser would assemble it.
type sseCopier struct {
	w   io.Writer
	o   StreamOptions
	max int

	raw      []byte // the current event's bytes, terminators included
	lineAt   int    // offset in raw where the current line starts
	lineLen  int    // bytes of the current line, terminator excluded
	data     []byte // the event's data: each data field's value and "\n"
	hasData  bool
	passing  bool // the event outgrew max: its bytes are forwarded as they come
	first    bool // the stream's first line is next (it may start with a BOM)
	bom      bool // raw starts with the stream's BOM, which outlives a dropped event
	afterCR  bool // the last byte was a CR ending a line: an LF next is part of it
	keptLast bool // the last finished event was forwarded (for an LF after its CR)
	dirty    bool // written since the last flush
}

var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// feed consumes p, any part of the stream.
func (c *sseCopier) feed(p []byte) error {
	for len(p) > 0 {
		if c.afterCR {
			c.afterCR = false
			if p[0] == '\n' {
				// The LF of a CRLF whose CR ended a line: it follows its
				// event when that CR ended the event too.
				p = p[1:]
				var err error
				switch {
				case len(c.raw) > 0 || c.passing:
					err = c.add([]byte{'\n'})
					c.lineAt = len(c.raw)
				case c.keptLast:
					err = c.write([]byte{'\n'})
				}
				if err != nil {
					return err
				}
				continue
			}
		}
		i := bytes.IndexAny(p, "\r\n")
		if i < 0 {
			c.lineLen += len(p)
			return c.add(p)
		}
		c.lineLen += i
		if err := c.add(p[:i+1]); err != nil {
			return err
		}
		c.afterCR = p[i] == '\r'
		p = p[i+1:]
		if err := c.endLine(); err != nil {
			return err
		}
	}
	return nil
}

// add appends b to the current event, or forwards it when the event is
// too long to hold.
func (c *sseCopier) add(b []byte) error {
	if c.passing {
		return c.write(b)
	}
	c.raw = append(c.raw, b...)
	if len(c.raw) <= c.max {
		return nil
	}
	c.passing = true
	err := c.write(c.raw)
	c.raw, c.lineAt = c.raw[:0], 0
	return err
}

// endLine handles the line just ended (raw ends with its terminator).
func (c *sseCopier) endLine() error {
	var line []byte
	if !c.passing {
		line = c.raw[c.lineAt : len(c.raw)-1]
	}
	if c.first {
		// The stream's one leading byte order mark is not part of the
		// line (WHATWG HTML 9.2.5).
		c.first = false
		if bytes.HasPrefix(line, utf8BOM) {
			line, c.lineLen = line[len(utf8BOM):], c.lineLen-len(utf8BOM)
			c.bom = true
		}
	}
	blank := c.lineLen == 0
	c.lineAt, c.lineLen = len(c.raw), 0
	if blank {
		return c.dispatch()
	}
	if c.passing {
		return nil
	}
	// "field: value", or "field" alone; a line starting with ':' is a
	// comment. One space after the colon is not part of the value.
	name, value := line, []byte(nil)
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		name, value = line[:i], bytes.TrimPrefix(line[i+1:], []byte{' '})
	}
	if string(name) == "data" {
		c.data = append(c.data, value...)
		c.data = append(c.data, '\n')
		c.hasData = true
	}
	return nil
}

// dispatch finishes the current event: observes its data, then forwards
// or drops its bytes.
func (c *sseCopier) dispatch() error {
	keep := true
	if !c.passing && c.hasData {
		data := c.data[:len(c.data)-1] // without the last "\n"
		if c.o.Usage != nil {
			c.o.Usage.Observe(data)
		}
		keep = !(c.o.DropUsageChunk && isUsageChunk(data))
	}
	var err error
	switch {
	case c.passing:
	case keep:
		err = c.write(c.raw)
	case c.bom:
		err = c.write(utf8BOM) // the stream's, not the event's
	}
	c.keptLast, c.bom = keep, false
	c.raw, c.data, c.hasData, c.passing, c.lineAt = c.raw[:0], c.data[:0], false, false, 0
	return err
}

// isUsageChunk reports whether data is an OpenAI usage chunk: a JSON
// object with an empty "choices" array and a "usage" object.
func isUsageChunk(data []byte) bool {
	if !mayHaveUsage(data) {
		return false
	}
	var v struct {
		Choices json.RawMessage `json:"choices"`
		Usage   json.RawMessage `json:"usage"`
	}
	if json.Unmarshal(data, &v) != nil {
		return false
	}
	ch := v.Choices
	return len(ch) >= 2 && ch[0] == '[' && len(bytes.TrimSpace(ch[1:len(ch)-1])) == 0 &&
		firstByte(v.Usage) == '{'
}

func (c *sseCopier) write(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	if _, err := c.w.Write(b); err != nil {
		return fmt.Errorf("llm: CopyStream: writing to the client: %w", err)
	}
	c.dirty = true
	return nil
}

// flush sends what was written to the client, if w can be flushed.
func (c *sseCopier) flush() error {
	if !c.dirty {
		return nil
	}
	c.dirty = false
	var err error
	switch f := c.w.(type) {
	case interface{ FlushError() error }:
		err = f.FlushError()
	case http.Flusher:
		f.Flush()
	case http.ResponseWriter:
		if err = http.NewResponseController(f).Flush(); errors.Is(err, http.ErrNotSupported) {
			err = nil
		}
	}
	if err != nil {
		return fmt.Errorf("llm: CopyStream: flushing to the client: %w", err)
	}
	return nil
}
