package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/internal/clocktest"
	"github.com/rampmeter/ratelimit/store/lease"
	"github.com/rampmeter/ratelimit/store/memory"
)

// The scenario: a fleet of up to 100 instances serves an API whose
// requests carry one of 20 API keys, Zipf-distributed (the hottest key asks
// for about a third of the traffic, the coldest for under 1 %), and whose
// instances get very different shares of it (the load balancer's weights
// fall as 1/(i+1)^0.7: the heaviest instance gets 8 %, the lightest
// 0.3 %). Every request is charged to a stack of two token buckets: its
// key's 600 per second (burst 600) and the route's 6,000 per second
// (burst 6,000, key "route"). 8,000 requests per second arrive (Poisson,
// in 1 ms steps) for 30 s, so the route and the hottest keys are over
// their limits, and:
//
//	 8 s    20 instances join (80 → 100)
//	12 s    a burst: 4,000 requests per second more on the hottest key for 2 s
//	16 s    instance 1, the second heaviest, crashes: its leases are never returned
//	22 s    10 instances leave, closing their stores (99 → 89 live)
//
// The same requests, in the same order, are also decided by one memory
// store holding the same limits: the single global bucket the fleet
// stands in for. Everything runs on one fake clock, so each run is exactly
// repeatable.
const (
	keys        = 20
	zipfS       = 1.2
	rate        = 8000.0 // requests per second
	duration    = 30 * time.Second
	step        = time.Millisecond
	instances   = 100
	startLive   = 80
	expireEvery = 100 // steps between the expiry passes of each instance
	burstRate   = 4000.0
)

