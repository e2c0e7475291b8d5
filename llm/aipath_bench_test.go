package llm_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/llm"
	"github.com/rampmeter/ratelimit/store/memory"
)

// BenchmarkAIPathRatio serves the benchmarks module's three middleware
// rows in one goroutine, interleaved in rounds of 32 requests (each row's
// ns/op the median of its rounds) so that a noisy machine slows all three
// alike: bare (the trivial handler),
// one (rampmeter: KeyByIP, one limit, IETF headers) and ai (rampmeter-ai:
// KeyByIP, requests + tokens estimated from the 249-byte chat body,
// WithReserveClamp(0.5), IETF + OpenAI headers, OpenAI errors, the
// handler reporting 100 tokens). It reports each row's ns/op and ratio,
// the AI path's added time over the one-limit path's (goal 2 of issue 10
// asks for at most 2).
func BenchmarkAIPathRatio(b *testing.B) {
	rows := aiPathRows(b)
	per := serveInterleaved(b, []aiRow{rows[0], rows[1], rows[len(rows)-1]})
	b.ReportMetric((per[2]-per[0])/(per[1]-per[0]), "ratio")
}

// BenchmarkAIPathSteps serves, interleaved as BenchmarkAIPathRatio does,
// the steps from the one-limit path to the AI path, each adding one piece
// to the one before, so that each piece's cost is the difference of two
// rows' ns/op:
//
//	one       KeyByIP, one limit, IETF headers (rampmeter)
//	two       + a second limit, cost 1 (store TakeTwo, two IETF items)
//	cost      + a cost function on the second limit (a constant 356):
//	          the request's state, its copy of the request, the status
//	          watch, the reservation clamp
//	report    + the handler's ReportUsage(100): settlement (one Adjust)
//	openai    + llm.OpenAIHeaders (six fields) and OpenAI errors
//	ai        + llm.EstimateOpenAITokens reading the 249-byte body
//	          instead of the constant (rampmeter-ai)
func BenchmarkAIPathSteps(b *testing.B) {
	serveInterleaved(b, aiPathRows(b))
}

// aiRow is a handler and the request it serves.
type aiRow struct {
	name string
	h    http.Handler
	r    *http.Request
	body []byte // rewound into r.Body before each request, when set
}

// aiPathRows returns bare and the rows of BenchmarkAIPathSteps.
func aiPathRows(b *testing.B) []aiRow {
	body := []byte(benchChatBody)
	if len(body) != 249 {
		b.Fatalf("the chat body is %d bytes, want 249", len(body))
	}
	trivial := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(okBody)
	})
	report := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if err := ratelimit.ReportUsage(r.Context(), "tokens", 100); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	newLim := func(opts ...ratelimit.Option) *ratelimit.Limiter {
		s, err := memory.New()
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		l, err := ratelimit.New(s, append([]ratelimit.Option{ratelimit.WithKey(ratelimit.KeyByIP())}, opts...)...)
		if err != nil {
			b.Fatal(err)
		}
		return l
	}
	requests := ratelimit.Every(1_000_000_000, time.Minute).Named("requests")
	tokens := ratelimit.Every(1_000_000_000_000, time.Minute).Named("tokens")
	constant := func(*http.Request) (int64, error) { return 356, nil }
	get := httptest.NewRequest(http.MethodGet, "/api/items", nil)
	get.RemoteAddr = "198.18.0.1:40000"
	post := httptest.NewRequest(http.MethodPost, "/api/items", nil)
	post.Header.Set("Content-Type", "application/json")
	post.ContentLength = int64(len(body))
	post.RemoteAddr = "198.18.0.1:40000"
	ai := []ratelimit.Option{ratelimit.WithReserveClamp(0.5)}
	openai := []ratelimit.Option{ratelimit.WithReserveClamp(0.5),
		ratelimit.WithHeaders(ratelimit.HeadersIETF, llm.OpenAIHeaders()), ratelimit.WithErrorFormat(llm.OpenAIErrors())}
	return []aiRow{
		{"bare", trivial, get, nil},
		{"one", newLim(ratelimit.WithLimits(requests)).Handler(trivial), get, nil},
		{"two", newLim(ratelimit.WithLimits(requests, tokens)).Handler(trivial), get, nil},
		{"cost", newLim(append(ai, ratelimit.WithLimits(requests, tokens.CostFrom(constant)))...).Handler(trivial), get, nil},
		{"report", newLim(append(ai, ratelimit.WithLimits(requests, tokens.CostFrom(constant)))...).Handler(report(trivial)), get, nil},
		{"openai", newLim(append(openai, ratelimit.WithLimits(requests, tokens.CostFrom(constant)))...).Handler(report(trivial)), get, nil},
		{"ai", newLim(append(openai, ratelimit.WithLimits(requests, tokens.CostFrom(llm.EstimateOpenAITokens())))...).Handler(report(trivial)), post, body},
	}
}

// serveInterleaved serves the rows in rounds of 32 requests each, one row
// after the other, and reports and returns each row's ns/op: the median
// over its rounds, so that a round the scheduler or the collector
// interrupts (other processes share the machine) does not count.
func serveInterleaved(b *testing.B, rows []aiRow) []float64 {
	rb := &rewindBody{}
	w := &discardWriter{h: make(http.Header, 8)}
	serveOne := func(row *aiRow) {
		if row.body != nil {
			rb.Reset(row.body)
			row.r.Body = rb
		}
		clear(w.h)
		w.code = 0
		row.h.ServeHTTP(w, row.r)
		if w.code != http.StatusOK {
			b.Fatalf("%s: status %d", row.name, w.code)
		}
	}
	for i := range rows {
		serveOne(&rows[i])
	}
	const round = 32
	rounds := make([][]time.Duration, len(rows))
	n := 0
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if n%round == 0 {
			for i := range rows {
				start := time.Now()
				for range round {
					serveOne(&rows[i])
				}
				rounds[i] = append(rounds[i], time.Since(start))
			}
		}
		n++
	}
	b.StopTimer()
	per := make([]float64, len(rows))
	for i := range rows {
		slices.Sort(rounds[i])
		per[i] = float64(rounds[i][len(rounds[i])/2]) / round
		b.ReportMetric(per[i], rows[i].name+"-ns/op")
	}
	return per
}

var okBody = []byte("ok\n")

// rewindBody is a request body read again from the start without
// allocating.
type rewindBody struct{ bytes.Reader }

func (*rewindBody) Close() error { return nil }
