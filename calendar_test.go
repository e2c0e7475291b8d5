package ratelimit

import (
	"net/http"
	"os"
	"testing"
	"time"
	_ "time/tzdata" // the zones load on machines without a zone database

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// newYork loads America/New_York: UTC−5 (EST), and UTC−4 (EDT) from the
// second Sunday of March at 02:00 EST to the first Sunday of November at
// 02:00 EDT (15 U.S.C. §260a). In 2026 that is March 8 and November 1; in
// 2028 March 12 and November 5.
func newYork(t testing.TB) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	return loc
}

// utc builds a UTC instant.
func utc(y int, m time.Month, d, h, min int) time.Time {
	return time.Date(y, m, d, h, min, 0, 0, time.UTC)
}

func TestCalendarValidation(t *testing.T) {
	ny := newYork(t)
	bad := map[string]Limit{
		"nil location":                    PerCalendarMonth(10, nil),
		"nil location, day":               PerCalendarDay(10, nil),
		"zero quota":                      PerCalendarMonth(0, ny),
		"quota over 2^49":                 PerCalendarMonth(1<<49+1, ny),
		"a separate burst":                PerCalendarDay(10, ny).WithBurst(5),
		"another algorithm":               PerCalendarMonth(10, ny).WithAlgorithm(TokenBucket),
		"CalendarWindow without calendar": PerDay(10).WithAlgorithm(CalendarWindow),
		"first-hit alignment":             PerCalendarDay(10, ny).AlignToFirstHit(),
		"refusal status 500":              PerCalendarMonth(10, ny).WithRefusalStatus(http.StatusInternalServerError),
		"refusal status 413":              PerCalendarMonth(10, ny).WithRefusalStatus(http.StatusRequestEntityTooLarge),
		"refusal status 200":              PerCalendarMonth(10, ny).WithRefusalStatus(http.StatusOK),
	}
	for name, l := range bad {
		assert.ErrorIs(t, l.Err(), ErrInvalidLimit, name)
	}
	assert.ErrorContains(t, PerCalendarMonth(10, nil).Err(), "nil *time.Location")

	// A budget in micro-units with an awkward quota is fine: a window has
	// no rate to scale (a FixedWindow of 49_990_000 per 720h would
	// overflow its scaled capacity).
	budget := PerCalendarMonth(49_990_000, ny).Named("budget").WithUnit("usd-micros").WithRefusalStatus(http.StatusPaymentRequired)
	require.NoError(t, budget.Err())
	assert.Equal(t, http.StatusPaymentRequired, budget.RefusalStatus())
	assert.Equal(t, 0, budget.WithRefusalStatus(0).RefusalStatus())
	assert.Equal(t, CalendarMonth, budget.CalendarPeriod())
	assert.Same(t, ny, budget.Location())
	assert.Equal(t, 30*24*time.Hour, budget.Period())
	assert.Equal(t, int64(49_990_000), budget.Burst())
	assert.Equal(t, `"budget" 49990000/calendar month America/New_York calendar-window`, budget.String())
	assert.Equal(t, "budget:cal-month:America/New_York:49990000", budget.ID())
	scale, drain, capacity := budget.Params()
	assert.Equal(t, [3]int64{1, 1, 49_990_000}, [3]int64{scale, drain, capacity})

	// The ID tells periods and zones apart, so they never share state.
	ids := map[string]bool{}
	for _, l := range []Limit{
		PerCalendarMonth(10, ny), PerCalendarDay(10, ny), PerCalendarMonth(10, time.UTC), PerCalendarMonth(11, ny),
		PerDay(10).WithAlgorithm(FixedWindow),
	} {
		require.NoError(t, l.Err())
		ids[l.ID()] = true
	}
	assert.Len(t, ids, 5)
	assert.Equal(t, "calendar-window", CalendarWindow.String())
	assert.Equal(t, "day", CalendarDay.String())
	assert.Equal(t, CalendarPeriod(0), PerDay(10).CalendarPeriod())
	assert.Nil(t, PerDay(10).Location())
}

