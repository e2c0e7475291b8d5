// Command compare measures rampmeter side by side with the Go rate limiters
// people use instead (x/time/rate, sethvargo/go-limiter, go-chi/httprate and
// httprate-redis, ulule/limiter, throttled, go-redis/redis_rate,
// mennanov/limiters, tollbooth) and with physical references (a trivial
// EVALSHA, PING and INCR through the same go-redis client, redis-benchmark,
// a bare HTTP handler), all in one run, and prints a Markdown report of
// medians and ratios. From the repository root:
//
//	go -C benchmarks run ./cmd/compare                                # every section (about 25 min on 2 cores)
//	go -C benchmarks run ./cmd/compare -sections decision,middleware  # in-memory only (about 7 min)
//	go -C benchmarks run ./cmd/compare -only 'rampmeter|sethvargo'    # fewer rows, faster
//	go -C benchmarks run ./cmd/compare -report results/20260101T120000Z  # print a stored run's report again
//
// Sections (-sections, comma-separated; default all):
//
//	decision    BenchmarkDecision: one in-memory decision, serial 1 key, parallel 10k keys, parallel 1 hot key
//	middleware  BenchmarkMiddleware: a trivial handler behind each middleware, serial 1 IP, parallel 10k IPs
//	refbench    redis-benchmark against the same redis-server: PING, INCR, EVALSHA (the C client's ceiling)
//	redis       cmd/redisbench: decisions/s of each Redis adapter at -redis-configs
//	wrk         cmd/httpserve behind each middleware on loopback, loaded by wrk
//
// Go benchmarks run -count times, interleaved (one -test.count=1 pass over
// every adapter per repetition), so the machine's slow drift spreads over
// all rows instead of hitting one. The command builds the test binary and
// the two helper commands into the results directory, starts its own
// redis-server (--save "" --appendonly no) on a free loopback port (or
// -redis-port) and its own HTTP server on another, and stops both by PID,
// also when interrupted. It needs redis-server and redis-benchmark
// (Debian: redis-server, redis-tools) for the Redis sections and wrk for
// the wrk section, and says so before measuring anything.
//
// Everything it measured stays in the results directory (-out; default
// results/<UTC time> under benchmarks/): the raw go test -bench output,
// redis.jsonl, wrk and redis-benchmark output, env.txt, adapters.json and
// report.md, the report it prints.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"
)

// allSections in the order they run.
var allSections = []string{"decision", "middleware", "refbench", "redis", "wrk"}

type options struct {
	sections     map[string]bool
	only         *regexp.Regexp // nil: every adapter
	count        int
	benchtime    string
	redisPort    int
	redisDur     time.Duration
	redisConfigs []redisConfig
	redisReps    int
	refbenchReqs int
	httpPort     int
	wrkDur       time.Duration
	wrkReps      int
	wrkThreads   int
	wrkConns     int
	// wrkCPUs splits the CPUs between the server and wrk ("SERVER:WRK",
	// taskset CPU lists), or is empty for no pinning.
	wrkServerCPUs, wrkLoadCPUs string
	out                        string
}

type redisConfig struct{ c, keys int }

