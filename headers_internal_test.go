package ratelimit

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestAppendSFString(t *testing.T) {
	for in, want := range map[string]string{
		"tokens":     `"tokens"`,
		`a"b`:        `"a\"b"`,
		`back\slash`: `"back\\slash"`,
		`"\`:         `"\"\\"`,
		"":           `""`,
	} {
		assert.Equal(t, want, string(appendSFString(nil, in)), in)
	}
	assert.True(t, validUnit(` !#~`))
	assert.False(t, validUnit("tab\t"))
	assert.False(t, validUnit("é"))
	assert.False(t, validUnit(`a"b`))
	assert.False(t, validUnit(`a\b`))
	assert.False(t, validUnit(""))
}

func TestRetryAfterSeconds(t *testing.T) {
	for _, tt := range []struct {
		d    time.Duration
		want int64
	}{
		{0, 1}, {time.Nanosecond, 1}, {100 * time.Millisecond, 1}, {time.Second, 1},
		{time.Second + time.Nanosecond, 2}, {1200 * time.Millisecond, 2}, {2 * time.Second, 2},
		{2*time.Second + time.Microsecond, 3}, {24 * time.Hour, 86400},
	} {
		assert.Equal(t, tt.want, retryAfterSeconds(tt.d), "%v", tt.d)
	}
	assert.Equal(t, int64(0), ceilSeconds(0))
	assert.Equal(t, int64(0), ceilSeconds(RetryNever))
}

func TestProblemPhrases(t *testing.T) {
	assert.Equal(t, "minute", periodPhrase(time.Minute))
	assert.Equal(t, "day", periodPhrase(24*time.Hour))
	assert.Equal(t, "7 days", periodPhrase(7*24*time.Hour))
	assert.Equal(t, "90 minutes", periodPhrase(90*time.Minute))
	assert.Equal(t, "1.5s", periodPhrase(1500*time.Millisecond))
	assert.Equal(t, "1 request", units(1, Requests))
	assert.Equal(t, "2 requests", units(2, Requests))
	assert.Equal(t, "1 token", units(1, Tokens))
}

// BenchmarkIETFValues compares, in one process, the two allocations of
// the IETF field values (a string and a []string) with ietfValues' one.
func BenchmarkIETFValues(b *testing.B) {
	rl := []byte(`"requests";r=999999998;t=1`)
	var sink []string
	b.Run("two-allocs", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sink = []string{"p", string(rl)}
		}
	})
	b.Run("one-block", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sink = ietfValues("p", rl)
		}
	})
	_ = sink
}
