package llm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
)

// wireBody is the JSON shape read. Polymorphic fields stay raw.
type wireBody struct {
	Model               string          `json:"model"`
	Stream              bool            `json:"stream"`
	StreamOptions       json.RawMessage `json:"stream_options"`
	Instructions        string          `json:"instructions"`
	System              json.RawMessage `json:"system"`
	Messages            []wireItem      `json:"messages"`
	Input               json.RawMessage `json:"input"`
	Prompt              json.RawMessage `json:"prompt"`
	Tools               json.RawMessage `json:"tools"`
	Functions           json.RawMessage `json:"functions"`
	MaxTokens           *int64          `json:"max_tokens"`
	MaxCompletionTokens *int64          `json:"max_completion_tokens"`
	MaxOutputTokens     *int64          `json:"max_output_tokens"`
	N                   *int64          `json:"n"`
}

// wireItem is a message, a content part or an input item: every field that
// carries text the model reads as prompt.
type wireItem struct {
	Content   json.RawMessage `json:"content"`
	Text      *string         `json:"text"`
	Output    json.RawMessage `json:"output"`
	Arguments *string         `json:"arguments"`
}

// maxNesting bounds how deep content parts may nest (a tool result's
// content holding parts holding content ...).
const maxNesting = 8

// parseOpenAIBodyJSON parses raw with encoding/json: the definition of
// the parse. The scanner (scan.go) gives the same result for the bodies it
// handles and hands every other body — malformed ones and rare shapes —
// to this function, so errors keep encoding/json's exact words and
// offsets.
func parseOpenAIBodyJSON(raw []byte) (*OpenAIBody, error) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0:
		return nil, fmt.Errorf("%w: the body is empty; expected a JSON object", ErrInvalidBody)
	case raw[0] != '{':
		return nil, fmt.Errorf("%w: the body must be a JSON object", ErrInvalidBody)
	}
	var w wireBody
	if err := json.Unmarshal(raw, &w); err != nil {
		return nil, jsonError(err)
	}
	b := &OpenAIBody{Raw: raw, Model: w.Model, Stream: w.Stream, N: 1}
	switch firstByte(w.StreamOptions) {
	case 0, 'n':
	case '{':
		var so struct {
			IncludeUsage bool `json:"include_usage"`
		}
		if err := json.Unmarshal(w.StreamOptions, &so); err != nil {
			return nil, jsonError(err)
		}
		b.IncludeUsage = so.IncludeUsage
	default:
		return nil, fmt.Errorf("%w: \"stream_options\" must be an object", ErrInvalidBody)
	}
	for _, c := range []struct {
		name string
		v    *int64
	}{{"max_tokens", w.MaxTokens}, {"max_completion_tokens", w.MaxCompletionTokens}, {"max_output_tokens", w.MaxOutputTokens}} {
		if c.v == nil {
			continue
		}
		if *c.v < 0 {
			return nil, fmt.Errorf("%w: %q must be ≥ 0, got %d", ErrInvalidBody, c.name, *c.v)
		}
		b.MaxOutputTokens = max(b.MaxOutputTokens, *c.v)
		b.HasMaxOutput = true
	}
	if w.N != nil {
		if *w.N < 1 {
			return nil, fmt.Errorf("%w: \"n\" must be ≥ 1, got %d", ErrInvalidBody, *w.N)
		}
		b.N = *w.N
	}
	if w.Instructions != "" {
		b.Texts = append(b.Texts, w.Instructions)
	}
	if err := b.addContent("system", w.System, 0); err != nil {
		return nil, err
	}
	for i := range w.Messages {
		if err := b.addItem("messages", &w.Messages[i], 0); err != nil {
			return nil, err
		}
	}
	if err := b.addInput("input", w.Input); err != nil {
		return nil, err
	}
	if err := b.addInput("prompt", w.Prompt); err != nil {
		return nil, err
	}
	for _, t := range []json.RawMessage{w.Tools, w.Functions} {
		if len(t) > 0 && string(t) != "null" {
			b.Texts = append(b.Texts, string(t))
		}
	}
	return b, nil
}

