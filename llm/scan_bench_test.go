package llm

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkReadOpenAIBody reads, parses and estimates a body per op, with
// the scanner (impl=scan: ReadOpenAIBody) and with the reference
// (impl=json: encoding/json, io.ReadAll), in one run:
//
//	body=chat      the benchmarks module's 249-byte chat request
//	body=escapes   a chat request whose strings have escapes and non-ASCII
//	body=responses a Responses request with instructions, items and tools
func BenchmarkReadOpenAIBody(b *testing.B) {
	bodies := scanBenchBodies
	c, err := newEstimateConfig("bench", nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, bb := range bodies {
		body := []byte(bb.body)
		for _, impl := range []struct {
			name string
			read func(*http.Request, int64) (*OpenAIBody, error)
		}{{"json", refReadOpenAIBody}, {"scan", ReadOpenAIBody}} {
			b.Run("body="+bb.name+"/impl="+impl.name, func(b *testing.B) {
				r := httptest.NewRequest("POST", "/v1/chat/completions", nil)
				r.ContentLength = int64(len(body))
				rd := &rewind{}
				b.ReportAllocs()
				b.SetBytes(int64(len(body)))
				for b.Loop() {
					rd.Reset(body)
					r.Body = rd
					ob, err := impl.read(r, DefaultMaxBodyBytes)
					if err != nil {
						b.Fatal(err)
					}
					if p, o := ob.estimate(&c); p+o <= 0 {
						b.Fatal(p, o)
					}
				}
			})
		}
	}
}

// rewind is a request body read again without allocating.
type rewind struct{ bytes.Reader }

func (*rewind) Close() error { return nil }

// scanBenchBodies are the bodies of the scanner's benchmarks.
var scanBenchBodies = []struct{ name, body string }{
	{"chat", `{"model":"gpt-4o-mini","messages":[{"role":"system","content":"You are a helpful assistant."},` +
		`{"role":"user","content":[{"type":"text","text":"Summarise the following paragraph in one sentence, please."}]}],` +
		`"max_completion_tokens":256,"stream":true}`},
	{"escapes", `{"model":"gpt-4o","messages":[{"role":"system","content":"Answer in French.\nBe brief."},` +
		`{"role":"user","content":"Translate \"caf\u00e9 cr\u00e8me\" and \ud83d\ude00, line 1\nline 2\ttab"}],"max_tokens":200,"temperature":0.2}`},
	{"responses", `{"model":"o3","instructions":"Be brief.","input":[{"role":"user","content":[{"type":"input_text","text":"What is the weather in Paris?"}]},` +
		`{"type":"function_call_output","call_id":"c1","output":"{\"temp\":21}"}],"tools":[{"type":"function","name":"weather",` +
		`"parameters":{"type":"object","properties":{"city":{"type":"string"}}}}],"max_output_tokens":500,"stream":true}`},
}
