package redisstore

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The script as a Redis Function library (Redis 7+). EVALSHA runs the
// whole script body on every call, and so creates its forty-odd local
// functions every time (on a 2-core host that was most of the script's
// CPU: about 70 µs of Redis time per call against 25 µs as a Function, see
// progress notes of issue 10). A library's body runs once, at FUNCTION LOAD,
// so the helpers are made once and each FCALL only decides.
//
// Functions cannot see math or string while the library loads, so the
// library wraps the script body in build, which the first FCALL on a
// server runs; the Lua state keeps what it returns. The names carry the
// script's SHA-1, so that stores of different versions sharing a server
// each call their own.
var (
	funcName   = "rampmeter_" + scriptHash[:16]
	libSource  = library(luaSource, funcName)
	errLibrary = errors.New("the script's source does not have the expected entry lines")
)

// scriptOnly is the script's line that only EVAL needs (see ratelimit.lua):
// a library must not even look the function up.
const scriptOnly = "if redis.replicate_commands then pcall(redis.replicate_commands) end\n"

// scriptEntry is the script's last line, which a library replaces.
const scriptEntry = "return run(KEYS, ARGV)\n"

// library returns the Function library of script, registering it as name,
// or "" if script lacks the lines it replaces (a test checks it does not).
func library(script, name string) string {
	body, ok := strings.CutSuffix(script, scriptEntry)
	if !ok || strings.Count(body, scriptOnly) != 1 {
		return ""
	}
	body = strings.Replace(body, scriptOnly, "", 1)
	return "#!lua name=" + name + "\n" +
		"local function build()\n" + body + "return run\nend\n" +
		"local run\n" +
		"redis.register_function('" + name + "', function(keys, argv)\n" +
		"  if not run then run = build() end\n" +
		"  return run(keys, argv)\n" +
		"end)\n"
}

// The ways a call by FCALL can fail without running, after which the store
// sends the call again as a script: the server has no Functions (Redis
// before 7, or a server such as miniredis without FCALL), an ACL denies
// FCALL or FUNCTION LOAD, or the server refused the call before running it
// because it may write (a read-only replica, out of memory under
// noeviction), where a script, which Redis lets start, still decides the
// calls that write nothing, as the store always has. None of them ran the
// function (an OOM error from within it comes from its first write, which
// Redis refuses before anything is written), so the script call is no
// replay.
func fcallRefused(err error) (sticky, refused bool) {
	switch {
	case redis.HasErrorPrefix(err, "unknown command"), redis.HasErrorPrefix(err, "NOPERM"),
		redis.HasErrorPrefix(err, "unknown subcommand"):
		return true, true
	case redis.HasErrorPrefix(err, "READONLY"), redis.HasErrorPrefix(err, "OOM"):
		return false, true
	}
	return false, false
}

// functionMissing reports whether err says the server does not have the
// store's function (never loaded there, FUNCTION FLUSH, a new node): the
// call did not run.
func functionMissing(err error) bool {
	return redis.HasErrorPrefix(err, "Function not found") // go-redis drops the "ERR "
}

// loadFunction loads the library on the server (on every master of a
// Cluster, every shard of a Ring), within ctx. A library already there is
// no error: its name says it is this one.
func (s *Store) loadFunction(ctx context.Context) error {
	if libSource == "" {
		return errLibrary
	}
	load := func(ctx context.Context, c redis.UniversalClient) error {
		err := c.FunctionLoad(ctx, libSource).Err()
		if err != nil && strings.Contains(err.Error(), "already exists") {
			return nil
		}
		return err
	}
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return load(ctx, n) })
	case *redis.Ring:
		return c.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error { return load(ctx, n) })
	}
	return load(ctx, s.client)
}
