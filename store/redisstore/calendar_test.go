package redisstore_test

import (
	"strconv"
	"testing"
	"time"
	_ "time/tzdata" // the zones load on machines without a zone database

	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/redisstore"
)

// calendarLimits are the agreement test's calendar windows: days and
// months in New York (DST from 2026-03-08, days after t0) and in Havana
// (whose DST starts at midnight, so a day begins at 01:00), and the
// largest quota a window takes.
func calendarLimits(t testing.TB) []*ratelimit.Limit {
	ny, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	havana, err := time.LoadLocation("America/Havana")
	require.NoError(t, err)
	return []*ratelimit.Limit{
		limitOf(t, ratelimit.PerCalendarDay(5, ny).Named("day")),
		limitOf(t, ratelimit.PerCalendarMonth(1000, ny).Named("month")),
		limitOf(t, ratelimit.PerCalendarDay(7, havana).Named("havana-day")),
		limitOf(t, ratelimit.PerCalendarMonth(1<<49, time.UTC).Named("max-quota")),
	}
}

// TestCalendarRedisClock: without WithClock the script decides by the
// Redis clock, and finds its period among the bounds this process
// computes around its own clock. miniredis's TIME is the test clock, in
// 2026-03, far from this host's: the first call misses the bounds, the
// script answers so without writing anything, and the store sends it
// again with bounds around the Redis time it learned: two round trips.
// Later calls use the learned skew: one round trip, until the Redis clock
// jumps by more than a period.
func TestCalendarRedisClock(t *testing.T) {
	e := newMini(t)
	hook := &countHook{}
	e.client.AddHook(hook)
	l := limitOf(t, ratelimit.PerCalendarMonth(10, time.UTC).Named("month"))
	// t0 is 2026-03-04 05:06:07.891011: March ends in 27 days 18:53:52.108989.
	left := time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC).Sub(t0)
	// Load the script first, so that the counts below see no NOSCRIPT.
	e.take(req("warm-up", limitOf(t, ratelimit.PerMinute(1)), 1))
	hook.take()
	d := e.take(req("k", l, 10))[0]
	require.Equal(t, ratelimit.Decision{Limit: l, Allowed: true, Remaining: 0, Reset: left, At: e.micros()}, d)
	require.Equal(t, []string{"evalsha", "evalsha"}, evals(hook.take()), "missed the bounds once, then decided")
	// The state: count, March's start and end.
	require.Equal(t, "10:"+strconv.FormatInt(ratelimit.Micros(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)), 10)+":"+
		strconv.FormatInt(ratelimit.Micros(time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC)), 10), e.stored(e.store.Key("k", l)))

	e.advance(time.Hour)
	d = e.take(req("k", l, 1))[0]
	require.Equal(t, ratelimit.Decision{Limit: l, Remaining: 0, Reset: left - time.Hour, RetryAfter: left - time.Hour, At: e.micros()}, d)
	require.Equal(t, []string{"evalsha"}, evals(hook.take()), "the skew is known: one round trip")

	// 70 days on, May 13: the Redis clock left the bounds (February to
	// April) again.
	e.advance(70 * 24 * time.Hour)
	d = e.take(req("k", l, 1))[0]
	end := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	require.Equal(t, ratelimit.Decision{Limit: l, Allowed: true, Remaining: 9, Reset: end.Sub(e.now), At: e.micros()}, d)
	require.Equal(t, []string{"evalsha", "evalsha"}, evals(hook.take()))

	// A Redis clock four months behind the stored period (May): the state
	// holds the period's end, so the script stays in May however far back
	// the clock is, as the Go algorithm does. The bounds first sent (April
	// to June) miss the clock: two round trips.
	e.setTime(time.Date(2026, 1, 10, 0, 0, 0, 0, time.UTC))
	d = e.take(req("k", l, 9))[0]
	require.Equal(t, ratelimit.Decision{Limit: l, Allowed: true, Remaining: 0, Reset: end.Sub(e.now), At: e.micros()}, d)
	require.Equal(t, []string{"evalsha", "evalsha"}, evals(hook.take()))
	d = e.take(req("k", l, 1))[0]
	require.Equal(t, ratelimit.Decision{Limit: l, Remaining: 0, Reset: end.Sub(e.now), RetryAfter: end.Sub(e.now), At: e.micros()}, d)
	require.Equal(t, []string{"evalsha"}, evals(hook.take()))
	require.Equal(t, "10:"+strconv.FormatInt(ratelimit.Micros(time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)), 10)+":"+
		strconv.FormatInt(ratelimit.Micros(end), 10), e.stored(e.store.Key("k", l)))

	// With WithClock the bounds are computed around the very time sent:
	// one round trip, however far that clock is from this host's.
	f := newMini(t, redisstore.WithClock(func() time.Time { return time.Date(2031, 12, 31, 23, 0, 0, 0, time.UTC) }))
	fh := &countHook{}
	f.client.AddHook(fh)
	f.take(req("warm-up", limitOf(t, ratelimit.PerMinute(1)), 1))
	fh.take()
	d = f.take(req("k", l, 4))[0]
	require.Equal(t, ratelimit.Decision{Limit: l, Allowed: true, Remaining: 6, Reset: time.Hour,
		At: ratelimit.Micros(time.Date(2031, 12, 31, 23, 0, 0, 0, time.UTC))}, d)
	require.Equal(t, []string{"evalsha"}, evals(fh.take()))
}

// evals keeps the script calls of a countHook's record.
func evals(cmds []string) []string {
	var out []string
	for _, c := range cmds {
		if c == "fcall" || c == "evalsha" || c == "eval" {
			out = append(out, c)
		}
	}
	return out
}
