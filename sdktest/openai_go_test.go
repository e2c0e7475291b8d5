package sdktest

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// goClient is an openai-go client of the demo for key, with the SDK's
// default retry policy (2 retries) unless opts change it, recording its
// attempts.
func goClient(key string, opts ...option.RequestOption) (openai.Client, *recorder) {
	rec := &recorder{}
	base := []option.RequestOption{
		option.WithAPIKey(key),
		option.WithBaseURL(demoURL),
		option.WithHTTPClient(&http.Client{Transport: rec, Timeout: time.Minute}),
	}
	return openai.NewClient(append(base, opts...)...), rec
}

// hello is a request of 3 prompt tokens ("Hello there": 11 bytes) and
// maxTokens output tokens.
func hello(maxTokens int64) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:               "demo",
		Messages:            []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello there")},
		MaxCompletionTokens: openai.Int(maxTokens),
	}
}

// words is the fake model's text of n tokens: "tok0 tok1 … tok(n-1)".
func words(n int) string {
	w := make([]string, n)
	for i := range w {
		w[i] = "tok" + strconv.Itoa(i)
	}
	return strings.Join(w, " ")
}

func TestGoCompletion(t *testing.T) {
	client, rec := goClient(newKey(t))
	var resp *http.Response
	c, err := client.Chat.Completions.New(t.Context(), hello(16), option.WithResponseInto(&resp))
	require.NoError(t, err)
	require.Len(t, c.Choices, 1)
	assert.Equal(t, words(16), c.Choices[0].Message.Content)
	assert.Equal(t, "assistant", string(c.Choices[0].Message.Role))
	assert.Equal(t, "length", c.Choices[0].FinishReason) // 16 ≤ 50: stopped at the cap
	// 3 prompt + 16 completion; the reservation (3 + 16) was exact, so the
	// header already shows the settled state: 2,000 − 19.
	assert.Equal(t, int64(3), c.Usage.PromptTokens)
	assert.Equal(t, int64(16), c.Usage.CompletionTokens)
	assert.Equal(t, int64(19), c.Usage.TotalTokens)
	assert.Equal(t, "1981", resp.Header.Get("x-ratelimit-remaining-tokens"))
	assert.Equal(t, "59", resp.Header.Get("x-ratelimit-remaining-requests"))
	assert.Equal(t, []int{200}, rec.statuses())
}

// A stream for a client that did not ask for the usage: the role comes
// first (the accumulator ends with role "assistant"), every chunk has a
// choice (chunk.Choices[0] never panics: the usage chunk the demo's
// upstream sends is dropped), and the usage still settles the reservation:
// max_tokens 100 reserves 103 but uses 3 + 50 = 53, so the next call (19
// reserved) sees 2,000 − 53 − 19 = 1,928 left (1,878 had the 103 stayed).
func TestGoStreamWithoutUsage(t *testing.T) {
	client, rec := goClient(newKey(t))
	stream := client.Chat.Completions.NewStreaming(t.Context(), hello(100))
	var acc openai.ChatCompletionAccumulator
	chunks := 0
	for stream.Next() {
		chunk := stream.Current()
		require.NotEmpty(t, chunk.Choices, "chunk %d has no choices: %s", chunks, chunk.RawJSON())
		_ = chunk.Choices[0].Delta // the pattern that crashed on the usage chunk
		assert.Zero(t, chunk.Usage.TotalTokens)
		require.True(t, acc.AddChunk(chunk))
		chunks++
	}
	require.NoError(t, stream.Err())
	require.NoError(t, stream.Close())
	// The role chunk, 50 words, the finish chunk.
	assert.Equal(t, 1+50+1, chunks)
	require.Len(t, acc.Choices, 1)
	assert.Equal(t, "assistant", string(acc.Choices[0].Message.Role))
	assert.Equal(t, words(50), acc.Choices[0].Message.Content)
	assert.Equal(t, "stop", acc.Choices[0].FinishReason)

	var resp *http.Response
	_, err := client.Chat.Completions.New(t.Context(), hello(16), option.WithResponseInto(&resp))
	require.NoError(t, err)
	assert.Equal(t, "1928", resp.Header.Get("x-ratelimit-remaining-tokens"))
	assert.Equal(t, []int{200, 200}, rec.statuses())
}

