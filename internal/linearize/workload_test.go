package linearize

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
)

// The load of every history: 5 clients (each its own Redis client and
// store instance, as 5 processes would be) × 16 goroutines.
const (
	clients    = 5
	goroutines = 16
	workers    = clients * goroutines
)

// budget is the checker's time limit per history: a hundred times what
// any history here needs (100 ms at most), so that running out of it says
// the history is too hard to check, not that the machine is slow.
const budget = 10 * time.Second

// scale multiplies the number of histories each test checks:
// RAMPMETER_LINEARIZE_SCALE=50 for a long run. Under the race detector
// the default is a quarter of the histories (at least one).
func scale(t *testing.T, n int) int {
	t.Helper()
	if s := os.Getenv("RAMPMETER_LINEARIZE_SCALE"); s != "" {
		k, err := strconv.Atoi(s)
		require.NoError(t, err, "RAMPMETER_LINEARIZE_SCALE")
		require.Positive(t, k, "RAMPMETER_LINEARIZE_SCALE")
		return n * k
	}
	if raceEnabled {
		return max(1, n/4)
	}
	return n
}

// scenario is a workload: which caller keys the goroutines pick from, the
// limits each key stacks, and how many calls each goroutine makes.
type scenario struct {
	name   string
	keys   []string
	stacks [][]*ratelimit.Limit // key i charges stacks[i%len(stacks)]
	ops    int                  // calls per goroutine per history (driver.free; a round makes one)
	// warm, if positive, is the percentage of calls on keys[0]; the
	// others pick among the rest. 0: every key alike.
	warm int
}

func keys(prefix string, n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = fmt.Sprintf("%s-%02d", prefix, i)
	}
	return ks
}

func limit(l ratelimit.Limit) *ratelimit.Limit {
	if err := l.Err(); err != nil {
		panic(err)
	}
	return &l
}

// worker is one goroutine's source of calls: its own random sequence, and
// the At of its last admitted Take per caller key, which its Adjusts
// settle (as a Limiter settles an estimate).
type worker struct {
	id   int
	rng  *rand.Rand
	sc   *scenario
	last map[string]int64
}

func newWorker(sc *scenario, seed uint64, id int) *worker {
	return &worker{id: id, rng: rand.New(rand.NewPCG(seed, uint64(id))), sc: sc, last: map[string]int64{}}
}

// next returns the worker's next call: a Take of a caller key's whole
// stack three times in four (sometimes of one of its limits), each limit
// charged 0 (a peek), 1, 2 or 3, its whole burst, or one more (never
// admitted); otherwise an Adjust refunding 1 to 3 or charging 1 or 2 per
// limit, settling usage charged at the worker's last admitted Take on the
// key, or now.
func (w *worker) next() (Kind, []ratelimit.Request) {
	rng := w.rng
	ki := rng.IntN(len(w.sc.keys))
	if w.sc.warm > 0 {
		ki = 0
		if rng.IntN(100) >= w.sc.warm {
			ki = 1 + rng.IntN(len(w.sc.keys)-1)
		}
	}
	key := w.sc.keys[ki]
	ls := w.sc.stacks[ki%len(w.sc.stacks)]
	if len(ls) > 1 && rng.IntN(5) == 0 {
		j := rng.IntN(len(ls))
		ls = ls[j : j+1]
	}
	reqs := make([]ratelimit.Request, len(ls))
	if rng.IntN(4) == 0 {
		at := int64(0)
		if rng.IntN(2) == 0 {
			at = w.last[key]
		}
		for i, l := range ls {
			c := -1 - rng.Int64N(3)
			if rng.IntN(2) == 0 {
				c = 1 + rng.Int64N(2)
			}
			reqs[i] = ratelimit.Request{Key: key, Limit: l, Cost: c, At: at}
		}
		return Adjust, reqs
	}
	for i, l := range ls {
		var c int64
		switch r := rng.IntN(20); {
		case r < 2:
			c = 0
		case r == 2:
			c = l.Burst()
		case r == 3:
			c = l.Burst() + 1
		case r < 7:
			c = 2 + rng.Int64N(2)
		default:
			c = 1
		}
		reqs[i] = ratelimit.Request{Key: key, Limit: l, Cost: c}
	}
	return Take, reqs
}

