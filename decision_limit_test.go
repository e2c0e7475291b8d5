package ratelimit_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/rampmeter/ratelimit"
)

// TestDecisionLimitAccessors: LimitUnit, LimitBurst and LimitIsShadow
// answer what d.Limit's accessors answer, and the zero values for a
// Decision without a Limit (a failed call's).
func TestDecisionLimitAccessors(t *testing.T) {
	plain := ratelimit.PerMinute(60)                                               // burst = quota, unit requests
	burst := ratelimit.PerDay(100_000).WithBurst(2_500).WithUnit(ratelimit.Tokens) // an explicit burst
	shadow := ratelimit.PerSecond(7).Named("probe").Shadow()
	for _, l := range []*ratelimit.Limit{&plain, &burst, &shadow} {
		d := ratelimit.Decision{Limit: l}
		assert.Equal(t, l.Unit(), d.LimitUnit(), "%v", l)
		assert.Equal(t, l.Burst(), d.LimitBurst(), "%v", l)
		assert.Equal(t, l.IsShadow(), d.LimitIsShadow(), "%v", l)
	}
	d := ratelimit.Decision{Limit: &burst}
	assert.Equal(t, ratelimit.Tokens, d.LimitUnit())
	assert.Equal(t, int64(2_500), d.LimitBurst())
	d = ratelimit.Decision{Limit: &plain}
	assert.Equal(t, ratelimit.Requests, d.LimitUnit())
	assert.Equal(t, int64(60), d.LimitBurst())
	assert.False(t, d.LimitIsShadow())
	d = ratelimit.Decision{Limit: &shadow}
	assert.True(t, d.LimitIsShadow())
	var none ratelimit.Decision
	assert.Equal(t, ratelimit.Unit(""), none.LimitUnit())
	assert.Equal(t, int64(0), none.LimitBurst())
	assert.False(t, none.LimitIsShadow())
}