func main() {
	var (
		sections = flag.String("sections", strings.Join(allSections, ","), "comma-separated sections to run: "+strings.Join(allSections, ", "))
		only     = flag.String("only", "", "regular expression: measure only the adapters and middlewares whose names match (the references -- bare, ref-* -- always run)")
		count    = flag.Int("count", 3, "repetitions of the Go benchmarks (interleaved); 6 or more gives benchstat confidence intervals")
		bench    = flag.String("benchtime", "1s", "go test -benchtime of each benchmark in each repetition")
		rport    = flag.Int("redis-port", 0, "loopback port of the redis-server the command starts (0: a free one)")
		rdur     = flag.Duration("redis-dur", 3*time.Second, "measured time of each Redis adapter in each configuration (plus 1 s of warm-up)")
		rcfg     = flag.String("redis-configs", "1:10000,64:10000,64:1", "comma-separated Redis load configurations, concurrency:distinct-keys")
		rreps    = flag.Int("redis-reps", 3, "repetitions of the Redis load, each over every configuration and adapter (medians across them)")
		rbreq    = flag.Int("refbench-requests", 200000, "requests of each redis-benchmark test at c=64 (a quarter of it at c=1)")
		hport    = flag.Int("http-port", 0, "loopback port of the HTTP server for wrk (0: a free one)")
		wdur     = flag.Duration("wrk-dur", 10*time.Second, "measured time of each wrk run (after a 2 s warm-up)")
		wreps    = flag.Int("wrk-reps", 3, "repetitions of the wrk runs (interleaved over the middlewares)")
		wthreads = flag.Int("wrk-threads", 2, "wrk -t")
		wconns   = flag.Int("wrk-conns", 50, "wrk -c")
		wcpus    = flag.String("wrk-cpus", "", "SERVER:WRK, two taskset CPU lists (e.g. 0:1): run the HTTP server and wrk on separate CPUs, so that the load generator does not take the measured server's CPU time and the server's throughput is its cost per request; empty: no pinning")
		out      = flag.String("out", "", "results directory (default results/<UTC time>)")
		report   = flag.String("report", "", "print the report of an earlier results directory and exit")
		vs       = flag.String("vs", "", "with -report: an earlier results directory to print the drift of medians against")
	)
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: go -C benchmarks run ./cmd/compare [flags]\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 {
		fatalf(2, "unexpected arguments %q", flag.Args())
	}
	if *report != "" {
		if err := printReport(os.Stdout, *report); err != nil {
			fatalf(1, "%v", err)
		}
		if *vs != "" {
			compareRuns(os.Stdout, *vs, *report)
		}
		return
	}
	o := options{count: *count, benchtime: *bench, redisPort: *rport, redisDur: *rdur, redisReps: *rreps,
		refbenchReqs: *rbreq, httpPort: *hport, wrkDur: *wdur, wrkReps: *wreps, wrkThreads: *wthreads, wrkConns: *wconns, out: *out}
	var err error
	if o.sections, err = parseSections(*sections); err != nil {
		fatalf(2, "%v", err)
	}
	if *only != "" {
		if o.only, err = regexp.Compile(*only); err != nil {
			fatalf(2, "-only: %v", err)
		}
	}
	if o.wrkServerCPUs, o.wrkLoadCPUs, err = parseCPUSplit(*wcpus); err != nil {
		fatalf(2, "-wrk-cpus: %v", err)
	}
	if o.redisConfigs, err = parseRedisConfigs(*rcfg); err != nil {
		fatalf(2, "-redis-configs: %v", err)
	}
	switch {
	case o.count < 1, o.redisReps < 1, o.wrkReps < 1:
		fatalf(2, "-count, -redis-reps and -wrk-reps must be at least 1")
	case o.redisDur <= 0, o.wrkDur <= 0:
		fatalf(2, "-redis-dur and -wrk-dur must be positive")
	case o.wrkThreads < 1, o.wrkConns < o.wrkThreads:
		fatalf(2, "-wrk-threads must be at least 1 and -wrk-conns at least -wrk-threads")
	case o.refbenchReqs < 4:
		fatalf(2, "-refbench-requests must be at least 4")
	}

	if err := checkModuleDir(); err != nil {
		fatalf(2, "%v", err)
	}
	tools, err := checkTools(o.sections, o.wrkServerCPUs != "")
	if err != nil {
		fatalf(2, "%v", err)
	}
	if o.out == "" {
		o.out = filepath.Join("results", time.Now().UTC().Format("20060102T150405Z"))
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		fatalf(1, "%v", err)
	}

	// Children are stopped by PID when the run ends, fails or is
	// interrupted (and, on Linux, when this process dies: Pdeathsig).
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r := &run{opts: o, tools: tools}
	err = r.all(ctx)
	r.stopAll()
	if err != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			fatalf(130, "interrupted; partial results in %s", o.out)
		}
		fatalf(1, "%v (partial results in %s)", err, o.out)
	}
}

func parseSections(s string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if !slices.Contains(allSections, f) {
			return nil, fmt.Errorf("-sections: unknown section %q (the sections are %s)", f, strings.Join(allSections, ", "))
		}
		out[f] = true
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-sections: no section given (the sections are %s)", strings.Join(allSections, ", "))
	}
	return out, nil
}

func parseRedisConfigs(s string) ([]redisConfig, error) {
	var out []redisConfig
	for _, f := range strings.Split(s, ",") {
		var c redisConfig
		if n, err := fmt.Sscanf(strings.TrimSpace(f), "%d:%d", &c.c, &c.keys); err != nil || n != 2 || c.c < 1 || c.keys < 1 {
			return nil, fmt.Errorf("%q is not concurrency:keys with both at least 1", f)
		}
		out = append(out, c)
	}
	return out, nil
}

// cpuList matches a taskset CPU list: numbers and ranges, comma-separated.
var cpuList = regexp.MustCompile(`^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$`)

// parseCPUSplit parses -wrk-cpus: empty, or SERVER:WRK with two taskset
// CPU lists.
func parseCPUSplit(s string) (server, load string, err error) {
	if s == "" {
		return "", "", nil
	}
	server, load, ok := strings.Cut(s, ":")
	if !ok || !cpuList.MatchString(server) || !cpuList.MatchString(load) {
		return "", "", fmt.Errorf("%q is not SERVER:WRK with two CPU lists such as 0:1 or 0-2:3", s)
	}
	return server, load, nil
}

// checkModuleDir makes sure the command runs in the benchmarks module,
// where it builds the benchmarks and writes results/.
func checkModuleDir() error {
	b, err := os.ReadFile("go.mod")
	if err == nil && strings.HasPrefix(string(b), "module github.com/rampmeter/ratelimit/benchmarks\n") {
		return nil
	}
	return errors.New("run me in the benchmarks module: from the repository root, go -C benchmarks run ./cmd/compare")
}

func fatalf(code int, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "compare: "+format+"\n", args...)
	os.Exit(code)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%s] "+format+"\n", append([]any{time.Now().UTC().Format("15:04:05")}, args...)...)
}
