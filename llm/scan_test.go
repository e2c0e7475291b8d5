package llm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

// trickyBodies are bodies where a hand-written JSON parse could part from
// encoding/json's: escapes, invalid UTF-8, duplicate and case-folded
// keys, nulls, numbers at the edges of int64, nesting, white space,
// malformed JSON. Each line's comment says what it probes.
var trickyBodies = []string{
	// The benchmark's body and the package tests' bodies.
	`{"model":"gpt-4o-mini","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":[{"type":"text","text":"Summarise the following paragraph in one sentence, please."}]}],"max_completion_tokens":256,"stream":true}`,
	`{"model":"m","messages":[{"role":"user","content":"Hello, world!"}],"max_tokens":100}`,
	`{"messages":[{"role":"user","content":[{"type":"text","text":"abcdefgh"},{"type":"image_url","image_url":{"url":"https://x"}}]}],"max_completion_tokens":50,"max_tokens":10}`,
	`{"input":"abcd","max_tokens":3,"max_output_tokens":7}`,
	`{"instructions":"abc","input":[{"role":"user","content":[{"type":"input_text","text":"abcde"}]}]}`,
	`{"prompt":["ab","cdefg"],"max_tokens":1}`,
	`{"prompt":[1,2,3],"max_tokens":0}`,
	`{"input":[[1,2],[3,4,5]]}`,
	`{"messages":[{"content":"abcd"}],"max_tokens":10,"n":3}`,
	`{"system":[{"type":"text","text":"12345678"}],"messages":[{"role":"user","content":"1234"}],"max_tokens":5}`,
	`{"messages":[{"role":"user","content":[{"type":"tool_result","content":[{"type":"text","text":"abcd"}]}]},{"type":"function_call","arguments":"{\"a\":1}"}],"max_tokens":0}`,
	`{"messages":[],"tools":[{"a":1}],"max_tokens":0}`,
	`{"messages":[{"role":"assistant","content":null}],"max_tokens":1}`,
	`{"max_tokens":9000000000000000000,"n":9}`,
	`{"stream":true,"stream_options":{"include_usage":true}}`,
	`{"stream":true,"stream_options":{"include_usage":false}}`,
	`{"stream":true,"stream_options":null}`,
	`{"stream":true,"stream_options":{"x":1}}`,
	// Escapes: every short escape, \u in both cases, surrogate pairs, lone
	// and reversed surrogates, \u0000, an escaped U+FFFD next to a
	// surrogate, escaped slashes.
	`{"messages":[{"content":"a\"b\\c\/d\be\ff\ng\rh\ti\u00e9\u00C9\ud83d\ude00"}]}`,
	`{"messages":[{"content":"\ud800"},{"content":"\udc00\ud800"},{"content":"\ud800\u0041"},{"content":"\ud800\ud800\udc00"}]}`,
	`{"messages":[{"content":"\ud83d\ufffd"},{"content":"x\u0000y"},{"content":"\ud83dabc"},{"content":"\ud83d\\"}]}`,
	`{"model":"gpt\u002d4o","instructions":"\u0061bc\n","input":"\u6f22\u5b57"}`,
	`{"messages":[{"content":"\u"}]}`,
	`{"messages":[{"content":"\u12"}]}`,
	`{"messages":[{"content":"\x"}]}`,
	`{"messages":[{"content":"\'"}]}`,
	// Invalid UTF-8 inside strings (replaced by U+FFFD when decoded, kept
	// in raw JSON such as "tools"), and outside strings (malformed).
	"{\"messages\":[{\"content\":\"a\xffb\xfe\"}],\"model\":\"\xc3\"}",
	"{\"messages\":[{\"content\":\"\xed\xa0\x80 \xe2\x82 \xf4\x90\x80\x80 \xc0\xaf \xef\xbf\xbd\"}]}",
	"{\"tools\":[\"\xff\"],\"functions\":{\"\xfe\":1},\"x\xff\":[\"\xff\"]}",
	"{\"messages\":[{\"content\":\"ok\"}]\xff}",
	"{\"messages\":[{\"content\":\"\xe6\xbc\xa2\xe5\xad\x97 caf\xc3\xa9\"}]}",
	// Control characters in strings are malformed; DEL is not.
	"{\"messages\":[{\"content\":\"a\tb\"}]}",
	"{\"messages\":[{\"content\":\"a\x7fb\"}]}",
	"{\"model\":\"\x00\"}",
	// Duplicate keys: the last counts; null keeps a Go string or bool
	// field but clears a pointer or raw field.
	`{"model":"a","model":"b","model":null}`,
	`{"stream":true,"stream":null}`,
	`{"stream":true,"stream":false}`,
	`{"instructions":"abc","instructions":null,"instructions":""}`,
	`{"instructions":"abc","instructions":null}`,
	`{"max_tokens":5,"max_tokens":null}`,
	`{"max_tokens":5,"max_tokens":7,"max_completion_tokens":null,"max_completion_tokens":3}`,
	`{"max_tokens":-1,"max_tokens":5}`,
	`{"max_tokens":5,"max_tokens":-1}`,
	`{"n":0,"n":2}`,
	`{"n":2,"n":null}`,
	`{"system":"aaaa","system":"bb"}`,
	`{"system":"aaaa","messages":[{"content":"c"}],"system":["bb","cc"],"input":"i","system":null}`,
	`{"system":5,"system":"ok"}`,
	`{"system":"ok","system":5}`,
	`{"input":[1,2,3],"input":"x","prompt":[4],"prompt":[[5,6]],"input":[7]}`,
	`{"prompt":"p","input":"i","messages":[{"content":"m"}],"system":"s","instructions":"z","functions":[],"tools":{}}`,
	`{"tools":[1],"tools":null}`,
	`{"tools":null,"tools":[2]}`,
	`{"stream_options":{"include_usage":true},"stream_options":null}`,
	`{"stream_options":{"include_usage":true},"stream_options":{}}`,
	`{"stream_options":{"include_usage":true,"include_usage":null}}`,
	`{"stream_options":{"include_usage":true,"include_usage":false}}`,
	`{"stream_options":5,"stream_options":{"include_usage":true}}`,
	`{"messages":[{"content":"a"}],"messages":[{"text":"b"}]}`,
	`{"messages":[{"content":"a"},{"content":"b"}],"messages":[{"text":"c"}],"messages":[{},{},{}]}`,
	`{"messages":null,"messages":[{"content":"a"}]}`,
	`{"messages":[{"content":"a","content":"bb","text":"t","text":null,"arguments":"x","arguments":"y"}]}`,
	`{"messages":[{"output":"o","content":"c","arguments":"a","text":"t"}]}`,
	`{"messages":[{"content":["a","b"],"output":["c"],"content":"d"}]}`,
	`{"messages":[{"output":["a"],"content":["b"],"output":null}]}`,
	`{"messages":[{"content":[{"text":"x","content":[{"text":"y"}],"output":"z"}],"text":"w"}]}`,
	// Keys match case-insensitively, with escapes, and with the Unicode
	// folds of k (the Kelvin sign) and s (the long s).
	`{"Model":"a","MESSAGES":[{"Content":"b","TEXT":"c"}],"Max_Tokens":3,"N":2,"Stream":true,"Stream_Options":{"Include_Usage":true}}`,
	`{"\u006dodel":"a","mess\u0061ges":[{"con\u0074ent":"b"}],"max_to\u212aens":4,"\u017fystem":"s","meſſages":[]}`,
	`{"max_toKens":4,"max_to` + "\u212a" + `ens":5,"model":"x","modeL":"y"}`,
	`{"max_tokens\u0000":4,"max tokens":5,"maxtokens":6,"max_tokens ":7,"\u0130nput":"x","\u0131nput":"y"}`,
	"{\"mod\xffel\":\"x\",\"m\\u00f6del\":\"y\"}",
	`{"` + strings.Repeat(`\u006d`, 30) + `":1,"` + strings.Repeat("x", 200) + `":2}`,
	// White space, inside and around; Unicode white space around the
	// object is trimmed, inside it is malformed.
	" \t\r\n{ \"model\" : \"m\" , \"messages\" : [ { \"content\" : [ \"a\" , { \"text\" : \"b\" } ] } ] , \"n\" : 2 } \n\t",
	"\v\f{\"model\":\"m\"}\u00a0\u2028\u0085",
	"{\"model\":\"m\",\v\"n\":1}",
	"{\u00a0\"model\":\"m\"}",
	// Numbers: int64's edges, -0, fractions and exponents (type errors
	// for caps, plain token IDs in input).
	`{"max_tokens":9223372036854775807,"n":1}`,
	`{"max_tokens":9223372036854775808}`,
	`{"max_tokens":99999999999999999999999999}`,
	`{"max_tokens":-0,"n":1}`,
	`{"n":-0}`,
	`{"max_tokens":-9223372036854775808}`,
	`{"max_tokens":1e3}`,
	`{"max_tokens":1.0}`,
	`{"max_tokens":0.5e-3}`,
	`{"max_tokens":01}`,
	`{"max_tokens":-}`,
	`{"max_tokens":1.}`,
	`{"max_tokens":.5}`,
	`{"max_tokens":1e}`,
	`{"max_tokens":+1}`,
	`{"max_tokens":"10"}`,
	`{"max_tokens":true}`,
	`{"max_tokens":[1]}`,
	`{"n":9223372036854775807,"max_tokens":2}`,
	`{"n":3000000000,"max_tokens":3000000000}`,
	`{"input":[1.5,-2e9,0,1E+2,3]}`,
	`{"input":[[1.5,null,-0],[],[2]]}`,
	`{"input":[["1"]]}`,
	`{"input":[["x"]]}`,
	`{"input":[[true]]}`,
	`{"input":[[[1]]]}`,
	`{"input":[null]}`,
	`{"input":[true]}`,
	`{"input":{}}`,
	`{"input":5}`,
	`{"prompt":[{"content":"a","output":"b"},"c",7]}`,
	// Types: each field's wrong kinds.
	`{"model":7}`,
	`{"model":["a"]}`,
	`{"model":{}}`,
	`{"model":true}`,
	`{"stream":"true"}`,
	`{"stream":1}`,
	`{"instructions":5}`,
	`{"messages":{}}`,
	`{"messages":"hi"}`,
	`{"messages":["hi"]}`,
	`{"messages":[5]}`,
	`{"messages":[null,{"content":"a"},null]}`,
	`{"messages":[[]]}`,
	`{"messages":[{"text":5}]}`,
	`{"messages":[{"arguments":{}}]}`,
	`{"messages":[{"text":null,"arguments":null,"content":null,"output":null}]}`,
	`{"messages":[{"content":5}]}`,
	`{"messages":[{"content":{}}]}`,
	`{"messages":[{"content":true}]}`,
	`{"messages":[{"content":[5]}]}`,
	`{"messages":[{"content":[null]}]}`,
	`{"messages":[{"content":[[]]}]}`,
	`{"messages":[{"content":[{"text":5}]}]}`,
	`{"messages":[{"content":[{"text":"a"}, {"text":[]}]}]}`,
	`{"system":{}}`,
	`{"system":[{"type":"text","text":"a"},"b",{"text":null}]}`,
	`{"stream_options":"x"}`,
	`{"stream_options":[]}`,
	`{"stream_options":{"include_usage":"yes"}}`,
	`{"stream_options":{"include_usage":1}}`,
	`{"stream_options":{"include_usage":null}}`,
	`{"stream_options":{"Include_usage":true,"other":{"include_usage":false}}}`,
	`{"tools":"x","functions":0}`,
	`{"tools":[ {"a" : 1} , 2 ],"functions":false}`,
	`{"tools":{},"functions":{}}`,
	// Nesting: content nests up to 8 levels; other values up to 10,000.
	nestContent(7), nestContent(8), nestContent(9),
	`{"x":` + strings.Repeat("[", 600) + strings.Repeat("]", 600) + `}`,
	`{"x":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`,
	`{"x":` + strings.Repeat(`{"a":`, 700) + "1" + strings.Repeat("}", 700) + `,"model":"m"}`,
	`{"messages":[{"content":"a","x":` + strings.Repeat("[", 600) + strings.Repeat("]", 600) + `}]}`,
	// Malformed.
	``, ` `, `null`, `[]`, `"x"`, `1`, `{`, `}`, `{"model":"m"`, `{"model":"m"}}`, `{"model":"m"} x`, `{}{}`, `{} []`,
	`{"a":1,}`, `{"a" 1}`, `{"a":}`, `{,}`, `{"a":1 "b":2}`, `{"a":[1,]}`, `{"a":[,1]}`, `{"a":[1 2]}`, `{"a":tru}`, `{"a":nul}`,
	`{"a":truex}`, `{"a":falsee}`, `{"a":nulll}`, `{'a':1}`, `{a:1}`, `{"a":1}` + "\x00", `{"messages":[`, `{"messages":[{"content":"a}]}`,
	`{"a":"\"}`, `{"a":"\\"}`, `{"a":"\u00"}`, `{"a":"\u00zz"}`, `{"a":-01}`, `{"a":1e+}`, `{"a":--1}`, `{"a":[}`, `{"a":{]}`,
	`{}`, `{ }`, `{"messages":[]}`, `{"messages":[{}]}`, `{"input":[]}`, `{"system":""}`, `{"instructions":""}`,
	`{"messages":[{"text":""},{"arguments":""}]}`,
}