// observe remembers an admitted Take's At for later settlements.
func (w *worker) observe(kind Kind, reqs []ratelimit.Request, out []ratelimit.Decision, err error) {
	if kind != Take || err != nil {
		return
	}
	for _, d := range out {
		if !d.Allowed {
			return
		}
	}
	w.last[reqs[0].Key] = out[0].At
}

// driver runs workers against stores (one per client) and records their
// calls.
type driver struct {
	stores  []ratelimit.Store // clients of them
	rec     *Recorder
	timeout atomic.Int64 // each call's deadline, in ns
	workers []*worker
	// returned counts the calls of the current round that returned, for
	// faults injected part-way through a round.
	returned atomic.Int64
}

func newDriver(stores []ratelimit.Store, sc *scenario, seed uint64, timeout time.Duration) *driver {
	d := &driver{stores: stores, rec: NewRecorder()}
	d.timeout.Store(int64(timeout))
	for id := range workers {
		d.workers = append(d.workers, newWorker(sc, seed, id))
	}
	return d
}

// do makes worker w's next call at now (0: the store's own clock).
func (d *driver) do(w *worker, now int64) {
	kind, reqs := w.next()
	store := d.stores[w.id/goroutines%len(d.stores)]
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(d.timeout.Load()))
	defer cancel()
	var out []ratelimit.Decision
	var err error
	if kind == Take {
		out, err = d.rec.Take(ctx, store, w.id, now, reqs)
	} else {
		out, err = d.rec.Adjust(ctx, store, w.id, now, reqs)
	}
	w.observe(kind, reqs, out, err)
}

// free runs every worker's ops calls at once, without pause, under the
// store's own clock.
func (d *driver) free(ops int) {
	var wg sync.WaitGroup
	for _, w := range d.workers {
		wg.Go(func() {
			for range ops {
				d.do(w, 0)
			}
		})
	}
	wg.Wait()
}

// round runs one call per worker, all at once, with the store's clock
// standing at now, and returns when every call has returned.
func (d *driver) round(now int64) {
	d.returned.Store(0)
	var wg sync.WaitGroup
	for _, w := range d.workers {
		wg.Go(func() {
			d.do(w, now)
			d.returned.Add(1)
		})
	}
	wg.Wait()
}

// whenReturned blocks until n calls of the current round have returned
// (true) or stop is closed (false).
func (d *driver) whenReturned(n int64, stop <-chan struct{}) bool {
	for d.returned.Load() < n {
		select {
		case <-stop:
			return false
		case <-time.After(100 * time.Microsecond):
		}
	}
	return true
}

// tally accumulates the figures of many histories for the log.
type tally struct {
	histories int
	f         Figures
	recorded  time.Duration
	outcomes  map[Outcome]int
	// The kinds of the calls that returned decisions: Takes admitted,
	// refused (and among them refused for good, cost above the burst),
	// and Adjusts.
	admitted, refused, never, adjusts int
}

func (ta *tally) add(f Figures, recorded time.Duration, rec *Recorder) {
	ta.histories++
	ta.f.Add(f)
	ta.recorded += recorded
	if ta.outcomes == nil {
		ta.outcomes = map[Outcome]int{}
	}
	for o, n := range rec.Outcomes() {
		ta.outcomes[o] += n
	}
	for _, op := range rec.Operations() {
		in, out := op.Input.(Input), op.Output.(Output)
		if out.Unknown || len(out.Decisions) == 0 {
			continue
		}
		if in.Kind == Adjust {
			ta.adjusts++
			continue
		}
		admitted, never := true, false
		for _, d := range out.Decisions {
			admitted = admitted && d.Allowed
			never = never || d.Never()
		}
		switch {
		case admitted:
			ta.admitted++
		case never:
			ta.never++
			ta.refused++
		default:
			ta.refused++
		}
	}
}

func (ta *tally) String() string {
	return fmt.Sprintf("%d histories, all linearizable: %v; recorded in %v; calls by outcome %v; Takes admitted %d, refused %d (%d for good), Adjusts %d",
		ta.histories, ta.f, ta.recorded.Round(time.Millisecond), ta.outcomes, ta.admitted, ta.refused, ta.never, ta.adjusts)
}
