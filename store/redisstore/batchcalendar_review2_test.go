package redisstore

// Review 2 (issue 10): a calendar call in a pipelined batch whose clock
// reading (WithClock) lies outside the calendar bounds of another call.

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
)

// TestReview2BatchCalendarRetry: a batch decides all its calls at one
// clock reading, the latest its callers read (WithClock). A calendar call
// sends the bounds of the periods around its own reading; when the
// batch's time is outside them the script answers "clock outside calendar
// bounds at <t>", and run sends the call again with bounds around t. The
// retry keeps the call's own reading in ARGV[2], so when it is sent alone
// (the batcher finds it alone in the queue) the script decides at that
// reading, which is outside the new bounds: the call fails, though every
// bound it needed was known.
//
// From first principles: call A reads 2026-12-04 12:00 UTC, call B three
// days later; both queue for one batch, decided at B's time. A daily
// limit of 10 on a fresh key admits A (cost 1): 9 left. A is decided
// either at B's time (in the batch) or at its own (alone); either way
// there is a day holding that time and no error.
func TestReview2BatchCalendarRetry(t *testing.T) {
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	day := ratelimit.PerCalendarDay(10, time.UTC).Named("day")
	tb := ratelimit.PerMinute(10).Named("tb")
	require.NoError(t, day.Err())
	require.NoError(t, tb.Err())
	t1 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	now := make(chan time.Time, 1)
	now <- t1
	clock := func() time.Time { t := <-now; now <- t; return t }
	s, err := New(c, WithClock(clock), WithPipelining())
	require.NoError(t, err)
	b := s.batch
	b.mu.Lock()
	b.running = true // a batch is on its way: calls queue
	b.mu.Unlock()
	queued := func(n int) {
		for {
			b.mu.Lock()
			l := len(b.queue)
			b.mu.Unlock()
			if l >= n {
				return
			}
			runtime.Gosched() // until the goroutine has queued its call
		}
	}
	type result struct {
		d   ratelimit.Decision
		err error
	}
	ra, rb := make(chan result, 1), make(chan result, 1)
	go func() {
		out := make([]ratelimit.Decision, 1)
		err := s.Take(context.Background(), []ratelimit.Request{{Key: "a", Limit: &day, Cost: 1}}, out)
		ra <- result{out[0], err}
	}()
	queued(1)
	<-now
	t2 := t1.Add(72 * time.Hour)
	now <- t2
	go func() {
		out := make([]ratelimit.Decision, 1)
		err := s.Take(context.Background(), []ratelimit.Request{{Key: "b", Limit: &tb, Cost: 1}}, out)
		rb <- result{out[0], err}
	}()
	queued(2)
	go b.loop()
	a, bb := <-ra, <-rb
	require.NoError(t, bb.err)
	require.True(t, bb.d.Allowed)
	require.NoError(t, a.err, "the calendar call of the batch")
	require.True(t, a.d.Allowed)
	require.Equal(t, int64(9), a.d.Remaining)
}
