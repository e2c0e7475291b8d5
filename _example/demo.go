package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/llm"
	"github.com/rampmeter/ratelimit/store/memory"
	"github.com/rampmeter/ratelimit/store/redisstore"
)

const demoInstances = 5

// demoStoreTimeout is the least store deadline of the demo: it checks
// exact figures, and a call that missed a 50ms deadline on a loaded
// machine would let its request through undecided (FailOpen).
const demoStoreTimeout = 5 * time.Second

// frozenClock is the demo's clock. Every instance and store decides by it,
// and it stands still, so no capacity refills while the demo runs and every
// expected figure follows from the limits alone.
type frozenClock struct{ t time.Time }

func (c frozenClock) Now() time.Time { return c.t }

// fleet is demoInstances API instances on loopback, each with its own
// limiter and HTTP server.
type fleet struct {
	urls     []string
	stores   []ratelimit.Store
	limiters []*ratelimit.Limiter
	servers  []*http.Server
}

func startFleet(stores []ratelimit.Store, plans *ratelimit.Plans, o options) (*fleet, error) {
	f := &fleet{stores: stores}
	for _, store := range stores {
		lim, err := newLimiter(store, plans, o)
		if err != nil {
			f.stop()
			return nil, err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			f.stop()
			return nil, err
		}
		srv := &http.Server{Handler: newRouter(lim, nil), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		f.urls = append(f.urls, "http://"+ln.Addr().String()+"/v1/chat/completions")
		f.limiters = append(f.limiters, lim)
		f.servers = append(f.servers, srv)
	}
	return f, nil
}

func (f *fleet) stop() {
	for _, s := range f.servers {
		_ = s.Close()
	}
}

// stats adds up the fleet's counters.
func (f *fleet) stats() ratelimit.Stats {
	var t ratelimit.Stats
	for _, l := range f.limiters {
		s := l.Stats()
		t.Allowed += s.Allowed
		t.Limited += s.Limited
		t.TooLarge += s.TooLarge
		t.Bypassed += s.Bypassed
		t.StoreErrors += s.StoreErrors
		t.Settled += s.Settled
		t.Released += s.Released
		t.PlanErrors += s.PlanErrors
	}
	return t
}

// demoRequest is one call the demo sends.
type demoRequest struct {
	key      string // API key ("" sends none)
	body     string
	instance int
}

// outcome is what came back.
type outcome struct {
	req        demoRequest
	status     int
	reserved   int64 // X-Demo-Reserved-Tokens: what the limiter reserved
	tokens     int64 // usage.total_tokens of a 200 response
	retryAfter string
	budgetRes  int64  // X-Demo-Reserved-Budget: micro-dollars reserved
	cost       int64  // the price of a 200 response's usage, micro-dollars
	message    string // the error message of a 402
}

// chatBody is a request body; a stream asks for the usage chunk, from
// which sendOne reads the tokens used.
func chatBody(model string, contentBytes int, maxTokens int64, stream bool) string {
	req := chatRequest{
		Model:     model,
		Messages:  []chatMessage{{Role: "user", Content: strings.Repeat("x", contentBytes)}},
		MaxTokens: &maxTokens,
		Stream:    stream,
	}
	if stream {
		req.StreamOptions = &streamOptions{IncludeUsage: true}
	}
	b, _ := json.Marshal(req)
	return string(b)
}

// send fires reqs at the fleet from concurrent clients over real HTTP.
func send(client *http.Client, f *fleet, reqs []demoRequest, clients int) []outcome {
	out := make([]outcome, len(reqs))
	work := make(chan int)
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for i := range work {
				out[i] = sendOne(client, f.urls[reqs[i].instance], reqs[i])
			}
		})
	}
	for i := range reqs {
		work <- i
	}
	close(work)
	wg.Wait()
	return out
}