// nestContent is a message whose content nests depth arrays of parts.
func nestContent(depth int) string {
	return `{"messages":[{"content":` + strings.Repeat(`[{"content":`, depth-1) + `["x"]` + strings.Repeat(`}]`, depth-1) + `}]}`
}

// checkParse asserts that the parse of raw is the reference's: the same
// body, or the same error; and that when the scanner parses raw by itself
// it gives the reference's body (it must give up on every body the
// reference refuses). It returns whether the scanner parsed it.
func checkParse(t *testing.T, raw []byte) bool {
	t.Helper()
	want, wantErr := refParseOpenAIBody(raw)
	var c cachedBody
	got, err := c.parse(raw)
	if fmt.Sprint(err) != fmt.Sprint(wantErr) {
		t.Fatalf("%q: error %v, want %v", raw, err, wantErr)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q:\n got %#v\nwant %#v", raw, got, want)
	}
	var fast OpenAIBody
	if !scanOpenAIBody(bytes.TrimSpace(raw), &fast, nil) {
		return false
	}
	if wantErr != nil {
		t.Fatalf("%q: the scanner parsed a body the reference refuses (%v)", raw, wantErr)
	}
	if !reflect.DeepEqual(&fast, want) {
		t.Fatalf("%q: scanner\n got %#v\nwant %#v", raw, &fast, want)
	}
	return true
}

