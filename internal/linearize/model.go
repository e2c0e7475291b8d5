package linearize

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"

	"github.com/rampmeter/ratelimit"
)

// Kind is what an operation of a history did.
type Kind uint8

const (
	// Take is a Store.Take call.
	Take Kind = iota + 1
	// Adjust is a Store.Adjust call.
	Adjust
	// Reset is a restart of a Redis without persistence: every state it
	// held is lost, and each caller key it hits starts afresh, as a key
	// never seen. Its interval is from just before the server was killed
	// to the moment it answered again.
	Reset
	// Rollback is a forced failover: the promoted replica holds each
	// caller key's state as of the last write it received, so the
	// writes acknowledged after it (charges, and refunds) are lost. Its
	// interval is from just before the master stopped to the moment the
	// replica served its slots; see Options.LossFrom for what it may lose.
	Rollback
)

func (k Kind) String() string {
	switch k {
	case Take:
		return "take"
	case Adjust:
		return "adjust"
	case Reset:
		return "reset"
	case Rollback:
		return "rollback"
	}
	return fmt.Sprintf("kind%d", uint8(k))
}

// Input is an operation's invocation: what it asked.
type Input struct {
	Kind Kind
	// Key is the caller key of every request of a Take or Adjust (one
	// partition of the history); faults leave it empty.
	Key string
	// Reqs are the requests of a Take or Adjust, in order.
	Reqs []ratelimit.Request
	// Now is the time, in µs since the Unix epoch, the store was told to
	// decide at: the reading of a fake clock (redisstore.WithClock) that
	// stands still while the call runs. 0 means the store read its own
	// clock (Redis TIME), and the model takes the time from the
	// Decisions' At.
	Now int64
	// Keys are the caller keys a fault (Reset, Rollback) hits; nil means
	// every key of the history.
	Keys []string
}

// Output is an operation's response.
type Output struct {
	// Decisions are the store's decisions, one per request.
	Decisions []ratelimit.Decision
	// Unknown marks a call that failed in a way that leaves open whether
	// the store applied it (a timeout, a dropped connection): the model
	// lets it have been applied, at Input.Now, or not at all.
	Unknown bool
}

// Options are the anomalies a model allows beyond the sequential store's
// own behaviour. The zero Options allow none: a Reset is then the only
// fault a history may carry, and a Rollback makes it Illegal.
type Options struct {
	// LossFrom opens a forced failover's window of losses: a Rollback may
	// revert a caller key's state to the one it had just before its first
	// operation decided at or after LossFrom (µs since the Unix epoch: the
	// operation's Input.Now, or its At under the server's clock), or to
	// any state it had after that, and to nothing older. Set it to the
	// time of the first operation the replica may have missed: in the
	// tests, the first decided after a WAIT proved every earlier write
	// replicated. 0 means no Rollback is allowed.
	LossFrom int64
}