// TestCalendarWindowAt checks the boundaries against the calendar: local
// midnights in New York, EST = UTC−5, EDT = UTC−4.
func TestCalendarWindowAt(t *testing.T) {
	ny := newYork(t)
	month, day := PerCalendarMonth(10, ny), PerCalendarDay(10, ny)
	for _, c := range []struct {
		name       string
		l          Limit
		at         time.Time
		start, end time.Time
		length     time.Duration
	}{
		// January 2026: Jan 1 00:00 EST = 05:00Z to Feb 1 00:00 EST.
		{"January", month, utc(2026, 1, 15, 12, 0), utc(2026, 1, 1, 5, 0), utc(2026, 2, 1, 5, 0), 31 * 24 * time.Hour},
		// Jan 31 23:59 EST is still January; Feb 1 00:00 EST is February,
		// 28 days in 2026.
		{"last minute of January", month, utc(2026, 2, 1, 4, 59), utc(2026, 1, 1, 5, 0), utc(2026, 2, 1, 5, 0), 31 * 24 * time.Hour},
		{"first instant of February", month, utc(2026, 2, 1, 5, 0), utc(2026, 2, 1, 5, 0), utc(2026, 3, 1, 5, 0), 28 * 24 * time.Hour},
		// March 2026 loses the hour of March 8: 31 days − 1 hour, ending
		// at Apr 1 00:00 EDT = 04:00Z.
		{"March (DST starts)", month, utc(2026, 3, 20, 0, 0), utc(2026, 3, 1, 5, 0), utc(2026, 4, 1, 4, 0), 31*24*time.Hour - time.Hour},
		// November 2026 gains it back: 30 days + 1 hour.
		{"November (DST ends)", month, utc(2026, 11, 1, 4, 0), utc(2026, 11, 1, 4, 0), utc(2026, 12, 1, 5, 0), 30*24*time.Hour + time.Hour},
		// December to January: Dec 31 23:59 EST is 2026, Jan 1 00:00 EST
		// 2027.
		{"New Year's Eve", month, utc(2027, 1, 1, 4, 59), utc(2026, 12, 1, 5, 0), utc(2027, 1, 1, 5, 0), 31 * 24 * time.Hour},
		{"New Year", month, utc(2027, 1, 1, 5, 0), utc(2027, 1, 1, 5, 0), utc(2027, 2, 1, 5, 0), 31 * 24 * time.Hour},
		// 2028 is a leap year: February has 29 days, and Feb 29 is a day.
		{"February 2028", month, utc(2028, 2, 29, 12, 0), utc(2028, 2, 1, 5, 0), utc(2028, 3, 1, 5, 0), 29 * 24 * time.Hour},
		{"Feb 28, 2028", day, utc(2028, 2, 29, 4, 59), utc(2028, 2, 28, 5, 0), utc(2028, 2, 29, 5, 0), 24 * time.Hour},
		{"Feb 29, 2028", day, utc(2028, 2, 29, 5, 0), utc(2028, 2, 29, 5, 0), utc(2028, 3, 1, 5, 0), 24 * time.Hour},
		{"Mar 1, 2028", day, utc(2028, 3, 1, 5, 0), utc(2028, 3, 1, 5, 0), utc(2028, 3, 2, 5, 0), 24 * time.Hour},
		// 2026-03-08: 00:00 EST = 05:00Z to Mar 9 00:00 EDT = 04:00Z, 23
		// hours (02:00 EST jumps to 03:00 EDT).
		{"Mar 8, 2026 (23 h)", day, utc(2026, 3, 8, 7, 30), utc(2026, 3, 8, 5, 0), utc(2026, 3, 9, 4, 0), 23 * time.Hour},
		{"Mar 9, 2026", day, utc(2026, 3, 9, 4, 0), utc(2026, 3, 9, 4, 0), utc(2026, 3, 10, 4, 0), 24 * time.Hour},
		// 2026-11-01: 00:00 EDT = 04:00Z to Nov 2 00:00 EST = 05:00Z, 25
		// hours (02:00 EDT falls back to 01:00 EST). Both 01:30s are Nov 1.
		{"Nov 1, 2026, first 01:30", day, utc(2026, 11, 1, 5, 30), utc(2026, 11, 1, 4, 0), utc(2026, 11, 2, 5, 0), 25 * time.Hour},
		{"Nov 1, 2026, second 01:30", day, utc(2026, 11, 1, 6, 30), utc(2026, 11, 1, 4, 0), utc(2026, 11, 2, 5, 0), 25 * time.Hour},
		{"Oct 31, 2026", day, utc(2026, 11, 1, 3, 59), utc(2026, 10, 31, 4, 0), utc(2026, 11, 1, 4, 0), 24 * time.Hour},
	} {
		start, end := c.l.WindowAt(c.at)
		assert.True(t, c.start.Equal(start), "%s: start %v, want %v", c.name, start, c.start)
		assert.True(t, c.end.Equal(end), "%s: end %v, want %v", c.name, end, c.end)
		assert.Equal(t, c.length, end.Sub(start), c.name)
		assert.Equal(t, ny, start.Location(), c.name)
		// The bounds a store passes to Redis: the previous, this, the next
		// period and the one after, consecutive.
		b := c.l.CalendarBounds(Micros(c.at))
		assert.Equal(t, Micros(start), b[1], c.name)
		assert.Equal(t, Micros(end), b[2], c.name)
		ps, pe := c.l.WindowAt(time.UnixMicro(b[1] - 1))
		assert.Equal(t, [2]int64{Micros(ps), Micros(pe)}, [2]int64{b[0], b[1]}, c.name)
		ns, ne := c.l.WindowAt(end)
		assert.Equal(t, [2]int64{Micros(ns), Micros(ne)}, [2]int64{b[2], b[3]}, c.name)
	}
	// UTC days and months are the plain calendar's.
	s, e := PerCalendarMonth(1, time.UTC).WindowAt(utc(2028, 2, 10, 0, 0))
	assert.Equal(t, [2]time.Time{utc(2028, 2, 1, 0, 0), utc(2028, 3, 1, 0, 0)}, [2]time.Time{s, e})
	// A FixedWindow's window is epoch-aligned; other algorithms have none.
	s, e = PerHour(1).WithAlgorithm(FixedWindow).WindowAt(utc(2026, 5, 5, 5, 5))
	assert.Equal(t, [2]time.Time{utc(2026, 5, 5, 5, 0), utc(2026, 5, 5, 6, 0)}, [2]time.Time{s, e})
	s, e = PerHour(1).WindowAt(utc(2026, 5, 5, 5, 5))
	assert.True(t, s.IsZero() && e.IsZero())
	assert.Equal(t, [4]int64{}, new(PerHour(1)).CalendarBounds(Micros(utc(2026, 5, 5, 5, 5))))
}

