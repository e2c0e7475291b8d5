package ratelimit

import (
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// Calendar windows: CalendarWindow limits count per calendar day or month
// in a time zone. The windows are the calendar's, so their length varies: a
// month has 28 to 31 days, and a day on which daylight saving time starts
// or ends has 23 or 25 hours (or other lengths where a zone's rules say
// so). Every boundary is computed with time.Date in the limit's Location.

// CalendarPeriod is the period of a CalendarWindow limit: a calendar day or
// a calendar month in the limit's Location.
type CalendarPeriod uint8

const (
	// CalendarDay is a day from local midnight to the next local midnight
	// (23 or 25 hours on the days daylight saving time starts or ends).
	CalendarDay CalendarPeriod = iota + 1
	// CalendarMonth is a month from local midnight on its 1st to local
	// midnight on the next month's 1st (28 to 31 days, give or take the
	// hour of a daylight-saving change).
	CalendarMonth
)

// String returns "day" or "month".
func (c CalendarPeriod) String() string {
	switch c {
	case CalendarDay:
		return "day"
	case CalendarMonth:
		return "month"
	}
	return "calendar(" + strconv.Itoa(int(c)) + ")"
}

// PerCalendarDay returns a CalendarWindow limit of quota units per calendar
// day in loc: the count starts afresh at every local midnight. A refusal's
// RetryAfter, and Reset, are the time until the next local midnight. loc
// must not be nil (Err, and so New, report it): use time.UTC, or a zone
// from time.LoadLocation ("America/New_York"; import _ "time/tzdata" to
// embed the zone database so that it loads on any machine). time.Local is
// accepted but names each machine's own zone, so instances in different
// zones sharing a store would disagree on the boundaries.
//
// Its Period is the nominal 24 hours, for code that needs one length
// (WithQuotaExhaustedStatus's threshold, Transport's bound on a pause); the
// windows themselves follow the calendar (WindowAt). Like FixedWindow it
// has no separate burst, and quota is at most 2^49.
func PerCalendarDay(quota int64, loc *time.Location) Limit {
	return calendarLimit(quota, CalendarDay, loc)
}

// PerCalendarMonth returns a CalendarWindow limit of quota units per
// calendar month in loc: the count starts afresh at local midnight on the
// 1st of every month, so a key's monthly budget resets on the 1st, whatever
// the month's length. A refusal's RetryAfter, and Reset, are the time until
// the next month starts. loc must not be nil; see PerCalendarDay for the
// choice of zone.
//
// Its Period is a nominal 30 days (720 hours), for code that needs one
// length; the windows follow the calendar (WindowAt).
//
// For a spend budget, count micro-units of a currency with a cost function
// and name the unit:
//
//	ratelimit.PerCalendarMonth(50_000_000, ny).Named("budget").
//		CostFrom(estimateMicroUSD).WithUnit("usd-micros").
//		WithRefusalStatus(http.StatusPaymentRequired)
func PerCalendarMonth(quota int64, loc *time.Location) Limit {
	return calendarLimit(quota, CalendarMonth, loc)
}

func calendarLimit(quota int64, c CalendarPeriod, loc *time.Location) Limit {
	period := 24 * time.Hour
	if c == CalendarMonth {
		period = 30 * 24 * time.Hour
	}
	l := Limit{quota: quota, period: period, unit: Requests, algorithm: CalendarWindow, calendar: c, loc: loc}
	return l.finish()
}

// CalendarPeriod returns the calendar period of a CalendarWindow limit, or
// 0 for any other limit.
func (l Limit) CalendarPeriod() CalendarPeriod { return l.calendar }

// Location returns the time zone of a CalendarWindow limit's windows, or
// nil for any other limit.
func (l Limit) Location() *time.Location { return l.loc }

// WindowAt returns the window holding t, [start, end), in the limit's
// Location: for a CalendarWindow limit the calendar day or month holding t;
// for a FixedWindow limit aligned to the Unix epoch the window of Period
// holding t. It returns zero times for other limits (their windows slide,
// or open at a key's first hit) and for an invalid limit.
func (l Limit) WindowAt(t time.Time) (start, end time.Time) {
	if l.Err() != nil {
		return time.Time{}, time.Time{}
	}
	now := Micros(t)
	switch {
	case l.algorithm == CalendarWindow:
		s, n := l.calSpan(now)
		return time.UnixMicro(s).In(l.loc), time.UnixMicro(n).In(l.loc)
	case l.algorithm == FixedWindow && !l.firstHit:
		s := now - now%l.periodUS
		if now < 0 && now%l.periodUS != 0 {
			s -= l.periodUS
		}
		return time.UnixMicro(s).In(t.Location()), time.UnixMicro(s + l.periodUS).In(t.Location())
	}
	return time.Time{}, time.Time{}
}

// CalendarBounds returns, for a valid CalendarWindow limit, the starts of
// four consecutive calendar periods around now (µs since the Unix epoch):
// the period before the one holding now, the one holding now, the next,
// and the one after it. So [b[0], b[3]) covers now's period and one whole
// period on either side. A store that decides by a clock other than the one
// it computes boundaries with (the Redis script reads the Redis clock, and
// has no time zones) passes them along; any time in [b[0], b[3]) then finds
// its window among them, exactly as TakeAt would compute it. It returns
// zeros for any other limit.
func (l *Limit) CalendarBounds(now int64) (b [4]int64) {
	if l.algorithm != CalendarWindow || l.err != nil || l.id == "" {
		return b
	}
	b[1], b[2] = l.calSpan(now)
	b[0] = l.calStart(b[1] - 1)
	b[3] = l.calNext(b[2])
	return b
}

// WithRefusalStatus returns a copy of l whose refusals are answered with
// status when l is the binding limit (Result.Binding): typically
// 402 Payment Required for a spent budget, or 403 Forbidden for a quota a
// client must not retry. It overrides WithQuotaExhaustedStatus for this
// limit. The response still carries Retry-After (the time until the cost
// fits again: for a CalendarWindow limit, until the next period starts) and
// the rate-limit fields, and the body says which limit ran out and when it
// resets. A status of 0 restores the default: 429 Too Many Requests (or the
// WithQuotaExhaustedStatus status). Any other status must be a 4xx other
// than 413, which is reserved for requests that can never fit; Err, and so
// New, report any other.
func (l Limit) WithRefusalStatus(status int) Limit {
	if status != 0 && (status < 400 || status > 499 || status == http.StatusRequestEntityTooLarge) && l.buildErr == nil {
		l.buildErr = fmt.Errorf("%w: refusal status %d: want a 4xx other than 413 (or 0 for the default)", ErrInvalidLimit, status)
	}
	l.refusal = status
	return l.finish()
}

// RefusalStatus returns the status of WithRefusalStatus, or 0 when the
// Limiter's default applies.
func (l Limit) RefusalStatus() int { return l.refusal }

// finishCalendar completes finish for a CalendarWindow limit: there is no
// rate to scale (a window counts units, as FixedWindow does), so the
// parameters of Params are scale 1, drain 1 and capacity Quota, and the ID
// names the period and the zone instead of a length of time.
func (l Limit) finishCalendar() Limit {
	switch {
	case l.loc == nil:
		l.err = fmt.Errorf("%w: %s: a calendar window needs a time zone, got a nil *time.Location", ErrInvalidLimit, l.Name())
		return l
	case l.calendar != CalendarDay && l.calendar != CalendarMonth:
		l.err = fmt.Errorf("%w: %s: a CalendarWindow limit is built with PerCalendarDay or PerCalendarMonth", ErrInvalidLimit, l.Name())
		return l
	case l.burst != 0 && l.burst != l.quota:
		l.err = fmt.Errorf("%w: %s: a %v admits Quota per window; it has no separate burst (got burst %d, quota %d)",
			ErrInvalidLimit, l.Name(), l.algorithm, l.burst, l.quota)
		return l
	case l.quota > maxScaled/4:
		l.err = fmt.Errorf("%w: %s: quota %d too large for a %v (at most 2^49)", ErrInvalidLimit, l.Name(), l.quota, l.algorithm)
		return l
	case l.firstHit:
		l.err = fmt.Errorf("%w: %s: AlignToFirstHit applies only to FixedWindow, not %v", ErrInvalidLimit, l.Name(), l.algorithm)
		return l
	}
	l.scale, l.drain, l.capacity, l.periodUS = 1, 1, l.quota, l.period.Microseconds()
	l.calSpans = new(calCache)
	l.id = l.Name() + ":cal-" + l.calendar.String() + ":" + zoneID(l.loc) + ":" + strconv.FormatInt(l.quota, 10)
	if l.ns != "" {
		l.id = l.ns + "/" + l.id
	}
	l.wireQ, l.wireW = min(l.quota, maxSFInteger), l.periodUS/int64(time.Second/time.Microsecond)
	return l
}

// zoneID names loc in a calendar limit's ID, so that limits whose zones
// place the periods' boundaries differently get different IDs, and so
// different stored states. A zone of the time zone database
// (time.LoadLocation) is named by its name, as Location.String gives it
// ("America/New_York"), and time.UTC by "UTC". A name alone does not
// identify the other zones:
//   - a fixed zone (time.FixedZone, any zone without transitions) is named
//     by its name and its offset east of UTC in seconds ("+50400",
//     "EST-18000", "UTC+3600"), except a zone named "UTC" of offset 0;
//   - time.Local, "Local" on every machine whatever its zone, by "Local"
//     and its offsets on 2000-01-15 and 2000-07-15 UTC ("Local+3600+7200"
//     in Paris), which tells apart machines in zones of different offsets.
//
// Two zones of one name loaded from different zone data
// (time.LoadLocationFromTZData) still share an ID.
func zoneID(loc *time.Location) string {
	name := loc.String()
	winter := time.Date(2000, 1, 15, 0, 0, 0, 0, time.UTC).In(loc)
	if start, end := winter.ZoneBounds(); start.IsZero() && end.IsZero() {
		// No transition ever: a fixed offset.
		_, off := winter.Zone()
		if name == "UTC" && off == 0 {
			return name
		}
		return name + offsetID(off)
	}
	if name == "Local" {
		_, w := winter.Zone()
		_, su := time.Date(2000, 7, 15, 0, 0, 0, 0, time.UTC).In(loc).Zone()
		return name + offsetID(w) + offsetID(su)
	}
	return name
}

// offsetID formats a zone offset in seconds east of UTC with its sign.
func offsetID(off int) string {
	if off < 0 {
		return strconv.Itoa(off)
	}
	return "+" + strconv.Itoa(off)
}

// calendarError reports a limit that is not a calendar window but carries
// one's settings (WithAlgorithm(CalendarWindow) on another limit, or
// another algorithm on a calendar limit); nil otherwise.
func (l Limit) calendarError() error {
	switch {
	case l.algorithm == CalendarWindow && l.calendar == 0:
		return fmt.Errorf("%w: %s: a CalendarWindow limit is built with PerCalendarDay or PerCalendarMonth", ErrInvalidLimit, l.Name())
	case l.algorithm != CalendarWindow && l.calendar != 0:
		return fmt.Errorf("%w: %s: a calendar %v is enforced with CalendarWindow, not %v", ErrInvalidLimit, l.Name(), l.calendar, l.algorithm)
	}
	return nil
}

// calendarString describes a calendar limit for String:
// `"budget" 50000000/calendar month America/New_York calendar-window`.
func (l Limit) calendarString() string {
	s := fmt.Sprintf("%q %d/calendar %v %v %v", l.Name(), l.quota, l.calendar, l.loc, l.algorithm)
	if l.shadow {
		s += " shadow"
	}
	return s
}

// ---- Calendar windows ----

// dayStart returns the first instant (µs) whose local date in loc is y-m-d
// or later. That is local midnight, except on a day whose midnight a
// daylight-saving change skips (some zones change at 00:00), which begins
// at the change.
func dayStart(y int, m time.Month, d int, loc *time.Location) int64 {
	t := time.Date(y, m, d, 0, 0, 0, 0, loc)
	if ty, tm, td := t.Date(); ty < y || ty == y && (tm < m || tm == m && td < d) {
		// time.Date picked the offset before the change, an instant of
		// the previous day: the day begins where that offset ends.
		if _, end := t.ZoneBounds(); !end.IsZero() {
			t = end
		}
	}
	return Micros(t)
}

// periodStartOf returns the start of the period whose local date is that
// of t (µs): its day, or the 1st of its month.
func (l *Limit) periodStartOf(t int64) int64 {
	y, m, d := time.UnixMicro(t).In(l.loc).Date()
	if l.calendar == CalendarMonth {
		d = 1
	}
	return dayStart(y, m, d, l.loc)
}

// calNext returns the start of the period after the one starting at s.
func (l *Limit) calNext(s int64) int64 {
	y, m, d := time.UnixMicro(s).In(l.loc).Date()
	var n int64
	if l.calendar == CalendarMonth {
		n = dayStart(y, m+1, 1, l.loc) // time.Date normalises month 13
	} else {
		n = dayStart(y, m, d+1, l.loc)
	}
	if n <= s { // cannot happen with sane zone data; keep windows non-empty
		n = s + l.periodUS
	}
	return n
}

// calSpan returns the calendar period holding t (µs), [s, n): s is the
// latest period start at or before t. Where a zone's clocks go back across
// midnight the local date repeats, so the period of t's local date may
// already have been followed by the next one; the loop moves on to it.
func (l *Limit) calSpan(t int64) (s, n int64) {
	if c := l.calSpans; c != nil {
		if p := c.last.Load(); p != nil && p[0] <= t && t < p[1] {
			return p[0], p[1]
		}
		defer func() { c.last.Store(&[2]int64{s, n}) }()
	}
	s = l.periodStartOf(t)
	if s > t { // cannot happen with sane zone data
		s = l.periodStartOf(s - l.periodUS)
	}
	n = l.calNext(s)
	for i := 0; n <= t && i < 4; i++ {
		s, n = n, l.calNext(n)
	}
	return s, n
}

// calCache holds the last period a limit computed, [start, end) in µs,
// shared by the copies of the limit (the zone's rules are fixed, so a
// period once computed holds for every time in it): most decisions fall
// in it and skip time.Date. A decision in another period replaces it.
type calCache struct {
	last atomic.Pointer[[2]int64]
}

// calStart returns the start of the calendar period holding t (µs).
func (l *Limit) calStart(t int64) int64 {
	s, _ := l.calSpan(t)
	return s
}

// calWindow returns the window a calendar state s decides in at now,
// [start, end): the period holding now, or the stored window when it is
// later (a clock that moved backwards stays in the stored window, as
// FixedWindow's does). The stored window's end is in the state (Prev), so
// the Redis script, which cannot compute it, finds it there however far
// the clock moved back.
func (l *Limit) calWindow(s *State, now int64) (start, end int64) {
	start, end = l.calSpan(now)
	if s.Updated > start {
		start, end = s.Updated, s.Prev
		if end <= start { // a state without its end: compute it
			end = l.calNext(start)
		}
	}
	return start, end
}

// calendarTake is windowTake for a calendar window: at most Quota units per
// calendar period. A refusal waits until the period ends.
func (l *Limit) calendarTake(s *State, now, cost int64, d *Decision) {
	start, end := l.calWindow(s, now)
	calRoll(s, start, end)
	switch {
	case cost > l.quota:
		d.RetryAfter = RetryNever
	case s.Level+cost > l.quota:
		d.RetryAfter = micros(end - now)
	default:
		d.Allowed = true
		s.Level += cost
	}
	l.describeCalendar(s, now, end, d)
}

// calendarAdjust is windowAdjust for a calendar window: delta is credited
// to the current period when the usage was charged in it; a refund for an
// earlier period is dropped, an overage charged to the current one.
func (l *Limit) calendarAdjust(s *State, now, chargedAt, delta int64, d *Decision) {
	start, end := l.calWindow(s, now)
	calRoll(s, start, end)
	limit := 2 * l.quota
	delta = clamp(delta, -limit, limit)
	if l.calStart(chargedAt) == s.Updated || delta > 0 {
		s.Level = clamp(s.Level+delta, 0, limit)
	}
	l.describeCalendar(s, now, end, d)
}

// calRoll moves a calendar state to the window [w, end).
func calRoll(s *State, w, end int64) {
	if w != s.Updated {
		*s = State{Updated: w, Prev: end}
		return
	}
	s.Prev = end
}

func (l *Limit) describeCalendar(s *State, now, end int64, d *Decision) {
	if s.Level < l.quota {
		d.Remaining = l.quota - s.Level
	}
	if s.Level > 0 && end > now {
		d.Reset = micros(end - now)
	}
}

// calendarExpires is ExpiresAt for a calendar window: a count expires with
// its period.
func (l *Limit) calendarExpires(s *State) int64 {
	switch {
	case s.Level == 0:
		return s.Updated
	case s.Prev > s.Updated:
		return s.Prev
	}
	return l.calNext(s.Updated)
}

// calendarWindowLeft returns the time from d.At to the end of the period
// holding it, for the effective window of a decision on an unused key.
func (l *Limit) calendarWindowLeft(d *Decision) time.Duration {
	if d.At <= 0 {
		return l.period
	}
	_, n := l.calSpan(d.At)
	return micros(n - d.At)
}

// calendarWireWindow returns the w of RateLimit-Policy for a calendar
// limit at at (µs): the length of the period holding it, in seconds
// rounded up (every zone's offsets are whole seconds today, so exact).
func (l *Limit) calendarWireWindow(at int64) int64 {
	s, n := l.calSpan(at)
	return ceilDiv(n-s, int64(time.Second/time.Microsecond))
}

// calendarDetail is the problem detail of a refusal bound by a calendar
// limit d: what the limit allows, what is left and asked for, and when the
// period starts afresh:
//
//	quota exceeded: the "budget" limit allows 1000 usd-micros per calendar month in America/New_York and has 400 left, but this request needs 600; it resets at 2026-02-01T00:00:00-05:00, retry after 43200 seconds
func calendarDetail(d *Decision, cost, secs int64) string {
	l := d.Limit
	s := fmt.Sprintf("quota exceeded: the %q limit allows %s per calendar %v in %v and has %d left, but this request needs %d",
		l.Name(), units(l.quota, l.unit), l.calendar, l.loc, d.Remaining, cost)
	if d.RetryAfter > 0 && d.At > 0 {
		s += "; it resets at " + CalendarReset(d).Format(time.RFC3339)
	}
	return s + ", retry after " + plural(secs, "second")
}

// CalendarReset returns when the period of a refusal d by a CalendarWindow
// limit ends and the limit starts afresh, in the limit's Location: d.At
// plus d.RetryAfter. It returns the zero time for any other decision.
func CalendarReset(d *Decision) time.Time {
	if d == nil || d.Limit == nil || d.Limit.algorithm != CalendarWindow || d.Allowed || d.RetryAfter <= 0 {
		return time.Time{}
	}
	return time.UnixMicro(d.At + d.RetryAfter.Microseconds()).In(d.Limit.loc)
}
