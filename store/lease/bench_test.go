package lease_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/internal/clocktest"
	"github.com/rampmeter/ratelimit/store/lease"
	"github.com/rampmeter/ratelimit/store/memory"
	"github.com/redis/go-redis/v9"

	"github.com/rampmeter/ratelimit/store/redisstore"
)

// The local-decision benchmarks compare a Take the lease.Store decides from
// its lease with the memory store's Take of the same request, on the
// default clocks: the target is at most twice the memory store's cost.
// The limits have a burst of 2^50 units and leases may take all of it, so
// after warming up every timed Take is admitted, and the leases, sized to
// a lifetime of demand (millions of requests), are refilled about once a
// second: backing-calls/op says how rarely.

func benchLimits() []*ratelimit.Limit {
	rpm := ratelimit.PerSecond(1_000_000).WithBurst(1 << 50).Named("requests")
	tokens := ratelimit.PerSecond(1_000_000).WithBurst(1 << 50).Named("tokens")
	return []*ratelimit.Limit{&rpm, &tokens}
}

// benchStore returns the store under test, named: the memory store, or a
// lease.Store over it, with the backing store counting the calls it
// receives (nil for "memory"); and the memory store.
func benchStore(b *testing.B, name string) (ratelimit.Store, *counting, *memory.Store) {
	b.Helper()
	mem, err := memory.New()
	if err != nil {
		b.Fatal(err)
	}
	if name == "memory" {
		return mem, nil, mem
	}
	backing := newCounting(mem)
	s, err := lease.New(backing, lease.WithMaxShare(1))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s, backing, mem
}

// stacks returns, for each of keys keys, a stack of the first limits
// limits, cost 1 each.
func stacks(keys, limits int) [][]ratelimit.Request {
	ls := benchLimits()[:limits]
	out := make([][]ratelimit.Request, keys)
	for k := range out {
		for _, l := range ls {
			out[k] = append(out[k], ratelimit.Request{Key: fmt.Sprintf("api-key-%010d", k), Limit: l, Cost: 1})
		}
	}
	return out
}

