package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// maxBatch is the most calls one batch script call decides: at about 10 µs
// of Redis time each, a batch holds the server for about a millisecond.
const maxBatch = 128

// batcher coalesces the concurrent calls of a pipelined Store on a
// single-server client (WithPipelining) into batch script calls (mode "b"
// of ratelimit.lua): while one batch is on its way, the calls that arrive
// queue up, and the next batch takes them all, up to maxBatch. Each call
// is decided by the script exactly as it would be alone (one atomic,
// all-or-nothing decision per call, in queue order), but the batch pays
// one round trip, one script invocation and one clock reading for all of
// them. A call alone in the queue is sent as an ordinary script call.
type batcher struct {
	s       *Store
	mu      sync.Mutex
	queue   []*batchCall
	running bool // a call or a batch is on its way (inline, or by loop)

	// Owned by the one goroutine running loop: the batch being sent, and
	// its calls still live.
	batch, live []*batchCall
}

// batchCall is one Store call waiting for its batch. Calls are pooled: a
// caller that received its reply puts its call back; one that gave up
// (its context ended) leaves it to the garbage collector, since the batch
// may still write to it.
type batchCall struct {
	ctx   context.Context
	args  []any // the call's own FCALL (or EVALSHA) command, as run built it
	n     int   // its requests
	reply string
	at    int64 // the batch's now (µs), which reply leaves out; -1: reply starts with it (a lone call)
	err   error
	done  chan struct{} // buffered: receives one value once reply and err are set
}

var callPool = sync.Pool{New: func() any { return &batchCall{done: make(chan struct{}, 1)} }}

// do sends the call whose command is args (n requests) and returns its
// reply and the time it was decided at (-1 when the reply starts with it,
// see parseReply), or its context's error once it ends. A call that finds nothing on
// its way is sent at once, as an ordinary script call, by its own
// goroutine; otherwise it queues for the next batch. A call whose context
// has ended when its batch is formed is never sent; one that ends later
// may still be decided by Redis, as after a timeout without pipelining.
// Nothing is ever re-sent.
func (b *batcher) do(ctx context.Context, args []any, n int) (string, int64, error) {
	b.mu.Lock()
	if !b.running {
		// Alone: the calls that arrive meanwhile queue, and loop sends
		// them once this one is back.
		// handOver is deferred so that a panic in the call (a go-redis
		// hook's, say) recovered by the caller cannot leave running set
		// with nobody to send the queue: every later call would wait
		// for its context's end.
		b.running = true
		b.mu.Unlock()
		defer b.handOver()
		reply, err := b.s.evalOne(ctx, args)
		return reply, -1, err
	}
	c := callPool.Get().(*batchCall)
	c.ctx, c.args, c.n = ctx, args, n
	b.queue = append(b.queue, c)
	b.mu.Unlock()
	select {
	case <-c.done:
		reply, at, err := c.reply, c.at, c.err
		*c = batchCall{done: c.done}
		callPool.Put(c)
		return reply, at, err
	case <-ctx.Done():
		// c belongs to the batch from here on; it is never read again.
		return "", -1, ctx.Err()
	}
}

// handOver ends a lone call of do: the calls that queued meanwhile go to
// loop, or, if none did, the next call is alone again.
func (b *batcher) handOver() {
	b.mu.Lock()
	if len(b.queue) > 0 {
		go b.loop()
	} else {
		b.running = false
	}
	b.mu.Unlock()
}

// loop sends batches until the queue is empty. One goroutine at a time
// runs it (b.running).
func (b *batcher) loop() {
	for {
		b.mu.Lock()
		n := min(len(b.queue), maxBatch)
		if n == 0 {
			b.running = false
			b.mu.Unlock()
			return
		}
		batch := append(b.batch[:0], b.queue[:n]...)
		rest := copy(b.queue, b.queue[n:])
		clear(b.queue[rest:])
		b.queue = b.queue[:rest]
		b.mu.Unlock()
		b.flush(batch)
		clear(batch)
		b.batch = batch
	}
}

// flush decides the calls of batch in one script call and then wakes
// their callers. A panic while deciding (in a go-redis hook, say, or a
// caller's context) would end the process from loop's goroutine, which no
// caller can recover; instead every call of the batch fails with an error
// wrapping errBatchPanic, and loop goes on with the next batch. Such a
// call may or may not have been decided by Redis, as after a timeout; it
// is not re-sent.
func (b *batcher) flush(batch []*batchCall) {
	b.decide(batch)
	for _, c := range batch {
		c.done <- struct{}{}
	}
}