// A stream for a client that asked for the usage: it ends with the usage
// chunk (no choices), which the accumulator reads.
func TestGoStreamWithUsage(t *testing.T) {
	client, _ := goClient(newKey(t))
	params := hello(100)
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := client.Chat.Completions.NewStreaming(t.Context(), params)
	var acc openai.ChatCompletionAccumulator
	var usageChunks int
	for stream.Next() {
		chunk := stream.Current()
		if len(chunk.Choices) == 0 {
			usageChunks++
			assert.Equal(t, int64(53), chunk.Usage.TotalTokens)
		}
		require.True(t, acc.AddChunk(chunk))
	}
	require.NoError(t, stream.Err())
	assert.Equal(t, 1, usageChunks)
	assert.Equal(t, "assistant", string(acc.Choices[0].Message.Role))
	assert.Equal(t, int64(3), acc.Usage.PromptTokens)
	assert.Equal(t, int64(50), acc.Usage.CompletionTokens)
	assert.Equal(t, int64(53), acc.Usage.TotalTokens)
}

// promisedWait is the wait a refusal's headers promise, as the SDKs read
// them: retry-after-ms if present, else Retry-After in seconds.
func promisedWait(t *testing.T, h http.Header) time.Duration {
	if ms := h.Get("retry-after-ms"); ms != "" {
		n, err := strconv.ParseFloat(ms, 64)
		require.NoError(t, err)
		return time.Duration(n * float64(time.Millisecond))
	}
	s, err := strconv.Atoi(h.Get("Retry-After"))
	require.NoError(t, err, "a 429 carries Retry-After")
	return time.Duration(s) * time.Second
}

// exhaustRequests spends key's requests limit (60 per minute, refilled one
// a second) until a call is refused, without retries.
func exhaustRequests(t *testing.T, key string) {
	t.Helper()
	client, rec := goClient(key, option.WithMaxRetries(0))
	for range 3 * demoRPM {
		_, err := client.Chat.Completions.New(t.Context(), hello(1))
		var apiErr *openai.Error
		if errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusTooManyRequests {
			return
		}
		require.NoError(t, err)
	}
	t.Fatalf("no 429 after %d calls: %v", 3*demoRPM, rec.statuses())
}

// A 429 is retried by the SDK after the wait its headers promise, and that
// retry succeeds: the promise is true. With 60 requests per minute the
// wait is at most a second (one request refills in 1s).
func TestGoRateLimitRetriedWithinThePromise(t *testing.T) {
	key := newKey(t)
	for try := 0; ; try++ {
		exhaustRequests(t, key)
		client, rec := goClient(key)
		start := time.Now()
		_, err := client.Chat.Completions.New(t.Context(), hello(1))
		require.NoError(t, err)
		as := rec.all()
		if as[0].status == http.StatusOK {
			// A request refilled between the refusal and this call: the
			// SDK had nothing to retry. Spend the key again.
			require.Less(t, try, 5, "the key refilled before every call")
			continue
		}
		require.Equal(t, []int{429, 200}, rec.statuses())
		wait := promisedWait(t, as[0].header)
		assert.Positive(t, wait)
		assert.LessOrEqual(t, wait, time.Second)
		// The SDK waited what the headers said (a timer fires no earlier
		// than asked), and the retry was admitted.
		gap := as[1].sent.Sub(as[0].answered)
		assert.GreaterOrEqual(t, gap, wait-time.Millisecond, "the SDK retried before the promised wait")
		// The whole call took the promised wait plus two round trips; a
		// loaded machine adds a little.
		assert.Less(t, time.Since(start), wait+2*time.Second)
		return
	}
}

