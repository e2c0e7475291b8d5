package ratelimit_test

// Review 2 (issue 10): a calendar limit's ID names its zone by
// Location.String(), which does not identify the zone's rules.

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/memory"
)

// TestReview2CalendarIDNamesTheZone: Limit.ID "identifies the limit's
// name, algorithm and parameters", so that "changing a limit's quota,
// period or burst starts its keys afresh instead of misreading old state".
// A calendar limit's zone is one of its parameters (it places every
// boundary), but the ID carries only loc.String(): every unnamed
// time.FixedZone ("" whatever the offset), and zones that share a name
// (FixedZone("UTC", 3600) and time.UTC), get one ID and so one stored
// state.
//
// The consequence, from first principles, on one memory store: at
// 2026-12-04 11:00 UTC a daily limit of 6 in UTC+14 is in the local day
// that started at 2026-12-04 10:00 UTC and ends 2026-12-05 10:00 UTC; its
// key spends all 6. The limit is then reconfigured to UTC-12, where
// 11:00 UTC is in the local day 2026-12-03 12:00 UTC to 2026-12-04 12:00
// UTC, in which the key has spent nothing: a Take of 1 must be allowed (5
// left, reset 1 h, to the end of that day). The new limit reads the old
// zone's state instead: the stored period starts later than its own, so it
// stays in the old zone's day, refused for 23 h.
func TestReview2CalendarIDNamesTheZone(t *testing.T) {
	plus14 := ratelimit.PerCalendarDay(6, time.FixedZone("", 14*3600)).Named("daily")
	minus12 := ratelimit.PerCalendarDay(6, time.FixedZone("", -12*3600)).Named("daily")
	utc := ratelimit.PerCalendarDay(6, time.UTC).Named("daily")
	notUTC := ratelimit.PerCalendarDay(6, time.FixedZone("UTC", 3600)).Named("daily")
	for _, l := range []*ratelimit.Limit{&plus14, &minus12, &utc, &notUTC} {
		require.NoError(t, l.Err())
	}
	t.Run("unnamed zones", func(t *testing.T) {
		require.NotEqual(t, plus14.ID(), minus12.ID(), "UTC+14 and UTC-12 share an ID")
	})
	t.Run("one name", func(t *testing.T) {
		require.NotEqual(t, utc.ID(), notUTC.ID(), "time.UTC and FixedZone(\"UTC\", 3600) share an ID")
	})
	t.Run("state", func(t *testing.T) {
		now := time.Date(2026, 12, 4, 11, 0, 0, 0, time.UTC)
		s, err := memory.New(memory.WithClock(func() time.Time { return now }))
		require.NoError(t, err)
		ctx := context.Background()
		out := make([]ratelimit.Decision, 1)
		require.NoError(t, s.Take(ctx, []ratelimit.Request{{Key: "k", Limit: &plus14, Cost: 6}}, out))
		require.True(t, out[0].Allowed)
		require.Equal(t, 23*time.Hour, out[0].Reset) // to 2026-12-05 10:00 UTC
		require.NoError(t, s.Take(ctx, []ratelimit.Request{{Key: "k", Limit: &minus12, Cost: 1}}, out))
		require.Equal(t, ratelimit.Decision{Limit: &minus12, Allowed: true, Remaining: 5, Reset: time.Hour, At: ratelimit.Micros(now)}, out[0],
			"the UTC-12 limit decided by the UTC+14 limit's day")
	})
}
