package redisstore

// Review tests (issue 10, the luatake branch): the script's inlined bucket
// Takes (bucket_one, bucket_stack), the batch view that keeps their states
// decoded, now given once per batch reply, and the key cache.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/internal/redistest"
)

// rvModel is the Go twin of the script (as agreement_test.go's model):
// the state each Redis key should hold, by (*Limit).TakeAt, AdjustFrom,
// ClockStepped and ExpiresAt.
type rvModel struct {
	st  map[string]ratelimit.State
	lim map[string]*ratelimit.Limit
	px  map[string]int64 // the PX (ms) of the key's last write
}

func newRVModel() *rvModel {
	return &rvModel{st: map[string]ratelimit.State{}, lim: map[string]*ratelimit.Limit{}, px: map[string]int64{}}
}

// apply decides one Store call (take, or an Adjust) of reqs on keys at
// now and returns its decisions and the keys it writes with their PX.
func (m *rvModel) apply(take bool, keys []string, reqs []ratelimit.Request, now, margin int64) ([]ratelimit.Decision, map[string]int64) {
	work := map[string]ratelimit.State{}
	dirty := map[string]bool{}
	stepped := map[string]bool{}
	out := make([]ratelimit.Decision, len(reqs))
	refused := false
	for i, r := range reqs {
		if st := m.st[keys[i]]; r.Limit.ClockStepped(&st, now) {
			stepped[keys[i]] = true
		}
	}
	for i, r := range reqs {
		st, ok := work[keys[i]]
		if !ok {
			st = m.st[keys[i]]
		}
		if take {
			out[i] = r.Limit.TakeAt(&st, now, r.Cost)
			refused = refused || !out[i].Allowed
		} else {
			out[i] = r.Limit.AdjustFrom(&st, now, r.At, r.Cost)
		}
		dirty[keys[i]] = dirty[keys[i]] || r.Cost != 0 || stepped[keys[i]]
		work[keys[i]] = st
	}
	if refused {
		for i, r := range reqs {
			st := m.st[keys[i]]
			peek := r.Limit.TakeAt(&st, now, 0)
			out[i].Remaining, out[i].Reset = peek.Remaining, peek.Reset
		}
		for i, r := range reqs {
			if dirty[keys[i]] = stepped[keys[i]]; stepped[keys[i]] {
				st := m.st[keys[i]]
				r.Limit.TakeAt(&st, now, 0)
				work[keys[i]] = st
			}
		}
	}
	written := map[string]int64{}
	for i, r := range reqs {
		k := keys[i]
		if !dirty[k] {
			continue
		}
		dirty[k] = false
		st := work[k]
		if ttl := r.Limit.ExpiresAt(&st) - now; ttl <= 0 {
			delete(m.st, k)
			written[k] = -2 // deleted
		} else {
			m.st[k], m.lim[k] = st, r.Limit
			written[k] = (ttl+999)/1000 + margin
			m.px[k] = written[k]
		}
	}
	return out, written
}

// rvCheckKeys requires every key the model knows to hold its state, the
// keys written to have their PX (exactly on miniredis, whose clock stands
// still; within the time since the write began on a real server), and the
// keys deleted to be gone.
func rvCheckKeys(t *testing.T, c *redis.Client, m *rvModel, written map[string]int64, since time.Time, real bool, msg string) {
	t.Helper()
	for k, st := range m.st {
		got, err := c.Get(t.Context(), k).Result()
		if err == redis.Nil && real && m.px[k] < 10_000 {
			// The real server's TTLs run on the wall clock, the store's
			// decisions on a fake one: a short PX may have elapsed.
			delete(m.st, k)
			delete(written, k)
			continue
		}
		require.NoError(t, err, "%s: key %s", msg, k)
		require.Equal(t, strconv.FormatInt(st.Level, 10)+":"+strconv.FormatInt(st.Updated, 10), got, "%s: key %s", msg, k)
	}
	for k, px := range written {
		got, err := c.PTTL(t.Context(), k).Result()
		require.NoError(t, err)
		want := time.Duration(px) * time.Millisecond
		switch {
		case px == -2:
			require.Equal(t, time.Duration(-2), got, "%s: key %s should be deleted", msg, k)
		case real:
			lo := want - time.Since(since).Truncate(time.Millisecond) - time.Millisecond
			if got == -2 { // gone since: only if its PX can have elapsed
				require.LessOrEqual(t, lo, time.Duration(0), "%s: PTTL of %s: gone, with %v left", msg, k, lo)
				continue
			}
			require.LessOrEqual(t, got, want, "%s: PTTL of %s", msg, k)
			require.GreaterOrEqual(t, got, max(lo, 0), "%s: PTTL of %s", msg, k)
		default:
			require.Equal(t, want, got, "%s: PTTL of %s", msg, k)
		}
	}
}

