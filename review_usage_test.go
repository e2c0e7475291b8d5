package ratelimit_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/rampmeter/ratelimit"
)

// Observe documents that counts above math.MaxInt64/4 are read as
// math.MaxInt64/4; a count beyond int64's range (a misbehaving upstream
// or proxy) instead makes the whole event unreadable: its other counts
// are dropped too, and the response is under-charged.
func TestReviewAnthropicUsageCountBeyondInt64(t *testing.T) {
	var u ratelimit.AnthropicUsage
	ok := u.Observe([]byte(`{"usage":{"input_tokens":5,"output_tokens":99999999999999999999}}`))
	assert.True(t, ok, "the event carries usage")
	assert.Equal(t, int64(5), u.Input)
	assert.Equal(t, int64(math.MaxInt64/4), u.Output)
}

// Negative, fractional and huge counts all clamp into [0, math.MaxInt64/4].
func TestReviewAnthropicUsageClampsEveryNumber(t *testing.T) {
	for in, want := range map[string]int64{
		`-99999999999999999999`: 0, `-3`: 0, `7.9`: 7, `1e3`: 1000, `1e400`: math.MaxInt64 / 4,
		`9223372036854775807`: math.MaxInt64 / 4, `-1e400`: 0, `0`: 0,
	} {
		var u ratelimit.AnthropicUsage
		assert.True(t, u.Observe([]byte(`{"usage":{"output_tokens":`+in+`}}`)), in)
		assert.Equal(t, want, u.Output, in)
	}
}

// ParseOpenAIUsage sums two counts: an absurd pair must not wrap around to
// a negative sum, which it reads as 0 tokens (the response free).
func TestReviewParseOpenAIUsageSumSaturates(t *testing.T) {
	for _, data := range []string{
		`{"usage":{"prompt_tokens":9223372036854775807,"completion_tokens":1}}`,
		`{"response":{"usage":{"input_tokens":5,"output_tokens":9223372036854775807}}}`,
	} {
		n, ok := ratelimit.ParseOpenAIUsage([]byte(data))
		assert.True(t, ok, data)
		assert.Equal(t, int64(math.MaxInt64), n, data)
	}
}