func sendOne(client *http.Client, url string, r demoRequest) outcome {
	o := outcome{req: r}
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(r.body))
	if err != nil {
		return o
	}
	if r.key != "" {
		req.Header.Set("Authorization", "Bearer "+r.key)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return o
	}
	defer resp.Body.Close()
	o.status = resp.StatusCode
	o.retryAfter = resp.Header.Get("Retry-After")
	o.reserved, _ = strconv.ParseInt(resp.Header.Get("X-Demo-Reserved-Tokens"), 10, 64)
	o.budgetRes, _ = strconv.ParseInt(resp.Header.Get("X-Demo-Reserved-Budget"), 10, 64)
	if resp.StatusCode == http.StatusPaymentRequired {
		var e struct{ Error struct{ Message string } }
		_ = json.NewDecoder(resp.Body).Decode(&e)
		o.message = e.Error.Message
	}
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return o
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		// The usage arrives in the last data chunk before [DONE].
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if u, ok := llm.ParseOpenAIUsage([]byte(strings.TrimPrefix(sc.Text(), "data: "))); ok {
				o.tokens = u.Total()
				o.cost = priceOf(r.body, u)
			}
		}
		return o
	}
	var body struct{ Usage usage }
	if json.NewDecoder(resp.Body).Decode(&body) == nil {
		o.tokens = body.Usage.TotalTokens
		o.cost = priceOf(r.body, llm.Usage{Input: body.Usage.PromptTokens, Output: body.Usage.CompletionTokens})
	}
	return o
}

// priceOf is the price of usage u of the model a request body names.
func priceOf(body string, u llm.Usage) int64 {
	var req struct{ Model string }
	_ = json.Unmarshal([]byte(body), &req)
	c, _ := prices.Cost(req.Model, u)
	return c
}

// keyPlan is the traffic one API key sends and what the limits must make
// of it, derived from the limits alone (the clock stands still).
type keyPlan struct {
	key          string
	plan         string // "free", "pro", or unknown
	what         string
	model        string
	sent         int
	contentBytes int
	maxTokens    int64

	rpm, tpd       int64 // the plan's limits
	estimate       int64 // the estimate of each call
	reserve        int64 // what each admitted call reserves (clamped)
	usage          int64 // what each successful call uses
	wantOK         int   // 200s
	wantLimited    int   // 429s: the per-minute rate
	wantForbidden  int   // 403s: the daily quota
	wantBadKey     int   // 401s: a key of no known plan
	wantTooLarge   int   // 413s
	wantFailed     int   // 502s: the model failed, the reservation released
	wantReserved   int64 // tokens reserved at admission, in total
	wantTokens     int64 // tokens charged after settlement
	wantReqRemain  int64 // the store's requests left for the key
	wantTokRemain  int64 // the store's tokens left for the key
	wantRetryAfter string

	// The monthly budget, in micro-dollars (the clock stands still, so
	// within one month).
	budget          int64
	costEstimate    int64  // the price of each call's token estimate
	costReserve     int64  // what each admitted call reserves (clamped)
	costUsage       int64  // the price of what each successful call uses
	wantPayment     int    // 402s: the monthly budget
	wantBudgetRes   int64  // micro-dollars reserved at admission, in total
	wantCost        int64  // micro-dollars charged after settlement
	wantBudgetLeft  int64  // the store's micro-dollars left for the key
	wantNextMonthIn int64  // seconds until the budget's next month begins
	wantMessage     string // the OpenAI error message of its 402s
}