// rvKeys returns the Redis keys of reqs in s, in order.
func rvKeys(s *Store, reqs []ratelimit.Request) []string {
	keys := make([]string, len(reqs))
	for j, r := range reqs {
		keys[j] = s.Key(r.Key, r.Limit)
	}
	return keys
}

// rvOnBoth runs run for each seed from 1 to seeds on a fresh miniredis and
// on the real redis-server, each through a client of its own; real says
// which it is.
func rvOnBoth(t *testing.T, seeds uint64, run func(t *testing.T, c *redis.Client, real bool, seed uint64)) {
	t.Helper()
	for seed := uint64(1); seed <= seeds; seed++ {
		t.Run(fmt.Sprintf("miniredis/%d", seed), func(t *testing.T) {
			m := miniredis.RunT(t)
			c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = c.Close() })
			run(t, c, false, seed)
		})
		t.Run(fmt.Sprintf("redis/%d", seed), func(t *testing.T) {
			c := redis.NewClient(&redis.Options{Addr: redistest.Addr(t), ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = c.Close() })
			run(t, c, true, seed)
		})
	}
}

// rvCheckLone makes calls one by one through lone at us (µs), each after
// pin(m), and checks each reply against the Go twin m and the keys it
// wrote (rvCheckKeys); where names the round in failure messages.
func rvCheckLone(t *testing.T, c *redis.Client, lone *Store, m *rvModel, pin func(*rvModel), calls []rvCall, us int64, real bool, where string) {
	t.Helper()
	for i, cl := range calls {
		msg := fmt.Sprintf("%s call %d (%s %s) at %d", where, i, cl.mode, rvDescribe(cl.reqs), us)
		pin(m)
		args, err := lone.command(cl.reqs, cl.mode)
		require.NoError(t, err)
		keys := rvKeys(lone, cl.reqs)
		since := time.Now()
		reply, err := lone.evalOne(t.Context(), args)
		require.NoError(t, err, msg)
		want, w := m.apply(cl.mode == "t", keys, cl.reqs, us, lone.marginMs)
		got := make([]ratelimit.Decision, len(cl.reqs))
		require.NoError(t, parseReply(reply, -1, cl.reqs, got), msg)
		require.Equal(t, want, got, "lone: %s", msg)
		rvCheckKeys(t, c, m, w, since, real, "lone: "+msg)
	}
}

// rvCall is one Store call of a batch.
type rvCall struct {
	mode string // "t" or "a"
	reqs []ratelimit.Request
}

