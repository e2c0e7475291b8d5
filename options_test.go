package ratelimit_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/memory"
)

func TestNewValidation(t *testing.T) {
	valid := ratelimit.WithLimits(ratelimit.PerMinute(60))
	tests := []struct {
		name  string
		store ratelimit.Store
		opts  []ratelimit.Option
		also  error
	}{
		{"nil store", nil, []ratelimit.Option{valid}, nil},
		{"typed nil store", (*memory.Store)(nil), []ratelimit.Option{valid}, nil},
		{"no limits", newStore(t, time.Now), nil, nil},
		{"empty WithLimits", newStore(t, time.Now), []ratelimit.Option{ratelimit.WithLimits()}, nil},
		{"invalid limit", newStore(t, time.Now), []ratelimit.Option{ratelimit.WithLimits(ratelimit.PerMinute(0))}, ratelimit.ErrInvalidLimit},
		{"zero limit", newStore(t, time.Now), []ratelimit.Option{ratelimit.WithLimits(ratelimit.Limit{})}, ratelimit.ErrInvalidLimit},
		{"duplicate names", newStore(t, time.Now), []ratelimit.Option{ratelimit.WithLimits(ratelimit.PerMinute(60), ratelimit.PerHour(600))}, nil},
		{"nil option", newStore(t, time.Now), []ratelimit.Option{valid, nil}, nil},
		{"nil key", newStore(t, time.Now), []ratelimit.Option{valid, ratelimit.WithKey(nil)}, nil},
		{"zero timeout", newStore(t, time.Now), []ratelimit.Option{valid, ratelimit.WithStoreTimeout(0)}, nil},
		{"negative timeout", newStore(t, time.Now), []ratelimit.Option{valid, ratelimit.WithStoreTimeout(-time.Second)}, nil},
		{"unknown style", newStore(t, time.Now), []ratelimit.Option{valid, ratelimit.WithHeaders(ratelimit.HeaderStyle(1 << 8))}, nil},
		{"a style bit no longer built in (OpenAI, now llm.OpenAIHeaders)", newStore(t, time.Now), []ratelimit.Option{valid, ratelimit.WithHeaders(ratelimit.HeaderStyle(1 << 2))}, nil},
		{"nil header writer", newStore(t, time.Now), []ratelimit.Option{valid, ratelimit.WithHeaders(ratelimit.HeadersIETF, nil)}, nil},
		{"no header writers", newStore(t, time.Now), []ratelimit.Option{valid, ratelimit.WithHeaders()}, nil},
		{"unknown failure mode", newStore(t, time.Now), []ratelimit.Option{valid, ratelimit.WithFailureMode(7)}, nil},
		{"nil reject handler", newStore(t, time.Now), []ratelimit.Option{valid, ratelimit.WithRejectHandler(nil)}, nil},
		{"nil key error handler", newStore(t, time.Now), []ratelimit.Option{valid, ratelimit.WithKeyErrorHandler(nil)}, nil},
		{"skip and key error handler", newStore(t, time.Now), []ratelimit.Option{valid, ratelimit.WithSkipOnKeyError(),
			ratelimit.WithKeyErrorHandler(func(http.ResponseWriter, *http.Request, error) {})}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim, err := ratelimit.New(tt.store, tt.opts...)
			assert.Nil(t, lim)
			require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
			if tt.also != nil {
				assert.ErrorIs(t, err, tt.also)
			}
		})
	}

	lim, err := ratelimit.New(newStore(t, time.Now), ratelimit.WithLimits(ratelimit.PerMinute(60), ratelimit.PerDay(1000).Named("daily")))
	require.NoError(t, err)
	limits := lim.Limits()
	require.Len(t, limits, 2)
	assert.Equal(t, "requests", limits[0].Name())
	assert.Equal(t, "daily", limits[1].Name())
	limits[0] = ratelimit.PerSecond(1)
	assert.Equal(t, int64(60), lim.Limits()[0].Quota(), "Limits returns a copy")
}