// keyPlans derives every key's figures from the limits; now is the demo's
// (frozen) clock, monthEnd the start of the next month of the budgets.
func keyPlans(o options, now, monthEnd time.Time) []keyPlan {
	mk := func(key, what, model string, sent, contentBytes int, maxTokens int64) keyPlan {
		p := keyPlan{key: key, plan: planOf(key), what: what, model: model, sent: sent, contentBytes: contentBytes, maxTokens: maxTokens}
		switch p.plan {
		case "free":
			p.rpm, p.tpd, p.budget = o.rpm, o.tpd, o.budget
		case "pro":
			p.rpm, p.tpd, p.budget = o.proRPM, o.proTPD, o.proBudget
		default:
			p.wantBadKey = sent // no known plan: an invalid API key, nothing charged
			return p
		}
		prompt := int64(contentBytes+3) / 4
		p.estimate = prompt + maxTokens
		p.reserve = min(p.estimate, max(1, p.tpd/2)) // WithReserveClamp(0.5)
		p.usage = prompt + min(maxTokens, maxCompletion)
		price, _ := prices.Price(model)
		cost := func(in, out int64) int64 { return ceilDiv(in*price.Input+out*price.Output, 1_000_000) }
		p.costEstimate = cost(prompt, maxTokens)
		p.costReserve = min(p.costEstimate, max(1, p.budget/2)) // WithReserveClamp(0.5)
		p.costUsage = cost(prompt, min(maxTokens, maxCompletion))
		p.wantNextMonthIn = int64(monthEnd.Sub(now) / time.Second)
		switch {
		case p.estimate > p.tpd:
			// Can never fit: 413, nothing charged on either limit.
			p.wantTooLarge = sent
		default:
			// The clock stands still: a key gets at most rpm requests,
			// and at most as many as its reservations fit into tpd
			// (reserved before earlier calls settle). The scenarios are
			// chosen so that this count is exact: either rpm binds far
			// from tpd, or every call uses its whole estimate.
			admitted := min(sent, int(p.rpm), int(p.tpd/p.reserve), int(p.budget/p.costReserve))
			p.wantLimited = sent - admitted
			if int(p.budget/p.costReserve) < min(sent, int(p.rpm), int(p.tpd/p.reserve)) {
				// Refused by the monthly budget (every such call uses its
				// whole estimate): 402 until the next month begins.
				p.wantPayment, p.wantLimited = p.wantLimited, 0
				p.wantRetryAfter = strconv.FormatInt(p.wantNextMonthIn, 10)
				used := int64(admitted) * p.costReserve
				p.wantMessage = fmt.Sprintf(`You exceeded your quota for "budget" on usd-micros per calendar month in %v: `+
					`Limit %d, Used %d, Requested %d. The quota resets at %s. Please try again in %v.`,
					monthEnd.Location(), p.budget, used, p.costReserve, monthEnd.Format(time.RFC3339),
					time.Duration(p.wantNextMonthIn)*time.Second)
			} else if int(p.tpd/p.reserve) < min(sent, int(p.rpm)) {
				// Refused by the daily quota: 403 (WithQuotaExhaustedStatus).
				p.wantForbidden, p.wantLimited = p.wantLimited, 0
				// The missing tokens refill at tpd per 24h.
				missing := p.reserve - (p.tpd - int64(admitted)*p.usage)
				p.wantRetryAfter = strconv.FormatInt(ceilDiv(missing*86_400, p.tpd), 10)
			} else if p.wantLimited > 0 {
				// One request refills in 60s/rpm.
				p.wantRetryAfter = strconv.FormatInt(ceilDiv(60, p.rpm), 10)
			}
			p.wantReserved = int64(admitted) * p.reserve
			p.wantBudgetRes = int64(admitted) * p.costReserve
			if model == failModel {
				p.wantFailed = admitted // released: nothing charged
			} else {
				p.wantOK = admitted
				p.wantTokens = int64(admitted) * p.usage
				p.wantCost = int64(admitted) * p.costUsage
			}
			p.wantReqRemain = p.rpm - int64(admitted)
		}
		p.wantTokRemain = p.tpd - p.wantTokens
		p.wantBudgetLeft = p.budget - p.wantCost
		if p.wantTooLarge > 0 {
			p.wantReqRemain = p.rpm
		}
		return p
	}
	return []keyPlan{
		mk("sk-free-alice", "small calls: the per-minute rate stops them (429)", "demo", int(5*o.rpm), 40, 100),
		mk("sk-free-bob", "the same", "demo", int(5*o.rpm), 40, 100),
		mk("sk-free-carol", "the same", "demo", int(5*o.rpm), 40, 100),
		mk("sk-free-dave", "large prompts: the daily token quota stops them (403)", "demo", 20, 40_000, 50),
		mk("sk-free-erin", "prompts larger than the daily quota: never admitted (413)", "demo", 3, int(4*o.tpd+400), 50),
		mk("sk-free-ivan", "max_tokens of 80% of the daily quota: half the quota reserved, the rest refunded", "demo", 1, 40, o.tpd*8/10),
		mk("sk-free-gina", "calls to a model that fails (502): each reservation given back", failModel, int(min(10, o.rpm)), 40, 100),
		mk("sk-pro-judy", "the burst of sk-free-alice on the pro plan: all admitted", "demo", int(5*o.rpm), 40, 100),
		mk("sk-trial-hank", "a key of no known plan: invalid API key (401)", "demo", 2, 40, 100),
		mk("sk-free-kim", "calls to an expensive model: the monthly budget stops them (402)", "demo-large", 10, 4000, 50),
	}
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

func runDemo(w io.Writer, o options) error {
	plans, err := newPlans(o)
	if err != nil {
		return err
	}
	o.storeTimeout = max(o.storeTimeout, demoStoreTimeout)
	client, mini, stopRedis, err := newRedisClient(o.redisURL)
	if err != nil {
		return err
	}
	defer stopRedis()
	clock := frozenClock{t: time.Now().UTC().Truncate(time.Second)}
	if mini != nil {
		mini.SetTime(clock.t) // miniredis answers TIME with this instant
	}
	var salt [4]byte
	_, _ = rand.Read(salt[:])
	prefix := "rampmeter-demo:" + hex.EncodeToString(salt[:]) + ":"
	// The frozen clock runs behind a real server's, which expires keys by
	// its own clock: keep keys past their frozen-clock expiry (a kept key
	// decides exactly like a fresh one, so no figure changes), or a slow
	// machine could see a server forget a key between two of its requests.
	shared, err := redisstore.New(client, redisstore.WithPrefix(prefix), redisstore.WithClock(clock.Now),
		redisstore.WithExpiryMargin(10*time.Minute))
	if err != nil {
		return err
	}
	if err := pingStore(shared); err != nil {
		return err
	}
	where := "an embedded miniredis (the same Lua script as on Redis)"
	if o.redisURL != "" {
		where = o.redisURL
	}
	fmt.Fprintf(w, "rampmeter demo: %d instances of an OpenAI-style API share one store: %s.\n", demoInstances, where)
	fmt.Fprintf(w, "The API key's prefix picks its plan: sk-free-… %d requests/min and %d tokens/day, sk-pro-… %d requests/min\n",
		o.rpm, o.tpd, o.proRPM)
	fmt.Fprintf(w, "and %d tokens/day; any other key is an invalid API key (401). Each plan also has a monthly budget ($%.2f and\n", o.proTPD, float64(o.budget)/1e6)
	fmt.Fprintf(w, "$%.2f per calendar month in America/New_York, 402 when spent) and a cap of %d and %d calls in flight per key.\n",
		float64(o.proBudget)/1e6, o.concurrent, o.proConc)
	fmt.Fprintf(w, "Tokens are estimated from the body and reserved (at most half the daily quota) before the model runs, then\n")
	fmt.Fprintf(w, "settled to what it used. The clock stands still, so every figure below follows from the limits alone, and is checked.\n\n")

	httpClient := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer httpClient.CloseIdleConnections()

	sharedStores := make([]ratelimit.Store, demoInstances)
	for i := range sharedStores {
		sharedStores[i] = shared
	}
	f, err := startFleet(sharedStores, plans, o)
	if err != nil {
		return err
	}
	defer f.stop()

	monthEnd, err := budgetMonthEnd(plans, clock.t)
	if err != nil {
		return err
	}
	ps := keyPlans(o, clock.t, monthEnd)
	outs, left := runTraffic(httpClient, f, ps, plans)
	fmt.Fprintf(w, "== %d instances sharing one store: every key's calls, spread over the instances ==\n", demoInstances)
	ok := reportShared(w, ps, outs, left, f)

	// The fleet's counters, against the plans.
	var want ratelimit.Stats
	for _, p := range ps {
		want.Allowed += uint64(p.wantOK + p.wantFailed)
		want.Limited += uint64(p.wantLimited + p.wantForbidden + p.wantPayment)
		want.PlanErrors += uint64(p.wantBadKey)
		want.TooLarge += uint64(p.wantTooLarge)
		want.Released += uint64(p.wantFailed)
		// One Adjust each: the call's slot on the concurrency cap comes
		// back, with its tokens settled in the same call.
		want.Settled += uint64(p.wantOK)
	}
	want.Settled += want.Released
	got := f.stats()
	statsOK := got == want
	fmt.Fprintf(w, "The limiters' counters (Stats), all instances: allowed %d, limited %d (429, 402 and 403), too large %d, invalid key %d,\n"+
		"released %d, settled %d, let through unlimited %d, store errors %d",
		got.Allowed, got.Limited, got.TooLarge, got.PlanErrors, got.Released, got.Settled, got.Bypassed, got.StoreErrors)
	if statsOK {
		fmt.Fprintln(w, ": as expected.")
	} else {
		fmt.Fprintf(w, "\n  MISMATCH: want %+v\n", want)
		ok = false
	}

	// Bad input gets a clear 4xx and keeps nothing: a request the limiter
	// cannot key or estimate is never charged, and a request the handler
	// refuses (400: {} names no model) gets its token reservation back.
	bad := send(httpClient, f, []demoRequest{
		{key: "", body: chatBody("demo", 10, 10, false)},
		{key: "sk-free-frank", body: `{"model":"demo","messages":[`},
		{key: "sk-free-grace", body: `{}`},
	}, 1)
	_, graceTokens := peekKey(shared, plans, "sk-free-grace")
	fmt.Fprintf(w, "Bad input: no API key → %d (want 401); malformed JSON → %d (want 400); {} without a model → %d (want 400),\n"+
		"  its %d reserved tokens given back: %d tokens left (want %d).\n\n",
		bad[0].status, bad[1].status, bad[2].status, defaultMaxTokens, graceTokens, o.tpd)
	if bad[0].status != http.StatusUnauthorized || bad[1].status != http.StatusBadRequest ||
		bad[2].status != http.StatusBadRequest || graceTokens != o.tpd {
		ok = false
	}

	if !checkConcurrency(w, httpClient, f, ps, plans, o) {
		ok = false
	}

	// The same traffic against a memory store in each instance: each
	// enforces the limit on its own share of the calls, so the fleet
	// admits up to demoInstances times the limit.
	localStores := make([]ratelimit.Store, demoInstances)
	for i := range localStores {
		m, err := memory.New(memory.WithClock(clock.Now))
		if err != nil {
			return err
		}
		defer m.Close()
		localStores[i] = m
	}
	lf, err := startFleet(localStores, plans, o)
	if err != nil {
		return err
	}
	defer lf.stop()
	localOuts, _ := runTraffic(httpClient, lf, ps[:3], plans)
	fmt.Fprintf(w, "== For comparison: the first three keys again, with a memory store in each instance ==\n")
	fmt.Fprintf(w, "Each instance counts only the calls it serves, so a key gets its per-minute limit from each of the %d.\n", demoInstances)
	reportLocal(w, ps[:3], localOuts, lf)
	sharedOK, localOK := countOK(outs, "sk-free-alice"), countOK(localOuts, "sk-free-alice")
	fmt.Fprintf(w, "sk-free-alice got %d calls through with the shared store and %d with a store per instance: %.1f× its %d per minute.\n\n",
		sharedOK, localOK, float64(localOK)/float64(o.rpm), o.rpm)

	if !ok {
		return fmt.Errorf("the %d instances sharing one store did not hold every limit exactly (see MISMATCH above)", demoInstances)
	}
	fmt.Fprintf(w, "PASS: the %d instances sharing one store held every limit exactly.\n", demoInstances)
	return nil
}

// runTraffic sends every key's calls at once, each key from 8 concurrent
// clients spreading its calls round-robin over the instances (every third
// small call streams), and reads what the store holds for each key as soon
// as its calls are answered (first instance's store). Reading at once
// matters on a real Redis: a key expires after its time-to-full in wall
// time, which the demo's frozen clock does not see pass.
func runTraffic(client *http.Client, f *fleet, ps []keyPlan, plans *ratelimit.Plans) ([]outcome, map[string][3]int64) {
	var mu sync.Mutex
	var outs []outcome
	left := map[string][3]int64{}
	var wg sync.WaitGroup
	for k, p := range ps {
		wg.Go(func() {
			reqs := make([]demoRequest, p.sent)
			for i := range reqs {
				reqs[i] = demoRequest{
					key:      p.key,
					body:     chatBody(p.model, p.contentBytes, p.maxTokens, p.contentBytes < 1000 && i%3 == 2),
					instance: (k + i) % demoInstances,
				}
			}
			out := send(client, f, reqs, 8)
			r, t := peekKey(f.stores[0], plans, p.key)
			b := peekBudget(f.stores[0], plans, p.key)
			mu.Lock()
			outs = append(outs, out...)
			left[p.key] = [3]int64{r, t, b}
			mu.Unlock()
		})
	}
	wg.Wait()
	return outs, left
}

func countOK(outs []outcome, key string) int {
	n := 0
	for _, o := range outs {
		if o.req.key == key && o.status == http.StatusOK {
			n++
		}
	}
	return n
}

// peekKey returns what the store itself holds for key on its plan's
// limits (a Take of cost 0 charges nothing), or -1s for an unknown plan.
func peekKey(store ratelimit.Store, plans *ratelimit.Plans, key string) (requests, tokens int64) {
	set, err := plans.Lookup(planOf(key), "")
	if err != nil {
		return -1, -1
	}
	limits := set.Limits()
	reqs := []ratelimit.Request{{Key: key, Limit: &limits[0]}, {Key: key, Limit: &limits[1]}}
	out := make([]ratelimit.Decision, 2)
	if store.Take(context.Background(), reqs, out) != nil {
		return -1, -1
	}
	return out[0].Remaining, out[1].Remaining
}

// budgetLimitOf returns the "budget" limit of key's plan, or nil.
func budgetLimitOf(plans *ratelimit.Plans, key string) *ratelimit.Limit {
	set, err := plans.Lookup(planOf(key), "")
	if err != nil {
		return nil
	}
	limits := set.Limits()
	for i := range limits {
		if limits[i].Name() == "budget" {
			return &limits[i]
		}
	}
	return nil
}

// budgetMonthEnd returns when the budgets' month holding now ends: the
// next 1st, 00:00 in their zone.
func budgetMonthEnd(plans *ratelimit.Plans, now time.Time) (time.Time, error) {
	l := budgetLimitOf(plans, "sk-free-x")
	if l == nil {
		return time.Time{}, fmt.Errorf("the free plan has no budget")
	}
	_, end := l.WindowAt(now)
	return end, nil
}

// peekBudget returns the micro-dollars the store holds for key's budget,
// or -1.
func peekBudget(store ratelimit.Store, plans *ratelimit.Plans, key string) int64 {
	l := budgetLimitOf(plans, key)
	if l == nil {
		return -1
	}
	out := make([]ratelimit.Decision, 1)
	if store.Take(context.Background(), []ratelimit.Request{{Key: key, Limit: l}}, out) != nil {
		return -1
	}
	return out[0].Remaining
}

// statusCounts counts outcomes by status.
type statusCounts struct {
	sent, ok, rate, payment, quota, tooLarge, badKey, failed, other int
	tokens                                                          int64 // charged: usage of 200s
	reserved                                                        int64
	cost, budgetRes                                                 int64 // micro-dollars charged, reserved
	message                                                         string
}

func (c *statusCounts) add(o outcome) {
	c.sent++
	c.reserved += o.reserved
	c.budgetRes += o.budgetRes
	switch o.status {
	case http.StatusOK:
		c.ok++
		c.tokens += o.tokens
		c.cost += o.cost
	case http.StatusTooManyRequests:
		c.rate++
	case http.StatusPaymentRequired:
		c.payment++
		c.message = o.message
	case http.StatusForbidden:
		c.quota++
	case http.StatusRequestEntityTooLarge:
		c.tooLarge++
	case http.StatusUnauthorized:
		c.badKey++
	case http.StatusBadGateway:
		c.failed++
	default:
		c.other++
	}
}

// The two header rows of a table of statusCounts columns: the status, and
// what it means here.
const (
	statusHeader  = "sent\t200\t429\t402\t403\t413\t401\t502\tother\t"
	meaningHeader = "\tok\tper-minute\tbudget\tdaily quota\tnever fits\tbad key\tmodel down\t\t"
)

func (c *statusCounts) cells() string {
	return fmt.Sprintf("%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t", c.sent, c.ok, c.rate, c.payment, c.quota, c.tooLarge, c.badKey, c.failed, c.other)
}

// reportShared prints the shared fleet's tables, per key and per instance,
// compares every figure with the plan, including the store's own remaining
// quota (left, per key), and returns whether all matched.
func reportShared(w io.Writer, ps []keyPlan, outs []outcome, left map[string][3]int64, f *fleet) bool {
	fmt.Fprintf(w, "The keys, each sending its calls at once, round-robin over the %d instances:\n", len(f.urls))
	for _, p := range ps {
		fmt.Fprintf(w, "  %-14s %3d %s\n", p.key, p.sent, p.what)
	}
	fmt.Fprintln(w)

	type row struct {
		c                            statusCounts
		retry, verdict               string
		reqLeft, tokLeft, budgetLeft int64
	}
	rows := make([]row, len(ps))
	allOK := true
	for i, p := range ps {
		r := &rows[i]
		for _, o := range outs {
			if o.req.key != p.key {
				continue
			}
			r.c.add(o)
			if o.retryAfter != "" && (o.status == http.StatusTooManyRequests || o.status == http.StatusForbidden || o.status == http.StatusPaymentRequired) {
				r.retry = o.retryAfter
			}
		}
		c := &r.c
		r.reqLeft, r.tokLeft, r.budgetLeft = left[p.key][0], left[p.key][1], left[p.key][2]
		match := c.ok == p.wantOK && c.rate == p.wantLimited && c.payment == p.wantPayment && c.quota == p.wantForbidden &&
			c.tooLarge == p.wantTooLarge && c.badKey == p.wantBadKey && c.failed == p.wantFailed && c.other == 0 &&
			c.tokens == p.wantTokens && c.reserved == p.wantReserved && r.retry == p.wantRetryAfter &&
			c.cost == p.wantCost && c.budgetRes == p.wantBudgetRes && c.message == p.wantMessage
		if p.rpm > 0 {
			match = match && r.reqLeft == p.wantReqRemain && r.tokLeft == p.wantTokRemain && r.budgetLeft == p.wantBudgetLeft
		}
		r.verdict = "yes"
		if !match {
			r.verdict = fmt.Sprintf("MISMATCH (want 200=%d 429=%d 402=%d 403=%d 413=%d 401=%d 502=%d reserved=%d charged=%d "+
				"budget reserved=%d charged=%d left=%d/%d/%d Retry-After=%q)",
				p.wantOK, p.wantLimited, p.wantPayment, p.wantForbidden, p.wantTooLarge, p.wantBadKey, p.wantFailed, p.wantReserved, p.wantTokens,
				p.wantBudgetRes, p.wantCost, p.wantReqRemain, p.wantTokRemain, p.wantBudgetLeft, p.wantRetryAfter)
			allOK = false
		}
		if r.retry == "" {
			r.retry = "-"
		} else {
			r.retry += "s"
		}
	}

	fmt.Fprintln(w, "What each key got, by status (Retry-After: the wait the last 429, 402 or 403 announced):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "key\t"+statusHeader+"Retry-After\t")
	fmt.Fprintln(tw, "\t"+meaningHeader+"\t")
	for i, p := range ps {
		fmt.Fprintf(tw, "%s\t%s%s\t\n", p.key, rows[i].c.cells(), rows[i].retry)
	}
	_ = tw.Flush()
	fmt.Fprintln(w)

	fmt.Fprintln(w, "Tokens reserved when each call was admitted, charged for what the model used, refunded the difference;")
	fmt.Fprintln(w, "then what the shared store holds for the key. Expected: every figure of both tables is the one derived")
	fmt.Fprintln(w, "from the limits.")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "key\ttokens\ttokens\ttokens\tbudget µ$\tbudget µ$\trequests\ttokens\tbudget µ$\t\t")
	fmt.Fprintln(tw, "\treserved\tcharged\trefunded\treserved\tcharged\tleft\tleft\tleft\texpected?\t")
	show := func(n int64) string {
		if n < 0 {
			return "-"
		}
		return strconv.FormatInt(n, 10)
	}
	for i, p := range ps {
		r := &rows[i]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t\n", p.key, r.c.reserved, r.c.tokens, r.c.reserved-r.c.tokens,
			r.c.budgetRes, r.c.cost, show(r.reqLeft), show(r.tokLeft), show(r.budgetLeft), r.verdict)
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	for i, p := range ps {
		if m := rows[i].c.message; m != "" {
			fmt.Fprintf(w, "A 402 of %s says: %s\n\n", p.key, m)
		}
	}
	fmt.Fprintln(w, "What each instance answered:")
	reportInstances(w, ps, outs, f)
	return allOK
}

// reportInstances prints what each instance answered.
func reportInstances(w io.Writer, ps []keyPlan, outs []outcome, f *fleet) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "instance\t"+statusHeader+"tokens\t")
	fmt.Fprintln(tw, "\t"+meaningHeader+"charged\t")
	for i := range f.urls {
		var c statusCounts
		for _, o := range outs {
			if o.req.instance == i && planned(ps, o.req.key) {
				c.add(o)
			}
		}
		fmt.Fprintf(tw, "%d\t%s%d\t\n", i+1, c.cells(), c.tokens)
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
}