// TestReviewInlineBatchesMatchGo holds random batches, and the same calls
// made one by one, to the Go twin: one-request Takes of token and leaky
// buckets (bucket_one), stacks of buckets on distinct keys (bucket_stack),
// stacks the generic path takes (a key twice, a fixed window beside a
// bucket) and Adjusts (charges, refunds, refunds to a fresh state) on the
// same keys in one batch, costs 0, 1, the burst and beyond it, and the
// clock moving forward a little and a lot, and back within
// ClockStepTolerance, at it and beyond it. Every decision, every stored
// value and every PX (the batch's store with an expiry margin) must be the
// Go twin's, on miniredis and a real server.
func TestReviewInlineBatchesMatchGo(t *testing.T) {
	tb := ratelimit.PerMinute(5).Named("tb")
	lb := ratelimit.PerMinute(6).Named("lb").WithAlgorithm(ratelimit.LeakyBucket)
	one := ratelimit.Every(1, 3*time.Second).Named("one")
	slow := ratelimit.Every(7, time.Hour).Named("slow").WithBurst(3).WithAlgorithm(ratelimit.LeakyBucket)
	fw := ratelimit.PerMinute(4).Named("fw").WithAlgorithm(ratelimit.FixedWindow)
	buckets := []*ratelimit.Limit{&tb, &lb, &one, &slow}
	all := append(append([]*ratelimit.Limit{}, buckets...), &fw)
	for _, l := range all {
		require.NoError(t, l.Err(), l.String())
	}
	callers := []string{"hot", "k1"}
	tol := ratelimit.ClockStepTolerance

	run := func(t *testing.T, c *redis.Client, real bool, seed uint64) {
		rng := rand.New(rand.NewPCG(seed, 0x1ae))
		now := time.Date(2026, 3, 4, 5, 6, 7, 891011000, time.UTC)
		base := fmt.Sprintf("review-lua:%x:", rand.Uint64())
		newStore := func(name string, opts ...Option) *Store {
			s, err := New(c, append([]Option{WithClock(func() time.Time { return now }), WithPrefix(base + name + ":")}, opts...)...)
			require.NoError(t, err)
			t.Cleanup(func() {
				for _, k := range callers {
					for _, l := range all {
						c.Del(context.Background(), s.Key(k, l))
					}
				}
			})
			return s
		}
		// The batch's keys outlive their states by a margin (1.5 ms: 2 ms).
		bat, lone := newStore("bat", WithExpiryMargin(1500*time.Microsecond)), newStore("lone")
		require.Equal(t, int64(2), bat.marginMs)
		mBat, mLone := newRVModel(), newRVModel()
		var ats []int64
		cost := func(l *ratelimit.Limit) int64 {
			switch rng.IntN(6) {
			case 0:
				return 0
			case 1:
				return l.Burst()
			case 2:
				return l.Burst() + 1
			default:
				return 1 + rng.Int64N(2)
			}
		}
		randCall := func() rvCall {
			k := callers[rng.IntN(len(callers))]
			switch x := rng.IntN(10); {
			case x < 4: // bucket_one
				l := buckets[rng.IntN(len(buckets))]
				return rvCall{"t", []ratelimit.Request{{Key: k, Limit: l, Cost: cost(l)}}}
			case x < 6: // bucket_stack: distinct buckets
				perm := rng.Perm(len(buckets))[:2+rng.IntN(2)]
				var reqs []ratelimit.Request
				for _, i := range perm {
					reqs = append(reqs, ratelimit.Request{Key: k, Limit: buckets[i], Cost: cost(buckets[i])})
				}
				return rvCall{"t", reqs}
			case x == 6: // generic: a key twice
				l := buckets[rng.IntN(len(buckets))]
				return rvCall{"t", []ratelimit.Request{{Key: k, Limit: l, Cost: cost(l)}, {Key: k, Limit: l, Cost: cost(l)}}}
			case x == 7: // generic: a window beside a bucket
				l := buckets[rng.IntN(len(buckets))]
				return rvCall{"t", []ratelimit.Request{{Key: k, Limit: l, Cost: cost(l)}, {Key: k, Limit: &fw, Cost: cost(&fw)}}}
			default: // Adjust
				l := all[rng.IntN(len(all))]
				r := ratelimit.Request{Key: k, Limit: l, Cost: rng.Int64N(7) - 4}
				if rng.IntN(5) == 0 {
					r.Cost = -1000 // to a fresh state: a delete
				}
				if len(ats) > 0 && rng.IntN(2) == 0 {
					r.At = ats[rng.IntN(len(ats))]
				}
				return rvCall{"a", []ratelimit.Request{r}}
			}
		}
		// pin keeps m's keys on the real server from expiring on the wall
		// clock between the model's prediction and the script's reads; a
		// key already gone (a short PX elapsed) is forgotten, as expired.
		pin := func(m *rvModel) {
			if !real {
				return
			}
			for k := range m.st {
				if !c.Persist(t.Context(), k).Val() && c.Exists(t.Context(), k).Val() == 0 {
					delete(m.st, k)
				}
			}
		}
		for round := range 60 {
			switch rng.IntN(8) {
			case 0:
				now = now.Add(-time.Duration(1+rng.Int64N(tol.Microseconds())) * time.Microsecond)
			case 1:
				now = now.Add(-[]time.Duration{tol, tol + time.Microsecond, 3 * time.Second, 30 * time.Hour}[rng.IntN(4)])
			case 2:
				now = now.Add(time.Duration(rng.Int64N(int64(2 * time.Hour))))
			default:
				now = now.Add(time.Duration(rng.Int64N(int64(15 * time.Second))))
			}
			us := ratelimit.Micros(now)
			pin(mBat)
			var calls []rvCall
			for range 2 + rng.IntN(24) {
				calls = append(calls, randCall())
			}
			// The batch.
			var batch []*batchCall
			for _, cl := range calls {
				args, err := bat.command(cl.reqs, cl.mode)
				require.NoError(t, err)
				batch = append(batch, &batchCall{ctx: t.Context(), args: args, n: len(cl.reqs), done: make(chan struct{}, 1)})
			}
			since := time.Now()
			(&batcher{s: bat}).flush(batch)
			written := map[string]int64{}
			for i, cl := range calls {
				bc := batch[i]
				<-bc.done
				msg := fmt.Sprintf("seed %d round %d call %d of %d (%s %s) at %d", seed, round, i, len(calls), cl.mode, rvDescribe(cl.reqs), us)
				require.NoError(t, bc.err, msg)
				require.Equal(t, us, bc.at, msg)
				keys := rvKeys(bat, cl.reqs)
				want, w := mBat.apply(cl.mode == "t", keys, cl.reqs, us, bat.marginMs)
				for k, px := range w {
					written[k] = px
				}
				got := make([]ratelimit.Decision, len(cl.reqs))
				require.NoError(t, parseReply(bc.reply, bc.at, cl.reqs, got), msg)
				require.Equal(t, want, got, "batch: %s", msg)
				ats = append(ats, got[0].At)
			}
			rvCheckKeys(t, c, mBat, written, since, real, fmt.Sprintf("seed %d round %d, batch", seed, round))
			// The same calls one by one.
			rvCheckLone(t, c, lone, mLone, pin, calls, us, real, fmt.Sprintf("seed %d round %d", seed, round))
		}
	}
	rvOnBoth(t, 3, run)
}

