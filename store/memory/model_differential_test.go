package memory

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
)

// reviewModel is the plain map of States the store must decide like (no
// eviction: the tests keep the cap far above the keys in use).
type reviewModel map[[2]string]ratelimit.State

func (m reviewModel) do(reqs []ratelimit.Request, now int64, take bool) []ratelimit.Decision {
	work := map[[2]string]ratelimit.State{}
	out := make([]ratelimit.Decision, len(reqs))
	all := true
	for i, r := range reqs {
		k := [2]string{r.Key, r.Limit.ID()}
		s, ok := work[k]
		if !ok {
			s = m[k]
		}
		if take {
			out[i] = r.Limit.TakeAt(&s, now, r.Cost)
			all = all && out[i].Allowed
		} else {
			out[i] = r.Limit.AdjustFrom(&s, now, r.At, r.Cost)
		}
		work[k] = s
	}
	if all {
		for k, s := range work {
			m[k] = s
		}
		return out
	}
	for i, r := range reqs {
		s := m[[2]string{r.Key, r.Limit.ID()}]
		p := r.Limit.TakeAt(&s, now, 0)
		out[i].Remaining, out[i].Reset = p.Remaining, p.Reset
	}
	return out
}

// TestDecisionsMatchModelOnLongStacks drives one shard (every key shares it,
// and its sweeps and free list) with random stacks of 1 to 40 requests
// (the inline, the quadratic-dedup and the map-dedup paths), duplicates,
// every algorithm, Takes and Adjusts with At, and a clock that jumps
// forward past expiries (sweeps every 60s), and checks every Decision
// against the plain model.
func TestDecisionsMatchModelOnLongStacks(t *testing.T) {
	algs := []ratelimit.Algorithm{ratelimit.TokenBucket, ratelimit.LeakyBucket, ratelimit.GCRA,
		ratelimit.FixedWindow, ratelimit.SlidingWindow, ratelimit.SlidingLog}
	var limits []ratelimit.Limit
	for _, a := range algs {
		for j, p := range []time.Duration{time.Second, 8 * time.Second, time.Minute} {
			l := ratelimit.Every(int64(4<<j), p).WithAlgorithm(a).Named(fmt.Sprintf("%v-%d", a, j))
			require.NoError(t, l.Err())
			limits = append(limits, l)
		}
	}
	keys := []string{"a", "b", "c", "d", "e"}
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 7))
		s, c := newTestStore(t, WithShards(1))
		m := reviewModel{}
		now := t0
		for step := range 400 {
			switch rng.IntN(10) {
			case 0:
				now = now.Add(time.Duration(rng.IntN(120)) * time.Second)
			case 1, 2, 3:
				now = now.Add(time.Duration(rng.IntN(2_000_000)) * time.Microsecond)
			}
			c.Set(now)
			n := 1 + rng.IntN(40)
			if rng.IntN(2) == 0 {
				n = 1 + rng.IntN(9)
			}
			take := rng.IntN(4) != 0
			reqs := make([]ratelimit.Request, n)
			for i := range reqs {
				l := &limits[rng.IntN(len(limits))]
				cost := int64(rng.IntN(3))
				r := ratelimit.Request{Key: keys[rng.IntN(len(keys))], Limit: l, Cost: cost}
				if !take {
					r.Cost = int64(rng.IntN(7)) - 3
					if rng.IntN(2) == 0 {
						r.At = ratelimit.Micros(now) - int64(rng.IntN(3_000_000))
					}
				}
				reqs[i] = r
			}
			out := make([]ratelimit.Decision, n)
			var err error
			if take {
				err = s.Take(context.Background(), reqs, out)
			} else {
				err = s.Adjust(context.Background(), reqs, out)
			}
			require.NoError(t, err)
			want := m.do(reqs, ratelimit.Micros(now), take)
			for i := range out {
				require.Equal(t, want[i], out[i], "seed %d step %d req %d of %d (take %v) %s/%s", seed, step, i, n, take, reqs[i].Key, reqs[i].Limit.Name())
			}
		}
	}
}