// 413 (a prompt larger than the daily quota can never fit) and 403 (the
// daily quota is spent) are final: the SDK does not retry them.
func TestGoNeverRetries413And403(t *testing.T) {
	client, rec := goClient(newKey(t))
	// 8,004 bytes: 2,001 prompt tokens > 2,000, the quota's capacity.
	big := openai.ChatCompletionNewParams{
		Model:               "demo",
		Messages:            []openai.ChatCompletionMessageParamUnion{openai.UserMessage(strings.Repeat("x", 8004))},
		MaxCompletionTokens: openai.Int(1),
	}
	_, err := client.Chat.Completions.New(t.Context(), big)
	var apiErr *openai.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusRequestEntityTooLarge, apiErr.StatusCode)
	assert.Equal(t, []int{413}, rec.statuses())
	assert.Empty(t, rec.all()[0].header.Get("Retry-After"), "waiting cannot help")

	// 3,600 bytes: 900 prompt tokens, max 50: 950 estimated and used. Two
	// calls leave 2,000 − 1,900 = 100; the third needs 950: refused by the
	// daily quota with 403, Retry-After the time for 850 more tokens at
	// 2,000 a day: 850 × 43.2s = 36,720s (36,719 if a second of refill
	// passed between the calls).
	client, rec = goClient(newKey(t))
	quota := openai.ChatCompletionNewParams{
		Model:               "demo",
		Messages:            []openai.ChatCompletionMessageParamUnion{openai.UserMessage(strings.Repeat("x", 3600))},
		MaxCompletionTokens: openai.Int(50),
	}
	for range 2 {
		_, err := client.Chat.Completions.New(t.Context(), quota)
		require.NoError(t, err)
	}
	_, err = client.Chat.Completions.New(t.Context(), quota)
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusForbidden, apiErr.StatusCode)
	assert.Equal(t, "insufficient_quota", apiErr.Code)
	assert.Equal(t, []int{200, 200, 403}, rec.statuses())
	assert.Contains(t, []string{"36719", "36720"}, rec.all()[2].header.Get("Retry-After"))
}

// The model fails (502): the SDK retries a 5xx twice, so the call makes 3
// attempts. Each 502 releases its token reservation before its header
// leaves, so its x-ratelimit-remaining-tokens shows the whole 2,000; the
// tokens are all there for the next call (2,000 − 19), while each attempt
// still cost one request (the default; see WithRefundOnServerError).
func TestGoServerErrorReleasesTheReservation(t *testing.T) {
	client, rec := goClient(newKey(t))
	params := hello(16)
	params.Model = "demo-fail"
	_, err := client.Chat.Completions.New(t.Context(), params)
	var apiErr *openai.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusBadGateway, apiErr.StatusCode)
	as := rec.all()
	require.Equal(t, []int{502, 502, 502}, rec.statuses())
	for i, a := range as {
		assert.Equal(t, "2000", a.header.Get("x-ratelimit-remaining-tokens"), "attempt %d", i+1)
		assert.Equal(t, "0s", a.header.Get("x-ratelimit-reset-tokens"), "attempt %d", i+1)
		// Requests: 60 − (i+1) charged, plus at most one refilled per
		// second of the SDK's backoff (0.5s, then 1s).
		n, err := strconv.Atoi(a.header.Get("x-ratelimit-remaining-requests"))
		require.NoError(t, err)
		assert.LessOrEqual(t, n, demoRPM-1, "attempt %d: the request counts", i+1)
	}
	var resp *http.Response
	_, err = client.Chat.Completions.New(t.Context(), hello(16), option.WithResponseInto(&resp))
	require.NoError(t, err)
	assert.Equal(t, "1981", resp.Header.Get("x-ratelimit-remaining-tokens"))
}

// The context of a stream the client abandons: the demo's pass-through
// stops, and the demo keeps serving.
func TestGoStreamCancelled(t *testing.T) {
	client, _ := goClient(newKey(t))
	ctx, cancel := context.WithCancel(t.Context())
	stream := client.Chat.Completions.NewStreaming(ctx, hello(50))
	require.True(t, stream.Next())
	cancel()
	for stream.Next() {
	}
	_ = stream.Close()
	_, err := client.Chat.Completions.New(t.Context(), hello(1))
	require.NoError(t, err)
}
