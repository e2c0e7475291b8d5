package llm

import (
	"math/rand/v2"
	"net/http"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/rampmeter/ratelimit"
)

// refFields is the provider fields' formatting before they shared one
// allocation (issue 10): the reference for TestProviderFieldsMatchReference.
func refFields(h http.Header, res ratelimit.Result, anthropic bool) {
	units := []ratelimit.Unit{ratelimit.Requests, ratelimit.Tokens}
	names := [][3]string{
		{"X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests"},
		{"X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens"},
	}
	if anthropic {
		units = append(units, InputTokens, OutputTokens)
		names = anthropicNames[:]
	}
	for i, u := range units {
		d := mostRestrictive(res.Decisions, u)
		if d == nil {
			continue
		}
		var reset string
		if anthropic {
			at := time.UnixMicro(d.At).Add(d.Reset)
			if r := at.Truncate(time.Second); !r.Equal(at) {
				at = r.Add(time.Second)
			}
			reset = at.UTC().Format(time.RFC3339)
		} else if reset = "0s"; d.Reset > 0 {
			reset = ((d.Reset + time.Millisecond - 1) / time.Millisecond * time.Millisecond).String()
		}
		h[names[i][0]] = []string{strconv.FormatInt(d.Limit.Burst(), 10)}
		h[names[i][1]] = []string{strconv.FormatInt(max(0, d.Remaining), 10)}
		h[names[i][2]] = []string{reset}
	}
}

// The provider fields are those of the reference for random decisions of
// every unit, shadow limits and extreme values included.
func TestProviderFieldsMatchReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(vs ...int64) int64 { return vs[rng.IntN(len(vs))] }
	for range 20000 {
		var ds []ratelimit.Decision
		for range rng.IntN(6) {
			burst := pick(1, 7, 60, 100_000, 1<<51, rng.Int64N(1<<51)+1)
			l := ratelimit.PerMinute(burst).Named("l" + strconv.Itoa(len(ds)))
			switch rng.IntN(5) {
			case 1:
				l = l.WithUnit(ratelimit.Tokens)
			case 2:
				l = l.WithUnit(InputTokens)
			case 3:
				l = l.WithUnit(OutputTokens)
			}
			if rng.IntN(6) == 0 {
				l = l.Shadow()
			}
			if l.Err() != nil {
				continue // a burst too large for a minute
			}
			ds = append(ds, ratelimit.Decision{Limit: &l, Allowed: true,
				Remaining: pick(-5, 0, 1, 59, burst, 1<<62, rng.Int64()),
				Reset:     time.Duration(pick(-1, 0, 1, 999_999, 1_000_000, int64(864*time.Second), int64(100*365*24*time.Hour), rng.Int64N(1<<50))),
				At:        pick(0, 1767323045000000, rng.Int64N(32503680000000000))})
		}
		res := ratelimit.Result{Allowed: true, Decisions: ds}
		for _, anthropic := range []bool{false, true} {
			got, want := http.Header{}, http.Header{}
			if anthropic {
				AnthropicHeaders().WriteHeaders(got, res)
			} else {
				OpenAIHeaders().WriteHeaders(got, res)
			}
			refFields(want, res, anthropic)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("anthropic %v, %+v:\n got %v\nwant %v", anthropic, ds, got, want)
			}
		}
	}
}
