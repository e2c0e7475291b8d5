package ratelimit_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/memory"
)

// fixedOne is a SingleTaker (and Store) whose TakeOne answers d.
type fixedOne struct {
	ratelimit.Store
	d ratelimit.Decision
}

func (f fixedOne) TakeOne(_ context.Context, r ratelimit.Request) (allowed bool, remaining int64, reset, retryAfter, delay time.Duration, at int64, err error) {
	d := &f.d
	return d.Allowed, d.Remaining, d.Reset, d.RetryAfter, d.Delay, d.At, nil
}

// fixedPair is a PairTaker (and Store) whose TakeTwo answers a and b.
type fixedPair struct {
	ratelimit.Store
	a, b ratelimit.Decision
}

func (f fixedPair) TakeTwo(context.Context, string, *ratelimit.Limit, int64, string, *ratelimit.Limit, int64) (allowedA bool, remainingA int64, resetA, retryAfterA, delayA time.Duration, atA int64, allowedB bool, remainingB int64, resetB, retryAfterB, delayB time.Duration, atB int64, err error) {
	a, b := &f.a, &f.b
	return a.Allowed, a.Remaining, a.Reset, a.RetryAfter, a.Delay, a.At,
		b.Allowed, b.Remaining, b.Reset, b.RetryAfter, b.Delay, b.At, nil
}

// distinctDecision returns a Decision whose every field is set to a value
// of its own, offset by k (by reflection, so that a new field is set
// too), with Limit l.
func distinctDecision(t *testing.T, l *ratelimit.Limit, k int64) ratelimit.Decision {
	t.Helper()
	var d ratelimit.Decision
	v := reflect.ValueOf(&d).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Int64:
			f.SetInt((int64(i+1) + 10*k) * int64(time.Second))
		case reflect.Pointer:
			f.Set(reflect.ValueOf(l))
		default:
			t.Fatalf("Decision.%s is a %s: teach this test (and check SingleTaker, PairTaker and Limiter.callOne, callTwo carry it)", v.Type().Field(i).Name, f.Kind())
		}
	}
	return d
}

// TestTakeTwoDecisionsCopiedWhole: TakeTwo returns two Decisions' fields
// one by one and Limiter.callTwo puts them back together (see
// PairTaker), so a field added to Decision must be added to both. Each
// field has a value of its own in each Decision and must reach the Result
// unchanged, in its Decision; the Limits are the Limiter's.
func TestTakeTwoDecisionsCopiedWhole(t *testing.T) {
	mem, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	la, lb := ratelimit.PerMinute(60).Named("a"), ratelimit.PerMinute(70).Named("b")
	want := []ratelimit.Decision{distinctDecision(t, &la, 1), distinctDecision(t, &lb, 2)}
	l, err := ratelimit.New(fixedPair{Store: mem, a: want[0], b: want[1]}, ratelimit.WithLimits(la, lb))
	if err != nil {
		t.Fatal(err)
	}
	res, err := l.Take(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Decisions) != 2 {
		t.Fatalf("%d decisions, want 2", len(res.Decisions))
	}
	for i, got := range res.Decisions {
		if got.Limit == nil || got.Limit.ID() != want[i].Limit.ID() {
			t.Fatalf("Decision %d: Limit %v, want the Limiter's %v", i, got.Limit, want[i].Limit)
		}
		got.Limit = want[i].Limit
		if !reflect.DeepEqual(got, want[i]) {
			t.Fatalf("Decision %d %+v, want %+v: TakeTwo or Limiter.callTwo drops a field", i, got, want[i])
		}
	}
}

// TestTakeOneDecisionCopiedWhole: TakeOne returns a Decision's fields one
// by one and Limiter.callOne puts them back together (see SingleTaker),
// so a field added to Decision must be added to both. Every field of the
// store's Decision is set to a value of its own (by reflection, so a new
// field is set too) and must reach the Result unchanged; the Limit is the
// request's, the Limiter's own copy of the limit.
func TestTakeOneDecisionCopiedWhole(t *testing.T) {
	mem, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	lim := ratelimit.PerMinute(60)
	var want ratelimit.Decision
	v := reflect.ValueOf(&want).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Int64:
			f.SetInt(int64(i+1) * int64(time.Second))
		case reflect.Pointer:
			f.Set(reflect.ValueOf(&lim))
		default:
			t.Fatalf("Decision.%s is a %s: teach this test (and check Limiter.callOne copies it)", v.Type().Field(i).Name, f.Kind())
		}
	}
	l, err := ratelimit.New(fixedOne{Store: mem, d: want}, ratelimit.WithLimits(lim))
	if err != nil {
		t.Fatal(err)
	}
	res, err := l.Take(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Decisions) != 1 {
		t.Fatalf("%d decisions, want 1", len(res.Decisions))
	}
	got := res.Decisions[0]
	if got.Limit == nil || got.Limit.ID() != lim.ID() {
		t.Fatalf("Decision.Limit %v, want the Limiter's limit %v", got.Limit, lim)
	}
	got.Limit = want.Limit
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Decision %+v, want %+v: TakeOne or Limiter.callOne drops a field", got, want)
	}
}
