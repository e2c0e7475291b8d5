package llm_test

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit/llm"
)

// chunkReader returns its data in reads of the given sizes (cycling), so
// that a test can split a stream anywhere: inside a field name, between
// the CR and the LF of a CRLF, inside the blank line.
type chunkReader struct {
	data  []byte
	sizes []int
	i     int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := min(len(r.data), len(p), r.sizes[r.i%len(r.sizes)])
	r.i++
	copy(p, r.data[:n])
	r.data = r.data[n:]
	return n, nil
}

// flushRecorder is a Writer that counts its flushes and what each one
// sent.
type flushRecorder struct {
	bytes.Buffer
	flushes   int
	unflushed int // bytes written since the last flush
}

func (w *flushRecorder) Write(p []byte) (int, error) {
	w.unflushed += len(p)
	return w.Buffer.Write(p)
}

func (w *flushRecorder) Flush() { w.flushes++; w.unflushed = 0 }

// copyStream runs CopyStream over in, split into reads of sizes, and
// returns what the client got and the usage observed.
func copyStream(t *testing.T, in string, sizes []int, drop bool) (string, llm.OpenAIUsage) {
	t.Helper()
	var u llm.OpenAIUsage
	var w flushRecorder
	err := llm.CopyStream(&w, &chunkReader{data: []byte(in), sizes: sizes}, llm.StreamOptions{Usage: &u, DropUsageChunk: drop})
	require.NoError(t, err)
	assert.Zero(t, w.unflushed, "everything written is flushed by the end")
	return w.String(), u
}

// everySplit calls f with read sizes that split in at every offset once
// (a first read of k bytes, then the rest), then with reads of 1, 2, 3
// and 7 bytes, then with random sizes.
func everySplit(in string, f func(sizes []int)) {
	for k := 1; k < len(in); k++ {
		f([]int{k, len(in)})
	}
	for _, n := range []int{1, 2, 3, 7} {
		f([]int{n})
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		sizes := make([]int, 8)
		for i := range sizes {
			sizes[i] = 1 + rng.IntN(40)
		}
		f(sizes)
	}
}

// An OpenAI Chat Completions stream as the upstream sends it with
// include_usage: a role delta, content, the finish chunk (each with
// "usage": null), the usage chunk (choices: []), and [DONE].
const (
	roleChunk    = `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""}}],"usage":null}` + "\n\n"
	contentChunk = `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hi"}}],"usage":null}` + "\n\n"
	finishChunk  = `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}` + "\n\n"
	usageChunk   = `data: {"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":30,"total_tokens":42,"prompt_tokens_details":{"cached_tokens":8}}}` + "\n\n"
	doneChunk    = "data: [DONE]\n\n"
)

// The usage a stream with usageChunk reports: 12 prompt tokens, of which
// 8 cached, and 30 completion tokens.
var streamUsage = llm.Usage{Input: 4, CacheRead: 8, Output: 30}

func TestCopyStreamDropsTheUsageChunk(t *testing.T) {
	in := roleChunk + contentChunk + finishChunk + usageChunk + doneChunk
	everySplit(in, func(sizes []int) {
		// Not dropped: the client asked for the usage and gets every byte.
		got, u := copyStream(t, in, sizes, false)
		require.Equal(t, in, got, sizes)
		require.Equal(t, streamUsage, u.Usage, sizes)
		// Dropped: the same bytes without the usage chunk, and the usage
		// still read.
		got, u = copyStream(t, in, sizes, true)
		require.Equal(t, roleChunk+contentChunk+finishChunk+doneChunk, got, sizes)
		require.Equal(t, streamUsage, u.Usage, sizes)
		require.True(t, u.Seen)
	})
}

