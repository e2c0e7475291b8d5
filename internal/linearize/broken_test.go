package linearize

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/internal/clocktest"
	"github.com/rampmeter/ratelimit/internal/redistest"
	"github.com/rampmeter/ratelimit/store/redisstore"
)

// peekThenCharge is a deliberately broken store over a correct one: its
// Take reads, then writes, in two calls. It peeks (cost 0) and, if every
// limit has room for its cost, charges it with Adjust, which does not
// check; otherwise it lets the correct store decide (and refuse). Alone,
// on a token bucket, it answers exactly as the correct store does (room
// only grows between the peek and the charge); two Takes that peek
// before either charges both take the last units.
type peekThenCharge struct {
	inner ratelimit.Store
	// between, if set, runs between the peek and the charge.
	between func()
}

func (b *peekThenCharge) Take(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	peek := slices.Clone(reqs)
	for i := range peek {
		peek[i].Cost = 0
	}
	if err := b.inner.Take(ctx, peek, out); err != nil {
		return err
	}
	for i, d := range out[:len(reqs)] {
		if !d.Allowed || d.Remaining < reqs[i].Cost {
			return b.inner.Take(ctx, reqs, out)
		}
	}
	if b.between != nil {
		b.between()
	}
	return b.inner.Adjust(ctx, reqs, out)
}

func (b *peekThenCharge) Adjust(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	return b.inner.Adjust(ctx, reqs, out)
}

// brokenStores returns clients stores on the real redis-server, each its
// own client, configured by opts and wrapped in peekThenCharge.
func brokenStores(t *testing.T, opts ...redisstore.Option) []ratelimit.Store {
	stores := redisStores(t, redistest.Addr(t), append(opts, redisstore.WithPrefix(redistest.Prefix(t)))...)
	for i, s := range stores {
		stores[i] = &peekThenCharge{inner: s}
	}
	return stores
}

// TestBrokenStoreTwoTakes: two Takes of the last unit of a bucket that
// does not refill during the test (8 per minute), both peeking before
// either charges, are both admitted; no sequential store admits both, and
// the check says so. The same calls one after the other are linearizable:
// the check rejects the interleaving, not the wrapper.
func TestBrokenStoreTwoTakes(t *testing.T) {
	slow := limit(ratelimit.PerMinute(8).Named("slow"))
	var peeked sync.WaitGroup
	stores := brokenStores(t)
	model := NewModel(Options{})
	ctx := context.Background()
	take := func(rec *Recorder, s ratelimit.Store, client int, key string, cost int64) ratelimit.Decision {
		out, err := rec.Take(ctx, s, client, 0, []ratelimit.Request{{Key: key, Limit: slow, Cost: cost}})
		require.NoError(t, err)
		return out[0]
	}

	// One after the other: 7, then 1 (the last), then 1 refused.
	rec := NewRecorder()
	s := stores[0]
	require.True(t, take(rec, s, 0, "seq", 7).Allowed)
	require.True(t, take(rec, s, 0, "seq", 1).Allowed)
	require.False(t, take(rec, s, 1, "seq", 1).Allowed)
	Check(t, "sequential", model, rec.Operations(), budget)

	// Interleaved: both peek 1 left, then both charge.
	rec = NewRecorder()
	require.True(t, take(rec, s, 0, "race", 7).Allowed)
	peeked.Add(2)
	racing := make([]ratelimit.Store, 2)
	for i := range racing {
		racing[i] = &peekThenCharge{inner: stores[i].(*peekThenCharge).inner, between: func() { peeked.Done(); peeked.Wait() }}
	}
	var wg sync.WaitGroup
	got := make([]ratelimit.Decision, 2)
	for i := range racing {
		wg.Go(func() { got[i] = take(rec, racing[i], 1+i, "race", 1) })
	}
	wg.Wait()
	require.True(t, got[0].Allowed && got[1].Allowed, "both admitted: %+v", got)
	history := rec.Operations()
	require.NoError(t, Validate(history))
	res, f := Verdict(model, history, budget)
	assert.Equal(t, porcupine.Illegal, res, "%v", f)
	why := explain(model, history, budget)
	assert.Contains(t, why, `caller key "race"`)
	assert.Contains(t, why, "✗")
	t.Logf("the check rejects the interleaved history:\n%s", why)
	// The visualization Check writes on failure renders.
	_, info, _ := failingPart(model, history, budget)
	single := model
	single.Partition = nil
	path := filepath.Join(t.TempDir(), "race.html")
	require.NoError(t, porcupine.VisualizePath(single, info, path))
	html, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Contains(t, string(html), "race slow×1")
}

// TestBrokenStoreUnderLoad: the broken store under the load of every
// history (5 clients × 16 goroutines on one hot key) fails the check,
// without any help to interleave; the correct store, under the same load,
// passes (TestRealRedis). Up to 20 histories are tried; the first that
// fails ends the test, and the count is logged.
func TestBrokenStoreUnderLoad(t *testing.T) {
	stores := brokenStores(t)
	model := NewModel(Options{})
	sc := scenario{name: "broken", stacks: [][]*ratelimit.Limit{{tb}}, ops: 4}
	for h := range 20 {
		sc.keys = []string{"hot-" + string(rune('a'+h))}
		d := newDriver(stores, &sc, uint64(h), 10*time.Second)
		d.free(sc.ops)
		require.Equal(t, map[Outcome]int{Done: workers * sc.ops}, d.rec.Outcomes())
		history := d.rec.Operations()
		require.NoError(t, Validate(history))
		res, f := Verdict(model, history, budget)
		if res == porcupine.Unknown {
			t.Logf("history %d of the broken store is undecided within %v (%v); trying another", h+1, budget, f)
		}
		if res == porcupine.Illegal {
			t.Logf("history %d of the broken store is not linearizable (%v)", h+1, f)
			return
		}
	}
	t.Fatal("20 histories of a store that reads then writes in two calls all passed the check: it does not bite")
}

// TestBrokenStoreRounds: the broken store on the real redis-server,
// deciding by a fake clock that stands still during each round, fails the
// check too: there the checker must search for the order of each round's
// calls, and finds none. Up to 20 histories of 30 rounds are tried.
func TestBrokenStoreRounds(t *testing.T) {
	clock := clocktest.New(t0)
	stores := brokenStores(t, redisstore.WithClock(clock.Now), redisstore.WithExpiryMargin(time.Minute))
	model := NewModel(Options{})
	sc := roundScenarios()[0]
	sc.stacks = [][]*ratelimit.Limit{{tb}}
	for h := range 20 {
		sc.keys = historyKeys(roundScenarios()[0], h)
		d := newDriver(stores, &sc, uint64(h), 10*time.Second)
		for range 30 {
			clock.Advance(time.Millisecond)
			d.round(ratelimit.Micros(clock.Now()))
		}
		require.Equal(t, map[Outcome]int{Done: 30 * workers}, d.rec.Outcomes())
		res, f := Verdict(model, d.rec.Operations(), budget)
		if res == porcupine.Unknown {
			t.Logf("history %d of the broken store is undecided within %v (%v); trying another", h+1, budget, f)
		}
		if res == porcupine.Illegal {
			t.Logf("history %d of the broken store is not linearizable (%v)", h+1, f)
			return
		}
	}
	t.Fatal("20 histories of a store that reads then writes in two calls all passed the check: it does not bite")
}
