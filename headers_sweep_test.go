package ratelimit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/stretchr/testify/require"

	"github.com/rampmeter/ratelimit"
)

// TestHeaderFieldsParseAsRFC9651 runs every RateLimit and RateLimit-Policy
// value of a randomised sweep through an independent RFC 9651 parser
// (github.com/dunglas/httpsfv) and checks the members and parameters it
// finds against the configuration: limits of every algorithm, quotas,
// periods (whole seconds, milliseconds, odd microseconds), bursts, units,
// shadow limits with and without HeadersShadow, costs (some too large),
// times, and one Limiter or two nested ones. Each value must also
// re-serialise byte for byte.
func TestHeaderFieldsParseAsRFC9651(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if testing.Short() {
		seed = 1
	}
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	checked, codes := 0, map[int]int{}
	for round := range 300 {
		checked += sweepRound(t, rng, round, codes)
		if t.Failed() {
			t.Fatalf("round %d failed (seed %d)", round, seed)
		}
	}
	t.Logf("%d field values checked; statuses %v", checked, codes)
	// 12 responses per round, most with fields; every outcome occurs.
	require.Greater(t, checked, 300*12)
	require.Greater(t, codes[http.StatusOK], 300)
	require.Greater(t, codes[http.StatusTooManyRequests], 300)
	require.Greater(t, codes[http.StatusRequestEntityTooLarge], 30)
}

// sweepLimiter is one Limiter of a sweep round and what it should say.
type sweepLimiter struct {
	lim    *ratelimit.Limiter
	name   string
	limits []ratelimit.Limit
	shadow bool // HeadersShadow
}

