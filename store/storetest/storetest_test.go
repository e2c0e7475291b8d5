package storetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/rampmeter/ratelimit"
)

// modelStore is the model behind a mutex: the reference implementation the
// suite's expected values must agree with.
type modelStore struct {
	mu  sync.Mutex
	m   model
	now time.Time
}

func (s *modelStore) call(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision, take bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := ratelimit.CheckRequests(reqs, out, take); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var ds []ratelimit.Decision
	if take {
		ds = s.m.take(reqs, ratelimit.Micros(s.now))
	} else {
		ds = s.m.adjust(reqs, ratelimit.Micros(s.now))
	}
	copy(out, ds)
	return nil
}

func (s *modelStore) Take(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	return s.call(ctx, reqs, out, true)
}

func (s *modelStore) Adjust(ctx context.Context, reqs []ratelimit.Request, out []ratelimit.Decision) error {
	return s.call(ctx, reqs, out, false)
}

func (s *modelStore) setTime(t time.Time) {
	s.mu.Lock()
	s.now = t
	s.mu.Unlock()
}

// TestModel runs the suite against the model, so that a wrong expected
// value in a scenario shows up here rather than as a store bug.
func TestModel(t *testing.T) {
	Run(t, func(t *testing.T) Harness {
		s := &modelStore{m: model{states: map[modelKey]ratelimit.State{}}}
		return Harness{Store: s, SetTime: s.setTime}
	})
}
