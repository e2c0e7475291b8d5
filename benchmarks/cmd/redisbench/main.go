// Command redisbench drives Redis-backed deciders (and plain go-redis
// reference operations) at a fixed concurrency for a fixed duration and
// prints one JSON line per run: decisions/s, latency percentiles, round
// trips and Redis commands per decision, client and server CPU per decision.
// cmd/compare runs it against a redis-server of its own.
//
//	redisbench -addr 127.0.0.1:6390 -c 1,64 -keys 10000 -d 5s
//
// Server CPU and commands per decision come from INFO, so they are exact
// only when nothing else uses the server during a run. -flush empties the
// whole server (FLUSHALL) before each run: only for a server of your own.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	_ "github.com/rampmeter/ratelimit/benchmarks/adapters"
	"github.com/rampmeter/ratelimit/benchmarks/decider"
)

type result struct {
	Adapter    string  `json:"adapter"`
	Kind       string  `json:"kind"`
	Module     string  `json:"module"`
	Version    string  `json:"version"`
	C          int     `json:"c"`
	Keys       int     `json:"keys"`
	Pool       int     `json:"pool"`
	Secs       float64 `json:"secs"`
	Ops        int64   `json:"ops"`
	OpsPerSec  float64 `json:"ops_per_s"`
	P50us      float64 `json:"p50_us"`
	P90us      float64 `json:"p90_us"`
	P99us      float64 `json:"p99_us"`
	P999us     float64 `json:"p999_us"`
	MaxUs      float64 `json:"max_us"`
	Errors     int64   `json:"errors"`
	FirstErr   string  `json:"first_err,omitempty"`
	Denied     int64   `json:"denied"`
	RTTPerOp   float64 `json:"rtt_per_op"`        // client round trips (go-redis Process/pipeline calls)
	CmdsPerOp  float64 `json:"redis_cmds_per_op"` // server-side commands (INFO stats)
	ClientCPU  float64 `json:"client_cpu_us_per_op"`
	ServerCPU  float64 `json:"server_cpu_us_per_op"`
	Rep        int     `json:"rep"`
	Go         string  `json:"go"`
	GOMAXPROCS int     `json:"gomaxprocs"`
}

// rttHook counts round trips: one per Process call, one per pipeline/tx.
type rttHook struct{ n atomic.Int64 }

func (h *rttHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *rttHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}
func (h *rttHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n.Add(1); return next(ctx, cmds) }
}

func main() {
	addr := flag.String("addr", "127.0.0.1:6390", "redis address (loopback only)")
	names := flag.String("adapters", "redis,redisref", "comma list of adapter names or kinds (redis, redisref)")
	cs := flag.String("c", "1,64", "comma list of concurrency levels (goroutines)")
	ks := flag.String("keys", "10000", "comma list of distinct-key counts (1 = single hot key)")
	dur := flag.Duration("d", 5*time.Second, "measured duration per run")
	warm := flag.Duration("warmup", time.Second, "unmeasured warm-up per run")
	pool := flag.Int("pool", 0, "go-redis PoolSize (0 = same as concurrency)")
	rep := flag.Int("rep", 0, "repetition number recorded in the output")
	flush := flag.Bool("flush", false, "FLUSHALL before each run (only on a server of your own)")
	list := flag.Bool("list", false, "list adapters and exit")
	flag.Parse()

	specs := selectSpecs(*names)
	if *list {
		for _, s := range specs {
			fmt.Printf("%-28s %-9s %s@%s  %s\n", s.Name, s.Kind, s.Module, decider.ModuleVersion(s.Module), s.Note)
		}
		return
	}
	if host, _, err := net.SplitHostPort(*addr); err != nil || !isLoopback(host) {
		fmt.Fprintln(os.Stderr, "redisbench: refusing a non-loopback address:", *addr)
		os.Exit(2)
	}
	admin := redis.NewClient(&redis.Options{Addr: *addr})
	defer admin.Close()
	ctx := context.Background()
	if err := admin.Ping(ctx).Err(); err != nil {
		fmt.Fprintln(os.Stderr, "redis not reachable:", err)
		os.Exit(1)
	}
	enc := json.NewEncoder(os.Stdout)
	for _, c := range ints(*cs) {
		for _, k := range ints(*ks) {
			for _, s := range specs {
				if *flush {
					admin.FlushAll(ctx)
				}
				r, err := runOne(ctx, admin, *addr, s, c, k, *pool, *warm, *dur)
				if err != nil {
					fmt.Fprintf(os.Stderr, "%s c=%d keys=%d: %v\n", s.Name, c, k, err)
					continue
				}
				r.Rep = *rep
				_ = enc.Encode(r)
				fmt.Fprintf(os.Stderr, "%-26s c=%-3d keys=%-5d %9.0f ops/s  p50=%6.0fus p99=%6.0fus rtt/op=%.2f cmds/op=%.2f err=%d\n",
					r.Adapter, c, k, r.OpsPerSec, r.P50us, r.P99us, r.RTTPerOp, r.CmdsPerOp, r.Errors)
			}
		}
	}
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func selectSpecs(sel string) []decider.Spec {
	var out []decider.Spec
	seen := map[string]bool{}
	for _, tok := range strings.Split(sel, ",") {
		tok = strings.TrimSpace(tok)
		var add []decider.Spec
		switch tok {
		case string(decider.Redis), string(decider.RedisRef), string(decider.Memory):
			add = decider.Specs(decider.Kind(tok))
		default:
			s, ok := decider.Lookup(tok)
			if !ok {
				fmt.Fprintf(os.Stderr, "unknown adapter %q\n", tok)
				os.Exit(2)
			}
			add = []decider.Spec{s}
		}
		for _, s := range add {
			if !seen[s.Name] {
				seen[s.Name] = true
				out = append(out, s)
			}
		}
	}
	return out
}

func ints(s string) []int {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "bad number %q\n", f)
			os.Exit(2)
		}
		out = append(out, n)
	}
	return out
}