var (
	joinAt    = 8 * time.Second
	burstFrom = 12 * time.Second
	burstTo   = 14 * time.Second
	crashAt   = 16 * time.Second
	crashed   = 1
	leaveAt   = 22 * time.Second
	leavers   = [2]int{60, 70} // instances [60, 70) leave
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// perKey and route are the two limits of every request.
var (
	perKey = ratelimit.PerSecond(600).Named("key")
	route  = ratelimit.PerSecond(6000).Named("route")
)

// Run is one simulation with one lease lifetime (0: no leasing, every
// request goes to the backing store).
type Run struct {
	Lifetime time.Duration

	Requests int64 // requests decided
	// Admitted counts the requests the fleet admitted; Global those the
	// single global bucket admitted.
	Admitted, Global int64
	// Missed counts requests the fleet refused that the global bucket
	// admitted; Extra those the fleet admitted that it refused.
	Missed, Extra int64
	// BackingCalls counts the calls the fleet made to the backing store.
	BackingCalls int64
	// MaxHeld is the most units held in leases by all instances at once
	// (sampled at each expiry pass); Lost the units the crashed instance
	// held when it crashed.
	MaxHeld, Lost int64
	// Span is the most requests the fleet admitted for the hottest key
	// within any 1 s (closed), and SpanBound the bound Burst +
	// ⌊(1 s + L − 1 µs) × Rate⌋; GlobalSpan the global bucket's most.
	Span, SpanBound, GlobalSpan int64
	// OverCharged is the most units any (key, limit) pair had admitted
	// beyond those charged to it in the backing store, checked after
	// every step: it must be 0.
	OverCharged int64
	// Stats sums the instances' lease.Stats.
	Stats lease.Stats
	// Series holds, per second, the hottest key's demand and admissions
	// by the fleet and by the global bucket.
	Series []Second
}

// Second is one second of the hottest key.
type Second struct{ Demand, Admitted, Global int64 }

// CallsPerDecision returns BackingCalls / Requests.
func (r *Run) CallsPerDecision() float64 { return float64(r.BackingCalls) / float64(r.Requests) }

// counting is the backing store: it counts calls and net charges per pair.
type counting struct {
	ratelimit.Store
	calls   int64
	charged map[string]int64
}

func pair(r ratelimit.Request) string { return r.Key + "|" + r.Limit.ID() }

func (c *counting) Take(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	c.calls++
	if err := c.Store.Take(ctx, reqs, out); err != nil {
		return err
	}
	for i := range reqs {
		if !out[i].Allowed {
			return nil
		}
	}
	for _, r := range reqs {
		c.charged[pair(r)] += r.Cost
	}
	return nil
}

func (c *counting) Adjust(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	c.calls++
	if err := c.Store.Adjust(ctx, reqs, out); err != nil {
		return err
	}
	for _, r := range reqs {
		c.charged[pair(r)] += r.Cost
	}
	return nil
}

// simulate runs the scenario with lease lifetime life (0: no leasing).
func simulate(life time.Duration) (*Run, error) {
	ctx := context.Background()
	clock := clocktest.New(t0)
	mem, err := memory.New(memory.WithClock(clock.Now))
	if err != nil {
		return nil, err
	}
	global, err := memory.New(memory.WithClock(clock.Now))
	if err != nil {
		return nil, err
	}
	backing := &counting{Store: mem, charged: map[string]int64{}}
	// The deadline of the instances' own calls is real time: an hour, so
	// that a loaded machine never makes a return time out and the run
	// differ.
	opts := []lease.Option{lease.WithClock(clock.Now), lease.WithExpiryInterval(0), lease.WithCallTimeout(time.Hour)}
	if life > 0 {
		opts = append(opts, lease.WithLifetime(life))
	} else {
		opts = append(opts, lease.WithHotThreshold(math.MaxInt64))
	}
	fleet := make([]*lease.Store, instances)
	for i := range fleet {
		if fleet[i], err = lease.New(backing, opts...); err != nil {
			return nil, err
		}
	}
	live := make([]bool, instances)
	for i := range startLive {
		live[i] = true
	}
	rng := rand.New(rand.NewPCG(12, 2026))
	zipf := rand.NewZipf(rng, zipfS, 1, keys-1)
	keyName := make([]string, keys)
	for k := range keyName {
		keyName[k] = fmt.Sprintf("api-key-%02d", k)
	}
	lk, lr := perKey, route
	run := &Run{Lifetime: life, Series: make([]Second, int(duration/time.Second))}
	admitted := map[string]int64{} // per pair, by the fleet
	var hotTimes, globalTimes []int64
	pick := newPicker(live)
	reqs := make([]ratelimit.Request, 2)
	out := make([]ratelimit.Decision, 2)
	gout := make([]ratelimit.Decision, 2)
	decide := func(now time.Duration, key int) error {
		inst := pick.pick(rng)
		reqs[0] = ratelimit.Request{Key: keyName[key], Limit: &lk, Cost: 1}
		reqs[1] = ratelimit.Request{Key: "route", Limit: &lr, Cost: 1}
		if err := fleet[inst].Take(ctx, reqs, out); err != nil {
			return err
		}
		if err := global.Take(ctx, reqs, gout); err != nil {
			return err
		}
		ok := out[0].Allowed && out[1].Allowed
		gok := gout[0].Allowed && gout[1].Allowed
		run.Requests++
		sec := int(now / time.Second)
		if key == 0 {
			run.Series[sec].Demand++
		}
		if ok {
			run.Admitted++
			admitted[pair(reqs[0])]++
			admitted[pair(reqs[1])]++
			if key == 0 {
				run.Series[sec].Admitted++
				hotTimes = append(hotTimes, int64(now/time.Microsecond))
			}
		}
		if gok {
			run.Global++
			if key == 0 {
				run.Series[sec].Global++
				globalTimes = append(globalTimes, int64(now/time.Microsecond))
			}
		}
		switch {
		case gok && !ok:
			run.Missed++
		case ok && !gok:
			run.Extra++
		}
		return nil
	}
	steps := int(duration / step)
	for s := range steps {
		now := time.Duration(s) * step
		clock.Set(t0.Add(now))
		switch now {
		case joinAt:
			for i := startLive; i < instances; i++ {
				live[i] = true
			}
			pick = newPicker(live)
		case crashAt:
			run.Lost = fleet[crashed].Stats().Held
			live[crashed] = false // abandoned: never closed, its leases never returned
			pick = newPicker(live)
		case leaveAt:
			for i := leavers[0]; i < leavers[1]; i++ {
				live[i] = false
				if err := fleet[i].Close(); err != nil {
					return nil, err
				}
			}
			pick = newPicker(live)
		}
		for range poisson(rng, rate*step.Seconds()) {
			if err := decide(now, int(zipf.Uint64())); err != nil {
				return nil, err
			}
		}
		if now >= burstFrom && now < burstTo {
			for range poisson(rng, burstRate*step.Seconds()) {
				if err := decide(now, 0); err != nil {
					return nil, err
				}
			}
		}
		if s%expireEvery == expireEvery-1 {
			var held int64
			for i, st := range fleet {
				if !live[i] {
					continue
				}
				if err := st.Expire(ctx); err != nil {
					return nil, err
				}
				held += st.Stats().Held
			}
			run.MaxHeld = max(run.MaxHeld, held)
		}
		for p, a := range admitted {
			run.OverCharged = max(run.OverCharged, a-backing.charged[p])
		}
	}
	for i, st := range fleet {
		if i != crashed {
			if err := st.Close(); err != nil {
				return nil, err
			}
		}
	}
	run.BackingCalls = backing.calls
	for _, st := range fleet {
		x := st.Stats()
		run.Stats.Local += x.Local
		run.Stats.Passed += x.Passed
		run.Stats.Refills += x.Refills
		run.Stats.BackingTakes += x.BackingTakes
		run.Stats.Returns += x.Returns
		run.Stats.Dropped += x.Dropped
		run.Stats.Drained += x.Drained
		run.Stats.Lost += x.Lost
		run.Stats.Leased += x.Leased
		run.Stats.Returned += x.Returned
	}
	span := time.Second.Microseconds()
	run.Span = maxInSpan(hotTimes, span)
	run.GlobalSpan = maxInSpan(globalTimes, span)
	l := life.Microseconds()
	if l == 0 {
		l = 1 // no lease: a unit is used at its charge
	}
	run.SpanBound = perKey.Burst() + (span+l-1)*perKey.Quota()/perKey.Period().Microseconds()
	return run, nil
}

// picker chooses an instance for each request: live instance i with
// weight 1/(i+1)^0.7.
type picker struct {
	ids []int
	cum []float64
}

func newPicker(live []bool) *picker {
	p := &picker{}
	var sum float64
	for i, ok := range live {
		if ok {
			sum += 1 / math.Pow(float64(i+1), 0.7)
			p.ids = append(p.ids, i)
			p.cum = append(p.cum, sum)
		}
	}
	for i := range p.cum {
		p.cum[i] /= sum
	}
	return p
}

func (p *picker) pick(rng *rand.Rand) int {
	u := rng.Float64()
	return p.ids[min(sort.SearchFloat64s(p.cum, u), len(p.ids)-1)]
}

// poisson draws a Poisson variate of mean m (Knuth's method: m is small).
func poisson(rng *rand.Rand, m float64) int {
	l, k, p := math.Exp(-m), 0, 1.0
	for {
		p *= rng.Float64()
		if p <= l {
			return k
		}
		k++
	}
}

// maxInSpan returns the most of the sorted times (µs) within any closed
// span of span µs.
func maxInSpan(times []int64, span int64) int64 {
	var best int64
	j := 0
	for i := range times {
		for j < len(times) && times[j] <= times[i]+span {
			j++
		}
		best = max(best, int64(j-i))
	}
	return best
}
