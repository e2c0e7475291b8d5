package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/rampmeter/ratelimit"
)

// pingKey is the caller key of Ping's probe; like every caller key it is
// hashed, so its Redis key is prefix{hash}:limitID.
const pingKey = "redisstore-ping"

// pingLimit is Ping's probe limit: one request per millisecond, so the
// probe's key expires a millisecond after it is written (plus any
// WithExpiryMargin), and its ID is its own.
var pingLimit = ratelimit.Every(1, time.Millisecond).Named("redisstore-ping")

// The clock readings Ping accepts: the script's clock must read a time
// after 2020-01-01 (a server or WithClock clock that reads 1970 or another
// zero time is broken) and before 2^53 µs since 1970 (year 2255), below
// which the script's doubles are exact.
var (
	pingEarliest = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	pingLatest   = int64(1) << 53
)

// Ping checks that the store can decide, as a start-up check (or a
// readiness probe): it runs the store's Lua script once, as Take does, for
// a probe key of its own (charging a limit of one request per millisecond,
// whose key expires a millisecond later), so it fails when:
//
//   - the server cannot be reached or answers an error (a wrong address,
//     wrong credentials, a Cluster slot that is moving);
//   - the script cannot be loaded or run (FCALL, EVALSHA and EVAL denied by an ACL,
//     scripting disabled, a server without Lua);
//   - the server refuses writes: a read-only replica (a Sentinel or
//     ElastiCache reader endpoint), or an out-of-memory server under
//     maxmemory-policy noeviction;
//   - the clock the script decides by (the server's TIME, or the
//     WithClock clock) reads a time before 2020 or past 2255.
//
// Without Ping a store in such a state makes every Take fail, and the
// Limiter applies its failure mode: under FailOpen (the default) every
// request passes unlimited. Call it once before serving, with a deadline:
//
//	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
//	defer cancel()
//	if err := store.Ping(ctx); err != nil {
//		log.Fatal(err) // the store cannot decide: do not serve unlimited
//	}
//
// On a Redis Cluster or Ring client it checks the shard that holds the
// probe key only. The error is "redisstore: ping: " and the cause, wrapping
// it (and the context's error when ctx ended).
func (s *Store) Ping(ctx context.Context) error {
	out := make([]ratelimit.Decision, 1)
	if err := s.run(ctx, []ratelimit.Request{{Key: pingKey, Limit: &pingLimit, Cost: 1}}, out, "t"); err != nil {
		return fmt.Errorf("redisstore: ping: %w", err)
	}
	if at := out[0].At; at < pingEarliest || at >= pingLatest {
		source := "the Redis server's clock (TIME)"
		if s.now != nil {
			source = "the WithClock clock"
		}
		return fmt.Errorf("redisstore: ping: %s reads %s, before 2020 or past 2255: the store would decide by a wrong time",
			source, time.UnixMicro(at).UTC().Format(time.RFC3339Nano))
	}
	return nil
}