// TestCalendarMidnightSkipped: where a zone's clocks spring forward at
// midnight, the day starts at the change. America/Havana moved from CST
// (UTC−5) to CDT (UTC−4) at 00:00 on 2026-03-08: Mar 8 starts at 05:00Z
// (01:00 CDT), and Mar 7 lasts 24 hours, 05:00Z to 05:00Z.
func TestCalendarMidnightSkipped(t *testing.T) {
	havana, err := time.LoadLocation("America/Havana")
	require.NoError(t, err)
	day := PerCalendarDay(1, havana)
	// Where the transition is, per the zone data: the instant local 00:00
	// Mar 8 would be, if the zone has a gap there.
	if _, off := time.Date(2026, 3, 8, 12, 0, 0, 0, havana).Zone(); off != -4*3600 {
		t.Skipf("zone data puts Havana at UTC%+d on 2026-03-08", off/3600)
	}
	gap := time.Date(2026, 3, 7, 23, 59, 0, 0, havana).Add(time.Minute)
	if gap.Hour() != 1 {
		t.Skipf("zone data has no gap at midnight in Havana on 2026-03-08 (%v)", gap)
	}
	s, e := day.WindowAt(utc(2026, 3, 8, 12, 0))
	assert.Equal(t, utc(2026, 3, 8, 5, 0), s.UTC(), "Mar 8 starts at the change, 01:00 CDT")
	assert.Equal(t, utc(2026, 3, 9, 4, 0), e.UTC(), "and ends at midnight CDT")
	s, e = day.WindowAt(utc(2026, 3, 8, 4, 59))
	assert.Equal(t, [2]time.Time{utc(2026, 3, 7, 5, 0), utc(2026, 3, 8, 5, 0)}, [2]time.Time{s.UTC(), e.UTC()})
}

