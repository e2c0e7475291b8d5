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
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/rampmeter/ratelimit"
	"github.com/rampmeter/ratelimit/store/memory"
	redisstore "github.com/rampmeter/ratelimit/store/redis"
)

const demoInstances = 5

// frozenClock is the demo's clock. Every instance and store decides by it,
// and it stands still, so no capacity refills while the demo runs and every
// expected figure follows from the limits alone.
type frozenClock struct{ t time.Time }

func (c frozenClock) Now() time.Time { return c.t }

// fleet is demoInstances API instances on loopback, each with its own
// limiter and HTTP server.
type fleet struct {
	urls     []string
	limiters []*ratelimit.Limiter
	servers  []*http.Server
}

func startFleet(stores []ratelimit.Store, o options) (*fleet, error) {
	f := &fleet{}
	for _, store := range stores {
		lim, err := newLimiter(store, o)
		if err != nil {
			f.stop()
			return nil, err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			f.stop()
			return nil, err
		}
		srv := &http.Server{Handler: newRouter(lim), ReadHeaderTimeout: 5 * time.Second}
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
	tokens     int64 // usage.total_tokens of a 200 response
	retryAfter string
}

func chatBody(contentBytes int, maxTokens int64, stream bool) string {
	b, _ := json.Marshal(chatRequest{
		Model:     "demo",
		Messages:  []chatMessage{{Role: "user", Content: strings.Repeat("x", contentBytes)}},
		MaxTokens: &maxTokens,
		Stream:    stream,
	})
	return string(b)
}

// send fires reqs at the fleet from 32 concurrent clients over real HTTP.
func send(client *http.Client, f *fleet, reqs []demoRequest) []outcome {
	out := make([]outcome, len(reqs))
	work := make(chan int)
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				out[i] = sendOne(client, f.urls[reqs[i].instance], reqs[i])
			}
		}()
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
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return o
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		// The usage arrives in the last data chunk before [DONE].
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := strings.TrimPrefix(sc.Text(), "data: ")
			var chunk struct {
				Usage *usage `json:"usage"`
			}
			if json.Unmarshal([]byte(line), &chunk) == nil && chunk.Usage != nil {
				o.tokens = chunk.Usage.TotalTokens
			}
		}
		return o
	}
	var body struct{ Usage usage }
	if json.NewDecoder(resp.Body).Decode(&body) == nil {
		o.tokens = body.Usage.TotalTokens
	}
	return o
}

// keyPlan is the traffic one API key sends and what the limits must make
// of it, derived from the limits alone (the clock stands still).
type keyPlan struct {
	key            string
	what           string
	sent           int
	contentBytes   int
	maxTokens      int64
	wantOK         int   // 200s
	wantLimited    int   // 429s
	wantTooLarge   int   // 413s
	wantTokens     int64 // tokens charged after settlement
	wantReserved   int64 // tokens reserved at admission (estimate × admitted)
	wantReqRemain  int64
	wantTokRemain  int64
	usagePerCall   int64
	estimatePerCal int64
}

func plans(o options) []keyPlan {
	mk := func(key, what string, sent, contentBytes int, maxTokens int64) keyPlan {
		p := keyPlan{key: key, what: what, sent: sent, contentBytes: contentBytes, maxTokens: maxTokens}
		prompt := int64(contentBytes+3) / 4
		p.estimatePerCal = prompt + maxTokens
		p.usagePerCall = prompt + min(maxTokens, maxCompletion)
		switch {
		case p.estimatePerCal > o.tpd:
			// Can never fit: 413, nothing charged on either limit.
			p.wantTooLarge = sent
		default:
			// The clock stands still: a key gets at most rpm requests, and
			// at most as many as the reserved estimates fit into tpd
			// (estimates are reserved before earlier calls settle, so this
			// is the conservative count; with usage ≤ estimate, settlement
			// only refunds).
			byTokens := int(o.tpd / p.estimatePerCal)
			p.wantOK = min(sent, int(o.rpm), byTokens)
			p.wantLimited = sent - p.wantOK
		}
		p.wantTokens = int64(p.wantOK) * p.usagePerCall
		p.wantReserved = int64(p.wantOK) * p.estimatePerCal
		p.wantReqRemain = o.rpm - int64(p.wantOK)
		p.wantTokRemain = o.tpd - p.wantTokens
		return p
	}
	return []keyPlan{
		mk("sk-alice", "burst of small calls: rpm binds", int(5*o.rpm), 40, 100),
		mk("sk-bob", "burst of small calls: rpm binds", int(5*o.rpm), 40, 100),
		mk("sk-carol", "burst of small calls: rpm binds", int(5*o.rpm), 40, 100),
		mk("sk-dave", "large prompts: tokens/day binds", 20, 40_000, 50),
		mk("sk-erin", "one prompt larger than tpd: never fits", 3, int(4*o.tpd+400), 50),
	}
}

