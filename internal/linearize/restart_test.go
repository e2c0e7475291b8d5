package linearize

import (
	"slices"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/internal/chaos"
	"github.com/rampmeter/ratelimit/internal/clocktest"
	"github.com/rampmeter/ratelimit/internal/clustertest"
	"github.com/rampmeter/ratelimit/store/redisstore"
)

// faultRounds runs rounds of d, moving clock 1 ms before each, around a
// fault: in round start, once a third of its calls have returned, fault
// runs on the test's goroutine (it may fail the test) while the rounds go
// on in another. When during is positive, at most during rounds (round
// start included) run while fault does; the next waits for fault to
// return. That bounds the calls of unknown outcome a slow fault can add,
// and with them the checker's work, whatever the machine's load: each
// such call may have been applied at any moment after it began, so the
// ways to order a key's history grow exponentially with their number.
// Once fault has returned, rounds go on until calm rounds in a row had
// every call succeed. It returns the number of rounds run.
func faultRounds(t *testing.T, d *driver, clock *clocktest.Clock, start, calm, during int, fault func()) int {
	t.Helper()
	reached, faulted, stop, done := make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{})
	var rounds int
	var stuck bool
	go func() {
		defer close(done)
		clean, after := 0, false
		for r := 0; ; r++ {
			select {
			case <-stop:
				return
			default:
			}
			if !after && during > 0 && r >= start+during {
				select {
				case <-faulted:
				case <-stop:
					return
				}
			}
			clock.Advance(time.Millisecond)
			if r == start {
				go func() {
					if d.whenReturned(workers/3, stop) {
						close(reached)
					}
				}()
			}
			before := d.rec.Outcomes()[Done]
			d.round(ratelimit.Micros(clock.Now()))
			if !after {
				select {
				case <-faulted:
					after = true
				default:
				}
			}
			switch {
			case !after:
			case d.rec.Outcomes()[Done]-before == workers:
				clean++
			default:
				clean = 0
			}
			if clean >= calm {
				rounds = r + 1
				return
			}
			if r > start+2000 {
				stuck = true
				return
			}
		}
	}()
	defer func() {
		close(stop)
		<-done
	}()
	select {
	case <-reached:
	case <-done:
		t.Fatal("the rounds ended before the fault")
	}
	fault()
	close(faulted)
	<-done
	if stuck {
		t.Fatal("calls still fail 2,000 rounds after the fault began")
	}
	return rounds
}

// withoutFaults returns history without its Reset and Rollback operations.
func withoutFaults(history []porcupine.Operation) []porcupine.Operation {
	return slices.DeleteFunc(slices.Clone(history), func(op porcupine.Operation) bool {
		k := op.Input.(Input).Kind
		return k == Reset || k == Rollback
	})
}

// TestRestart kills a redis-server without persistence (SIGKILL, by PID)
// in the middle of a round of calls, and starts it again on its port,
// while 5 clients × 16 goroutines keep calling, the stores deciding by a
// shared fake clock (1 ms a round). The restart loses every state; the
// documented anomaly is exactly that, a reset of every caller key's usage,
// modelled as one Reset of every key between the kill and the moment the
// server answers again. Calls in flight at the kill end with a dropped
// connection (applied before it, or not at all), calls while it is down
// with a refused dial (not applied); nothing else may happen, and every
// decision before and after must be exact. The same history without the
// Reset must fail the check: the restart's loss was observed, and the
// model would not have let it pass unannounced.
func TestRestart(t *testing.T) {
	t.Cleanup(func() { clustertest.WaitDialProbes(t) }) // registered first, so run last
	srv := chaos.StartRedis(t)
	clock := clocktest.New(t0)
	stores := redisStores(t, srv.Addr, redisstore.WithClock(clock.Now), redisstore.WithExpiryMargin(time.Minute))
	model := NewModel(Options{})
	scs := roundScenarios()
	var ta tally
	for h := range scale(t, 2) {
		sc := scs[h%len(scs)]
		sc.keys = historyKeys(sc, h)
		d := newDriver(stores, &sc, uint64(h), 5*time.Second)
		start := time.Now()
		rounds := faultRounds(t, d, clock, 10, 10, 0, func() {
			from := time.Now()
			srv.Kill()
			require.NoError(t, srv.Start())
			d.rec.Fault(Reset, nil, from, time.Now())
		})
		recorded := time.Since(start)
		outcomes := d.rec.Outcomes()
		require.Zero(t, outcomes[Failed]+outcomes[TimedOut], "history %d: only dropped connections and refused dials (%v): %v", h, outcomes, d.rec.Failures())
		history := d.rec.Operations()
		f := Check(t, "restart", model, history, budget)
		ta.add(f, recorded, d.rec)
		res, g := Verdict(model, withoutFaults(history), budget)
		require.Equal(t, porcupine.Illegal, res, "history %d without its Reset (%v)", h, g)
		t.Logf("history %d (%s): %d rounds, calls by outcome %v; without the Reset it is %v (decided in %v)",
			h, sc.name, rounds, outcomes, res, g.Took.Round(time.Millisecond))
	}
	t.Logf("restart: %v", &ta)
}