// calStep is one call on a calendar limit and the decision it must give.
type calStep struct {
	at        time.Time
	adjust    bool
	cost      int64
	chargedAt time.Time // Adjust only; zero: now
	want      Decision  // Limit and At are filled in
}

func runCalendar(t *testing.T, l *Limit, steps []calStep) State {
	t.Helper()
	var s State
	for i, st := range steps {
		now := Micros(st.at)
		var got Decision
		if st.adjust {
			var charged int64
			if !st.chargedAt.IsZero() {
				charged = Micros(st.chargedAt)
			}
			got = l.AdjustFrom(&s, now, charged, st.cost)
		} else {
			got = l.TakeAt(&s, now, st.cost)
		}
		want := st.want
		want.Limit, want.At = l, now
		if st.adjust {
			want.Allowed = true
		}
		assert.Equal(t, want, got, "step %d at %v", i, st.at)
	}
	return s
}

func TestCalendarMonthEnds(t *testing.T) {
	ny := newYork(t)
	l := PerCalendarMonth(100, ny)
	const us = time.Microsecond
	lastJan := utc(2026, 2, 1, 5, 0).Add(-us) // Jan 31 23:59:59.999999 EST
	feb1 := utc(2026, 2, 1, 5, 0)
	s := runCalendar(t, &l, []calStep{
		// 100 in the last microsecond of January: all of January's quota,
		// which comes back 1 µs later.
		{at: lastJan, cost: 100, want: Decision{Allowed: true, Remaining: 0, Reset: us}},
		{at: lastJan, cost: 1, want: Decision{Remaining: 0, Reset: us, RetryAfter: us}},
		// A peek is refused only in debt: here it is allowed, uncharged.
		{at: lastJan, cost: 0, want: Decision{Allowed: true, Remaining: 0, Reset: us}},
		// February 1, 00:00 EST: a fresh month of 28 days.
		{at: feb1, cost: 30, want: Decision{Allowed: true, Remaining: 70, Reset: 28 * 24 * time.Hour}},
		// A refund of January's usage is dropped: that month has passed.
		{at: feb1, adjust: true, cost: -50, chargedAt: lastJan, want: Decision{Remaining: 70, Reset: 28 * 24 * time.Hour}},
		// A refund of February's is credited; an overage of January's is
		// charged to February.
		{at: feb1.Add(time.Hour), adjust: true, cost: -10, chargedAt: feb1, want: Decision{Remaining: 80, Reset: 27*24*time.Hour + 23*time.Hour}},
		{at: feb1.Add(time.Hour), adjust: true, cost: 15, chargedAt: lastJan, want: Decision{Remaining: 65, Reset: 27*24*time.Hour + 23*time.Hour}},
		// An overage past the quota is debt, up to 2 × Quota: a peek is
		// refused until March 1, 00:00 EST, 27 days 23 hours away.
		{at: feb1.Add(time.Hour), adjust: true, cost: 1000, want: Decision{Remaining: 0, Reset: 27*24*time.Hour + 23*time.Hour}},
		{at: feb1.Add(time.Hour), cost: 0, want: Decision{Remaining: 0, Reset: 27*24*time.Hour + 23*time.Hour, RetryAfter: 27*24*time.Hour + 23*time.Hour}},
		// A cost above the quota can never fit.
		{at: feb1.Add(time.Hour), cost: 101, want: Decision{Remaining: 0, Reset: 27*24*time.Hour + 23*time.Hour, RetryAfter: RetryNever}},
	})
	// The state holds February's start and end (March 1, 00:00 EST).
	assert.Equal(t, State{Level: 200, Updated: Micros(feb1), Prev: Micros(utc(2026, 3, 1, 5, 0))}, s, "debt is bounded by 2 × Quota")
	assert.Equal(t, Micros(utc(2026, 3, 1, 5, 0)), l.ExpiresAt(&s), "the count expires with February")

	// December to January: the year rolls over.
	dec31 := utc(2027, 1, 1, 4, 0) // Dec 31 23:00 EST
	runCalendar(t, &l, []calStep{
		{at: dec31, cost: 100, want: Decision{Allowed: true, Remaining: 0, Reset: time.Hour}},
		{at: dec31.Add(30 * time.Minute), cost: 1, want: Decision{Remaining: 0, Reset: 30 * time.Minute, RetryAfter: 30 * time.Minute}},
		// January 2027 has 31 days and no DST change.
		{at: dec31.Add(time.Hour), cost: 1, want: Decision{Allowed: true, Remaining: 99, Reset: 31 * 24 * time.Hour}},
	})
}

