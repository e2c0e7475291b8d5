package ratelimit_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/rampmeter/ratelimit"
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
	var u ratelimit.AnthropicUsage
	for _, e := range events {
		assert.Equal(t, e.ok, u.Observe([]byte(e.data)), e.data)
	}
	// message_delta counts are cumulative: the output is 15, not 1 + 15.
	assert.Equal(t, ratelimit.AnthropicUsage{Input: 25, CacheCreation: 100, CacheRead: 2000, Output: 15}, u)
	assert.Equal(t, int64(25+100+2000+15), u.Total())
}

func TestAnthropicUsageDeltaOverridesInputs(t *testing.T) {
	// A message_delta may repeat the input counts (cumulative, e.g. after
	// server tool use): the last value of each count wins.
	var u ratelimit.AnthropicUsage
	u.Observe([]byte(`{"type":"message_start","message":{"usage":{"input_tokens":10,"output_tokens":1}}}`))
	u.Observe([]byte(`{"type":"message_delta","usage":{"input_tokens":40,"output_tokens":7}}`))
	u.Observe([]byte(`{"type":"message_delta","usage":{"output_tokens":9}}`))
	assert.Equal(t, ratelimit.AnthropicUsage{Input: 40, Output: 9}, u)
	assert.Equal(t, int64(49), u.Total())
}

func TestAnthropicUsageBody(t *testing.T) {
	var u ratelimit.AnthropicUsage
	ok := u.Observe([]byte(`{"id":"msg_1","type":"message","content":[{"type":"text","text":"Hi"}],"usage":{"input_tokens":12,"output_tokens":30}}`))
	assert.True(t, ok)
	assert.Equal(t, int64(42), u.Total())
	// Negative counts are read as 0; a null usage is no usage.
	var n ratelimit.AnthropicUsage
	assert.True(t, n.Observe([]byte(`{"usage":{"input_tokens":-5,"output_tokens":3}}`)))
	assert.Equal(t, int64(3), n.Total())
	assert.False(t, n.Observe([]byte(`{"usage":null}`)))
	assert.Equal(t, int64(3), n.Total())
	// Huge counts saturate instead of overflowing Total.
	var h ratelimit.AnthropicUsage
	h.Observe([]byte(`{"usage":{"input_tokens":9223372036854775807,"cache_creation_input_tokens":9223372036854775807,"cache_read_input_tokens":9223372036854775807,"output_tokens":9223372036854775807}}`))
	assert.Equal(t, int64(math.MaxInt64/4*4), h.Total())
}
