package ratelimit_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
)

func TestResultBinding(t *testing.T) {
	a := ratelimit.PerMinute(60).Named("a")
	b := ratelimit.PerDay(1000).Named("b")
	c := ratelimit.PerHour(100).Named("c")
	tests := []struct {
		name string
		res  ratelimit.Result
		want string
	}{
		{"no decisions", ratelimit.Result{Allowed: true}, ""},
		// Allowed: least fraction left. a 30/60 = 0.5, b 400/1000 = 0.4,
		// c 40/100 = 0.4: b (first of the tie).
		{"allowed", ratelimit.Result{Allowed: true, Decisions: []ratelimit.Decision{
			{Limit: &a, Allowed: true, Remaining: 30},
			{Limit: &b, Allowed: true, Remaining: 400},
			{Limit: &c, Allowed: true, Remaining: 40},
		}}, "b"},
		{"longest wait", ratelimit.Result{Decisions: []ratelimit.Decision{
			{Limit: &a, RetryAfter: time.Second},
			{Limit: &b, Allowed: true},
			{Limit: &c, RetryAfter: time.Minute},
		}}, "c"},
		{"never first", ratelimit.Result{Decisions: []ratelimit.Decision{
			{Limit: &a, RetryAfter: time.Hour},
			{Limit: &b, RetryAfter: ratelimit.RetryNever},
			{Limit: &c, RetryAfter: ratelimit.RetryNever},
		}}, "b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := tt.res.Binding()
			if tt.want == "" {
				assert.Nil(t, d)
				return
			}
			require.NotNil(t, d)
			assert.Equal(t, tt.want, d.Limit.Name())
		})
	}
}
