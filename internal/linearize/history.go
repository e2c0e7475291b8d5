package linearize

import (
	"context"
	"errors"
	"io"
	"math"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"

	"github.com/rampmeter/ratelimit"
)

// Outcome is how a store call ended, as the history records it.
type Outcome uint8

const (
	// Done: the call returned decisions.
	Done Outcome = iota
	// NotRun: the call failed before anything could run: a refused dial,
	// or a Redis error that Redis answers instead of running the script
	// (TRYAGAIN, MOVED, ASK, CLUSTERDOWN, LOADING, MASTERDOWN, READONLY,
	// BUSY). It changed nothing and decided nothing, so it is left out of
	// the history (and counted).
	NotRun
	// Lost: the connection ended under the call (EOF, reset, broken
	// pipe). The server ran the script before it closed the connection or
	// never: the operation is Unknown and responds at the error.
	Lost
	// TimedOut: the deadline passed. The script may have run, or may
	// still run later: the operation is Unknown and never responds.
	TimedOut
	// Failed: any other error, which no test expects; it is recorded as
	// TimedOut is, and counted apart so that tests can fail on it.
	Failed
)

func (o Outcome) String() string {
	return [...]string{"done", "not run", "lost", "timed out", "failed"}[o]
}

// Classify returns the Outcome of a store call that returned err.
func Classify(err error) Outcome {
	if err == nil {
		return Done
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return NotRun
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		msg := rerr.Error()
		for _, p := range []string{"TRYAGAIN", "MOVED", "ASK", "CLUSTERDOWN", "LOADING", "MASTERDOWN", "READONLY", "BUSY"} {
			if strings.HasPrefix(msg, p+" ") || msg == p {
				return NotRun
			}
		}
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return TimedOut
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return Lost
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return TimedOut
	}
	return Failed
}

// Never is the response time of an operation that never responded (a
// call that timed out).
const Never = math.MaxInt64

// Recorder records a history of store calls: what each asked, what it was
// told, and when it was invoked and responded, by the wall clock in ns
// since the Unix epoch: the clock the decisions' At is read from (Redis
// TIME, on this host), so that Check can compare the two. It is safe for
// concurrent use.
type Recorder struct {
	mu       sync.Mutex
	ops      []porcupine.Operation
	outcomes [Failed + 1]int
	failures []error // the first few Failed errors
	kills    []kill
}

// kill is a Killed record: no call on keys runs after at.
type kill struct {
	keys map[string]bool
	at   int64
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{} }

// Take calls s.Take(ctx, reqs) and records it as an operation of client
// (porcupine's client ID: one per goroutine) on the caller key of reqs[0]
// (every request must share it). now is the time the store's clock reads
// for the call (µs), or 0 when the store reads the server's clock. It
// returns what s.Take returned.
func (r *Recorder) Take(ctx context.Context, s ratelimit.Store, client int, now int64, reqs []ratelimit.Request) ([]ratelimit.Decision, error) {
	return r.call(ctx, s, Take, client, now, reqs)
}

// Adjust is Take for s.Adjust.
func (r *Recorder) Adjust(ctx context.Context, s ratelimit.Store, client int, now int64, reqs []ratelimit.Request) ([]ratelimit.Decision, error) {
	return r.call(ctx, s, Adjust, client, now, reqs)
}

func (r *Recorder) call(ctx context.Context, s ratelimit.Store, kind Kind, client int, now int64, reqs []ratelimit.Request) ([]ratelimit.Decision, error) {
	out := make([]ratelimit.Decision, len(reqs))
	in := Input{Kind: kind, Reqs: reqs, Now: now}
	if len(reqs) > 0 {
		in.Key = reqs[0].Key
	}
	call := time.Now().UnixNano()
	var err error
	if kind == Take {
		err = s.Take(ctx, reqs, out)
	} else {
		err = s.Adjust(ctx, reqs, out)
	}
	ret := time.Now().UnixNano()
	op := porcupine.Operation{ClientId: client, Input: in, Call: call, Return: ret}
	outcome := Classify(err)
	switch outcome {
	case Done:
		op.Output = Output{Decisions: out}
	case Lost:
		op.Output = Output{Unknown: true}
	case TimedOut, Failed:
		op.Output = Output{Unknown: true}
		op.Return = Never
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.outcomes[outcome]++
	if outcome == Failed && len(r.failures) < 5 {
		r.failures = append(r.failures, err)
	}
	if outcome != NotRun {
		r.ops = append(r.ops, op)
	}
	return out, err
}

// Fault records a fault (Reset or Rollback) on the caller keys keys (nil:
// all) that happened between from and to.
func (r *Recorder) Fault(kind Kind, keys []string, from, to time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, porcupine.Operation{
		ClientId: -1, Input: Input{Kind: kind, Keys: keys}, Output: Output{},
		Call: from.UnixNano(), Return: to.UnixNano(),
	})
}

// Killed records that at, the only server that could still run the calls
// on the caller keys keys was dead, so that none of them ran after it: a
// call on one of them invoked before at that timed out (whose response is
// Never) responds at at in Operations, like a Lost call at its error. The
// server must not have run anything between its last answer and at (a
// SIGKILL, or a SIGSTOP followed by one: a stopped process runs nothing).
// An operation bounded this way may only be linearized earlier than a
// Never would let it, so the bound can fail a history the unbounded one
// passes, never the converse; it keeps the calls that timed out on a hung
// master from being concurrent with everything after them, which makes
// the checker's work grow exponentially with their number.
//
// One call invoked before at may still have run elsewhere: go-redis picks
// a call's node when it routes it, not when it is invoked, so a client
// that had just learnt the new master could send it there. That changes
// no verdict as long as no call on keys is invoked between at and the
// return of every call invoked before it (faultRounds with during 1
// guarantees it): porcupine orders only invocations and responses, and
// moving a response past no invocation moves nothing.
func (r *Recorder) Killed(keys []string, at time.Time) {
	k := kill{keys: map[string]bool{}, at: at.UnixNano()}
	for _, key := range keys {
		k.keys[key] = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.kills = append(r.kills, k)
}

// Operations returns the history recorded so far, bounded by Killed.
func (r *Recorder) Operations() []porcupine.Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	ops := append([]porcupine.Operation(nil), r.ops...)
	for i := range ops {
		op := &ops[i]
		if op.Return != Never {
			continue
		}
		for _, k := range r.kills {
			if op.Call < k.at && k.keys[op.Input.(Input).Key] {
				op.Return = k.at
				break
			}
		}
	}
	return ops
}

// Outcomes returns how many calls ended with each Outcome.
func (r *Recorder) Outcomes() map[Outcome]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[Outcome]int{}
	for o, n := range r.outcomes {
		if n > 0 {
			m[Outcome(o)] = n
		}
	}
	return m
}

// Failures returns the first few errors classified Failed.
func (r *Recorder) Failures() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.failures...)
}
