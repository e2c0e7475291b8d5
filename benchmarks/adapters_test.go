package benchmarks_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rampmeter/ratelimit/benchmarks/decider"
	"github.com/rampmeter/ratelimit/internal/redistest"
)

// The smoke tests' limit: 5 requests per minute, offered 20 at once. Every
// algorithm here (token buckets with a burst of 5, GCRA with a burst of 5,
// fixed and sliding windows of 5, go-limiter's 5 tokens per interval)
// admits exactly the first 5 of 20 requests made within a few
// milliseconds, unless a window boundary passes in between.
const (
	smokeLimit   = 5
	smokeOffered = 20
	smokePeriod  = time.Minute
)

// countAdmitted runs attempt (which reports how many of smokeOffered
// requests passed) until no minute boundary of the Unix clock passes during
// it, at most 3 times: httprate's sliding windows are aligned to the epoch,
// and a boundary inside the burst legitimately admits more than the limit.
func countAdmitted(t *testing.T, attempt func(try int) int) int {
	t.Helper()
	for try := 0; ; try++ {
		start := time.Now().Truncate(smokePeriod)
		n := attempt(try)
		if time.Now().Truncate(smokePeriod).Equal(start) || try == 2 {
			return n
		}
		t.Logf("a minute boundary passed during attempt %d (%d admitted); trying again with new keys", try, n)
	}
}

// TestAdaptersLimit checks that every decision adapter is wired to really
// limit: of 20 requests for one key, exactly the limit's 5 pass, and another
// key is independent. Redis adapters run against the redis-server of
// RAMPMETER_REDIS_ADDR (default 127.0.0.1:6379), skipped when none answers
// unless RAMPMETER_REQUIRE_REDIS=1.
func TestAdaptersLimit(t *testing.T) {
	ctx := context.Background()
	for _, s := range decider.Specs(decider.Memory, decider.Redis) {
		t.Run(s.Name, func(t *testing.T) {
			cfg := decider.Config{Limit: smokeLimit, Period: smokePeriod}
			prefix := ""
			if s.Kind == decider.Redis {
				// Settings as cmd/redisbench's, with the test server.
				cfg.Redis = redis.NewClient(&redis.Options{Addr: redistest.Addr(t)})
				t.Cleanup(func() { _ = cfg.Redis.Close() })
				prefix = redistest.Prefix(t)
			}
			allowed := countAdmitted(t, func(try int) int {
				c := cfg
				c.KeyPrefix = prefix + s.Name + ":" + string(rune('0'+try)) + ":"
				d := mustNew(t, s, c)
				defer decider.Close(d)
				n := 0
				for range smokeOffered {
					ok, err := d.Allow(ctx, "a")
					if err != nil {
						t.Fatal(err)
					}
					if ok {
						n++
					}
				}
				if !s.SingleKey {
					if ok, err := d.Allow(ctx, "b"); err != nil || !ok {
						t.Fatalf("a second key was refused after the first spent its limit: ok=%v err=%v", ok, err)
					}
				}
				return n
			})
			if allowed != smokeLimit {
				t.Fatalf("%d of %d requests passed; want the limit, %d", allowed, smokeOffered, smokeLimit)
			}
		})
	}
}

// TestMiddlewaresLimit: each middleware lets exactly the limit's 5 of 20
// requests from one client IP through and refuses the others (any 4xx);
// the bare handler lets all 20 through.
func TestMiddlewaresLimit(t *testing.T) {
	for _, m := range decider.Middlewares() {
		t.Run(m.Name, func(t *testing.T) {
			ok := countAdmitted(t, func(int) int {
				mw, closeFn, err := m.New(decider.Config{Limit: smokeLimit, Period: smokePeriod})
				if err != nil {
					t.Fatal(err)
				}
				if closeFn != nil {
					defer closeFn()
				}
				h := mw(trivial)
				n := 0
				for range smokeOffered {
					r := newRequest(m, "198.18.0.1:40000")
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, r)
					switch {
					case rec.Code == http.StatusOK:
						n++
					case rec.Code < 400 || rec.Code > 499:
						t.Fatalf("status %d: %s", rec.Code, rec.Body)
					}
				}
				return n
			})
			want := smokeLimit
			if m.Name == "bare" {
				want = smokeOffered
			}
			if ok != want {
				t.Fatalf("%d of %d requests passed; want %d", ok, smokeOffered, want)
			}
		})
	}
}

// newRequest is a request from remoteAddr as the benchmarks send it
// through m: GET /api/items, or POST with m.Body.
func newRequest(m decider.MiddlewareSpec, remoteAddr string) *http.Request {
	var r *http.Request
	if m.Body != nil {
		r = httptest.NewRequest(http.MethodPost, "/api/items", bytes.NewReader(m.Body))
		r.Header.Set("Content-Type", "application/json")
	} else {
		r = httptest.NewRequest(http.MethodGet, "/api/items", nil)
	}
	r.RemoteAddr = remoteAddr
	return r
}

// TestReferencesAnswer checks that every physical Redis reference (PING,
// INCR and the EVALSHA scripts, which admit everything) runs on the test
// redis-server: each call answers allowed, without error, for two keys and
// again for a key it wrote (the state-floor scripts GET and SET it).
func TestReferencesAnswer(t *testing.T) {
	ctx := context.Background()
	for _, s := range decider.Specs(decider.RedisRef) {
		t.Run(s.Name, func(t *testing.T) {
			client := redis.NewClient(&redis.Options{Addr: redistest.Addr(t)})
			t.Cleanup(func() { _ = client.Close() })
			cfg := decider.Config{Limit: smokeLimit, Period: smokePeriod, Redis: client, KeyPrefix: redistest.Prefix(t) + s.Name + ":"}
			d := mustNew(t, s, cfg)
			defer decider.Close(d)
			for _, key := range []string{"a", "b", "a"} {
				if ok, err := d.Allow(ctx, key); err != nil || !ok {
					t.Fatalf("Allow(%q) = %v, %v; want true, nil", key, ok, err)
				}
			}
		})
	}
}