// errBatchPanic is wrapped by the error of every call of a batch whose
// decision panicked (see flush).
var errBatchPanic = errors.New("pipelined batch panicked")

// decide sets the reply or error of every call of batch (set), deciding
// the live ones in one script call; it wakes no caller (flush does), so a
// call it set is still its own, which is what lets a panic part way set
// every call's error instead.
func (b *batcher) decide(batch []*batchCall) {
	defer func() {
		if p := recover(); p != nil {
			err := fmt.Errorf("%w: %v", errBatchPanic, p)
			if perr, ok := p.(error); ok {
				err = fmt.Errorf("%w: %w", errBatchPanic, perr)
			}
			for _, c := range batch {
				c.set("", -1, err)
			}
		}
	}()
	live := b.live[:0]
	defer func() { clear(live); b.live = live[:0] }()
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.set("", -1, err) // never sent
			continue
		}
		live = append(live, c)
	}
	switch len(live) {
	case 0:
		return
	case 1:
		c := live[0]
		reply, err := b.s.evalOne(c.ctx, c.args)
		c.set(reply, -1, err)
		return
	}

	// The batch's deadline is its latest caller's: a caller that gives up
	// earlier returns by itself (do), and no caller waits past its own.
	ctx := context.Background()
	var latest time.Time
	nkeys, nargs := 0, 0
	for _, c := range live {
		dl, ok := c.ctx.Deadline()
		if !ok {
			latest = time.Time{}
			break
		}
		if dl.After(latest) {
			latest = dl
		}
	}
	for _, c := range live {
		nkeys += c.n
		nargs += len(c.args) - 3 - c.n - 3
	}
	if !latest.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, latest)
		defer cancel()
	}

	// fcall name (or evalsha sha) numkeys, every call's keys, then "b" now margin calls,
	// and per call: mode, n, its requests' arguments.
	args := make([]any, 0, 3+nkeys+4+2*len(live)+nargs)
	verb, name := b.s.verb()
	args = append(args, verb, name, nkeys)
	for _, c := range live {
		args = append(args, c.args[3:3+c.n]...)
	}
	// One clock reading decides the batch: the latest the callers read
	// (WithClock), or Redis TIME ("").
	var now any = ""
	if b.s.now != nil {
		var latestNow int64
		for _, c := range live {
			if v, ok := c.args[3+c.n+1].(int64); ok && v > latestNow {
				latestNow = v
			}
		}
		now = latestNow
	}
	// The compact form ("B") when every call is a Take of one request.
	compact := true
	for _, c := range live {
		if c.n != 1 || c.args[3+c.n] != "t" {
			compact = false
			break
		}
	}
	var mode any = "b" // boxed from a constant: no allocation
	if compact {
		mode = "B"
	}
	args = append(args, mode, now, b.s.marginArg, len(live))
	for _, c := range live {
		argv := c.args[3+c.n:]
		if !compact { // the compact form has no mode and count per call
			args = append(args, argv[0], c.n)
		}
		args = append(args, argv[3:]...)
	}

	reply, err := b.s.evalOne(ctx, args)
	// The reply's first line is the time every call was decided at.
	var at int64
	if err == nil {
		var first string
		first, reply, _ = strings.Cut(reply, "\n")
		var ok bool
		if at, _, ok = nextInt(first); !ok || at < 0 {
			err = fmt.Errorf("batch reply starts with %q, not the time", first)
		}
	}
	if err != nil {
		for _, c := range live {
			c.set("", -1, err)
		}
		return
	}
	for i, c := range live {
		line, rest, _ := strings.Cut(reply, "\n")
		reply = rest
		switch {
		case line == "":
			c.set("", -1, fmt.Errorf("batch reply has no line for call %d of %d", i+1, len(live)))
		case line[0] == '!':
			c.set("", -1, errors.New(line[1:]))
		default:
			c.set(line, at, nil)
		}
	}
}

// set records the call's outcome; flush then wakes its caller.
func (c *batchCall) set(reply string, at int64, err error) {
	c.reply, c.at, c.err = reply, at, err
}
