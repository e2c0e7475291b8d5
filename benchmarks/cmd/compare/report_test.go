package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeFixture lays out a results directory as a run writes it, with
// figures chosen so that every median and ratio below is plain arithmetic.
func writeFixture(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	write := func(name, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("env.txt", "date (UTC):   2026-01-01T00:00:00Z\n")
	info := []adapterInfo{
		{Name: "rampmeter-limiter-mem", Kind: "memory", Module: rampmeterMod},
		{Name: "sethvargo-mem", Kind: "memory", Module: "github.com/sethvargo/go-limiter"},
		{Name: "xtime-bare", Kind: "memory", Module: "golang.org/x/time", LowerBound: true, SingleKey: true},
		{Name: "rampmeter-redis", Kind: "redis", Module: rampmeterMod},
		{Name: "redis_rate", Kind: "redis", Module: "github.com/go-redis/redis_rate/v10"},
		{Name: "httprate-redis-counter", Kind: "redis", Module: "github.com/go-chi/httprate-redis", LowerBound: true},
		{Name: "ref-evalsha-trivial", Kind: "redisref", Module: "github.com/redis/go-redis/v9", LowerBound: true},
		{Name: "bare", Kind: "middleware", Reference: true},
		{Name: "rampmeter", Kind: "middleware", Module: rampmeterMod},
		{Name: "sethvargo-httplimit", Kind: "middleware", Module: "github.com/sethvargo/go-limiter"},
		{Name: "handrolled-xtime-map", Kind: "middleware", Module: "golang.org/x/time", Reference: true},
	}
	b, err := json.Marshal(info)
	if err != nil {
		t.Fatal(err)
	}
	write("adapters.json", string(b))
	// Three repetitions each: medians 200 (rampmeter), 100 (sethvargo), 50
	// (xtime-bare, a floor).
	write("decision.txt", `goos: linux
BenchmarkDecision/lib=rampmeter-limiter-mem/case=serial-hot-2   	 1000	       220.0 ns/op	     386 B/op	       6 allocs/op
BenchmarkDecision/lib=sethvargo-mem/case=serial-hot-2           	 1000	       110.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkDecision/lib=xtime-bare/case=serial-hot-2              	 1000	        50.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkNoiseProbe-2   	 1000	       300.0 ns/op
BenchmarkDecision/lib=rampmeter-limiter-mem/case=serial-hot-2   	 1000	       200.0 ns/op	     386 B/op	       6 allocs/op
BenchmarkDecision/lib=sethvargo-mem/case=serial-hot-2           	 1000	        90.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkDecision/lib=xtime-bare/case=serial-hot-2              	 1000	        50.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkDecision/lib=rampmeter-limiter-mem/case=serial-hot-2   	 1000	       180.0 ns/op	     386 B/op	       6 allocs/op
BenchmarkDecision/lib=sethvargo-mem/case=serial-hot-2           	 1000	       100.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkDecision/lib=xtime-bare/case=serial-hot-2              	 1000	        50.0 ns/op	       0 B/op	       0 allocs/op
`)
	// Added over bare (100 ns): rampmeter 400, sethvargo 200, the
	// hand-written floor 50.
	write("middleware.txt", `BenchmarkMiddleware/mw=bare/case=serial-1ip-2                  	 1000	       100.0 ns/op	      16 B/op	       1 allocs/op
BenchmarkMiddleware/mw=rampmeter/case=serial-1ip-2             	 1000	       500.0 ns/op	    1407 B/op	      10 allocs/op
BenchmarkMiddleware/mw=sethvargo-httplimit/case=serial-1ip-2   	 1000	       300.0 ns/op	     200 B/op	      10 allocs/op
BenchmarkMiddleware/mw=handrolled-xtime-map/case=serial-1ip-2  	 1000	       150.0 ns/op	      16 B/op	       1 allocs/op
`)
	write("redis.jsonl", `{"adapter":"rampmeter-redis","kind":"redis","c":1,"keys":10000,"ops_per_s":9000,"ops":9000,"server_cpu_us_per_op":20,"redis_cmds_per_op":4,"rtt_per_op":1}
{"adapter":"redis_rate","kind":"redis","c":1,"keys":10000,"ops_per_s":9500,"ops":9500,"server_cpu_us_per_op":15,"redis_cmds_per_op":4,"rtt_per_op":1}
{"adapter":"httprate-redis-counter","kind":"redis","c":1,"keys":10000,"ops_per_s":9900,"ops":9900,"server_cpu_us_per_op":5,"redis_cmds_per_op":5,"rtt_per_op":2}
{"adapter":"ref-evalsha-trivial","kind":"redisref","c":1,"keys":10000,"ops_per_s":10000,"ops":10000,"server_cpu_us_per_op":8,"redis_cmds_per_op":1,"rtt_per_op":1}
`)
	write("redis-benchmark.csv", `c=64,"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
c=64,"INCR","51680.00","0.800","0.200","0.775","1.200","1.567","3.000"
`)
	wrk := func(name string, rps string) {
		write("wrk/"+name+".1.txt", "  Latency Distribution\n     50%    1.00ms\n     75%    2.00ms\n     99%   10.00ms\nRequests/sec:  "+rps+"\n")
	}
	wrk("bare", "10000.00")
	wrk("rampmeter", "9700.00")
	wrk("sethvargo-httplimit", "9800.00")
	wrk("handrolled-xtime-map", "9990.00")
	return dir
}

func TestReport(t *testing.T) {
	var out strings.Builder
	if err := printReport(&out, writeFixture(t)); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		// Medians of 3; the floor (xtime-bare, 50 ns) is never the best peer.
		"| In-memory decision, `Limiter.Take`, serial, 1 key (ns) | 200 | 100 (sethvargo-mem) | 2.00x |",
		"| In-memory decision: memory per decision (serial) | 386 B, 6 allocs | 0 B, 0 allocs (sethvargo-mem) |  |",
		// 400 / 200 ns added; the hand-written floor's 50 is not a peer.
		"| Middleware: time added over the bare handler, serial, 1 IP (ns) | +400 | +200 (sethvargo-httplimit) | 2.00x |",
		"| Middleware: memory added per request (serial) | +1391 B, +9 allocs | +184 B, +9 allocs (sethvargo-httplimit) |  |",
		// 9000/10000 and 9500/10000; httprate's counter alone (0.99x) is a floor.
		"| Redis, 1 limit: decisions/s ÷ trivial EVALSHA's, c=1, 10k keys (higher is better) | 0.90x | 0.95x (redis_rate) | 0.95x |",
		"| Redis CPU per decision, c=1, 10k keys (µs; the trivial EVALSHA: 8) | 20 | 15 (redis_rate) | 1.33x |",
		"| Real HTTP server under wrk: requests/s ÷ the bare server's (higher is better) | 0.97x | 0.98x (sethvargo-httplimit) | 0.99x |",
		// Tables: ratios to rampmeter's row, floors marked.
		"| rampmeter-limiter-mem | 200 (1.00x) | n/a | n/a | 386 | 6 | 0 | 20/–/–% |",
		"| sethvargo-mem | 100 (0.50x) | n/a | n/a | 0 | 0 | 0 | 20/–/–% |",
		"| xtime-bare † | 50 (0.25x) |",
		"| handrolled-xtime-map † | 150 | +50 (0.12x) |",
		"| rampmeter | 9700 (0.97x) | 1000 | 10000 | 0 | 1 | ±0% |",
		"| rampmeter-redis | 9000 (0.90x) | 0 / 0 | 1.00 | 4.00 | 20 (2.50x) |",
		// redis-benchmark's CSV: p50 and p99 are its 5th and 7th fields, in ms.
		"| c=64 INCR | 51680 | 775 | 1567 | 1 | ±0% |",
		"Noise probe (CRC-32 of 4 KiB, pure CPU): median 300 ns, spread ±0% over 1 runs",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the report lacks\n\t%s\nreport:\n%s", want, got)
		}
	}
}

