// Package redistest connects tests to a real redis-server.
//
// The server is named by RAMPMETER_REDIS_ADDR (default 127.0.0.1:6379). When
// it does not answer PING, tests that need it are skipped, unless
// RAMPMETER_REQUIRE_REDIS=1 (set by CI), in which case they fail: CI must
// never pass by skipping the real-Redis tests.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Addr returns the address of the real redis-server for tests, skipping or
// failing t (see the package doc) when none answers.
func Addr(t testing.TB) string {
	t.Helper()
	addr, c := probeClient()
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		if os.Getenv("RAMPMETER_REQUIRE_REDIS") == "1" {
			t.Fatalf("real Redis required (RAMPMETER_REQUIRE_REDIS=1) but %s does not answer: %v", addr, err)
		}
		t.Skipf("no redis-server at %s (%v); set RAMPMETER_REDIS_ADDR or start one", addr, err)
	}
	return addr
}

// probeClient returns the test server's address (RAMPMETER_REDIS_ADDR, by
// default 127.0.0.1:6379) and a client of it with a one-second dial
// timeout, for the package's own housekeeping; the caller closes it.
func probeClient() (string, *redis.Client) {
	addr := os.Getenv("RAMPMETER_REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	return addr, redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
}

// Client returns a client of the real redis-server, closed when t ends. It
// is configured as the Redis store wants its clients: the caller's context
// deadline ends a command (ContextTimeoutEnabled), and no command is
// re-sent after an error (MaxRetries -1).
func Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: Addr(t), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Prefix returns a key prefix unique to this test run, so tests sharing one
// server never see each other's keys. Tests must not FLUSHALL a shared server.
// When t ends, the keys under the prefix are deleted from the server of
// RAMPMETER_REDIS_ADDR (a test's frozen clock can give them TTLs far longer
// than the test), best effort: a server that does not answer is left alone.
func Prefix(t testing.TB) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "rmtest:" + hex.EncodeToString(b[:]) + ":"
	t.Cleanup(func() { deleteKeys(prefix) })
	return prefix
}

// deleteKeys deletes the keys whose names start with prefix (which holds no
// glob characters) from the test server, within a few seconds.
func deleteKeys(prefix string) {
	_, c := probeClient()
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if iter.Err() != nil || len(keys) == 0 {
		return
	}
	// One UNLINK per key: on a cluster the keys may sit in many slots.
	pipe := c.Pipeline()
	for _, k := range keys {
		pipe.Unlink(ctx, k)
	}
	_, _ = pipe.Exec(ctx)
}