func TestCalendarLeapDay(t *testing.T) {
	ny := newYork(t)
	day, month := PerCalendarDay(10, ny), PerCalendarMonth(10, ny)
	feb28at23 := utc(2028, 2, 29, 4, 0) // Feb 28 23:00 EST
	runCalendar(t, &day, []calStep{
		{at: feb28at23, cost: 10, want: Decision{Allowed: true, Remaining: 0, Reset: time.Hour}},
		{at: feb28at23, cost: 1, want: Decision{Remaining: 0, Reset: time.Hour, RetryAfter: time.Hour}},
		// Feb 29 is a day of its own, 24 hours long.
		{at: feb28at23.Add(time.Hour), cost: 10, want: Decision{Allowed: true, Remaining: 0, Reset: 24 * time.Hour}},
		{at: feb28at23.Add(13 * time.Hour), cost: 1, want: Decision{Remaining: 0, Reset: 12 * time.Hour, RetryAfter: 12 * time.Hour}},
		{at: feb28at23.Add(25 * time.Hour), cost: 1, want: Decision{Allowed: true, Remaining: 9, Reset: 24 * time.Hour}},
	})
	// The month: spent on Feb 29 at noon, it resets on March 1 at 00:00
	// EST, 12 hours later (DST starts only on March 12, 2028).
	noon29 := utc(2028, 2, 29, 17, 0)
	runCalendar(t, &month, []calStep{
		{at: noon29, cost: 10, want: Decision{Allowed: true, Remaining: 0, Reset: 12 * time.Hour}},
		{at: noon29, cost: 1, want: Decision{Remaining: 0, Reset: 12 * time.Hour, RetryAfter: 12 * time.Hour}},
		// March 2028: 31 days less the hour of March 12.
		{at: noon29.Add(12 * time.Hour), cost: 1, want: Decision{Allowed: true, Remaining: 9, Reset: 31*24*time.Hour - time.Hour}},
	})
}

func TestCalendarDST(t *testing.T) {
	ny := newYork(t)
	l := PerCalendarDay(5, ny)
	// 2026-03-08, 23 hours: 05:00Z to 04:00Z the next day.
	mar8 := utc(2026, 3, 8, 5, 0)
	runCalendar(t, &l, []calStep{
		{at: mar8, cost: 5, want: Decision{Allowed: true, Remaining: 0, Reset: 23 * time.Hour}},
		// 01:59 EST; one minute later it is 03:00 EDT, and the day ends
		// 21 hours after that.
		{at: mar8.Add(119 * time.Minute), cost: 1, want: Decision{Remaining: 0, Reset: 21*time.Hour + time.Minute, RetryAfter: 21*time.Hour + time.Minute}},
		{at: mar8.Add(2 * time.Hour), cost: 1, want: Decision{Remaining: 0, Reset: 21 * time.Hour, RetryAfter: 21 * time.Hour}},
		// Midnight EDT, 04:00Z: a new day of 24 hours.
		{at: mar8.Add(23 * time.Hour), cost: 1, want: Decision{Allowed: true, Remaining: 4, Reset: 24 * time.Hour}},
	})
	// 2026-11-01, 25 hours: 04:00Z to 05:00Z the next day. 01:30 happens
	// twice (05:30Z EDT, 06:30Z EST), both on November 1.
	nov1 := utc(2026, 11, 1, 4, 0)
	runCalendar(t, &l, []calStep{
		{at: nov1, cost: 3, want: Decision{Allowed: true, Remaining: 2, Reset: 25 * time.Hour}},
		{at: nov1.Add(90 * time.Minute), cost: 2, want: Decision{Allowed: true, Remaining: 0, Reset: 23*time.Hour + 30*time.Minute}},
		{at: nov1.Add(150 * time.Minute), cost: 1, want: Decision{Remaining: 0, Reset: 22*time.Hour + 30*time.Minute, RetryAfter: 22*time.Hour + 30*time.Minute}},
		{at: nov1.Add(25 * time.Hour), cost: 1, want: Decision{Allowed: true, Remaining: 4, Reset: 24 * time.Hour}},
	})
}