func rvDescribe(reqs []ratelimit.Request) string {
	var b strings.Builder
	for _, r := range reqs {
		fmt.Fprintf(&b, "[%s %s %d at %d]", r.Key, r.Limit.Name(), r.Cost, r.At)
	}
	return b.String()
}

// TestReviewInlineCorruptState stores near-valid and corrupted bucket
// states (and a key of another type) and requires the inlined Takes
// (bucket_one; bucket_stack, the key first and second) to answer exactly
// as the generic path (the request stacked with a fixed window): the same
// error, or the same decision, value and PX; alone and in a batch, where
// the call on the bad key fails alone.
func TestReviewInlineCorruptState(t *testing.T) {
	tb := ratelimit.PerMinute(5).Named("tb")
	lb := ratelimit.PerMinute(6).Named("lb").WithAlgorithm(ratelimit.LeakyBucket)
	roomy := ratelimit.PerSecond(1_000_000).Named("roomy")
	win := ratelimit.PerSecond(1_000_000).Named("win").WithAlgorithm(ratelimit.FixedWindow)
	for _, l := range []*ratelimit.Limit{&tb, &lb, &roomy, &win} {
		require.NoError(t, l.Err())
	}
	now := time.Date(2026, 3, 4, 5, 6, 7, 891011000, time.UTC)
	us := ratelimit.Micros(now)
	states := []string{
		"", ":", "5:", ":5", "5:5:5", "-1:5", "+1:5", " 5:5", "5:5 ", "5:5\n", "1e3:5", "0x10:5",
		"5.0:5", "5:5.5", "5:-0", "-0:5", "00000000000000000000012:" + strconv.FormatInt(us-1, 10),
		"99999999999999999999:" + strconv.FormatInt(us, 10), "9007199254740993:" + strconv.FormatInt(us, 10),
		"4503599627370496:" + strconv.FormatInt(us-5, 10), "0:99999999999999999999", "3:-99999999999999999999",
		"3:" + strconv.FormatInt(us+ratelimit.ClockStepTolerance.Microseconds(), 10),
		"3:" + strconv.FormatInt(us+ratelimit.ClockStepTolerance.Microseconds()+1, 10),
		"12000000:" + strconv.FormatInt(us, 10), "12000001:" + strconv.FormatInt(us, 10),
		"0:0", "0:" + strconv.FormatInt(us, 10), "1:" + strconv.FormatInt(us, 10),
		"hash", // a key of another type
	}
	run := func(t *testing.T, c *redis.Client, real bool) {
		base := fmt.Sprintf("review-corrupt:%x:", rand.Uint64())
		var stores []*Store
		newStore := func(name string) *Store {
			s, err := New(c, WithClock(func() time.Time { return now }), WithPrefix(base+name+":"))
			require.NoError(t, err)
			stores = append(stores, s)
			return s
		}
		t.Cleanup(func() {
			for _, s := range stores {
				for _, l := range []*ratelimit.Limit{&tb, &lb, &roomy, &win} {
					for _, k := range []string{"k", "other", "before", "after"} {
						c.Del(context.Background(), s.Key(k, l))
					}
				}
			}
		})
		gen, one, first, second, bat := newStore("gen"), newStore("one"), newStore("first"), newStore("second"), newStore("bat")
		put := func(s *Store, l *ratelimit.Limit, state string) {
			k := s.Key("k", l)
			require.NoError(t, c.Del(t.Context(), k).Err())
			switch state {
			case "":
			case "hash":
				require.NoError(t, c.HSet(t.Context(), k, "f", "v").Err())
			default:
				require.NoError(t, c.Set(t.Context(), k, state, time.Hour).Err())
			}
		}
		keyState := func(s *Store, l *ratelimit.Limit) (string, int64) {
			k := s.Key("k", l)
			typ := c.Type(t.Context(), k).Val()
			if typ != "string" {
				return typ, -2
			}
			return c.Get(t.Context(), k).Val(), c.PTTL(t.Context(), k).Val().Milliseconds()
		}
		for _, l := range []*ratelimit.Limit{&tb, &lb} {
			for _, state := range states {
				for _, cost := range []int64{0, 1, l.Burst(), l.Burst() + 1} {
					msg := fmt.Sprintf("%s state %q cost %d", l.Name(), state, cost)
					r := ratelimit.Request{Key: "k", Limit: l, Cost: cost}
					ro := ratelimit.Request{Key: "other", Limit: &roomy, Cost: 1}
					start := time.Now() // the case's keys are all written and read after it
					for _, s := range []*Store{gen, one, first, second, bat} {
						put(s, l, state)
					}
					genD := make([]ratelimit.Decision, 2)
					genErr := gen.Take(t.Context(), []ratelimit.Request{r, {Key: "other", Limit: &win, Cost: 1}}, genD)
					oneD := make([]ratelimit.Decision, 1)
					oneErr := one.Take(t.Context(), []ratelimit.Request{r}, oneD)
					firstD := make([]ratelimit.Decision, 2)
					firstErr := first.Take(t.Context(), []ratelimit.Request{r, ro}, firstD)
					secondD := make([]ratelimit.Decision, 2)
					secondErr := second.Take(t.Context(), []ratelimit.Request{ro, r}, secondD)
					// In a batch: calls on other keys around it.
					var batch []*batchCall
					for _, reqs := range [][]ratelimit.Request{
						{{Key: "before", Limit: l, Cost: 1}}, {r}, {{Key: "after", Limit: l, Cost: 1}},
					} {
						args, err := bat.command(reqs, "t")
						require.NoError(t, err)
						batch = append(batch, &batchCall{ctx: t.Context(), args: args, n: 1, done: make(chan struct{}, 1)})
					}
					(&batcher{s: bat}).flush(batch)
					for _, bc := range batch {
						<-bc.done
					}
					// The error's kind: levels beyond 2^53 (not written by
					// the script) make both paths answer nonsense the
					// store refuses, or crash gopher-lua (miniredis), with
					// messages that name the call's shape.
					errStr := func(err error) string {
						if err == nil {
							return ""
						}
						s := err.Error()
						switch {
						case strings.Contains(s, "malformed rate-limit state"):
							return "malformed"
						case strings.Contains(s, "WRONGTYPE"):
							return "wrongtype"
						case strings.Contains(s, "script reply"), strings.Contains(s, "batch reply line"):
							return "bad reply"
						case strings.Contains(s, "stack traceback"):
							return "lua error"
						}
						return s
					}
					if !real && strings.Contains(state, "99999999999999999999") {
						// gopher-lua's tonumber gives nil for a number
						// beyond int64: the generic path crashes (as it
						// did before the inlined path), the inlined one
						// calls the state malformed, alone and in a batch.
						require.Error(t, genErr, msg)
						require.Equal(t, "malformed", errStr(oneErr), "%s: %v", msg, oneErr)
						require.Equal(t, "malformed", errStr(firstErr), "%s: %v", msg, firstErr)
						require.Equal(t, "malformed", errStr(batch[1].err), "%s: %v", msg, batch[1].err)
						continue
					}
					require.Equal(t, errStr(genErr), errStr(oneErr), "%s: %v; generic: %v", msg, oneErr, genErr)
					require.Equal(t, errStr(genErr), errStr(firstErr), "%s: %v; generic: %v", msg, firstErr, genErr)
					require.Equal(t, errStr(genErr), errStr(secondErr), "%s: %v; generic: %v", msg, secondErr, genErr)
					if bc := batch[1]; bc.err == nil && genErr != nil {
						// A batch's line parsed by its caller.
						bc.err = parseReply(bc.reply, bc.at, []ratelimit.Request{r}, make([]ratelimit.Decision, 1))
					}
					require.Equal(t, errStr(genErr), errStr(batch[1].err), "%s: in a batch: %v; generic: %v", msg, batch[1].err, genErr)
					for _, i := range []int{0, 2} {
						require.NoError(t, batch[i].err, "%s: a call beside it in the batch", msg)
					}
					gv, gp := keyState(gen, l)
					for name, s := range map[string]*Store{"one": one, "first": first, "second": second, "batch": bat} {
						v, p := keyState(s, l)
						if real && (gp >= 0 && gp < 2000 || p >= 0 && p < 2000) {
							// A PX of moments: the real server's wall
							// clock may expire either key before it is read.
							continue
						}
						require.Equal(t, gv, v, "%s: %s: stored value", msg, name)
						if real {
							// The same PX, counted down by the server from
							// two writes and read at two moments, all since
							// start: the two differ by at most the wall time
							// since start (a stall widens the bound, never
							// fails it; a wrong PX is off by whole seconds).
							require.InDelta(t, gp, p, float64(time.Since(start).Milliseconds()+1), "%s: %s: PTTL", msg, name)
						} else {
							require.Equal(t, gp, p, "%s: %s: PTTL", msg, name)
						}
					}
					if genErr != nil {
						continue
					}
					require.Equal(t, genD[0], oneD[0], msg)
					require.Equal(t, genD[0], firstD[0], msg)
					require.Equal(t, genD[0], secondD[1], msg)
					got := make([]ratelimit.Decision, 1)
					require.NoError(t, parseReply(batch[1].reply, batch[1].at, []ratelimit.Request{r}, got), msg)
					require.Equal(t, genD[0], got[0], "%s: in a batch", msg)
				}
			}
		}
	}
	t.Run("miniredis", func(t *testing.T) {
		m := miniredis.RunT(t)
		c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		run(t, c, false)
	})
	t.Run("redis", func(t *testing.T) {
		c := redis.NewClient(&redis.Options{Addr: redistest.Addr(t), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		run(t, c, true)
	})
}

// TestReviewKeyCacheConcurrent hammers the four-way key cache, in every
// size from one slot to a few sets, from many goroutines with more pairs
// than slots, and requires every entry returned to be the pair's own:
// its key, its limit's ID, the Redis key and the params of an uncached
// store. Run it with -race.
func TestReviewKeyCacheConcurrent(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	var limits []*ratelimit.Limit
	for i := range 5 {
		l := ratelimit.PerMinute(int64(60 + i)).Named("l" + strconv.Itoa(i%3)) // names shared, IDs distinct
		if i == 4 {
			l = ratelimit.PerMinute(60).Named("l0") // the same ID as limit 0
		}
		require.NoError(t, l.Err())
		limits = append(limits, &l)
	}
	ref, err := New(client, WithKeyCache(0))
	require.NoError(t, err)
	keys := make([]string, 40)
	for i := range keys {
		keys[i] = fmt.Sprintf("caller-%d", i)
	}
	keys[39] = strings.Repeat("x", maxCachedKey) // the longest kept
	keys[38] = strings.Repeat("y", maxCachedKey+1)
	for _, size := range []int{1, 2, 4, 8, 16} {
		s, err := New(client, WithKeyCache(size))
		require.NoError(t, err)
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(g), uint64(size)))
				for range 20000 {
					k := keys[rng.IntN(len(keys))]
					l := limits[rng.IntN(len(limits))]
					e := s.entry(k, l)
					want := ref.entry(k, l)
					if e == nil || e.key != k || e.id != l.ID() || e.rkey != want.rkey || e.params != want.params {
						t.Errorf("size %d: entry(%q, %s) = %+v, want %+v", size, k, l.ID(), e, want)
						return
					}
				}
			})
		}
		wg.Wait()
	}
}

