package linearize

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// Figures describe a checked history.
type Figures struct {
	Ops        int // operations, faults included
	Unknown    int // operations whose outcome is unknown
	Partitions int // caller keys
	MaxOps     int // operations of the largest partition
	// MaxConcurrent is the most operations of one partition in flight at
	// once (as recorded, before Narrow; one that never responded counts
	// to the end), which the checker's work grows with exponentially at
	// worst.
	MaxConcurrent int
	Took          time.Duration // the checker's time
}

// Add accumulates g into f (maxima for the Max fields).
func (f *Figures) Add(g Figures) {
	f.Ops += g.Ops
	f.Unknown += g.Unknown
	f.Partitions += g.Partitions
	f.MaxOps = max(f.MaxOps, g.MaxOps)
	f.MaxConcurrent = max(f.MaxConcurrent, g.MaxConcurrent)
	f.Took += g.Took
}

func (f Figures) String() string {
	return fmt.Sprintf("%d operations (%d unknown) on %d caller keys, at most %d on one, at most %d of them in flight at once; checked in %v",
		f.Ops, f.Unknown, f.Partitions, f.MaxOps, f.MaxConcurrent, f.Took.Round(time.Millisecond))
}

// Verdict checks history against model with porcupine within budget and
// returns its result (Ok, Illegal, or Unknown when the budget ran out)
// with the history's figures. It does not validate the history (see
// Check), and checks it narrowed (see Narrow).
func Verdict(model porcupine.Model, history []porcupine.Operation, budget time.Duration) (porcupine.CheckResult, Figures) {
	f := figures(history)
	start := time.Now()
	res := porcupine.CheckOperationsTimeout(model, Narrow(history), budget)
	f.Took = time.Since(start)
	return res, f
}

// Narrow returns history with the interval of each operation decided by
// the server's clock (Input.Now 0, a known outcome) narrowed to the part
// of its call that lies within the microsecond of its At: the moment the
// script read TIME, which is when it took effect, since Redis runs one
// script at a time. Other operations keep their intervals.
//
// Narrowing changes no verdict under NewModel's models on the keys whose
// operations are all decided by the server's clock (in these tests a key's
// operations are all of one clock, and faults come with the driven one),
// and it is what makes a hot key checkable. Every linearization the model
// accepts orders such a key's operations by At (it refuses an At earlier
// than one before it), and such an order respects the narrowed intervals
// (two operations in the same microsecond overlap, and may go either
// way); every order that respects the narrowed intervals respects the
// recorded ones, which contain them (Validate checks the At against the
// call). So the narrowed history is linearizable exactly when the recorded
// one is. (Next to an operation it does not narrow, narrowing also asserts
// that a script took effect at its At, which is the truth for a correct
// store.) The checker, though, no longer has to discover the At order by
// search: with 80 calls in flight on one key it tries a call with a later
// At before one with an earlier At whenever the earlier one changes
// nothing (a refusal, a peek), and learns that the order is dead only when
// it reaches the earlier call's response, after trying every arrangement
// of what it placed in between: exponential, and out of any budget within
// a few hundred operations.
func Narrow(history []porcupine.Operation) []porcupine.Operation {
	out := make([]porcupine.Operation, len(history))
	for i, op := range history {
		out[i] = op
		in, o := op.Input.(Input), op.Output.(Output)
		if (in.Kind != Take && in.Kind != Adjust) || in.Now != 0 || o.Unknown || len(o.Decisions) == 0 {
			continue
		}
		at := o.Decisions[0].At * 1000
		out[i].Call, out[i].Return = max(op.Call, at), min(op.Return, at+999)
	}
	return out
}

// Check validates history, checks it against model within budget, and
// fails t unless it is linearizable, saying why:
//
//   - an invalid history (a call stacking several caller keys, which the
//     partitioning cannot model; an unknown outcome under the server's
//     clock; a decision made by the server's clock at a time outside its
//     call by the test host's clock, on which the servers run);
//   - Illegal: the caller key whose operations no sequential store could
//     have answered, those operations in order of invocation, and a
//     porcupine visualization written to t's artifact directory (kept
//     with go test -artifacts);
//   - Unknown: the checker ran out of budget, which is no pass: the
//     history is too long or too concurrent for it, and must be made
//     shorter.
//
// name labels the history in messages. It returns the history's figures.
func Check(t *testing.T, name string, model porcupine.Model, history []porcupine.Operation, budget time.Duration) Figures {
	t.Helper()
	if err := Validate(history); err != nil {
		t.Fatalf("%s: invalid history: %v", name, err)
	}
	res, f := Verdict(model, history, budget)
	switch res {
	case porcupine.Ok:
		return f
	case porcupine.Unknown:
		t.Fatalf("%s: the checker could not decide within %v (%v): the history is too long or too concurrent to check, which is not a pass; shorten it",
			name, budget, f)
	}
	part, info, res := failingPart(model, history, budget)
	vis := ""
	if part != nil {
		path := filepath.Join(t.ArtifactDir(), "linearize-"+strings.NewReplacer("/", "-", " ", "-").Replace(name)+".html")
		single := model
		single.Partition = nil
		vis = "; visualization: " + path + " (kept with go test -artifacts)"
		if err := porcupine.VisualizePath(single, info, path); err != nil {
			vis = "; no visualization: " + err.Error()
		}
	}
	t.Fatalf("%s: NOT LINEARIZABLE (%v): %s%s", name, f, describeFailure(part, info, res), vis)
	return f
}

