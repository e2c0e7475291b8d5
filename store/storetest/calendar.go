package storetest

import (
	"time"
	_ "time/tzdata" // America/New_York loads on machines without a zone database

	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
)

// Scenarios for CalendarWindow limits: windows aligned to calendar days and
// months in America/New_York, where EST is UTC−5 and EDT UTC−4, EDT running
// from the second Sunday of March, 02:00 EST, to the first Sunday of
// November, 02:00 EDT (2026: March 8 and November 1; 2028: March 12).
// Every instant is given in UTC, with its local time in a comment.

// calendarScenarios are run by Run after the other algorithms' scenarios.
var calendarScenarios = []scenario{
	{"CalendarMonthEnds", calendarMonthEnds},
	{"CalendarLeapDay", calendarLeapDay},
	{"CalendarDST", calendarDST},
	{"CalendarStacked", calendarStacked},
}

// atTime sets the store's clock to t.
func (e *env) atTime(t time.Time) {
	e.now = t
	e.h.SetTime(t)
}

// newYork returns America/New_York.
func (e *env) newYork() *time.Location {
	e.t.Helper()
	loc, err := time.LoadLocation("America/New_York")
	require.NoError(e.t, err)
	return loc
}

func calendarLimit(e *env, l ratelimit.Limit) *ratelimit.Limit {
	e.t.Helper()
	require.NoError(e.t, l.Err())
	return &l
}

func utc(y int, m time.Month, d, h, min int) time.Time {
	return time.Date(y, m, d, h, min, 0, 0, time.UTC)
}

// calendarMonthEnds: 100 per calendar month across January → February
// and December → January, with settlements dated in the month charged.
func calendarMonthEnds(e *env) {
	l := calendarLimit(e, ratelimit.PerCalendarMonth(100, e.newYork()).Named("month"))
	const us = time.Microsecond
	// Jan 31, 23:59:59.999999 EST: the whole quota in January's last µs.
	e.atTime(utc(2026, 2, 1, 5, 0).Add(-us))
	d := e.take1("k", l, 100)
	e.check(ok(l, 0, us), d, "100 in January's last µs")
	jan := d.At
	e.check(refused(l, 0, us, us), e.take1("k", l, 1), "January is spent until February, 1 µs away")
	// Feb 1, 00:00 EST: a fresh month of 28 days.
	e.atTime(utc(2026, 2, 1, 5, 0))
	d = e.take1("k", l, 30)
	e.check(ok(l, 70, 28*24*time.Hour), d, "February")
	feb := d.At
	// A refund of January's usage is dropped; February's is credited; an
	// overage of January's is charged to February.
	e.atTime(utc(2026, 2, 1, 6, 0))
	const left = 27*24*time.Hour + 23*time.Hour
	e.checkAll("settle January and February", []ratelimit.Decision{ok(l, 70, left), ok(l, 80, left), ok(l, 75, left)},
		e.adjust(ratelimit.Request{Key: "k", Limit: l, Cost: -50, At: jan},
			ratelimit.Request{Key: "k", Limit: l, Cost: -10, At: feb},
			ratelimit.Request{Key: "k", Limit: l, Cost: 5, At: jan}))
	e.check(refused(l, 75, left, ratelimit.RetryNever), e.take1("k", l, 101), "more than the quota never fits")

	// Dec 31, 23:00 EST → Jan 1, 2027.
	e.atTime(utc(2027, 1, 1, 4, 0))
	e.check(ok(l, 0, time.Hour), e.take1("y", l, 100), "December spent an hour before the year ends")
	e.atTime(utc(2027, 1, 1, 4, 30))
	e.check(refused(l, 0, 30*time.Minute, 30*time.Minute), e.take1("y", l, 1), "until midnight")
	e.atTime(utc(2027, 1, 1, 5, 0))
	e.check(ok(l, 99, 31*24*time.Hour), e.take1("y", l, 1), "January 2027, 31 days")
}

// calendarLeapDay: Feb 29, 2028 is a day, and February 2028 has 29 days.
func calendarLeapDay(e *env) {
	ny := e.newYork()
	day := calendarLimit(e, ratelimit.PerCalendarDay(10, ny).Named("day"))
	month := calendarLimit(e, ratelimit.PerCalendarMonth(10, ny).Named("month"))
	e.atTime(utc(2028, 2, 29, 4, 0)) // Feb 28, 23:00 EST
	e.check(ok(day, 0, time.Hour), e.take1("k", day, 10), "Feb 28")
	e.check(refused(day, 0, time.Hour, time.Hour), e.take1("k", day, 1), "Feb 28 spent")
	e.atTime(utc(2028, 2, 29, 5, 0)) // Feb 29, 00:00 EST
	e.check(ok(day, 0, 24*time.Hour), e.take1("k", day, 10), "Feb 29, 24 hours")
	e.atTime(utc(2028, 2, 29, 17, 0)) // Feb 29, 12:00 EST
	e.check(refused(day, 0, 12*time.Hour, 12*time.Hour), e.take1("k", day, 1), "Feb 29 spent until Mar 1")
	e.check(ok(month, 0, 12*time.Hour), e.take1("k", month, 10), "February 2028 spent at noon on the 29th")
	e.check(refused(month, 0, 12*time.Hour, 12*time.Hour), e.take1("k", month, 1), "until Mar 1")
	e.atTime(utc(2028, 3, 1, 5, 0)) // Mar 1, 00:00 EST
	// March 2028: 31 days less the hour DST takes on March 12.
	e.check(ok(month, 9, 31*24*time.Hour-time.Hour), e.take1("k", month, 1), "March 2028")
	e.check(ok(day, 9, 24*time.Hour), e.take1("k", day, 1), "Mar 1")
}

