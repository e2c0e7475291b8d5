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

func (f fixedOne) TakeOne(context.Context, ratelimit.Request) (ratelimit.Decision, error) {
	return f.d, nil
}

// TestTakeOneDecisionCopiedWhole: Limiter.callOne copies TakeOne's
// Decision field by field (see its comment), so a field added to Decision
// must be added there too. Every field of the store's Decision is set to
// a value of its own (by reflection, so a new field is set too) and must
// reach the Result unchanged.
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
	if len(res.Decisions) != 1 || !reflect.DeepEqual(res.Decisions[0], want) {
		t.Fatalf("Decisions %+v, want [%+v]: Limiter.callOne drops a field", res.Decisions, want)
	}
}