func sweepRound(t *testing.T, rng *rand.Rand, round int, codes map[int]int) (checked int) {
	clock := newClock()
	store := newStore(t, clock.Now)
	nested := rng.IntN(2) == 0
	var chain []*sweepLimiter
	names := []string{"ip", "key"}
	if rng.IntN(3) == 0 {
		names[1] = "" // an unnamed inner Limiter beside a named outer one
	}
	for i := range 1 + btoi(nested) {
		sl := &sweepLimiter{name: names[i], shadow: rng.IntN(2) == 0}
		if !nested {
			sl.name = []string{"", "api"}[rng.IntN(2)]
		}
		for j := range 1 + rng.IntN(3) {
			sl.limits = append(sl.limits, sweepLimit(rng, fmt.Sprintf("l%d", j)))
		}
		style := ratelimit.HeadersIETF
		if sl.shadow {
			style |= ratelimit.HeadersShadow
		}
		opts := []ratelimit.Option{ratelimit.WithLimits(sl.limits...), ratelimit.WithHeaders(style),
			ratelimit.WithStoreTimeout(time.Minute)}
		if sl.name != "" {
			opts = append(opts, ratelimit.WithName(sl.name))
		}
		if i == 0 && nested {
			opts = append(opts, ratelimit.WithKey(ratelimit.KeyByIP()))
		}
		lim, err := ratelimit.New(store, opts...)
		require.NoError(t, err, "round %d: %v", round, sl.limits)
		ratelimit.SetSleep(lim, func(context.Context, time.Duration) error { return nil })
		sl.lim = lim
		chain = append(chain, sl)
	}
	var h http.Handler = okHandler
	for i := len(chain) - 1; i >= 0; i-- {
		h = chain[i].lim.Handler(h)
	}
	for range 12 {
		clock.Advance(time.Duration(rng.Int64N(int64(3 * time.Second))))
		tokens := rng.Int64N(4) // the cost of the limits with a cost function
		if rng.IntN(5) == 0 {
			tokens = rng.Int64N(40) // often more than a small burst: 413
		}
		w := serve(h, request("POST", "/", "k", tokens))
		codes[w.Code]++
		checked += checkSweepResponse(t, chain, w.Code, w.Header(), w.Body.Bytes())
	}
	return checked
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// sweepLimit returns a random valid limit named name.
func sweepLimit(rng *rand.Rand, name string) ratelimit.Limit {
	periods := []time.Duration{time.Second, 10 * time.Second, time.Minute, time.Hour, 24 * time.Hour,
		500 * time.Millisecond, 1500 * time.Millisecond, 700 * time.Millisecond, 61500 * time.Millisecond,
		999_999 * time.Microsecond, 100*time.Second + time.Microsecond}
	algos := []ratelimit.Algorithm{ratelimit.TokenBucket, ratelimit.GCRA, ratelimit.LeakyBucket,
		ratelimit.SlidingWindow, ratelimit.SlidingLog, ratelimit.FixedWindow}
	units := []ratelimit.Unit{ratelimit.Requests, ratelimit.Tokens, "content-bytes", "concurrent-requests", "credits", "GPU-seconds (A100)"}
	for {
		quota := []int64{1, 2, 3, 7, 10, 60, 1000, 100_000}[rng.IntN(8)]
		l := ratelimit.Every(quota, periods[rng.IntN(len(periods))]).Named(name).WithAlgorithm(algos[rng.IntN(len(algos))])
		if rng.IntN(2) == 0 && l.Algorithm() <= ratelimit.LeakyBucket {
			l = l.WithBurst(max(1, quota*int64(1+rng.IntN(3))/2))
		}
		if rng.IntN(2) == 0 {
			l = l.CostFrom(estimateTokens) // the request's X-Tokens
		}
		l = l.WithUnit(units[rng.IntN(len(units))]).Named(name)
		if rng.IntN(4) == 0 {
			l = l.Shadow()
		}
		if l.Err() == nil {
			return l
		}
	}
}

// checkSweepResponse checks the fields of one response of chain and
// returns how many field values it checked.
func checkSweepResponse(t *testing.T, chain []*sweepLimiter, code int, h http.Header, body []byte) int {
	t.Helper()
	// Which Limiters wrote fields: all up to the first that refused.
	ran := len(chain)
	var violated []string
	if code != http.StatusOK {
		var p struct {
			Violated []string `json:"violated-policies"`
		}
		require.NoError(t, json.Unmarshal(body, &p), "%s", body)
		violated = p.Violated
		require.NotEmpty(t, violated, "a refusal names its limits: %s", body)
		for i, sl := range chain {
			if strings.HasPrefix(violated[0], memberPrefix(sl.name)) && (sl.name != "" || !strings.Contains(violated[0], "/")) {
				ran = i + 1
				break
			}
		}
	}
	type member struct {
		name  string
		limit ratelimit.Limit
	}
	var want []member
	for _, sl := range chain[:ran] {
		for _, l := range sl.limits {
			if !l.IsShadow() || sl.shadow {
				want = append(want, member{memberPrefix(sl.name) + l.Name(), l})
			}
		}
	}
	policy, rl := h.Values("RateLimit-Policy"), h.Values("RateLimit")
	if len(want) == 0 {
		require.Empty(t, policy)
		require.Empty(t, rl)
		return 0
	}
	require.Len(t, policy, 1, "one field line")
	require.Len(t, rl, 1, "one field line")
	pl, err := httpsfv.UnmarshalList(policy)
	require.NoError(t, err, "RateLimit-Policy: %s", policy[0])
	ll, err := httpsfv.UnmarshalList(rl)
	require.NoError(t, err, "RateLimit: %s", rl[0])
	for v, l := range map[string]httpsfv.List{policy[0]: pl, rl[0]: ll} {
		again, err := httpsfv.Marshal(l)
		require.NoError(t, err)
		require.Equal(t, v, again, "re-serialised")
	}
	require.Len(t, pl, len(want), "policy members of %s", policy[0])
	require.Len(t, ll, len(want), "RateLimit members of %s", rl[0])

	retryAfter := int64(-1)
	if v := h.Get("Retry-After"); v != "" {
		retryAfter, err = strconv.ParseInt(v, 10, 64)
		require.NoError(t, err)
		require.GreaterOrEqual(t, retryAfter, int64(1))
	}
	seen := map[string]bool{}
	longestViolated := int64(-1)
	for i, m := range want {
		pi, ok := pl[i].(httpsfv.Item)
		require.True(t, ok, "an Item, not an Inner List")
		ri, ok := ll[i].(httpsfv.Item)
		require.True(t, ok)
		require.Equal(t, m.name, pi.Value, "policy member %d of %s", i, policy[0])
		require.Equal(t, m.name, ri.Value, "RateLimit member %d of %s", i, rl[0])
		require.False(t, seen[m.name], "duplicate member %q", m.name)
		seen[m.name] = true

		// RateLimit-Policy: q, w, and the unit, burst and shadow.
		l := m.limit
		params := map[string]any{}
		for _, k := range pi.Params.Names() {
			params[k], _ = pi.Params.Get(k)
		}
		q, qok := params["q"].(int64)
		w, wok := params["w"].(int64)
		require.True(t, qok && wok && q >= 1 && w >= 1, "q and w of %s", policy[0])
		if l.Period()%time.Second == 0 {
			require.Equal(t, [2]int64{l.Quota(), int64(l.Period() / time.Second)}, [2]int64{q, w})
		} else {
			// Whole seconds, the same rate or less: q/w ≤ Quota/Period,
			// and more than one unit less would be a rounding beyond q's.
			require.GreaterOrEqual(t, time.Duration(w)*time.Second, l.Period())
			require.LessOrEqual(t, q*int64(l.Period()), l.Quota()*w*int64(time.Second))
			require.Greater(t, (q+1)*int64(l.Period()), l.Quota()*w*int64(time.Second))
		}
		delete(params, "q")
		delete(params, "w")
		switch u := string(l.Unit()); u {
		case "requests":
		case "content-bytes", "concurrent-requests":
			require.Equal(t, u, params["qu"])
			delete(params, "qu")
		default:
			require.Equal(t, u, params["rampmeter-unit"])
			delete(params, "rampmeter-unit")
		}
		if l.Burst() != q {
			require.Equal(t, l.Burst(), params["rampmeter-burst"])
			delete(params, "rampmeter-burst")
		}
		if l.IsShadow() {
			require.Equal(t, true, params["rampmeter-shadow"])
			delete(params, "rampmeter-shadow")
		}
		require.Empty(t, params, "unexpected parameters in %s", policy[0])

		// RateLimit: 0 ≤ r ≤ q, t ≥ 0, nothing else.
		params = map[string]any{}
		for _, k := range ri.Params.Names() {
			params[k], _ = ri.Params.Get(k)
		}
		r, rok := params["r"].(int64)
		tt, tok := params["t"].(int64)
		require.True(t, rok && tok, "r and t of %s", rl[0])
		require.True(t, r >= 0 && r <= q, "r=%d, q=%d", r, q)
		require.GreaterOrEqual(t, tt, int64(0))
		require.Len(t, params, 2, "unexpected parameters in %s", rl[0])
		for _, v := range violated {
			if v == m.name {
				longestViolated = max(longestViolated, tt)
			}
		}
	}
	if code == http.StatusTooManyRequests {
		// The binding limit, the refusing one with the longest wait, has
		// t = Retry-After; no refusing limit waits longer.
		require.Equal(t, retryAfter, longestViolated, "Retry-After %d, RateLimit %s, violated %v", retryAfter, rl[0], violated)
	}
	return 2 * ran
}

// memberPrefix is the prefix of a Limiter's member names.
func memberPrefix(name string) string {
	if name == "" {
		return ""
	}
	return name + "/"
}