// TestReviewInlineOOM: on a server out of memory (noeviction) the inlined
// Takes that write fail with Redis's OOM error and write nothing (a stack
// of buckets: neither key), those that write nothing (peeks, refusals of
// states not stepped back from) are answered; alone and in a batch (whose
// first write is refused, and which is then decided one call at a time).
func TestReviewInlineOOM(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: chaosStart(t), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	tb := ratelimit.PerMinute(5).Named("tb")
	lb := ratelimit.PerMinute(6).Named("lb").WithAlgorithm(ratelimit.LeakyBucket)
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	s, err := New(c, WithClock(func() time.Time { return now }), WithPrefix("review-oom-inline:"))
	require.NoError(t, err)
	// p: tb holds 4 of 5 and lb 2 of 6.
	require.NoError(t, s.Take(t.Context(), []ratelimit.Request{{Key: "p", Limit: &tb, Cost: 4}, {Key: "p", Limit: &lb, Cost: 2}}, make([]ratelimit.Decision, 2)))
	before := map[string]string{}
	for _, l := range []*ratelimit.Limit{&tb, &lb} {
		before[s.Key("p", l)] = c.Get(t.Context(), s.Key("p", l)).Val()
	}
	require.NoError(t, c.Set(t.Context(), "ballast", strings.Repeat("x", 1<<20), 0).Err())
	require.NoError(t, c.ConfigSet(t.Context(), "maxmemory-policy", "noeviction").Err())
	require.NoError(t, c.ConfigSet(t.Context(), "maxmemory", "1048576").Err())
	t.Cleanup(func() { c.ConfigSet(context.Background(), "maxmemory", "0") })

	calls := [][]ratelimit.Request{
		{{Key: "p", Limit: &tb, Cost: 1}, {Key: "p", Limit: &lb, Cost: 1}}, // admitted: writes both
		{{Key: "p", Limit: &tb, Cost: 0}},                                  // a peek
		{{Key: "p", Limit: &tb, Cost: 2}, {Key: "p", Limit: &lb, Cost: 1}}, // refused by tb: writes nothing
		{{Key: "a", Limit: &lb, Cost: 1}},                                  // admitted: writes
		{{Key: "p", Limit: &lb, Cost: 0}, {Key: "a", Limit: &tb, Cost: 0}}, // peeks
	}
	us := ratelimit.Micros(now)
	want := []string{
		"OOM",
		fmt.Sprintf("%d 1 1 48000000 0 0", us),
		fmt.Sprintf("%d 0 1 48000000 12000000 0 1 4 20000000 0 20000000", us), // lb: the queue ahead
		"OOM",
		fmt.Sprintf("%d 1 4 20000000 0 20000000 1 5 0 0 0", us),
	}
	got := func(reply string, err error) string {
		if err != nil {
			return strings.SplitN(err.Error(), " ", 2)[0]
		}
		return reply
	}
	var lone []string
	for _, reqs := range calls {
		args, err := s.command(reqs, "t")
		require.NoError(t, err)
		lone = append(lone, got(s.evalOne(t.Context(), args)))
	}
	require.Equal(t, want, lone, "one by one")
	var batch []*batchCall
	for _, reqs := range calls {
		args, err := s.command(reqs, "t")
		require.NoError(t, err)
		batch = append(batch, &batchCall{ctx: t.Context(), args: args, n: len(reqs), done: make(chan struct{}, 1)})
	}
	(&batcher{s: s}).flush(batch)
	var batched []string
	for _, bc := range batch {
		<-bc.done
		batched = append(batched, got(bc.line(), bc.err))
	}
	require.Equal(t, want, batched, "in a batch")
	for k, v := range before {
		require.Equal(t, v, c.Get(t.Context(), k).Val(), k)
	}
	require.Zero(t, c.Exists(t.Context(), s.Key("a", &tb), s.Key("a", &lb)).Val())
}