// explain says which caller key of history is not linearizable under
// model, and shows its operations.
func explain(model porcupine.Model, history []porcupine.Operation, budget time.Duration) string {
	part, info, res := failingPart(model, history, budget)
	return describeFailure(part, info, res)
}

func describeFailure(part []porcupine.Operation, info porcupine.LinearizationInfo, res porcupine.CheckResult) string {
	if part == nil {
		return "every caller key alone is linearizable"
	}
	key := ""
	for _, op := range part {
		if k := op.Input.(Input).Key; k != "" {
			key = k
			break
		}
	}
	return fmt.Sprintf("on caller key %q no sequential store could have answered these %d operations (%v)\n%s",
		key, len(part), res, render(part, info))
}

// failingPart checks history's caller keys one by one (narrowed) and
// returns the first that is not linearizable (nil if none), with the
// checker's partial linearizations of it and its result.
func failingPart(model porcupine.Model, history []porcupine.Operation, budget time.Duration) ([]porcupine.Operation, porcupine.LinearizationInfo, porcupine.CheckResult) {
	single := model
	single.Partition = nil
	for _, part := range model.Partition(Narrow(history)) {
		res, info := porcupine.CheckOperationsVerbose(single, part, budget)
		if res != porcupine.Ok {
			return part, info, res
		}
	}
	return nil, porcupine.LinearizationInfo{}, porcupine.Ok
}

// render lists a partition's operations in order of invocation, marking
// those of the longest partial linearization the checker found, at most
// 80 of them, around the first that could not be placed.
func render(part []porcupine.Operation, info porcupine.LinearizationInfo) string {
	ops := slices.Clone(part)
	order := make([]int, len(ops))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return int(max(-1, min(1, ops[a].Call-ops[b].Call))) })
	placed := map[int]int{} // op index -> position in the longest linearization
	if lins := info.PartialLinearizations(); len(lins) > 0 {
		var longest []int
		for _, l := range lins[0] {
			if len(l) > len(longest) {
				longest = l
			}
		}
		for pos, id := range longest {
			placed[id] = pos
		}
	}
	first := -1
	for i, j := range order {
		if _, ok := placed[j]; !ok {
			first = i
			break
		}
	}
	lo, hi := 0, len(order)
	if first >= 0 {
		lo, hi = max(0, first-60), min(len(order), first+20)
	} else if hi > 80 {
		hi = 80
	}
	var b strings.Builder
	fmt.Fprintf(&b, "operations %d to %d of %d, by invocation (intervals as checked, in µs from the first; [n] is the place in the longest linearization found, ✗ not placed):\n", lo, hi, len(order))
	t0 := ops[order[0]].Call
	for _, j := range order[lo:hi] {
		op := ops[j]
		mark := "✗"
		if pos, ok := placed[j]; ok {
			mark = fmt.Sprintf("[%d]", pos)
		}
		ret := "never"
		if op.Return != Never {
			ret = fmt.Sprint((op.Return - t0) / 1000)
		}
		fmt.Fprintf(&b, "  %6s client %3d  %8d..%-8s %s\n", mark, op.ClientId, (op.Call-t0)/1000, ret,
			Describe(op.Input.(Input), op.Output.(Output)))
	}
	return b.String()
}

// Validate returns an error if history cannot be checked as recorded:
// a Take or Adjust without requests or stacking several caller keys; an
// operation with an unknown outcome decided by the server's clock
// (Input.Now 0); or a decision made by the server's clock whose At lies
// outside its call, by the test host's clock.
func Validate(history []porcupine.Operation) error {
	for i, op := range history {
		in, out := op.Input.(Input), op.Output.(Output)
		if in.Kind != Take && in.Kind != Adjust {
			continue
		}
		if len(in.Reqs) == 0 {
			return fmt.Errorf("operation %d: no requests", i)
		}
		for _, r := range in.Reqs {
			if r.Key != in.Key {
				return fmt.Errorf("operation %d stacks caller keys %q and %q: one partition per caller key cannot model it", i, in.Key, r.Key)
			}
		}
		if in.Now != 0 {
			continue
		}
		if out.Unknown {
			return fmt.Errorf("operation %d (%s) has an unknown outcome under the server's clock: the time it may have been decided at is unknown", i, Describe(in, out))
		}
		for _, d := range out.Decisions {
			if d.At < op.Call/1000 || d.At > op.Return/1000 {
				return fmt.Errorf("operation %d (%s) was decided at %d µs, outside its call [%d, %d] µs by this host's clock",
					i, Describe(in, out), d.At, op.Call/1000, op.Return/1000)
			}
		}
	}
	return nil
}

// figures measures history (without checking it).
func figures(history []porcupine.Operation) Figures {
	f := Figures{Ops: len(history)}
	parts := Partition(history)
	f.Partitions = len(parts)
	for _, op := range history {
		if op.Output.(Output).Unknown {
			f.Unknown++
		}
	}
	for _, p := range parts {
		f.MaxOps = max(f.MaxOps, len(p))
		type edge struct {
			at    int64
			delta int
		}
		edges := make([]edge, 0, 2*len(p))
		for _, op := range p {
			edges = append(edges, edge{op.Call, 1}, edge{op.Return, -1})
		}
		// Calls before returns at the same instant: porcupine's intervals
		// are closed.
		slices.SortFunc(edges, func(a, b edge) int {
			if a.at != b.at {
				if a.at < b.at {
					return -1
				}
				return 1
			}
			return b.delta - a.delta
		})
		n := 0
		for _, e := range edges {
			n += e.delta
			f.MaxConcurrent = max(f.MaxConcurrent, n)
		}
	}
	return f
}
