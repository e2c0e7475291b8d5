package adapters

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/rampmeter/ratelimit/benchmarks/decider"
)

const goRedisModule = "github.com/redis/go-redis/v9"

// Physical references through the SAME go-redis client the limiters use:
// what one round trip costs from Go, with no limiter logic at all.
type redisPing struct{ c *redis.Client }

func (a *redisPing) Allow(ctx context.Context, _ string) (bool, error) {
	return true, a.c.Ping(ctx).Err()
}

type redisIncr struct {
	c      *redis.Client
	prefix string
}

func (a *redisIncr) Allow(ctx context.Context, key string) (bool, error) {
	return true, a.c.Incr(ctx, a.prefix+key).Err()
}

// A minimal Lua limiter-shaped script: INCR, set TTL on first hit, compare.
var fixedWindowScript = redis.NewScript(`
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
if n > tonumber(ARGV[1]) then return 0 end
return 1`)

var trivialScript = redis.NewScript(`return 1`)

// The commands every exact limiter that keeps its state in Redis, on
// Redis's clock, must run per decision: read the clock, read the state,
// write it back with an expiry, and nothing else (no arithmetic, no parsing,
// a constant reply). ARGV[1] is the expiry in ms. The harness's limit never
// refuses, so a limiter's key expires about 1 ms after its decision and
// every decision writes a fresh key; ARGV[1] = 1 does the same.
var stateFloorScript = redis.NewScript(`
local t = redis.call('TIME')
redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], t[1], 'PX', ARGV[1])
return 1`)

// The same for a stack of two limits kept in two keys (KEYS[1], KEYS[2]).
var stateFloor2Script = redis.NewScript(`
local t = redis.call('TIME')
redis.call('GET', KEYS[1])
redis.call('GET', KEYS[2])
redis.call('SET', KEYS[1], t[1], 'PX', ARGV[1])
redis.call('SET', KEYS[2], t[1], 'PX', ARGV[1])
return 1`)

type redisScript2 struct {
	c      *redis.Client
	s      *redis.Script
	prefix string
	args   []any
}

func (a *redisScript2) Allow(ctx context.Context, key string) (bool, error) {
	k := a.prefix + "{" + key + "}"
	v, err := a.s.Run(ctx, a.c, []string{k + ":requests", k + ":tokens"}, a.args...).Int64()
	return v == 1, err
}

type redisScript struct {
	c      *redis.Client
	s      *redis.Script
	prefix string
	args   []any
}

func (a *redisScript) Allow(ctx context.Context, key string) (bool, error) {
	v, err := a.s.Run(ctx, a.c, []string{a.prefix + key}, a.args...).Int64()
	return v == 1, err
}

func init() {
	decider.Register(decider.Spec{
		Name: "ref-ping", Kind: decider.RedisRef, Module: goRedisModule,
		Note: "go-redis PING (one round trip, no key)",
		New:  func(c decider.Config) (decider.Decider, error) { return &redisPing{c: c.Redis}, nil },
	})
	decider.Register(decider.Spec{
		Name: "ref-incr", Kind: decider.RedisRef, Module: goRedisModule,
		Note: "go-redis INCR key",
		New: func(c decider.Config) (decider.Decider, error) {
			return &redisIncr{c: c.Redis, prefix: c.KeyPrefix}, nil
		},
	})
	decider.Register(decider.Spec{
		Name: "ref-evalsha-trivial", Kind: decider.RedisRef, Module: goRedisModule,
		Note: "go-redis Script.Run of `return 1` (EVALSHA)",
		New: func(c decider.Config) (decider.Decider, error) {
			return &redisScript{c: c.Redis, s: trivialScript, prefix: c.KeyPrefix}, nil
		},
	})
	decider.Register(decider.Spec{
		Name: "ref-evalsha-fixedwindow", Kind: decider.RedisRef, Module: goRedisModule,
		Note: "go-redis Script.Run of a 4-line INCR/PEXPIRE fixed-window script (EVALSHA): floor for a 1-RTT Lua limiter",
		New: func(c decider.Config) (decider.Decider, error) {
			return &redisScript{c: c.Redis, s: fixedWindowScript, prefix: c.KeyPrefix, args: []any{c.Limit, c.Period.Milliseconds()}}, nil
		},
	})
	decider.Register(decider.Spec{
		Name: "ref-evalsha-statefloor", Kind: decider.RedisRef, Module: goRedisModule,
		Note: "go-redis Script.Run of TIME, GET, SET PX 1 ms, return 1 (EVALSHA): the commands of any exact limiter keeping its state in Redis on Redis's clock, without its logic",
		New: func(c decider.Config) (decider.Decider, error) {
			return &redisScript{c: c.Redis, s: stateFloorScript, prefix: c.KeyPrefix, args: []any{1}}, nil
		},
	})
	decider.Register(decider.Spec{
		Name: "ref-evalsha-statefloor2", Kind: decider.RedisRef, Module: goRedisModule,
		Note: "as ref-evalsha-statefloor for two stacked limits in two keys: TIME, 2 GET, 2 SET PX",
		New: func(c decider.Config) (decider.Decider, error) {
			return &redisScript2{c: c.Redis, s: stateFloor2Script, prefix: c.KeyPrefix, args: []any{1}}, nil
		},
	})
}