func TestScanMatchesReference(t *testing.T) {
	fast := 0
	for _, body := range trickyBodies {
		if checkParse(t, []byte(body)) {
			fast++
		}
	}
	t.Logf("%d of %d bodies parsed by the scanner", fast, len(trickyBodies))
}

// The scanner parses typical bodies by itself: encoding/json is only for
// malformed and rare ones.
func TestScanParsesTypicalBodies(t *testing.T) {
	for _, body := range append(trickyBodies[:18:18],
		`{"model":"m","messages":[{"role":"user","content":"line 1\nline 2 \"quoted\" caf\u00e9 \ud83d\ude00"}],"temperature":0.7,"top_p":1,"stop":["\n"],"user":"u-1","metadata":{"a":[1,2,{"b":null}]}}`,
		`{"model":"claude","system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","data":"AAAA"}},{"type":"text","text":"what?"}]}],"max_tokens":1024}`,
		`{"model":"text-embedding-3-small","input":["a","b"],"encoding_format":"float"}`,
		`{"model":"o3","instructions":"be brief","input":[{"role":"user","content":"hi"},{"type":"function_call_output","call_id":"c","output":"42"}],"tools":[{"type":"function","name":"f","parameters":{}}],"max_output_tokens":100,"stream":true}`,
	) {
		var b OpenAIBody
		if !scanOpenAIBody(bytes.TrimSpace([]byte(body)), &b, nil) {
			t.Errorf("the scanner gave up on %s", body)
		}
		checkParse(t, []byte(body))
	}
}