// CRLF and CR line endings (all three are valid, WHATWG HTML 9.2.5),
// mixed in one stream: forwarded byte for byte, and the usage event found
// and dropped with its own terminators whatever the split, including
// between the CR and the LF of the CRLF that ends it.
func TestCopyStreamLineEndings(t *testing.T) {
	usage := `{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}`
	for name, tc := range map[string]struct{ in, want string }{
		"CRLF": {
			in:   "data: {\"choices\":[{\"delta\":{}}]}\r\n\r\ndata: " + usage + "\r\n\r\ndata: [DONE]\r\n\r\n",
			want: "data: {\"choices\":[{\"delta\":{}}]}\r\n\r\ndata: [DONE]\r\n\r\n",
		},
		"CR": {
			in:   "data: {\"choices\":[{\"delta\":{}}]}\r\rdata: " + usage + "\r\rdata: [DONE]\r\r",
			want: "data: {\"choices\":[{\"delta\":{}}]}\r\rdata: [DONE]\r\r",
		},
		// The usage event ends "\r\n\r": its blank line is a lone CR, so
		// an LF right after it is still part of that line ending and
		// goes (is dropped) with the event.
		"mixed": {
			in:   "data: {\"choices\":[{\"delta\":{}}]}\n\r\ndata: " + usage + "\r\n\r\ndata: [DONE]\n\n",
			want: "data: {\"choices\":[{\"delta\":{}}]}\n\r\ndata: [DONE]\n\n",
		},
	} {
		everySplit(tc.in, func(sizes []int) {
			got, u := copyStream(t, tc.in, sizes, true)
			require.Equal(t, tc.want, got, "%s %v", name, sizes)
			require.Equal(t, llm.Usage{Input: 1, Output: 2}, u.Usage, "%s %v", name, sizes)
			got, _ = copyStream(t, tc.in, sizes, false)
			require.Equal(t, tc.in, got, "%s %v", name, sizes)
		})
	}
}

// Comments, other fields, multi-line data, a missing space after the
// colon and a byte order mark: all forwarded as sent; the usage event's
// data is assembled as a client would (lines joined with "\n"), so a
// usage object split over two data lines is still found and dropped.
func TestCopyStreamFields(t *testing.T) {
	keepAlive := ": keep-alive\n\n"
	typed := "event: chunk\nid: 7\nretry: 1000\ndata:{\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n"
	split := "data: {\"choices\":[],\n: a comment inside the event\ndata: \"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\n\n"
	in := "\xEF\xBB\xBF" + keepAlive + typed + split + doneChunk
	everySplit(in, func(sizes []int) {
		got, u := copyStream(t, in, sizes, true)
		require.Equal(t, "\xEF\xBB\xBF"+keepAlive+typed+doneChunk, got, sizes)
		require.Equal(t, llm.Usage{Input: 3, Output: 4}, u.Usage, sizes)
	})
}

// A byte order mark is not part of the first field's name: a stream whose
// first line is "BOM data: ..." has data (WHATWG HTML 9.2.5).
func TestCopyStreamBOMBeforeData(t *testing.T) {
	in := "\xEF\xBB\xBF" + usageChunk + doneChunk
	got, u := copyStream(t, in, []int{1}, true)
	assert.Equal(t, "\xEF\xBB\xBF"+doneChunk, got)
	assert.Equal(t, streamUsage, u.Usage)
}

// Only a usage chunk is dropped: a usage riding on a chunk with choices
// (some OpenAI-compatible servers), a chunk without choices and without
// usage (Azure's prompt_filter_results), "usage": null, a "choices"
// member that is not an empty array, and data that is not JSON are
// forwarded.
func TestCopyStreamDropsOnlyUsageChunks(t *testing.T) {
	kept := []string{
		`data: {"choices":[{"index":0,"delta":{"content":"x"}}],"usage":{"prompt_tokens":1,"completion_tokens":1}}` + "\n\n",
		`data: {"choices":[],"prompt_filter_results":[{"prompt_index":0}]}` + "\n\n",
		`data: {"choices":[],"usage":null}` + "\n\n",
		`data: {"choices":{},"usage":{"prompt_tokens":1}}` + "\n\n",
		`data: {"usage":{"prompt_tokens":1}}` + "\n\n",
		`data: "usage"` + "\n\n",
		"event: ping\n\n",
		doneChunk,
	}
	in := strings.Join(kept, "")
	got, _ := copyStream(t, in, []int{5}, true)
	assert.Equal(t, in, got)
	// Whitespace inside the empty array still makes a usage chunk.
	got, u := copyStream(t, `data: {"choices":[ ],"usage":{"completion_tokens":6}}`+"\n\n"+doneChunk, []int{4}, true)
	assert.Equal(t, doneChunk, got)
	assert.Equal(t, llm.Usage{Output: 6}, u.Usage)
}