// TestReviewBatchServerTime: without WithClock a batch decides at the
// server's TIME, which its reply gives once: every call's decisions are
// dated by it (the same for all), between the wall clock before and
// after, and the lines parse as a lone call's replies do.
func TestReviewBatchServerTime(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: redistest.Addr(t), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	tb := ratelimit.PerMinute(5).Named("tb")
	fw := ratelimit.PerMinute(4).Named("fw").WithAlgorithm(ratelimit.FixedWindow)
	s, err := New(c, WithPrefix(fmt.Sprintf("review-time:%x:", rand.Uint64())))
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, l := range []*ratelimit.Limit{&tb, &fw} {
			c.Del(context.Background(), s.Key("k", l))
		}
	})
	calls := []rvCall{
		{"t", []ratelimit.Request{{Key: "k", Limit: &tb, Cost: 1}}},
		{"t", []ratelimit.Request{{Key: "k", Limit: &tb, Cost: 1}, {Key: "k", Limit: &fw, Cost: 1}}},
		{"a", []ratelimit.Request{{Key: "k", Limit: &tb, Cost: -1}}},
		{"t", []ratelimit.Request{{Key: "k", Limit: &tb, Cost: 9}}},
	}
	var batch []*batchCall
	for _, cl := range calls {
		args, err := s.command(cl.reqs, cl.mode)
		require.NoError(t, err)
		batch = append(batch, &batchCall{ctx: t.Context(), args: args, n: len(cl.reqs), done: make(chan struct{}, 1)})
	}
	before := time.Now().UnixMicro()
	(&batcher{s: s}).flush(batch)
	after := time.Now().UnixMicro()
	at := batch[0].at
	for i, bc := range batch {
		<-bc.done
		require.NoError(t, bc.err)
		require.Equal(t, at, bc.at, "call %d", i)
		got := make([]ratelimit.Decision, len(calls[i].reqs))
		require.NoError(t, parseReply(bc.reply, bc.at, calls[i].reqs, got))
		for j, d := range got {
			require.Equal(t, at, d.At, "call %d request %d", i, j)
		}
		if i == 3 {
			require.False(t, got[0].Allowed)
		}
	}
	// The shared server's clock is the wall clock of this machine.
	require.GreaterOrEqual(t, at, before-1000)
	require.LessOrEqual(t, at, after+1000)
}
