package ratelimit

import (
	"net/http"
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
	assert.True(t, sfStringOK(` !"~`))
	assert.False(t, sfStringOK("tab\t"))
	assert.False(t, sfStringOK("é"))
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

// The precomputed writer New builds must match HeaderStyle.WriteHeaders.
func TestStyleWriterMatchesHeaderStyle(t *testing.T) {
	limits := []Limit{PerMinute(60), PerDay(100_000).Named("tokens").WithUnit(Tokens)}
	res := Result{Decisions: []Decision{
		{Limit: &limits[0], Allowed: true, Remaining: 3, Reset: 57 * time.Second},
		{Limit: &limits[1], RetryAfter: 3 * time.Second, Remaining: 7, Reset: time.Hour},
	}}
	for _, style := range []HeaderStyle{HeadersNone, HeadersIETF, HeadersXRateLimit, HeadersIETF | HeadersXRateLimit} {
		want, got := http.Header{}, http.Header{}
		style.WriteHeaders(want, res)
		newStyleWriter(style, nil, limits).WriteHeaders(got, res)
		assert.Equal(t, want, got, style.String())
	}
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