// TestCalendarClockBackwards: a clock that moves back into the previous
// period stays in the stored one, so no quota is created; the wait is
// until the stored period ends.
func TestCalendarClockBackwards(t *testing.T) {
	ny := newYork(t)
	l := PerCalendarMonth(10, ny)
	feb1 := utc(2026, 2, 1, 5, 0)
	s := runCalendar(t, &l, []calStep{
		{at: feb1, cost: 10, want: Decision{Allowed: true, Remaining: 0, Reset: 28 * 24 * time.Hour}},
		{at: feb1.Add(-time.Hour), cost: 1, want: Decision{Remaining: 0, Reset: 28*24*time.Hour + time.Hour, RetryAfter: 28*24*time.Hour + time.Hour}},
		// A refund dated in January is for another period: dropped.
		{at: feb1.Add(-time.Hour), adjust: true, cost: -10, want: Decision{Remaining: 0, Reset: 28*24*time.Hour + time.Hour}},
	})
	assert.Equal(t, State{Level: 10, Updated: Micros(feb1), Prev: Micros(utc(2026, 3, 1, 5, 0))}, s)

	// Far back, two months: still February's window, whose end the state
	// holds; a state written without its end computes it.
	d := l.TakeAt(&s, Micros(utc(2025, 12, 10, 0, 0)), 1)
	assert.Equal(t, Decision{Limit: &l, Remaining: 0, Reset: utc(2026, 3, 1, 5, 0).Sub(utc(2025, 12, 10, 0, 0)),
		RetryAfter: utc(2026, 3, 1, 5, 0).Sub(utc(2025, 12, 10, 0, 0)), At: Micros(utc(2025, 12, 10, 0, 0))}, d)
	noEnd := State{Level: 10, Updated: Micros(feb1)}
	assert.Equal(t, d, l.TakeAt(&noEnd, Micros(utc(2025, 12, 10, 0, 0)), 1))
	assert.Equal(t, s, noEnd)
}

// TestCalendarHeaders: RateLimit-Policy's w is the length of the current
// period in seconds, and RateLimit's t the time to its end.
func TestCalendarHeaders(t *testing.T) {
	ny := newYork(t)
	day := PerCalendarDay(5, ny)
	month := PerCalendarMonth(1000, ny).Named("budget").WithUnit("usd-micros")
	for _, c := range []struct {
		name   string
		at     time.Time
		policy string
		rl     string
	}{
		// Mar 8, 2026, 23 h = 82800 s; March, 743 h = 2674800 s. At
		// 01:00 EST (06:00Z) the day has 22 h = 79200 s left, and the
		// month, to Apr 1 04:00Z, 23 days 22 hours = 2066400 s.
		{"DST starts", utc(2026, 3, 8, 6, 0),
			`"requests";q=5;w=82800, "budget";q=1000;w=2674800;rampmeter-unit="usd-micros"`,
			`"requests";r=4;t=79200, "budget";r=999;t=2066400`},
		// Nov 1, 2026, 25 h = 90000 s; November, 721 h = 2595600 s.
		{"DST ends", utc(2026, 11, 1, 4, 0),
			`"requests";q=5;w=90000, "budget";q=1000;w=2595600;rampmeter-unit="usd-micros"`,
			`"requests";r=4;t=90000, "budget";r=999;t=2595600`},
		// February 2028, 29 days = 2505600 s.
		{"leap February", utc(2028, 2, 1, 5, 0),
			`"requests";q=5;w=86400, "budget";q=1000;w=2505600;rampmeter-unit="usd-micros"`,
			`"requests";r=4;t=86400, "budget";r=999;t=2505600`},
	} {
		now := Micros(c.at)
		ds := []Decision{day.TakeAt(new(State), now, 1), month.TakeAt(new(State), now, 1)}
		h := http.Header{}
		sw := &styleWriter{style: HeadersIETF}
		sw.write(h, Result{Allowed: true, Decisions: ds}, policyField([]*Limit{&day, &month}, false))
		assert.Equal(t, c.policy, h.Get("RateLimit-Policy"), c.name)
		assert.Equal(t, c.rl, h.Get("RateLimit"), c.name)
		h = http.Header{}
		HeadersIETF.WriteHeaders(h, Result{Allowed: true, Decisions: ds})
		assert.Equal(t, c.policy, h.Get("RateLimit-Policy"), c.name)
	}
	// Without a decision time, the nominal window.
	assert.Equal(t, `"requests";q=5;w=86400`, policyField([]*Limit{&day}, false))
}