// FuzzParseOpenAIBody holds the parse equal to the reference (encoding/json)
// on fuzzed bodies, seeded with trickyBodies. Run it with, for example:
//
//	go test -run '^$' -fuzz '^FuzzParseOpenAIBody$' -fuzztime 5m ./llm
func FuzzParseOpenAIBody(f *testing.F) {
	for _, body := range trickyBodies {
		if len(body) < 4096 {
			f.Add([]byte(body))
		}
	}
	f.Fuzz(func(t *testing.T, raw []byte) { checkParse(t, raw) })
}

// readBody reads what io.ReadAll(io.LimitReader(body, maxBytes+1)) reads,
// whatever the announced size and however the reader splits the body, and
// fails as it fails. (Reads of other sizes than io.ReadAll's can only
// differ for a reader whose bytes or errors depend on the sizes of the
// reads, such as iotest.TimeoutReader.)
func TestReadBodyMatchesReadAll(t *testing.T) {
	body := []byte(strings.Repeat("0123456789", 100))
	for _, n := range []int{0, 1, 9, 10, 11, 511, 512, 513, 1000} {
		for _, maxBytes := range []int64{1, 9, 10, 11, 512, 999, 1000, 1001, 1 << 62, 1<<63 - 1} {
			for _, size := range []int64{-1, 0, 1, int64(n), int64(n) + 1, 1 << 40} {
				for name, wrap := range map[string]func(io.Reader) io.Reader{
					"plain": func(r io.Reader) io.Reader { return r }, "one byte": iotest.OneByteReader,
					"data+EOF": iotest.DataErrReader, "fails": failAfter,
				} {
					want, wantErr := io.ReadAll(io.LimitReader(wrap(bytes.NewReader(body[:n])), maxBytes+1))
					got, err := readBody(wrap(bytes.NewReader(body[:n])), size, maxBytes)
					if !bytes.Equal(got, want) || err != wantErr {
						t.Fatalf("n %d, max %d, size %d, %s: %q, %v; want %q, %v", n, maxBytes, size, name, got, err, want, wantErr)
					}
				}
			}
		}
	}
}