func TestReportNeedsResults(t *testing.T) {
	if err := printReport(&strings.Builder{}, t.TempDir()); err == nil {
		t.Fatal("a directory without env.txt printed a report")
	}
}

func TestParseFlags(t *testing.T) {
	s, err := parseSections("decision, wrk")
	if err != nil || len(s) != 2 || !s["decision"] || !s["wrk"] {
		t.Fatalf("parseSections: %v, %v", s, err)
	}
	for _, bad := range []string{"", "decision,redsi", ","} {
		if _, err := parseSections(bad); err == nil {
			t.Errorf("parseSections(%q) accepted", bad)
		}
	}
	c, err := parseRedisConfigs("1:10000, 64:1")
	if err != nil || len(c) != 2 || c[0] != (redisConfig{1, 10000}) || c[1] != (redisConfig{64, 1}) {
		t.Fatalf("parseRedisConfigs: %v, %v", c, err)
	}
	for _, bad := range []string{"", "64", "0:10", "64:0", "a:b"} {
		if _, err := parseRedisConfigs(bad); err == nil {
			t.Errorf("parseRedisConfigs(%q) accepted", bad)
		}
	}
	if got := namesPattern("lib=", []string{"a+b", "c"}); got != `^lib=(a\+b|c)$` {
		t.Errorf("namesPattern: %s", got)
	}
	if got := wrkDuration(2500e6); got != "3s" {
		t.Errorf("wrkDuration(2.5s) = %s", got)
	}
}

func TestParseCPUSplit(t *testing.T) {
	for _, c := range []struct {
		in, server, load string
		ok               bool
	}{
		{"", "", "", true},
		{"0:1", "0", "1", true},
		{"0-2:3", "0-2", "3", true},
		{"0,2:1,3", "0,2", "1,3", true},
		{"0", "", "", false},
		{"0:", "", "", false},
		{":1", "", "", false},
		{"a:1", "", "", false},
		{"0:1:2", "", "", false},
		{"0 :1", "", "", false},
	} {
		server, load, err := parseCPUSplit(c.in)
		if (err == nil) != c.ok || server != c.server || load != c.load {
			t.Errorf("parseCPUSplit(%q) = %q, %q, %v; want %q, %q, ok=%v", c.in, server, load, err, c.server, c.load, c.ok)
		}
	}
}