// An event cut short by the end of the stream (no blank line after it)
// is forwarded as it came, and neither observed nor dropped: a client
// would discard it (WHATWG HTML 9.2.6, "once the end of the file is
// reached, any pending data must be discarded").
func TestCopyStreamUnfinishedEvent(t *testing.T) {
	in := contentChunk + strings.TrimSuffix(usageChunk, "\n")
	everySplit(in, func(sizes []int) {
		got, u := copyStream(t, in, sizes, true)
		require.Equal(t, in, got, sizes)
		require.False(t, u.Seen, sizes)
	})
}

// An event longer than MaxEventBytes (250 here; usageChunk has 190 bytes,
// long 363) is forwarded as it arrives, unparsed:
// even a usage chunk is then neither observed nor dropped; the events
// around it are handled as usual.
func TestCopyStreamOversizedEvent(t *testing.T) {
	long := `data: {"choices":[],"usage":{"prompt_tokens":1},"pad":"` + strings.Repeat("x", 300) + `"}` + "\r\n\r\n"
	in := usageChunk + long + usageChunk + doneChunk
	everySplit(in, func(sizes []int) {
		var u llm.OpenAIUsage
		var w bytes.Buffer
		err := llm.CopyStream(&w, &chunkReader{data: []byte(in), sizes: sizes},
			llm.StreamOptions{Usage: &u, DropUsageChunk: true, MaxEventBytes: 250})
		require.NoError(t, err)
		require.Equal(t, long+doneChunk, w.String(), sizes)
		require.Equal(t, streamUsage, u.Usage, sizes) // from the last usage chunk
	})
}

// Anthropic's stream names its events; AnthropicUsage reads message_start
// and the cumulative message_delta from the data the copier assembles.
func TestCopyStreamAnthropic(t *testing.T) {
	in := "event: message_start\r\n" +
		`data: {"type":"message_start","message":{"id":"m","usage":{"input_tokens":25,"cache_creation_input_tokens":100,"cache_read_input_tokens":2000,"output_tokens":1}}}` + "\r\n\r\n" +
		"event: content_block_delta\r\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}` + "\r\n\r\n" +
		"event: message_delta\r\n" + `data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":15}}` + "\r\n\r\n" +
		"event: message_stop\r\n" + `data: {"type":"message_stop"}` + "\r\n\r\n"
	everySplit(in, func(sizes []int) {
		var u llm.AnthropicUsage
		var w bytes.Buffer
		require.NoError(t, llm.CopyStream(&w, &chunkReader{data: []byte(in), sizes: sizes}, llm.StreamOptions{Usage: &u, DropUsageChunk: true}))
		require.Equal(t, in, w.String(), sizes)
		require.Equal(t, llm.Usage{Input: 25, CacheWrite: 100, CacheRead: 2000, Output: 15}, u.Usage, sizes)
	})
}

// w is flushed whenever everything read so far has been written: once per
// read of whole events, and not for a read that ends inside an event
// (nothing new to send), nor for a dropped event.
func TestCopyStreamFlushes(t *testing.T) {
	// One event per read: 4 flushes for the 4 forwarded events, none for
	// the dropped one.
	sizes := []int{len(roleChunk), len(contentChunk), len(finishChunk), len(usageChunk), len(doneChunk)}
	var w flushRecorder
	in := roleChunk + contentChunk + finishChunk + usageChunk + doneChunk
	require.NoError(t, llm.CopyStream(&w, &chunkReader{data: []byte(in), sizes: sizes}, llm.StreamOptions{DropUsageChunk: true}))
	assert.Equal(t, 4, w.flushes)
	// Half an event per read: a flush after every second read.
	w = flushRecorder{}
	half := len(contentChunk) / 2
	in = contentChunk + contentChunk
	require.NoError(t, llm.CopyStream(&w, &chunkReader{data: []byte(in), sizes: []int{half, len(contentChunk) - half}}, llm.StreamOptions{}))
	assert.Equal(t, 2, w.flushes)
	assert.Equal(t, in, w.String())
}