// jsonError turns an encoding/json error into a message for clients.
func jsonError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Errorf("%w: malformed JSON at byte %d: %s", ErrInvalidBody, syn.Offset, syn.Error())
	case errors.As(err, &typ):
		return fmt.Errorf("%w: %q must be %s, not a JSON %s", ErrInvalidBody, typ.Field, jsonKind(typ.Type), typ.Value)
	default:
		return fmt.Errorf("%w: %s", ErrInvalidBody, err.Error())
	}
}

// jsonKind names the JSON kind that decodes into t.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	default:
		return "an object"
	}
}

func firstByte(raw json.RawMessage) byte {
	for _, c := range raw {
		if c != ' ' && c != '\t' && c != '\r' && c != '\n' {
			return c
		}
	}
	return 0
}

// addContent adds a "content" (or "system"): a string, an array of parts
// or strings, or null.
func (b *OpenAIBody) addContent(field string, raw json.RawMessage, depth int) error {
	switch firstByte(raw) {
	case 0, 'n':
		return nil
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return jsonError(err)
		}
		b.Texts = append(b.Texts, s)
		return nil
	case '[':
		if depth >= maxNesting {
			return fmt.Errorf("%w: %q nests content more than %d levels deep", ErrInvalidBody, field, maxNesting)
		}
		var parts []json.RawMessage
		if err := json.Unmarshal(raw, &parts); err != nil {
			return jsonError(err)
		}
		for _, p := range parts {
			switch firstByte(p) {
			case '"':
				if err := b.addContent(field, p, depth+1); err != nil {
					return err
				}
			case '{':
				var it wireItem
				if err := json.Unmarshal(p, &it); err != nil {
					return fmt.Errorf("%w: a part of %q: %w", ErrInvalidBody, field, jsonError(err))
				}
				if err := b.addItem(field, &it, depth+1); err != nil {
					return err
				}
			default:
				return fmt.Errorf("%w: the parts of %q must be objects or strings", ErrInvalidBody, field)
			}
		}
		return nil
	default:
		return fmt.Errorf("%w: %q must be a string, an array of content parts or null", ErrInvalidBody, field)
	}
}

// addItem adds the text of a message, content part or input item.
func (b *OpenAIBody) addItem(field string, it *wireItem, depth int) error {
	if it.Text != nil {
		b.Texts = append(b.Texts, *it.Text)
	}
	if it.Arguments != nil {
		b.Texts = append(b.Texts, *it.Arguments)
	}
	if err := b.addContent(field, it.Content, depth); err != nil {
		return err
	}
	return b.addContent(field, it.Output, depth)
}

// addInput adds "input" or "prompt": a string, an array of strings, token
// IDs, arrays of token IDs or input items, or null.
func (b *OpenAIBody) addInput(field string, raw json.RawMessage) error {
	switch firstByte(raw) {
	case 0, 'n':
		return nil
	case '"':
		return b.addContent(field, raw, 0)
	case '[':
	default:
		return fmt.Errorf("%w: %q must be a string or an array", ErrInvalidBody, field)
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return jsonError(err)
	}
	for _, it := range items {
		switch c := firstByte(it); {
		case c == '"':
			if err := b.addContent(field, it, 0); err != nil {
				return err
			}
		case c == '-' || c >= '0' && c <= '9':
			b.TokenIDs++ // one token ID
		case c == '[':
			var ids []json.Number
			if err := json.Unmarshal(it, &ids); err != nil {
				return fmt.Errorf("%w: %q: an array inside it must hold token IDs (integers)", ErrInvalidBody, field)
			}
			b.TokenIDs += int64(len(ids))
		case c == '{':
			var item wireItem
			if err := json.Unmarshal(it, &item); err != nil {
				return fmt.Errorf("%w: an item of %q: %w", ErrInvalidBody, field, jsonError(err))
			}
			if err := b.addItem(field, &item, 0); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%w: the items of %q must be strings, token IDs or objects", ErrInvalidBody, field)
		}
	}
	return nil
}