// NewModel returns the porcupine model of a ratelimit.Store under o: a
// sequential store that decides Take and Adjust exactly as the reference
// model of package storetest does (the pure functions
// (*ratelimit.Limit).TakeAt and AdjustFrom on one State per (caller key,
// limit ID), a Take all or nothing), partitioned by caller key, with the
// fault transitions Reset and Rollback.
//
// An operation is accepted at a point of the linearization only if every
// field of every Decision (Allowed, Remaining, Reset, RetryAfter, Delay,
// At and the Limit pointer) is what the sequential store, in the state the
// operations linearized before it left, decides at the operation's time.
// The time is Input.Now when the test drives the store's clock, and
// otherwise the At the store reported, which must not be earlier than the
// At of any operation linearized before it on the same caller key.
//
// Why that is neither too strict nor too lax:
//
//   - Redis runs one script at a time, and each script reads TIME once,
//     so a correct store's decisions on one key are a sequence in which
//     time never goes back (the host's clock does not step during a
//     test), each decided by the pure functions on the state the previous
//     one left: the linearization exists, and it takes every At as the
//     time of its decision. Accepting equal Ats in either order keeps two
//     scripts in the same microsecond (on two Cluster nodes during a slot
//     migration) acceptable. Check also requires each At to lie within
//     its call's interval by the test host's clock, on which the servers
//     run, so a store cannot pass by reporting times that suit it.
//   - Under a driven clock the time is the one the store was given, and
//     the decision must carry it; the clock stands still while a round of
//     calls runs, so where an operation lands in its round changes only
//     the order of charges, which the model must then explain exactly.
//   - A model that only counted admissions would accept a store that
//     tells wrong Remaining or Retry-After values, or charges a refused
//     Take's other limits; comparing every field rejects those. A state
//     is carried exactly (no rounding, no forgetting), so a store that
//     forgets a state early or charges twice diverges at the next
//     decision that observes it.
//   - Faults are the only other transitions, each once per caller key it
//     hits and only within its interval: a Reset (a restart without
//     persistence) forgets every state of the key; a Rollback (a forced
//     failover) reverts it to a state it had since Options.LossFrom. A
//     reset or a loss anywhere else, or a loss older than the window, has
//     no transition and fails the check. Per key the model is laxer than
//     the server in one way, which partitioning requires: each key may
//     lose a different suffix of its own writes, while a real replica
//     misses one suffix of the master's writes across all keys.
//   - A call whose outcome is unknown is applied at its Input.Now or not
//     at all, at any point after its invocation up to its recorded
//     response: the error time for a dropped connection (the server
//     cannot run a script from a connection it has closed), never for a
//     timeout (a server may still run it) unless the only server that
//     could run it was killed (Recorder.Killed: the kill). It needs a
//     driven clock: under the server's clock the time it would have been
//     decided at is unknown, so Check refuses such a history.
func NewModel(o Options) porcupine.Model {
	return porcupine.Model{
		Partition: Partition,
		Init:      func() any { return states{state{}} },
		Step: func(s, in, out any) (bool, any) {
			next := o.stepAll(s.(states), in.(Input), out.(Output))
			return len(next) > 0, next
		},
		Equal:             func(a, b any) bool { return a.(states).equal(b.(states)) },
		Hash:              func(s any) uint64 { return s.(states).hash() },
		DescribeOperation: func(in, out any) string { return Describe(in.(Input), out.(Output)) },
		DescribeState:     func(s any) string { return s.(states).String() },
	}
}

// states is the set of states a caller key may be in: the model is
// nondeterministic (an unknown outcome, a Rollback), and porcupine checks
// a deterministic model over sets of states (its NondeterministicModel
// does the same, but merges the sets in quadratic time, which a few
// thousand states — a dozen unknown outcomes in a row — make slow). The
// states are distinct, in no particular order.
type states []state

// stepAll applies the operation to every state of ss and returns the
// distinct states that result (none if no state allows it).
func (o Options) stepAll(ss states, in Input, out Output) states {
	var next states
	seen := map[uint64][]int{}
	for _, s := range ss {
		for _, n := range o.step(s, in, out) {
			h := n.hash()
			dup := false
			for _, i := range seen[h] {
				if next[i].equal(n) {
					dup = true
					break
				}
			}
			if !dup {
				seen[h] = append(seen[h], len(next))
				next = append(next, n)
			}
		}
	}
	return next
}

