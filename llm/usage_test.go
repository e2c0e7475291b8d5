package llm_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit/llm"
)

func TestAnthropicUsageStream(t *testing.T) {
	// The event data of one streamed Messages response, in order (shapes
	// from Anthropic's "Streaming Messages" documentation).
	events := []struct {
		data string
		ok   bool
	}{
		{`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"usage":{"input_tokens":25,"cache_creation_input_tokens":100,"cache_read_input_tokens":2000,"output_tokens":1}}}`, true},
		{`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`, false},
		{`{"type":"ping"}`, false},
		{`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}`, false},
		{`{"type":"content_block_stop","index":0}`, false},
		{`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}`, true},
		{`{"type":"message_stop"}`, false},
		{`not json`, false},
	}
	var u llm.AnthropicUsage
	for _, e := range events {
		assert.Equal(t, e.ok, u.Observe([]byte(e.data)), e.data)
	}
	// message_delta counts are cumulative: the output is 15, not 1 + 15.
	assert.Equal(t, llm.Usage{Input: 25, CacheWrite: 100, CacheRead: 2000, Output: 15}, u.Usage)
	assert.True(t, u.Seen)
	assert.Equal(t, int64(25+100+2000+15), u.Total())
}

func TestAnthropicUsageDeltaOverridesInputs(t *testing.T) {
	// A message_delta may repeat the input counts (cumulative, e.g. after
	// server tool use): the last value of each count wins.
	var u llm.AnthropicUsage
	u.Observe([]byte(`{"type":"message_start","message":{"usage":{"input_tokens":10,"output_tokens":1}}}`))
	u.Observe([]byte(`{"type":"message_delta","usage":{"input_tokens":40,"output_tokens":7}}`))
	u.Observe([]byte(`{"type":"message_delta","usage":{"output_tokens":9}}`))
	assert.Equal(t, llm.Usage{Input: 40, Output: 9}, u.Usage)
	assert.Equal(t, int64(49), u.Total())
}

func TestAnthropicUsageBody(t *testing.T) {
	var u llm.AnthropicUsage
	ok := u.Observe([]byte(`{"id":"msg_1","type":"message","content":[{"type":"text","text":"Hi"}],"usage":{"input_tokens":12,"output_tokens":30}}`))
	assert.True(t, ok)
	assert.Equal(t, int64(42), u.Total())
	// Negative counts are read as 0; a null usage is no usage.
	var n llm.AnthropicUsage
	assert.True(t, n.Observe([]byte(`{"usage":{"input_tokens":-5,"output_tokens":3}}`)))
	assert.Equal(t, int64(3), n.Total())
	assert.False(t, n.Observe([]byte(`{"usage":null}`)))
	assert.Equal(t, int64(3), n.Total())
	// Huge counts saturate instead of overflowing Total.
	var h llm.AnthropicUsage
	h.Observe([]byte(`{"usage":{"input_tokens":9223372036854775807,"cache_creation_input_tokens":9223372036854775807,"cache_read_input_tokens":9223372036854775807,"output_tokens":9223372036854775807}}`))
	assert.Equal(t, int64(math.MaxInt64/4*4), h.Total())
}

// A count beyond int64's range (a misbehaving upstream or proxy) clamps
// to math.MaxInt64/4 as Observe documents, and the event's other counts
// are still read, so the response is not under-charged.
func TestAnthropicUsageCountBeyondInt64(t *testing.T) {
	var u llm.AnthropicUsage
	ok := u.Observe([]byte(`{"usage":{"input_tokens":5,"output_tokens":99999999999999999999}}`))
	assert.True(t, ok, "the event carries usage")
	assert.Equal(t, int64(5), u.Input)
	assert.Equal(t, int64(math.MaxInt64/4), u.Output)
}

// Negative, fractional and huge counts all clamp into [0, math.MaxInt64/4].
func TestAnthropicUsageClampsEveryNumber(t *testing.T) {
	for in, want := range map[string]int64{
		`-99999999999999999999`: 0, `-3`: 0, `7.9`: 7, `1e3`: 1000, `1e400`: math.MaxInt64 / 4,
		`9223372036854775807`: math.MaxInt64 / 4, `-1e400`: 0, `0`: 0,
	} {
		var u llm.AnthropicUsage
		assert.True(t, u.Observe([]byte(`{"usage":{"output_tokens":`+in+`}}`)), in)
		assert.Equal(t, want, u.Output, in)
	}
}

