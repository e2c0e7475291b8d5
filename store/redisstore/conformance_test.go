package redisstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
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
// (skipped without one) with a fake clock given through WithClock, a prefix
// unique to each subtest, and keys pinned against the server's wall-clock
// expiry (see pinKeys).
func TestConformanceRedis(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		e := newPinned(t)
		return storetest.Harness{Store: e.store, SetTime: e.setTime}
	})
}

// TestPropertiesMiniredis runs the suite's property tests (random sequences
// on every algorithm, compared with the model decision by decision and
// header by header) on miniredis, deciding by Redis TIME.
func TestPropertiesMiniredis(t *testing.T) {
	storetest.RunProperties(t, func(t *testing.T) storetest.Harness {
		e := newMini(t)
		return storetest.Harness{Store: e.store, SetTime: e.setTime}
	})
}

// TestPropertiesRedis runs the property tests on the real redis-server,
// with WithClock, a unique prefix and pinned keys.
func TestPropertiesRedis(t *testing.T) {
	storetest.RunProperties(t, func(t *testing.T) storetest.Harness {
		e := newPinned(t)
		return storetest.Harness{Store: e.store, SetTime: e.setTime}
	})
}

// newPinned is newReal with pinKeys installed.
func newPinned(t *testing.T) *env {
	e := newReal(t)
	e.client.AddHook(pinKeys{e.client})
	return e
}

// pinKeys runs every script call in a MULTI/EXEC with a PERSIST of each of
// its keys. The store decides by a fake clock (WithClock) that jumps
// seconds or days in microseconds of real time, while the real server
// expires keys by its wall clock: a key written with a PX of 1ms (a state
// that empties 1µs later on the fake clock) could vanish before the fake
// clock has moved at all, which no store may do. Never expiring is always
// correct (an expired state decides like a key never seen, which the
// suite checks), so pinned keys keep the comparison exact; the TTLs
// themselves are checked by TestLuaGoAgreement and TestTTLIsTimeUntilFull,
// and expiry by TestConformanceMiniredis, whose TTLs follow the fake clock.
// Inside MULTI/EXEC nothing expires between the script and the PERSIST.
type pinKeys struct{ client *redis.Client }

func (pinKeys) DialHook(next redis.DialHook) redis.DialHook { return next }

func (pinKeys) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h pinKeys) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name != "fcall" && name != "evalsha" && name != "eval" {
			return next(ctx, cmd)
		}
		args := cmd.Args() // fcall name (evalsha sha) numkeys key... arg...
		n, _ := args[2].(int)
		_, _ = h.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
			_ = p.Process(ctx, cmd)
			for _, k := range args[3 : 3+n] {
				p.Persist(ctx, k.(string))
			}
			return nil
		})
		return cmd.Err()
	}
}

// TestPinKeys checks the hook the real-server harnesses rely on: a key the
// script writes with a TTL is left without one.
func TestPinKeys(t *testing.T) {
	e := newPinned(t)
	l := limitOf(t, ratelimit.PerSecond(10))
	e.take(req("k", l, 1))
	ttl, err := e.client.PTTL(t.Context(), e.store.Key("k", l)).Result()
	require.NoError(t, err)
	require.Equal(t, time.Duration(-1), ttl, "no TTL")
	require.Equal(t, "100000:"+strconv.FormatInt(e.micros(), 10), e.stored(e.store.Key("k", l)))
}