// reportLocal prints the comparison fleet's tables: per key, how many calls
// got through against the key's per-minute limit; per instance, what it
// answered.
func reportLocal(w io.Writer, ps []keyPlan, outs []outcome, f *fleet) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "key\tsent\tgot through\trefused\tlimit\tgot through\t")
	fmt.Fprintln(tw, "\t\t(200)\t(429)\tper minute\t÷ limit\t")
	for _, p := range ps {
		var c statusCounts
		for _, o := range outs {
			if o.req.key == p.key {
				c.add(o)
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%.1f×\t\n", p.key, c.sent, c.ok, c.rate, p.rpm, float64(c.ok)/float64(p.rpm))
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(w, "What each instance answered:")
	reportInstances(w, ps, outs, f)
}

func planned(ps []keyPlan, key string) bool {
	for _, p := range ps {
		if p.key == key {
			return true
		}
	}
	return false
}

// peekSlots returns how many slots key holds on its plan's concurrency
// cap, straight from store (a Take of cost 0), or -1.
func peekSlots(store ratelimit.Store, plans *ratelimit.Plans, key string) int64 {
	set, err := plans.Lookup(planOf(key), "")
	if err != nil {
		return -1
	}
	for _, l := range set.Limits() {
		if l.Algorithm() == ratelimit.Concurrency {
			out := make([]ratelimit.Decision, 1)
			if store.Take(context.Background(), []ratelimit.Request{{Key: key, Limit: &l}}, out) != nil {
				return -1
			}
			return l.Quota() - out[0].Remaining
		}
	}
	return -1
}

// checkConcurrency shows the concurrency cap: after the traffic above no
// key holds a slot; then sk-free-kate sends as many slow calls as its cap
// at once, spread over the instances, and, while they are all held, 3 more:
// the cap, shared by the fleet, refuses those with 429 and Retry-After: 1.
// Once the slow calls are let go, every slot is back and a new call passes.
func checkConcurrency(w io.Writer, client *http.Client, f *fleet, ps []keyPlan, plans *ratelimit.Plans, o options) bool {
	ok := true
	held := int64(0)
	for _, p := range ps {
		if n := peekSlots(f.stores[0], plans, p.key); n > 0 {
			held += n
		}
	}
	fmt.Fprintf(w, "== The concurrency cap: at most %d calls of a free key in flight at once, across the instances ==\n", o.concurrent)
	fmt.Fprintf(w, "After all the calls above, slots still held by their keys: %d (want 0).\n", held)
	ok = ok && held == 0

	const key, extra = "sk-free-kate", 3
	n := int(o.concurrent)
	if o.rpm < int64(n+extra+1) {
		fmt.Fprintf(w, "  skipped: -rpm %d is below the %d calls this check sends\n\n", o.rpm, n+extra+1)
		return ok
	}
	reqs := make([]demoRequest, n)
	for i := range reqs {
		reqs[i] = demoRequest{key: key, body: chatBody(slowModel, 40, 10, i%2 == 1), instance: i % demoInstances}
	}
	done := make(chan []outcome, 1)
	go func() { done <- send(client, f, reqs, n) }()
	deadline := time.Now().Add(20 * time.Second)
	for slowHold.held.Load() < int64(n) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	inFlight := slowHold.held.Load()
	heldSlots := peekSlots(f.stores[0], plans, key)
	more := make([]demoRequest, extra)
	for i := range more {
		more[i] = demoRequest{key: key, body: chatBody("demo", 40, 10, false), instance: i % demoInstances}
	}
	refused := send(client, f, more, 1)
	close(slowHold.gate)
	slow := <-done
	after := sendOne(client, f.urls[0], demoRequest{key: key, body: chatBody("demo", 40, 10, false)})
	left := peekSlots(f.stores[0], plans, key)

	okSlow := 0
	for _, r := range slow {
		if r.status == http.StatusOK {
			okSlow++
		}
	}
	okRefused := 0
	for _, r := range refused {
		if r.status == http.StatusTooManyRequests && r.retryAfter == "1" {
			okRefused++
		}
	}
	fmt.Fprintf(w, "%s sends %d slow calls at once: %d held by the model, %d slots held in the store (want %d and %d).\n",
		key, n, inFlight, heldSlots, n, n)
	fmt.Fprintf(w, "While they are held, %d more calls: %d refused with 429 and Retry-After: 1 (want %d).\n", extra, okRefused, extra)
	fmt.Fprintf(w, "Let go, the slow calls answer: %d × 200 (want %d); then a new call: %d (want 200); slots held: %d (want 0).\n\n",
		okSlow, n, after.status, left)
	return ok && inFlight == int64(n) && heldSlots == int64(n) && okRefused == extra && okSlow == n &&
		after.status == http.StatusOK && left == 0
}