// calendarDST: the days daylight saving time starts and ends, 23 and 25
// hours long.
func calendarDST(e *env) {
	l := calendarLimit(e, ratelimit.PerCalendarDay(5, e.newYork()).Named("day"))
	e.atTime(utc(2026, 3, 8, 5, 0)) // Mar 8, 00:00 EST
	e.check(ok(l, 0, 23*time.Hour), e.take1("k", l, 5), "Mar 8 has 23 hours")
	e.atTime(utc(2026, 3, 8, 7, 0)) // 03:00 EDT, an hour after 01:00 EST
	e.check(refused(l, 0, 21*time.Hour, 21*time.Hour), e.take1("k", l, 1), "until 00:00 EDT, 04:00Z")
	e.atTime(utc(2026, 3, 9, 4, 0)) // Mar 9, 00:00 EDT
	e.check(ok(l, 4, 24*time.Hour), e.take1("k", l, 1), "Mar 9")

	e.atTime(utc(2026, 11, 1, 4, 0)) // Nov 1, 00:00 EDT
	e.check(ok(l, 2, 25*time.Hour), e.take1("n", l, 3), "Nov 1 has 25 hours")
	e.atTime(utc(2026, 11, 1, 5, 30)) // 01:30 EDT
	e.check(ok(l, 0, 23*time.Hour+30*time.Minute), e.take1("n", l, 2), "the first 01:30")
	e.atTime(utc(2026, 11, 1, 6, 30)) // 01:30 EST, the same day
	e.check(refused(l, 0, 22*time.Hour+30*time.Minute, 22*time.Hour+30*time.Minute), e.take1("n", l, 1), "the second 01:30")
	e.atTime(utc(2026, 11, 2, 5, 0)) // Nov 2, 00:00 EST
	e.check(ok(l, 4, 24*time.Hour), e.take1("n", l, 1), "Nov 2")
}

// calendarStacked: a calendar budget stacked with a rate limit is all or
// nothing, like any stack.
func calendarStacked(e *env) {
	budget := calendarLimit(e, ratelimit.PerCalendarMonth(1000, e.newYork()).Named("budget").WithUnit("usd-micros"))
	rpm := tenPerSecond()
	e.atTime(utc(2026, 1, 31, 17, 0)) // Jan 31, 12:00 EST: 12 h of January left
	const left = 12 * time.Hour
	e.checkAll("both charged", []ratelimit.Decision{ok(budget, 400, left), ok(rpm, 49, 100*time.Millisecond)},
		e.take(req("k", budget, 600), req("k", rpm, 1)))
	// The budget refuses 600 more: the rate limit is not charged.
	e.checkAll("refused by the budget", []ratelimit.Decision{refused(budget, 400, left, left), ok(rpm, 49, 100*time.Millisecond)},
		e.take(req("k", budget, 600), req("k", rpm, 1)))
	e.check(ok(budget, 400, left), e.peek("k", budget), "budget not charged again")
	e.check(ok(rpm, 49, 100*time.Millisecond), e.peek("k", rpm), "rate limit not charged")
}

// calendarZones are the zones calendar limits are drawn in: UTC, New
// York's DST, and Havana's, whose DST starts at midnight (a day then
// begins at 01:00).
var calendarZones = func() []*time.Location {
	zones := []*time.Location{time.UTC}
	for _, name := range []string{"America/New_York", "America/Havana"} {
		if loc, err := time.LoadLocation(name); err == nil { // embedded: time/tzdata
			zones = append(zones, loc)
		}
	}
	return zones
}()

// drawCalendarLimit returns a calendar day or month limit of quota in a
// drawn zone.
func drawCalendarLimit(src source, quota int64, name string) ratelimit.Limit {
	loc := calendarZones[src.draw(0, int64(len(calendarZones)-1), "zone")]
	if src.draw(0, 1, "month") == 1 {
		return ratelimit.PerCalendarMonth(quota, loc).Named(name)
	}
	return ratelimit.PerCalendarDay(quota, loc).Named(name)
}
