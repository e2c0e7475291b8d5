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