// ParseOpenAIUsage clamps each count to math.MaxInt64/4, so an absurd
// pair sums to at most math.MaxInt64/2 instead of wrapping around to a
// negative sum, which would read as 0 tokens (the response free).
func TestParseOpenAIUsageSumSaturates(t *testing.T) {
	const hi = math.MaxInt64 / 4
	for data, want := range map[string]llm.Usage{
		`{"usage":{"prompt_tokens":9223372036854775807,"completion_tokens":1}}`:                  {Input: hi, Output: 1},
		`{"response":{"usage":{"input_tokens":5,"output_tokens":9223372036854775807}}}`:          {Input: 5, Output: hi},
		`{"usage":{"prompt_tokens":99999999999999999999999,"completion_tokens":1e400}}`:          {Input: hi, Output: hi},
		`{"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":9223372036854775807}}`: {Input: hi - 1, Output: 1},
	} {
		u, ok := llm.ParseOpenAIUsage([]byte(data))
		assert.True(t, ok, data)
		assert.Equal(t, want, u, data)
		assert.Positive(t, u.Total(), data)
	}
}

func TestIncludeStreamUsage(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"model":"m","stream":true}`, `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`},
		{`{"stream":false}`, `{"stream":false}`},
		{`{}`, `{}`},
		{`{"stream":true,"stream_options":{"x":1}}`, `{"stream":true,"stream_options":{"x":1,"include_usage":true}}`},
		{`{"stream":true,"stream_options":{}}`, `{"stream":true,"stream_options":{"include_usage":true}}`},
		{`{"stream":true,"stream_options":{"include_usage":false}}`, `{"stream":true,"stream_options":{"include_usage":true}}`},
		{`{"stream":true,"stream_options":null,"z":"<&>"}`, `{"stream":true,"stream_options":{"include_usage":true},"z":"<&>"}`},
		{`{"stream":true,"stream_options":{"include_usage":true}}`, `{"stream":true,"stream_options":{"include_usage":true}}`},
		// Member order and spacing are kept; the member goes last.
		{"{ \"stream\" : true , \"a\" : [1, 2] }\n", "{ \"stream\" : true , \"a\" : [1, 2] ,\"stream_options\":{\"include_usage\":true}}\n"},
	}
	for _, tt := range tests {
		got, err := llm.IncludeStreamUsage([]byte(tt.in))
		require.NoError(t, err, tt.in)
		assert.Equal(t, tt.want, string(got), tt.in)
	}
	for _, bad := range []string{`[1]`, `{"stream":true,"stream_options":5}`, `{"a":1} x`, `{"a":`, ``} {
		_, err := llm.IncludeStreamUsage([]byte(bad))
		assert.ErrorIs(t, err, llm.ErrInvalidBody, bad)
	}
}

func TestParseOpenAIUsage(t *testing.T) {
	tests := []struct {
		data string
		want llm.Usage
		ok   bool
	}{
		{`{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":30,"total_tokens":42}}`, llm.Usage{Input: 12, Output: 30}, true},
		{`{"usage":{"prompt_tokens":12,"completion_tokens":30}}`, llm.Usage{Input: 12, Output: 30}, true},
		// Chat Completions: 1,000 of the 1,200 prompt tokens came from the
		// cache (cached_tokens is part of prompt_tokens); reasoning tokens
		// are part of completion_tokens.
		{`{"usage":{"prompt_tokens":1200,"completion_tokens":300,"total_tokens":1500,` +
			`"prompt_tokens_details":{"cached_tokens":1000,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":200}}}`,
			llm.Usage{Input: 200, CacheRead: 1000, Output: 300}, true},
		// Responses: the same in input_tokens_details, in response.completed.
		{`{"type":"response.completed","response":{"usage":{"input_tokens":5,"output_tokens":7,"total_tokens":12}}}`, llm.Usage{Input: 5, Output: 7}, true},
		{`{"type":"response.completed","response":{"id":"r","usage":{"input_tokens":2048,"input_tokens_details":{"cached_tokens":1024},` +
			`"output_tokens":64,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":2112}}}`,
			llm.Usage{Input: 1024, CacheRead: 1024, Output: 64}, true},
		{`{"usage":{"input_tokens":5,"output_tokens":7}}`, llm.Usage{Input: 5, Output: 7}, true},
		// Embeddings: prompt_tokens and total_tokens only.
		{`{"object":"list","usage":{"prompt_tokens":8,"total_tokens":8}}`, llm.Usage{Input: 8}, true},
		// A total above prompt + output: the surplus counts as input, so
		// that Total is the 50 the upstream reports.
		{`{"usage":{"prompt_tokens":10,"completion_tokens":20,"total_tokens":50}}`, llm.Usage{Input: 30, Output: 20}, true},
		{`{"usage":{"total_tokens":9}}`, llm.Usage{Input: 9}, true},
		// cached_tokens above prompt_tokens (a buggy upstream) is capped
		// at the prompt; negative counts read as 0.
		{`{"usage":{"prompt_tokens":10,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":15}}}`, llm.Usage{CacheRead: 10, Output: 1}, true},
		{`{"usage":{"prompt_tokens":-4,"completion_tokens":3}}`, llm.Usage{Output: 3}, true},
		{`{"choices":[{"delta":{"content":"hi"}}]}`, llm.Usage{}, false},
		{`{"choices":[{"delta":{"content":"the \"usage\" word"}}]}`, llm.Usage{}, false},
		{`{"usage":null}`, llm.Usage{}, false},
		// The fast filter skips "usage": null and "usage" as a value, but
		// not a usage object after either, whatever the spacing.
		{`{"kind":"usage","usage" : null, "response": {"usage"` + "\n\t: " + `{"input_tokens":2,"output_tokens":1}}}`, llm.Usage{Input: 2, Output: 1}, true},
		{`{"usage": nullx}`, llm.Usage{}, false},
		{`{"usage":5}`, llm.Usage{}, false},
		{`[DONE]`, llm.Usage{}, false},
	}
	for _, tt := range tests {
		got, ok := llm.ParseOpenAIUsage([]byte(tt.data))
		assert.Equal(t, tt.ok, ok, tt.data)
		assert.Equal(t, tt.want, got, tt.data)
	}
}