// BenchmarkCalendarTakeAt measures one charged decision of the pure
// function on a state in place: a calendar month in New York against a
// fixed window of a day (the same count-per-window rule, boundaries by
// arithmetic).
func BenchmarkCalendarTakeAt(b *testing.B) {
	ny := newYork(b)
	for _, l := range []Limit{PerCalendarMonth(1<<49, ny), PerDay(86_400_000_000).WithAlgorithm(FixedWindow)} {
		b.Run(l.Algorithm().String(), func(b *testing.B) {
			var s State
			now := Micros(utc(2026, 3, 8, 12, 0))
			b.ReportAllocs()
			for b.Loop() {
				now++
				if d := l.TakeAt(&s, now, 1); !d.Allowed {
					b.Fatal("refused")
				}
			}
		})
	}
}

// TestZoneID: a calendar limit's ID names its zone by what places the
// periods' boundaries. Zone database zones and time.UTC keep their names
// (the IDs, and so the stored states, of existing limits are unchanged);
// a fixed zone adds its offset east of UTC in seconds, since unnamed fixed
// zones of every offset, and FixedZone("UTC", 3600), would otherwise share
// an ID; "Local" adds its offsets on 2000-01-15 and 2000-07-15 UTC, since
// every machine's local zone is called "Local".
func TestZoneID(t *testing.T) {
	ny := newYork(t)
	tokyo, err := time.LoadLocation("Asia/Tokyo") // UTC+9 since 1951, no transition since
	require.NoError(t, err)
	for _, c := range []struct {
		loc  *time.Location
		want string
	}{
		{time.UTC, "UTC"},
		{time.FixedZone("UTC", 0), "UTC"}, // the same rules as time.UTC: one state is right
		{time.FixedZone("UTC", 3600), "UTC+3600"},
		{time.FixedZone("", 14*3600), "+50400"},
		{time.FixedZone("", -12*3600), "-43200"},
		{time.FixedZone("", 0), "+0"},
		{time.FixedZone("EST", -5*3600), "EST-18000"},
		{ny, "America/New_York"},
		{tokyo, "Asia/Tokyo"},
	} {
		assert.Equal(t, c.want, zoneID(c.loc), "zone %v", c.loc)
	}

	// "Local" with Paris's rules (UTC+1, and UTC+2 in summer), and with a
	// fixed offset.
	if data, err := os.ReadFile("/usr/share/zoneinfo/Europe/Paris"); err == nil {
		local, err := time.LoadLocationFromTZData("Local", data)
		require.NoError(t, err)
		assert.Equal(t, "Local+3600+7200", zoneID(local))
	}
	assert.Equal(t, "Local-18000", zoneID(time.FixedZone("Local", -5*3600)))

	assert.Equal(t, "daily:cal-day:+50400:6", PerCalendarDay(6, time.FixedZone("", 14*3600)).Named("daily").ID())
	assert.Equal(t, "daily:cal-day:UTC:6", PerCalendarDay(6, time.UTC).Named("daily").ID())
}