func (ss states) equal(tt states) bool {
	if len(ss) != len(tt) {
		return false
	}
	if len(ss) == 1 {
		return ss[0].equal(tt[0])
	}
	in := map[uint64][]int{}
	for i, t := range tt {
		h := t.hash()
		in[h] = append(in[h], i)
	}
	for _, s := range ss {
		found := false
		for _, i := range in[s.hash()] {
			if tt[i].equal(s) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// hash combines the states' hashes regardless of their order.
func (ss states) hash() uint64 {
	var h uint64
	for _, s := range ss {
		h += s.hash() * 0x9E3779B97F4A7C15
	}
	return h
}

func (ss states) String() string {
	if len(ss) == 1 {
		return ss[0].String()
	}
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = s.String()
	}
	return fmt.Sprintf("one of %d: %s", len(ss), strings.Join(parts, " | "))
}

// Partition splits a history by caller key: operations on different caller
// keys share no state, so the history is linearizable if and only if each
// part is. A fault goes into every part it hits (Input.Keys, or all).
// Parts are ordered by key.
func Partition(history []porcupine.Operation) [][]porcupine.Operation {
	parts := map[string][]porcupine.Operation{}
	var faults []porcupine.Operation
	for _, op := range history {
		in := op.Input.(Input)
		switch in.Kind {
		case Reset, Rollback:
			faults = append(faults, op)
		default:
			parts[in.Key] = append(parts[in.Key], op)
		}
	}
	for _, f := range faults {
		keys := f.Input.(Input).Keys
		if keys == nil {
			for k := range parts {
				keys = append(keys, k)
			}
		}
		for _, k := range keys {
			if _, ok := parts[k]; ok {
				parts[k] = append(parts[k], f)
			}
		}
	}
	keys := make([]string, 0, len(parts))
	for k := range parts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([][]porcupine.Operation, len(keys))
	for i, k := range keys {
		out[i] = parts[k]
	}
	return out
}

// limitState is the state of one limit of a caller key.
type limitState struct {
	id string // Limit.ID()
	s  ratelimit.State
}

// state is one caller key's model state. It is immutable: every step
// returns a new one and never writes to the slices of the old.
type state struct {
	// limits holds each limit's State, sorted by ID; a limit missing has
	// the zero State (a key never seen), and no entry holds it.
	limits []limitState
	// at is the latest time an operation decided by the server's clock
	// was decided at, in µs (0 before any).
	at int64
	// armed is set once an operation at or after Options.LossFrom has
	// been applied and no Rollback yet; snaps then holds every distinct
	// state since, oldest first, starting with the state before it.
	armed      bool
	snaps      [][]limitState
	rolledBack bool // the key's Rollback has been linearized
}

func (s state) get(id string) ratelimit.State {
	if i, ok := slices.BinarySearchFunc(s.limits, id, func(e limitState, id string) int { return cmp.Compare(e.id, id) }); ok {
		return s.limits[i].s
	}
	return ratelimit.State{}
}

// with returns a copy of limits in which id has state v (and no entry when
// v is the zero State).
func with(limits []limitState, id string, v ratelimit.State) []limitState {
	i, ok := slices.BinarySearchFunc(limits, id, func(e limitState, id string) int { return cmp.Compare(e.id, id) })
	zero := v.Level == 0 && v.Updated == 0 && v.Prev == 0 && len(v.Log) == 0
	switch {
	case ok && zero:
		return slices.Delete(slices.Clone(limits), i, i+1)
	case ok:
		out := slices.Clone(limits)
		out[i].s = v
		return out
	case zero:
		return limits
	}
	return slices.Insert(slices.Clone(limits), i, limitState{id, v})
}

// decide returns what the sequential store decides for in at now from
// limits, and the limits after it. A Take evaluates its requests in order
// on a working copy (a limit listed twice is charged twice) and commits it
// only if every request is allowed; otherwise nothing is committed and
// every Decision's Remaining and Reset are a peek at the stored state (the
// contract of package storetest). An Adjust applies its requests in order
// and commits.
func decide(limits []limitState, in Input, now int64) ([]limitState, []ratelimit.Decision) {
	out := make([]ratelimit.Decision, len(in.Reqs))
	work := state{limits: limits}
	all := true
	for i, r := range in.Reqs {
		id := r.Limit.ID()
		s := work.get(id)
		if in.Kind == Adjust {
			out[i] = r.Limit.AdjustFrom(&s, now, r.At, r.Cost)
		} else {
			out[i] = r.Limit.TakeAt(&s, now, r.Cost)
			all = all && out[i].Allowed
		}
		work.limits = with(work.limits, id, s)
	}
	if in.Kind == Adjust || all {
		return work.limits, out
	}
	stored := state{limits: limits}
	for i, r := range in.Reqs {
		s := stored.get(r.Limit.ID())
		p := r.Limit.TakeAt(&s, now, 0)
		out[i].Remaining, out[i].Reset = p.Remaining, p.Reset
	}
	return limits, out
}

// step returns the states st may move to by the operation (in, out): none
// when the sequential store could not have answered out.
func (o Options) step(st state, in Input, out Output) []state {
	switch in.Kind {
	case Reset:
		return []state{o.apply(st, nil, in.Now)}
	case Rollback:
		if o.LossFrom == 0 || st.rolledBack {
			return nil
		}
		n := st
		n.armed, n.snaps, n.rolledBack = false, nil, true
		next := []state{n} // nothing lost
		for _, snap := range st.snaps {
			m := n
			m.limits = snap
			next = append(next, m)
		}
		return next
	case Take, Adjust:
	default:
		return nil
	}
	if out.Unknown {
		if in.Now == 0 {
			return nil // see NewModel: refused by Check before it gets here
		}
		limits, _ := decide(st.limits, in, in.Now)
		return []state{st, o.apply(st, limits, in.Now)}
	}
	if len(out.Decisions) != len(in.Reqs) || len(in.Reqs) == 0 {
		return nil
	}
	now := in.Now
	if now == 0 {
		now = out.Decisions[0].At
		if now < st.at {
			return nil // the server's clock went back along this order
		}
	}
	limits, want := decide(st.limits, in, now)
	for i := range want {
		if !sameDecision(want[i], out.Decisions[i]) {
			return nil
		}
	}
	n := o.apply(st, limits, now)
	if in.Now == 0 {
		n.at = now
	}
	return []state{n}
}

// apply returns st with limits, the result of an operation at time t,
// recording it for a Rollback when the loss window is open.
func (o Options) apply(st state, limits []limitState, t int64) state {
	n := st
	n.limits = limits
	if o.LossFrom == 0 || st.rolledBack {
		return n
	}
	if !st.armed && t >= o.LossFrom {
		n.armed = true
		n.snaps = [][]limitState{st.limits}
	}
	if n.armed && !equalLimits(n.snaps[len(n.snaps)-1], limits) {
		n.snaps = append(n.snaps[:len(n.snaps):len(n.snaps)], limits)
	}
	return n
}

// sameDecision reports whether the store's decision got is exactly the
// model's want, field by field.
func sameDecision(want, got ratelimit.Decision) bool {
	return got.Limit == want.Limit && got.Allowed == want.Allowed && got.Remaining == want.Remaining &&
		got.Reset == want.Reset && got.RetryAfter == want.RetryAfter && got.Delay == want.Delay && got.At == want.At
}

func equalState(a, b ratelimit.State) bool {
	return a.Level == b.Level && a.Updated == b.Updated && a.Prev == b.Prev && slices.Equal(a.Log, b.Log)
}

func equalLimits(a, b []limitState) bool {
	return slices.EqualFunc(a, b, func(x, y limitState) bool { return x.id == y.id && equalState(x.s, y.s) })
}

func (s state) equal(t state) bool {
	return s.at == t.at && s.armed == t.armed && s.rolledBack == t.rolledBack &&
		equalLimits(s.limits, t.limits) && slices.EqualFunc(s.snaps, t.snaps, equalLimits)
}

// hash is FNV-1a over every field equal compares.
func (s state) hash() uint64 {
	h := uint64(14695981039346656037)
	mix := func(v int64) {
		for range 8 {
			h ^= uint64(v) & 0xff
			h *= 1099511628211
			v >>= 8
		}
	}
	limits := func(ls []limitState) {
		mix(int64(len(ls)))
		for _, l := range ls {
			for i := 0; i < len(l.id); i++ {
				mix(int64(l.id[i]))
			}
			mix(l.s.Level)
			mix(l.s.Updated)
			mix(l.s.Prev)
			for _, t := range l.s.Log {
				mix(t)
			}
		}
	}
	mix(s.at)
	if s.armed {
		mix(1)
	}
	if s.rolledBack {
		mix(2)
	}
	limits(s.limits)
	for _, snap := range s.snaps {
		limits(snap)
	}
	return h
}

func (s state) String() string {
	var b strings.Builder
	b.WriteString("{")
	for i, l := range s.limits {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s=%d/%d", l.id, l.s.Level, l.s.Updated)
		if l.s.Prev != 0 {
			fmt.Fprintf(&b, "/prev %d", l.s.Prev)
		}
		if len(l.s.Log) > 0 {
			fmt.Fprintf(&b, "/log %d", len(l.s.Log))
		}
	}
	b.WriteString("}")
	if s.armed {
		fmt.Fprintf(&b, " (%d states since the loss window opened)", len(s.snaps))
	}
	if s.rolledBack {
		b.WriteString(" (rolled back)")
	}
	return b.String()
}

// Describe renders an operation for failure messages and visualizations.
func Describe(in Input, out Output) string {
	var b strings.Builder
	b.WriteString(in.Kind.String())
	switch in.Kind {
	case Reset, Rollback:
		return b.String()
	}
	fmt.Fprintf(&b, " %s", in.Key)
	for _, r := range in.Reqs {
		fmt.Fprintf(&b, " %s×%d", r.Limit.Name(), r.Cost)
		if r.At != 0 {
			fmt.Fprintf(&b, "@%d", r.At)
		}
	}
	if in.Now != 0 {
		fmt.Fprintf(&b, " now %d", in.Now)
	}
	if out.Unknown {
		b.WriteString(" → unknown")
		return b.String()
	}
	b.WriteString(" →")
	for i, d := range out.Decisions {
		if i == 0 {
			fmt.Fprintf(&b, " at %d", d.At)
		}
		verdict := "ok"
		if !d.Allowed {
			verdict = "refused"
		}
		fmt.Fprintf(&b, " [%s rem %d reset %v", verdict, d.Remaining, d.Reset)
		if d.RetryAfter != 0 {
			fmt.Fprintf(&b, " retry %v", d.RetryAfter)
		}
		if d.Delay != 0 {
			fmt.Fprintf(&b, " delay %v", d.Delay)
		}
		b.WriteString("]")
	}
	return b.String()
}
