package llm

// The reference: ReadOpenAIBody before the scanner (issue 10), the parse
// with encoding/json and the read with io.ReadAll. scan_test.go holds the
// scanner equal to it.

import (
	"bytes"
	"errors"
	"io"
	"net/http"
)

// refParseOpenAIBody is the definition of the parse: encoding/json
// (estimate_json.go, the parse before the scanner, unchanged), which the
// scanner must equal wherever it does not hand over.
func refParseOpenAIBody(raw []byte) (*OpenAIBody, error) { return parseOpenAIBodyJSON(raw) }

// refCachedBody is the reference's r.Body.
type refCachedBody struct {
	*bytes.Reader
	body *OpenAIBody
	err  error
}

func (*refCachedBody) Close() error { return nil }

// refReadOpenAIBody is the reference's ReadOpenAIBody for a body of at
// most maxBytes (the benchmarks' old side).
func refReadOpenAIBody(r *http.Request, maxBytes int64) (*OpenAIBody, error) {
	raw, err := io.ReadAll(io.LimitReader(r.Body, maxBytes+1))
	if err != nil || int64(len(raw)) > maxBytes {
		return nil, errors.New("unreadable")
	}
	body, err := refParseOpenAIBody(raw)
	if err != nil {
		body = nil
		err = invalidBody(err)
	}
	r.Body = &refCachedBody{Reader: bytes.NewReader(raw), body: body, err: err}
	return body, err
}
