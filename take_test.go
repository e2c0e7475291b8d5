package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
)

func TestTake(t *testing.T) {
	lim, _, clock := newLimiter(t, aiLimits())
	ctx := context.Background()

	// No costs: 1 each.
	res, err := lim.Take(ctx, "k")
	require.NoError(t, err)
	assert.True(t, res.Allowed)
	require.Len(t, res.Decisions, 2)
	assert.Equal(t, int64(59), res.Decisions[0].Remaining)
	assert.Equal(t, int64(99_999), res.Decisions[1].Remaining)

	// Explicit costs, aligned with the limits.
	res, err = lim.Take(ctx, "k", 1, 99_999)
	require.NoError(t, err)
	assert.True(t, res.Allowed)
	assert.Equal(t, int64(0), res.Decisions[1].Remaining)
	assert.Equal(t, "tokens", res.Binding().Limit.Name())

	// Refused: not an error. 2 tokens missing × 0.864s = 1.728s.
	res, err = lim.Take(ctx, "k", 1, 2)
	require.NoError(t, err)
	assert.False(t, res.Allowed)
	assert.Equal(t, 1728*time.Millisecond, res.RetryAfter)
	assert.Equal(t, int64(58), res.Decisions[0].Remaining, "requests not charged")

	clock.Advance(1728 * time.Millisecond)
	res, err = lim.Take(ctx, "k", 1, 2)
	require.NoError(t, err)
	assert.True(t, res.Allowed)

	// Never.
	res, err = lim.Take(ctx, "other", 1, 100_001)
	require.NoError(t, err)
	assert.False(t, res.Allowed)
	assert.Equal(t, ratelimit.RetryNever, res.RetryAfter)

	for _, bad := range []struct {
		key   string
		costs []int64
	}{{"", nil}, {"k", []int64{1}}, {"k", []int64{1, 2, 3}}, {"k", []int64{1, -1}}} {
		res, err := lim.Take(ctx, bad.key, bad.costs...)
		assert.ErrorIs(t, err, ratelimit.ErrInvalidRequest, "%q %v", bad.key, bad.costs)
		assert.Equal(t, ratelimit.Result{}, res)
	}
	assert.Equal(t, ratelimit.Stats{Allowed: 3, Limited: 1, TooLarge: 1}, lim.Stats())
}

func TestTakeStoreFailure(t *testing.T) {
	open, err := ratelimit.New(failingStore{}, aiLimits())
	require.NoError(t, err)
	res, err := open.Take(context.Background(), "k")
	assert.ErrorIs(t, err, errStoreDown)
	assert.Equal(t, ratelimit.Result{Allowed: true, Bypassed: true}, res)
	assert.Equal(t, ratelimit.Stats{Bypassed: 1, StoreErrors: 1}, open.Stats())

	closed, err := ratelimit.New(failingStore{}, aiLimits(), ratelimit.WithFailureMode(ratelimit.FailClosed))
	require.NoError(t, err)
	res, err = closed.Take(context.Background(), "k")
	assert.ErrorIs(t, err, errStoreDown)
	assert.Equal(t, ratelimit.Result{RetryAfter: time.Second}, res)
	assert.Equal(t, ratelimit.Stats{StoreErrors: 1}, closed.Stats())

	// The caller's own cancellation is not a store failure.
	blocked, err := ratelimit.New(&blockingStore{}, aiLimits())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err = blocked.Take(ctx, "k")
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, ratelimit.Result{}, res)
	assert.Equal(t, ratelimit.Stats{}, blocked.Stats())
}

func TestAdjust(t *testing.T) {
	lim, _, _ := newLimiter(t, aiLimits())
	ctx := context.Background()
	_, err := lim.Take(ctx, "k", 1, 50_000)
	require.NoError(t, err)

	// Refund 20,000: 30,000 in use → 70,000 left, 30,000 × 0.864s = 25,920s.
	res, err := lim.Adjust(ctx, "k", "tokens", -20_000)
	require.NoError(t, err)
	assert.True(t, res.Allowed)
	require.Len(t, res.Decisions, 1)
	assert.Equal(t, "tokens", res.Decisions[0].Limit.Name())
	assert.Equal(t, int64(70_000), res.Decisions[0].Remaining)
	assert.Equal(t, 25_920*time.Second, res.Decisions[0].Reset)

	// Charge into debt: 130,000 in use, nothing left.
	res, err = lim.Adjust(ctx, "k", "tokens", 100_000)
	require.NoError(t, err)
	assert.Equal(t, int64(0), res.Decisions[0].Remaining)
	assert.Equal(t, 112_320*time.Second, res.Decisions[0].Reset)

	_, err = lim.Adjust(ctx, "k", "dollars", 1)
	assert.ErrorIs(t, err, ratelimit.ErrUnknownLimit)
	_, err = lim.Adjust(ctx, "", "tokens", 1)
	assert.ErrorIs(t, err, ratelimit.ErrInvalidRequest)

	failing, err := ratelimit.New(failingStore{}, aiLimits())
	require.NoError(t, err)
	_, err = failing.Adjust(ctx, "k", "tokens", 1)
	assert.ErrorIs(t, err, errStoreDown)
	assert.Equal(t, ratelimit.Stats{StoreErrors: 1}, failing.Stats())
}