// OpenAIUsage keeps the last usage a stream carried; Seen says whether
// there was one.
func TestOpenAIUsageObserve(t *testing.T) {
	var u llm.OpenAIUsage
	assert.False(t, u.Observe([]byte(`{"choices":[{"delta":{"role":"assistant","content":""}}],"usage":null}`)))
	assert.False(t, u.Seen)
	assert.True(t, u.Observe([]byte(`{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":3}}}`)))
	assert.False(t, u.Observe([]byte(`[DONE]`)))
	assert.True(t, u.Seen)
	assert.Equal(t, llm.Usage{Input: 6, CacheRead: 3, Output: 4}, u.Usage)
	assert.Equal(t, int64(13), u.Total())
}

// Count adds the selected kinds: with Input 1, CacheRead 10, CacheWrite
// 100 and Output 1000, each subset's sum spells out which kinds it
// selects.
func TestUsageCount(t *testing.T) {
	u := llm.Usage{Input: 1, CacheRead: 10, CacheWrite: 100, Output: 1000}
	for k, want := range map[llm.Kinds]int64{
		llm.Input: 1, llm.CacheRead: 10, llm.CacheWrite: 100, llm.Output: 1000,
		llm.Input | llm.CacheWrite: 101, // Anthropic's input-tokens limit
		llm.Prompt:                 111,
		llm.All:                    1111,
		llm.Input | llm.Output:     1001,
		0:                          0,
	} {
		assert.Equal(t, want, u.Count(k), k.String())
	}
	assert.Equal(t, int64(1111), u.Total())
}

func TestKindsString(t *testing.T) {
	for k, want := range map[llm.Kinds]string{
		llm.All: "All", llm.Prompt: "Prompt", 0: "None", llm.Input: "Input",
		llm.Input | llm.CacheWrite: "Input|CacheWrite", llm.CacheRead | llm.Output: "CacheRead|Output",
		llm.Output | 0x40: "Output|Kinds(0x40)",
	} {
		assert.Equal(t, want, k.String())
	}
}