// failAfter fails with errBroken once it has returned r's bytes.
func failAfter(r io.Reader) io.Reader { return io.MultiReader(r, iotest.ErrReader(errBroken)) }

var errBroken = errors.New("connection reset")

// FuzzParseOpenAIBodyShapes holds the parse equal to the reference on
// bodies that a generator builds from the fuzzer's bytes: mostly valid
// JSON, mostly the fields the parse reads, in every shape and order, with
// duplicates, case-folded keys, escapes and wrong types, so that the fuzzer
// explores the parse's rules rather than JSON's syntax. Run it with, for
// example:
//
//	go test -run '^$' -fuzz '^FuzzParseOpenAIBodyShapes$' -fuzztime 5m ./llm
func FuzzParseOpenAIBodyShapes(f *testing.F) {
	f.Add([]byte("chat completions"))
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20})
	f.Add([]byte("\xff\xfe\xfd\x80\x00\x10\x20\x30\x40\x50\x60\x70"))
	f.Fuzz(func(t *testing.T, seed []byte) {
		g := &bodyGen{seed: seed}
		var sb strings.Builder
		g.object(&sb, 0, true)
		checkParse(t, []byte(sb.String()))
	})
}

// bodyGen builds a JSON body from seed's bytes, read one at a time (0
// once they run out).
type bodyGen struct {
	seed []byte
	i    int
}

func (g *bodyGen) next() int {
	if g.i >= len(g.seed) {
		return 0
	}
	g.i++
	return int(g.seed[g.i-1])
}

var (
	genTopKeys  = []string{"model", "messages", "system", "input", "prompt", "instructions", "tools", "functions", "stream", "stream_options", "max_tokens", "max_completion_tokens", "max_output_tokens", "n", "Messages", "MODEL", "meſſages", "max_to\\u212aens", "\\u006e", "temperature", "role"}
	genItemKeys = []string{"content", "text", "arguments", "output", "type", "role", "Content", "TEXT", "include_usage", "con\\u0074ent"}
	genStrings  = []string{``, `a`, `abcd`, `Hello, world!`, `\n`, `\u00e9`, `\ud83d\ude00`, `\ud800`, `\udc00\ud800`, "\xff", "caf\xc3\xa9", `\"`, `\\`, `\/`, "\xed\xa0\x80", `12`}
	genNumbers  = []string{`0`, `1`, `2`, `-1`, `-0`, `1.5`, `1e3`, `256`, `9223372036854775807`, `9223372036854775808`, `100000000000000000000`}
	genLits     = []string{`null`, `true`, `false`}
)

func (g *bodyGen) pick(list []string) string { return list[g.next()%len(list)] }

// value writes a value: item says it is where parts or items go.
func (g *bodyGen) value(sb *strings.Builder, depth int) {
	kind := g.next() % 8
	if depth > 10 && kind >= 5 {
		kind %= 5
	}
	switch kind {
	case 0, 1:
		sb.WriteString(`"` + g.pick(genStrings) + `"`)
	case 2:
		sb.WriteString(g.pick(genNumbers))
	case 3:
		sb.WriteString(g.pick(genLits))
	case 4:
		if g.next()%4 == 0 { // a stray byte: mostly malformed
			sb.WriteByte(byte(g.next()))
		} else {
			sb.WriteString(`"` + g.pick(genStrings) + g.pick(genStrings) + `"`)
		}
	case 5, 6:
		sb.WriteByte('[')
		for j := range g.next() % 4 {
			if j > 0 {
				sb.WriteByte(',')
			}
			g.value(sb, depth+1)
		}
		sb.WriteByte(']')
	default:
		g.object(sb, depth+1, false)
	}
}

func (g *bodyGen) object(sb *strings.Builder, depth int, top bool) {
	keys := genItemKeys
	if top {
		keys = genTopKeys
	}
	sb.WriteByte('{')
	n := g.next() % 6
	if top {
		n = 1 + g.next()%8
	}
	for j := range n {
		if j > 0 {
			sb.WriteString(",")
		}
		if g.next()%5 == 0 {
			sb.WriteString(" ")
		}
		sb.WriteString(`"` + g.pick(keys) + `":`)
		g.value(sb, depth)
	}
	sb.WriteByte('}')
}