// warm charges every (key, limit) pair 2^40 units in the memory store, so
// that its entry stays alive for days (as in the memory store's own
// benchmarks: a decision on an existing key is measured), then makes
// every stack hot with 20,000 requests over all of them (20 each for
// 1,000 keys): the leases then grow with the timed demand.
func warm(b *testing.B, mem *memory.Store, s ratelimit.Store, all [][]ratelimit.Request) {
	b.Helper()
	out := make([]ratelimit.Decision, 2)
	for _, reqs := range all {
		for _, r := range reqs {
			r.Cost = 1 << 40
			if err := mem.Take(context.Background(), []ratelimit.Request{r}, out[:1]); err != nil || !out[0].Allowed {
				b.Fatal(err, out[0])
			}
		}
	}
	for range max(20, 20_000/len(all)) {
		for _, reqs := range all {
			if err := s.Take(context.Background(), reqs, out); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func BenchmarkLocalDecision(b *testing.B) {
	for _, shape := range []struct {
		name         string
		keys, limits int
	}{{"hot-key", 1, 1}, {"hot-key-stack2", 1, 2}, {"keys=1000", 1000, 1}} {
		for _, name := range []string{"memory", "lease"} {
			b.Run(shape.name+"/"+name, func(b *testing.B) {
				s, backing, mem := benchStore(b, name)
				all := stacks(shape.keys, shape.limits)
				warm(b, mem, s, all)
				before := 0
				if backing != nil {
					before = backing.calls()
				}
				ctx := context.Background()
				out := make([]ratelimit.Decision, shape.limits)
				i := 0
				b.ReportAllocs()
				for b.Loop() {
					if err := s.Take(ctx, all[i], out); err != nil {
						b.Fatal(err)
					}
					if i++; i == len(all) {
						i = 0
					}
				}
				if !out[0].Allowed {
					b.Fatal("benchmark measured refusals")
				}
				if backing != nil {
					b.ReportMetric(float64(backing.calls()-before)/float64(b.N), "backing-calls/op")
				}
			})
		}
	}
}

func BenchmarkLocalDecisionParallel(b *testing.B) {
	for _, keys := range []int{1, 1000} {
		for _, name := range []string{"memory", "lease"} {
			b.Run(fmt.Sprintf("keys=%d/%s", keys, name), func(b *testing.B) {
				s, backing, mem := benchStore(b, name)
				all := stacks(keys, 1)
				warm(b, mem, s, all)
				before := 0
				if backing != nil {
					before = backing.calls()
				}
				var next atomic.Int64
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					i := int(next.Add(7919)) % len(all)
					out := make([]ratelimit.Decision, 1)
					for pb.Next() {
						if err := s.Take(context.Background(), all[i], out); err != nil {
							b.Error(err)
							return
						}
						if i++; i == len(all) {
							i = 0
						}
					}
				})
				if backing != nil {
					b.ReportMetric(float64(backing.calls()-before)/float64(b.N), "backing-calls/op")
				}
			})
		}
	}
}

// BenchmarkRedisHotKey is 5 processes (each its own client) deciding one
// hot key on the real redis-server, 1,000 decisions per second between
// them on a fake clock (each op advances it 1 ms; the Redis store and the
// lease.Store both read it), the background expiry run every 100 ms:
// ns/op is the real cost of a decision with its share of the Redis round
// trips, redis-calls/op the scripts sent per decision. "redisstore" is
// the same without the decorator: one round trip per decision.
func BenchmarkRedisHotKey(b *testing.B) {
	for _, name := range []string{"redisstore", "lease"} {
		b.Run(name, func(b *testing.B) {
			addr, prefix := redisAddrB(b)
			clock := clocktest.New(t0)
			var stores []ratelimit.Store
			var leases []*lease.Store
			var cmds []*commands
			for range 5 {
				client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
				b.Cleanup(func() { _ = client.Close() })
				c := &commands{}
				client.AddHook(c)
				cmds = append(cmds, c)
				rs, err := redisstore.New(client, redisstore.WithPrefix(prefix), redisstore.WithClock(clock.Now))
				if err != nil {
					b.Fatal(err)
				}
				if name == "redisstore" {
					stores = append(stores, rs)
					continue
				}
				ls, err := lease.New(rs, lease.WithClock(clock.Now), lease.WithExpiryInterval(0))
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = ls.Close() })
				stores = append(stores, ls)
				leases = append(leases, ls)
			}
			l := ptr(ratelimit.PerSecond(2000).Named("route"))
			reqs := []ratelimit.Request{{Key: "hot", Limit: l, Cost: 1}}
			out := make([]ratelimit.Decision, 1)
			ctx := context.Background()
			step := 0
			var calls int64
			b.ReportAllocs()
			for b.Loop() {
				clock.Set(t0.Add(time.Duration(step) * time.Millisecond))
				if err := stores[step%5].Take(ctx, reqs, out); err != nil {
					b.Fatal(err)
				}
				if !out[0].Allowed {
					b.Fatal("refused")
				}
				if step++; step%100 == 0 {
					for _, ls := range leases {
						_ = ls.Expire(ctx)
					}
				}
			}
			for _, c := range cmds {
				calls += c.scripts.Load()
			}
			b.ReportMetric(float64(calls)/float64(b.N), "redis-calls/op")
		})
	}
}

// BenchmarkLimiterTake measures Limiter.Take, one limit on one hot key,
// over the memory store and over a lease.Store on it, and the same with
// two stacked limits (stack2-): every timed Take is served from the lease.
// The lease store is not NonBlocking; it is a ratelimit.LocalTaker, so
// the Limiter asks it to decide at once (TryTakeOne for one limit, as a
// SingleTaker; TryTakeTwo for the stack, as a PairTaker) before it would
// build the store timeout's context, and a Take served from the lease
// costs no context, no clock reading of the Limiter's and no allocation.
func BenchmarkLimiterTake(b *testing.B) {
	for _, c := range []struct {
		name   string
		limits int
	}{{"memory", 1}, {"lease", 1}, {"stack2-memory", 2}, {"stack2-lease", 2}} {
		b.Run(c.name, func(b *testing.B) {
			s, _, mem := benchStore(b, strings.TrimPrefix(c.name, "stack2-"))
			all := stacks(1, c.limits)
			warm(b, mem, s, all)
			var limits []ratelimit.Limit
			for _, r := range all[0] {
				limits = append(limits, *r.Limit)
			}
			lim, err := ratelimit.New(s, ratelimit.WithLimits(limits...))
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if res, err := lim.Take(ctx, all[0][0].Key); err != nil || !res.Allowed {
					b.Fatal(res.Allowed, err)
				}
			}
		})
	}
}