// Through an http.ResponseWriter, events reach the client as they come:
// the client reads the first event before the upstream sends the second.
func TestCopyStreamOverHTTP(t *testing.T) {
	pr, pw := io.Pipe()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		assert.NoError(t, llm.CopyStream(w, pr, llm.StreamOptions{DropUsageChunk: true}))
	}))
	defer srv.Close()
	wrote := make(chan error, 1)
	go func() { _, err := io.WriteString(pw, contentChunk); wrote <- err }()
	// The response's header leaves with the first event's flush.
	resp, err := srv.Client().Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.NoError(t, <-wrote)
	buf := make([]byte, len(contentChunk))
	_, err = io.ReadFull(resp.Body, buf) // would block forever without a flush
	require.NoError(t, err)
	assert.Equal(t, contentChunk, string(buf))
	_, err = io.WriteString(pw, usageChunk+doneChunk)
	require.NoError(t, err)
	require.NoError(t, pw.Close())
	rest, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, doneChunk, string(rest))
}

// A failing upstream: what arrived is forwarded (the unfinished event
// too), and the error is returned, wrapped.
func TestCopyStreamReadError(t *testing.T) {
	boom := errors.New("connection reset")
	in := io.MultiReader(strings.NewReader(contentChunk+"data: {\"cho"), iotestErrReader{boom})
	var w bytes.Buffer
	err := llm.CopyStream(&w, in, llm.StreamOptions{})
	assert.ErrorIs(t, err, boom)
	assert.Equal(t, contentChunk+"data: {\"cho", w.String())
}

// iotestErrReader fails every read with err.
type iotestErrReader struct{ err error }

func (r iotestErrReader) Read([]byte) (int, error) { return 0, r.err }

// errWriter fails every write after the first n bytes.
type errWriter struct {
	n   int
	err error
}

func (w *errWriter) Write(p []byte) (int, error) {
	if len(p) > w.n {
		return 0, w.err
	}
	w.n -= len(p)
	return len(p), nil
}

// A client that left: the write error is returned, and the upstream is not
// read further (the usage chunk after it is not observed).
func TestCopyStreamWriteError(t *testing.T) {
	gone := errors.New("client gone")
	r := &chunkReader{data: []byte(contentChunk + contentChunk + usageChunk), sizes: []int{len(contentChunk)}}
	var u llm.OpenAIUsage
	err := llm.CopyStream(&errWriter{n: len(contentChunk), err: gone}, r, llm.StreamOptions{Usage: &u})
	assert.ErrorIs(t, err, gone)
	assert.False(t, u.Seen)
	assert.Equal(t, usageChunk, string(r.data), "the upstream was not read past the failed write")
}

// FuzzCopyStream holds three properties on any input: without
// DropUsageChunk every byte is forwarded; with it, what is forwarded and
// the usage observed do not depend on how the reads split the stream;
// and dropping never adds a byte (the output is the input less whole
// events).
func FuzzCopyStream(f *testing.F) {
	f.Add(roleChunk+usageChunk+doneChunk, uint8(3))
	f.Add("data: x\r\rdata: {\"choices\":[],\"usage\":{}}\r\n\r\n", uint8(1))
	f.Add("\xEF\xBB\xBF"+usageChunk, uint8(2))
	f.Add(": c\n\nevent: e\ndata\n\n", uint8(5))
	f.Fuzz(func(t *testing.T, in string, size uint8) {
		run := func(sizes []int, drop bool) (string, llm.OpenAIUsage) {
			var u llm.OpenAIUsage
			var w bytes.Buffer
			err := llm.CopyStream(&w, &chunkReader{data: []byte(in), sizes: sizes},
				llm.StreamOptions{Usage: &u, DropUsageChunk: drop, MaxEventBytes: 64})
			require.NoError(t, err)
			return w.String(), u
		}
		whole, wholeUsage := run([]int{len(in) + 1}, true)
		plain, _ := run([]int{1 + int(size)}, false)
		require.Equal(t, in, plain)
		split, splitUsage := run([]int{1 + int(size)%7, 1 + int(size)/7}, true)
		require.Equal(t, whole, split)
		require.Equal(t, wholeUsage, splitUsage)
		require.LessOrEqual(t, len(whole), len(in))
	})
}