func runOne(ctx context.Context, admin *redis.Client, addr string, s decider.Spec, c, nkeys, pool int, warm, dur time.Duration) (*result, error) {
	if pool <= 0 {
		pool = c
	}
	hook := &rttHook{}
	client := redis.NewClient(&redis.Options{Addr: addr, PoolSize: pool, MinIdleConns: pool, MaxIdleConns: pool})
	client.AddHook(hook)
	defer client.Close()
	cfg := decider.HighLimit()
	cfg.Redis = client
	cfg.KeyPrefix = "bench:" + s.Name + ":"
	d, err := s.New(cfg)
	if err != nil {
		return nil, err
	}
	defer decider.Close(d)
	keys := []string{"hot"}
	if nkeys > 1 {
		keys = decider.Keys(nkeys)
	}

	// Warm-up: create every key once (steady state, not first-hit paths),
	// then run unmeasured for the warm-up time (pool filled, scripts loaded).
	prewarm(ctx, d, keys, c)
	load(ctx, d, keys, c, time.Now().Add(warm), nil)

	rtt0 := hook.n.Load()
	cmds0, cpu0 := serverStats(ctx, admin)
	ru0 := rusage()
	lat := make([][]int64, c)
	t0 := time.Now()
	ops, errs, denied, firstErr := load(ctx, d, keys, c, t0.Add(dur), lat)
	elapsed := time.Since(t0).Seconds()
	ru1 := rusage()
	cmds1, cpu1 := serverStats(ctx, admin)
	rtt1 := hook.n.Load()

	all := make([]int64, 0, ops)
	for _, l := range lat {
		all = append(all, l...)
	}
	slices.Sort(all)
	pct := func(p float64) float64 {
		if len(all) == 0 {
			return 0
		}
		i := int(p * float64(len(all)-1))
		return float64(all[i]) / 1e3
	}
	r := &result{
		Adapter: s.Name, Kind: string(s.Kind), Module: s.Module, Version: decider.ModuleVersion(s.Module),
		C: c, Keys: nkeys, Pool: pool, Secs: elapsed, Ops: ops, OpsPerSec: float64(ops) / elapsed,
		P50us: pct(0.50), P90us: pct(0.90), P99us: pct(0.99), P999us: pct(0.999), MaxUs: pct(1),
		Errors: errs, FirstErr: firstErr, Denied: denied,
		Go: runtime.Version(), GOMAXPROCS: runtime.GOMAXPROCS(0),
	}
	if ops > 0 {
		r.RTTPerOp = float64(rtt1-rtt0) / float64(ops)
		r.CmdsPerOp = float64(cmds1-cmds0-2) / float64(ops) // minus the two INFO calls
		r.ClientCPU = (ru1 - ru0).Seconds() * 1e6 / float64(ops)
		r.ServerCPU = (cpu1 - cpu0) * 1e6 / float64(ops)
	}
	return r, nil
}

// load runs c workers until deadline; if lat is non-nil each worker records
// per-decision latency (ns) into lat[i].
func load(ctx context.Context, d decider.Decider, keys []string, c int, deadline time.Time, lat [][]int64) (ops, errs, denied int64, firstErr string) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var tOps, tErr, tDen atomic.Int64
	n := uint64(len(keys))
	for i := 0; i < c; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			w := decider.ForWorker(d)
			rng := uint64(i)*0x9E3779B97F4A7C15 | 1
			var local []int64
			if lat != nil {
				local = make([]int64, 0, 1<<14)
			}
			var o, e, dn int64
			for {
				now := time.Now()
				if !now.Before(deadline) {
					break
				}
				rng ^= rng << 13
				rng ^= rng >> 7
				rng ^= rng << 17
				ok, err := w.Allow(ctx, keys[rng%n])
				if lat != nil {
					local = append(local, int64(time.Since(now)))
				}
				o++
				if err != nil {
					e++
					mu.Lock()
					if firstErr == "" {
						firstErr = err.Error()
					}
					mu.Unlock()
				} else if !ok {
					dn++
				}
			}
			if lat != nil {
				lat[i] = local
			}
			tOps.Add(o)
			tErr.Add(e)
			tDen.Add(dn)
		}(i)
	}
	wg.Wait()
	return tOps.Load(), tErr.Load(), tDen.Load(), firstErr
}

// prewarm calls Allow once per key, spread over c workers.
func prewarm(ctx context.Context, d decider.Decider, keys []string, c int) {
	var wg sync.WaitGroup
	var next atomic.Int64
	for i := 0; i < c; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := decider.ForWorker(d)
			for {
				j := next.Add(1) - 1
				if j >= int64(len(keys)) {
					return
				}
				_, _ = w.Allow(ctx, keys[j])
			}
		}()
	}
	wg.Wait()
}

// serverStats returns total_commands_processed and used CPU seconds of redis-server.
func serverStats(ctx context.Context, admin *redis.Client) (cmds int64, cpu float64) {
	info, err := admin.Info(ctx, "stats", "cpu").Result()
	if err != nil {
		return 0, 0
	}
	var user, sys float64
	for _, line := range strings.Split(info, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch k {
		case "total_commands_processed":
			cmds, _ = strconv.ParseInt(v, 10, 64)
		case "used_cpu_user":
			user, _ = strconv.ParseFloat(v, 64)
		case "used_cpu_sys":
			sys, _ = strconv.ParseFloat(v, 64)
		}
	}
	return cmds, user + sys
}

func rusage() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