func runDemo(w io.Writer, o options) error {
	if o.rpm < 1 || o.tpd < 1 {
		return fmt.Errorf("-rpm and -tpd must be at least 1")
	}
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
	shared, err := redisstore.New(client, redisstore.WithPrefix(prefix), redisstore.WithClock(clock.Now))
	if err != nil {
		return err
	}
	where := "embedded miniredis (real Lua path)"
	if o.redisURL != "" {
		where = o.redisURL
	}
	fmt.Fprintf(w, "rampmeter demo: %d instances, %d requests/min + %d tokens/day per API key, stacked and atomic\n", demoInstances, o.rpm, o.tpd)
	fmt.Fprintf(w, "shared store: %s; the clock is frozen so every figure below is exact\n\n", where)

	httpClient := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer httpClient.CloseIdleConnections()

	sharedStores := make([]ratelimit.Store, demoInstances)
	for i := range sharedStores {
		sharedStores[i] = shared
	}
	f, err := startFleet(sharedStores, o)
	if err != nil {
		return err
	}
	defer f.stop()

	ps := plans(o)
	reqs := buildTraffic(ps)
	outs := send(httpClient, f, reqs)
	ok := report(w, "Shared Redis store (the fix)", ps, outs, f, true)

	// Malformed input gets a clear 4xx and charges nothing.
	bad := send(httpClient, f, []demoRequest{
		{key: "", body: chatBody(10, 10, false)},
		{key: "sk-frank", body: `{"model":"demo","messages":[`},
	})
	fmt.Fprintf(w, "no API key → %d (want 401); malformed JSON → %d (want 400)\n\n", bad[0].status, bad[1].status)
	if bad[0].status != http.StatusUnauthorized || bad[1].status != http.StatusBadRequest {
		ok = false
	}

	// The same traffic against per-process memory stores: each instance
	// enforces its own limit, so the fleet admits about 5× the rate.
	localStores := make([]ratelimit.Store, demoInstances)
	for i := range localStores {
		m, err := memory.New(memory.WithClock(clock.Now))
		if err != nil {
			return err
		}
		localStores[i] = m
	}
	lf, err := startFleet(localStores, o)
	if err != nil {
		return err
	}
	defer lf.stop()
	localOuts := send(httpClient, lf, reqs)
	report(w, "For contrast: a memory store per process (the bug)", ps[:3], localOuts, lf, false)
	sharedOK, localOK := countOK(outs, "sk-alice"), countOK(localOuts, "sk-alice")
	fmt.Fprintf(w, "sk-alice admitted: %d with the shared store, %d with per-process stores (%.1f× the intended %d/min)\n\n",
		sharedOK, localOK, float64(localOK)/float64(o.rpm), o.rpm)

	if !ok {
		return fmt.Errorf("the shared-store fleet did not hold every limit exactly (see the table)")
	}
	fmt.Fprintln(w, "PASS: the shared-store fleet held every limit exactly.")
	return nil
}

// buildTraffic interleaves every key's calls and spreads them round-robin
// over the instances; every third small call streams.
func buildTraffic(ps []keyPlan) []demoRequest {
	var reqs []demoRequest
	n := 0
	for i := 0; ; i++ {
		added := false
		for _, p := range ps {
			if i >= p.sent {
				continue
			}
			added = true
			reqs = append(reqs, demoRequest{
				key:      p.key,
				body:     chatBody(p.contentBytes, p.maxTokens, p.contentBytes < 1000 && i%3 == 2),
				instance: n % demoInstances,
			})
			n++
		}
		if !added {
			return reqs
		}
	}
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

// report prints the per-key and per-instance tables; with check it compares
// every figure with the plan, including the store's own remaining quota, and
// returns whether all matched.
func report(w io.Writer, title string, ps []keyPlan, outs []outcome, f *fleet, check bool) bool {
	fmt.Fprintf(w, "== %s ==\n", title)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "key\tsent\t200\t429\t413\tother\ttokens reserved\ttokens charged\trefunded\trequests left\ttokens left\tRetry-After\tcheck\t")
	allOK := true
	for _, p := range ps {
		var sent, okN, limited, tooLarge, other int
		var tokens int64
		retry := "-"
		for _, o := range outs {
			if o.req.key != p.key {
				continue
			}
			sent++
			switch o.status {
			case http.StatusOK:
				okN++
				tokens += o.tokens
			case http.StatusTooManyRequests:
				limited++
				retry = o.retryAfter + "s"
			case http.StatusRequestEntityTooLarge:
				tooLarge++
			default:
				other++
			}
		}
		reserved := int64(okN) * p.estimatePerCal
		// Peek (cost 0) at what the store itself holds for this key.
		res, err := f.limiters[0].Take(context.Background(), p.key, 0, 0)
		reqLeft, tokLeft := int64(-1), int64(-1)
		if err == nil && len(res.Decisions) == 2 {
			reqLeft, tokLeft = res.Decisions[0].Remaining, res.Decisions[1].Remaining
		}
		verdict := ""
		if check {
			match := okN == p.wantOK && limited == p.wantLimited && tooLarge == p.wantTooLarge && other == 0 &&
				tokens == p.wantTokens && reqLeft == p.wantReqRemain && tokLeft == p.wantTokRemain
			verdict = "exact"
			if !match {
				verdict = fmt.Sprintf("MISMATCH (want 200=%d 429=%d 413=%d tokens=%d left=%d/%d)",
					p.wantOK, p.wantLimited, p.wantTooLarge, p.wantTokens, p.wantReqRemain, p.wantTokRemain)
				allOK = false
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t\n",
			p.key, sent, okN, limited, tooLarge, other, reserved, tokens, reserved-tokens, reqLeft, tokLeft, retry, verdict)
	}
	_ = tw.Flush()

	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "instance\tsent\t200\t429\t413\ttokens charged\t")
	for i := range f.urls {
		var sent, okN, limited, tooLarge int
		var tokens int64
		for _, o := range outs {
			if o.req.instance != i || !planned(ps, o.req.key) {
				continue
			}
			sent++
			switch o.status {
			case http.StatusOK:
				okN++
				tokens += o.tokens
			case http.StatusTooManyRequests:
				limited++
			case http.StatusRequestEntityTooLarge:
				tooLarge++
			}
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t\n", i+1, sent, okN, limited, tooLarge, tokens)
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	return allOK
}

func planned(ps []keyPlan, key string) bool {
	for _, p := range ps {
		if p.key == key {
			return true
		}
	}
	return false
}
