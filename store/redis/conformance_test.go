package redisstore_test

import (
	"testing"

	"github.com/rampmeter/ratelimit/store/storetest"
)

// TestConformanceMiniredis runs the conformance suite on miniredis with the
// store reading the clock from Redis TIME, which miniredis takes from
// SetTime (and with TTLs that count down on that clock, so keys expire).
func TestConformanceMiniredis(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		e := newMini(t)
		return storetest.Harness{Store: e.store, SetTime: e.setTime}
	})
}

// TestConformanceRedis runs the conformance suite on the real redis-server
// (skipped without one) with a fake clock given through WithClock and a
// prefix unique to each subtest.
func TestConformanceRedis(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		e := newReal(t)
		return storetest.Harness{Store: e.store, SetTime: e.setTime}
	})
}
