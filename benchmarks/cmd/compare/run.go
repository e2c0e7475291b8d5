package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	_ "github.com/rampmeter/ratelimit/benchmarks/adapters" // registers every adapter
	"github.com/rampmeter/ratelimit/benchmarks/decider"
)

// tools are the programs a run uses, by path.
type tools struct {
	goCmd, redisServer, redisBenchmark, wrk string
	taskset                                 string // for -wrk-cpus
	benchstat                               string // optional
}

// checkTools finds the programs the chosen sections need, and fails with
// a message saying how to get each one that is missing.
func checkTools(sections map[string]bool, pin bool) (tools, error) {
	var t tools
	var missing []string
	need := func(dst *string, name, why, install string) {
		p, err := exec.LookPath(name)
		if err != nil {
			missing = append(missing, fmt.Sprintf("  %s (%s): %s", name, why, install))
			return
		}
		*dst = p
	}
	need(&t.goCmd, "go", "builds the benchmarks", "the Go toolchain, https://go.dev/dl/")
	if sections["redis"] || sections["refbench"] {
		need(&t.redisServer, "redis-server", "the redis and refbench sections", "apt-get install -y redis-server")
	}
	if sections["refbench"] {
		need(&t.redisBenchmark, "redis-benchmark", "the refbench section", "apt-get install -y redis-tools")
	}
	if sections["wrk"] {
		need(&t.wrk, "wrk", "the wrk section", "apt-get install -y wrk")
		if pin {
			need(&t.taskset, "taskset", "-wrk-cpus", "apt-get install -y util-linux")
		}
	}
	if len(missing) > 0 {
		return t, fmt.Errorf("missing tools, not in PATH:\n%s\n(or leave their sections out with -sections)", strings.Join(missing, "\n"))
	}
	t.benchstat, _ = exec.LookPath("benchstat")
	return t, nil
}

// run is one comparison: its options, and the processes it started.
type run struct {
	opts  options
	tools tools
	bin   string // where the binaries are built

	mu       sync.Mutex
	children map[int]*exec.Cmd // by PID
}

func (r *run) path(name string) string { return filepath.Join(r.opts.out, name) }

func (r *run) all(ctx context.Context) error {
	o := r.opts
	logf("results in %s", o.out)
	if err := r.writeEnv("at start"); err != nil {
		return err
	}
	if err := r.build(ctx); err != nil {
		return err
	}
	if err := r.writeAdapters(); err != nil {
		return err
	}
	logf("smoke tests: every in-memory adapter and middleware really limits")
	if err := r.smoke(ctx, decider.Memory, "", ""); err != nil {
		return err
	}
	if o.sections["decision"] || o.sections["middleware"] {
		if err := r.goBenchmarks(ctx); err != nil {
			return err
		}
	}
	if o.sections["redis"] || o.sections["refbench"] {
		if err := r.redisSections(ctx); err != nil {
			return err
		}
	}
	if o.sections["wrk"] {
		if err := r.wrkSection(ctx); err != nil {
			return err
		}
	}
	if err := appendFile(r.path("env.txt"), fmt.Sprintf("loadavg:      %s (at end)\n", loadavg())); err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := printReport(&buf, o.out); err != nil {
		return err
	}
	if err := os.WriteFile(r.path("report.md"), buf.Bytes(), 0o644); err != nil {
		return err
	}
	logf("report in %s", r.path("report.md"))
	_, err := os.Stdout.Write(buf.Bytes())
	return err
}

// ---------------------------------------------------------------- build, environment

func (r *run) build(ctx context.Context) error {
	r.bin = r.path("bin")
	logf("building the benchmarks, cmd/redisbench and cmd/httpserve into %s", r.bin)
	if err := r.cmd(ctx, nil, nil, r.tools.goCmd, "test", "-c", "-o", filepath.Join(r.bin, "bench.test"), "."); err != nil {
		return err
	}
	return r.cmd(ctx, nil, nil, r.tools.goCmd, "build", "-o", r.bin+string(filepath.Separator), "./cmd/redisbench", "./cmd/httpserve")
}

func (r *run) writeEnv(when string) error {
	o := r.opts
	var b strings.Builder
	line := func(k, v string) { fmt.Fprintf(&b, "%-13s %s\n", k+":", v) }
	line("date (UTC)", time.Now().UTC().Format(time.RFC3339))
	line("rampmeter", gitDescribe())
	line("kernel", strings.TrimSpace(output("uname", "-sr")))
	line("cpu", cpuModel())
	line("memory", memTotal())
	line("loadavg", loadavg()+" ("+when+")")
	line("go", strings.TrimPrefix(strings.TrimSpace(output(r.tools.goCmd, "version")), "go version "))
	if r.tools.redisServer != "" {
		v := regexp.MustCompile(`v=([0-9.]+)`).FindStringSubmatch(output(r.tools.redisServer, "--version"))
		if v != nil {
			line("redis-server", v[1])
		}
	}
	if r.tools.wrk != "" {
		if f := strings.Fields(output(r.tools.wrk, "--version")); len(f) > 1 {
			line("wrk", f[1])
		}
	}
	var sec []string
	for _, s := range allSections {
		if o.sections[s] {
			sec = append(sec, s)
		}
	}
	only := ""
	if o.only != nil {
		only = fmt.Sprintf(" -only '%s'", o.only)
	}
	var cfgs []string
	for _, c := range o.redisConfigs {
		cfgs = append(cfgs, fmt.Sprintf("%d:%d", c.c, c.keys))
	}
	line("settings", fmt.Sprintf("-sections %s%s -count %d -benchtime %s -redis-dur %s -redis-configs %s -redis-reps %d -wrk-dur %s -wrk-reps %d (wrk -t%d -c%d) GOMAXPROCS=%d",
		strings.Join(sec, ","), only, o.count, o.benchtime, o.redisDur, strings.Join(cfgs, ","), o.redisReps, o.wrkDur, o.wrkReps, o.wrkThreads, o.wrkConns, runtime.GOMAXPROCS(0))+pinNote(o))
	return os.WriteFile(r.path("env.txt"), []byte(b.String()), 0o644)
}

// adapterInfo is one row's description, written to adapters.json so that a
// report can be printed again from the results directory alone.
type adapterInfo struct {
	Name       string `json:"name"`
	Kind       string `json:"kind"` // memory, redis, redisref, middleware
	Module     string `json:"module,omitempty"`
	Version    string `json:"version,omitempty"`
	Note       string `json:"note"`
	LowerBound bool   `json:"lower_bound,omitempty"`
	Reference  bool   `json:"reference,omitempty"`
	SingleKey  bool   `json:"single_key,omitempty"`
}

func (r *run) writeAdapters() error {
	var all []adapterInfo
	for _, s := range r.specs() {
		all = append(all, adapterInfo{Name: s.Name, Kind: string(s.Kind), Module: s.Module, Version: decider.ModuleVersion(s.Module),
			Note: s.Note, LowerBound: s.LowerBound || s.Kind == decider.RedisRef, SingleKey: s.SingleKey})
	}
	for _, m := range r.middlewares() {
		v := ""
		if m.Module != "" {
			v = decider.ModuleVersion(m.Module)
		}
		note := m.Note
		if m.Body != nil {
			note += fmt.Sprintf(" [POST, %d-byte JSON body]", len(m.Body))
		}
		all = append(all, adapterInfo{Name: m.Name, Kind: "middleware", Module: m.Module, Version: v, Note: note, Reference: m.Reference})
	}
	b, err := json.MarshalIndent(all, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(r.path("adapters.json"), append(b, '\n'), 0o644)
}

// specs are the decision adapters this run measures (-only; the Redis
// references always).
func (r *run) specs(kinds ...decider.Kind) []decider.Spec {
	var out []decider.Spec
	for _, s := range decider.Specs(kinds...) {
		if r.opts.only == nil || s.Kind == decider.RedisRef || r.opts.only.MatchString(s.Name) {
			out = append(out, s)
		}
	}
	return out
}

// middlewares are the middlewares this run measures (-only; the
// references always).
func (r *run) middlewares() []decider.MiddlewareSpec {
	var out []decider.MiddlewareSpec
	for _, m := range decider.Middlewares() {
		if r.opts.only == nil || m.Reference && m.Name == "bare" || r.opts.only.MatchString(m.Name) {
			out = append(out, m)
		}
	}
	return out
}

// namesPattern is a go test -run/-bench level matching exactly these names.
func namesPattern(prefix string, names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = regexp.QuoteMeta(n)
	}
	return "^" + prefix + "(" + strings.Join(q, "|") + ")$"
}

// ---------------------------------------------------------------- Go benchmarks

// smoke runs the smoke tests of the adapters of kind (and, for Memory, of
// the middlewares); env adds the Redis server's address for Redis.
func (r *run) smoke(ctx context.Context, kind decider.Kind, redisAddr, logName string) error {
	var names []string
	for _, s := range r.specs(kind) {
		names = append(names, s.Name)
	}
	var env []string
	if redisAddr != "" {
		env = []string{"RAMPMETER_REDIS_ADDR=" + redisAddr, "RAMPMETER_REQUIRE_REDIS=1"}
	}
	if logName == "" {
		logName = "smoke.txt"
	}
	var out bytes.Buffer
	test := filepath.Join(r.bin, "bench.test")
	if len(names) > 0 {
		if err := r.cmd(ctx, env, &out, test, "-test.run", "^TestAdaptersLimit$/"+namesPattern("", names), "-test.count", "1", "-test.v"); err != nil {
			_ = os.WriteFile(r.path(logName), out.Bytes(), 0o644)
			return fmt.Errorf("smoke test failed: %w\n%s", err, out.Bytes())
		}
	}
	if kind == decider.Memory {
		var mws []string
		for _, m := range r.middlewares() {
			mws = append(mws, m.Name)
		}
		if err := r.cmd(ctx, env, &out, test, "-test.run", "^TestMiddlewaresLimit$/"+namesPattern("", mws), "-test.count", "1", "-test.v"); err != nil {
			_ = os.WriteFile(r.path(logName), out.Bytes(), 0o644)
			return fmt.Errorf("smoke test failed: %w\n%s", err, out.Bytes())
		}
	}
	return os.WriteFile(r.path(logName), out.Bytes(), 0o644)
}

func (r *run) goBenchmarks(ctx context.Context) error {
	o := r.opts
	var libs, mws []string
	for _, s := range r.specs(decider.Memory) {
		libs = append(libs, s.Name)
	}
	for _, m := range r.middlewares() {
		mws = append(mws, m.Name)
	}
	test := filepath.Join(r.bin, "bench.test")
	args := func(pattern string) []string {
		return []string{"-test.run", "^$", "-test.bench", pattern, "-test.benchmem", "-test.benchtime", o.benchtime, "-test.count", "1"}
	}
	for i := 1; i <= o.count; i++ {
		if o.sections["decision"] && len(libs) > 0 {
			logf("decision benchmarks, repetition %d of %d", i, o.count)
			if err := r.benchTo(ctx, "decision.txt", test, args("^BenchmarkDecision$/"+namesPattern("lib=", libs))...); err != nil {
				return err
			}
			if err := r.benchTo(ctx, "decision.txt", test, args("^(BenchmarkNoiseProbe|BenchmarkClockNow)$")...); err != nil {
				return err
			}
		}
		if o.sections["middleware"] {
			logf("middleware benchmarks, repetition %d of %d", i, o.count)
			if err := r.benchTo(ctx, "middleware.txt", test, args("^BenchmarkMiddleware$/"+namesPattern("mw=", mws))...); err != nil {
				return err
			}
		}
	}
	if r.tools.benchstat != "" {
		for _, f := range []string{"decision", "middleware"} {
			var out bytes.Buffer
			if _, err := os.Stat(r.path(f + ".txt")); err == nil {
				if r.cmd(ctx, nil, &out, r.tools.benchstat, r.path(f+".txt")) == nil {
					_ = os.WriteFile(r.path(f+".benchstat.txt"), out.Bytes(), 0o644)
				}
			}
		}
	}
	return nil
}

// benchTo appends a benchmark run's output to file; a benchmark that
// reports an error (b.Errorf: a limiter denied, a middleware answered
// non-200) fails the run.
func (r *run) benchTo(ctx context.Context, file string, name string, args ...string) error {
	var out bytes.Buffer
	err := r.cmd(ctx, nil, &out, name, args...)
	if aerr := appendFile(r.path(file), out.String()); aerr != nil {
		return aerr
	}
	if err != nil {
		return fmt.Errorf("benchmark run failed (%w); its output is in %s", err, r.path(file))
	}
	return nil
}

// ---------------------------------------------------------------- Redis

func (r *run) redisSections(ctx context.Context) error {
	o := r.opts
	port, err := pickPort(o.redisPort)
	if err != nil {
		return fmt.Errorf("redis-server: %w (set -redis-port)", err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	logf("starting redis-server on %s", addr)
	logFile, err := os.Create(r.path("redis-server.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	srv, err := r.start(logFile, r.tools.redisServer, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", "")
	if err != nil {
		return err
	}
	defer r.stop(srv)
	client := redis.NewClient(&redis.Options{Addr: addr})
	defer client.Close()
	if err := waitFor(ctx, 10*time.Second, func() error { return client.Ping(ctx).Err() }); err != nil {
		return fmt.Errorf("redis-server (pid %d) did not answer on %s: %w; see %s", srv.Process.Pid, addr, err, r.path("redis-server.log"))
	}
	logf("redis-server pid %d on %s", srv.Process.Pid, addr)

	if o.sections["refbench"] {
		if err := r.refbench(ctx, client, port); err != nil {
			return err
		}
	}
	if o.sections["redis"] {
		logf("smoke tests: every Redis adapter really limits")
		if err := r.smoke(ctx, decider.Redis, addr, "redis-smoke.txt"); err != nil {
			return err
		}
		var names []string
		for _, s := range r.specs(decider.Redis, decider.RedisRef) {
			names = append(names, s.Name)
		}
		stderr, err := os.OpenFile(r.path("redisbench.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		defer stderr.Close()
		for rep := 1; rep <= o.redisReps; rep++ {
			for _, c := range o.redisConfigs {
				logf("Redis load, repetition %d of %d, c=%d keys=%d (%d adapters, %s each)", rep, o.redisReps, c.c, c.keys, len(names), o.redisDur)
				var out bytes.Buffer
				err := r.cmdErr(ctx, nil, &out, stderr, filepath.Join(r.bin, "redisbench"), "-addr", addr, "-flush",
					"-adapters", strings.Join(names, ","), "-c", strconv.Itoa(c.c), "-keys", strconv.Itoa(c.keys),
					"-d", o.redisDur.String(), "-rep", strconv.Itoa(rep))
				if aerr := appendFile(r.path("redis.jsonl"), out.String()); aerr != nil {
					return aerr
				}
				if err != nil {
					return fmt.Errorf("redisbench: %w; see %s", err, r.path("redisbench.log"))
				}
			}
		}
	}
	return nil
}

// refbench runs redis-benchmark, the C client's ceiling on the same server:
// PING and INCR, EVALSHA of `return 1` and of a 4-line fixed-window script,
// at c=64 and c=1, and pipelined (-P 16) PING and INCR.
func (r *run) refbench(ctx context.Context, client *redis.Client, port int) error {
	o := r.opts
	trivial, err := client.ScriptLoad(ctx, "return 1").Result()
	if err != nil {
		return err
	}
	fixed, err := client.ScriptLoad(ctx, "local n = redis.call('INCR', KEYS[1]) if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end if n > tonumber(ARGV[1]) then return 0 end return 1").Result()
	if err != nil {
		return err
	}
	n := strconv.Itoa(o.refbenchReqs)
	n1 := strconv.Itoa(o.refbenchReqs / 4)
	nP := strconv.Itoa(o.refbenchReqs * 10)
	tests := []struct {
		label string
		args  []string
	}{
		{"c=64", []string{"-c", "64", "-n", n, "-t", "ping,incr"}},
		{"c=64", []string{"-c", "64", "-n", n, "-r", "10000", "evalsha", trivial, "1", "key:__rand_int__"}},
		{"c=64", []string{"-c", "64", "-n", n, "-r", "10000", "evalsha", fixed, "1", "fw:__rand_int__", "1099511627776", "60000"}},
		{"c=1", []string{"-c", "1", "-n", n1, "-t", "ping,incr"}},
		{"c=1", []string{"-c", "1", "-n", n1, "-r", "10000", "evalsha", trivial, "1", "key:__rand_int__"}},
		{"c=64_P=16", []string{"-c", "64", "-P", "16", "-n", nP, "-t", "ping,incr"}},
	}
	for rep := 1; rep <= o.redisReps; rep++ {
		logf("redis-benchmark, repetition %d of %d", rep, o.redisReps)
		if err := client.FlushAll(ctx).Err(); err != nil { // our own server
			return err
		}
		for _, t := range tests {
			var out bytes.Buffer
			args := append([]string{"-h", "127.0.0.1", "-p", strconv.Itoa(port), "--csv"}, t.args...)
			if err := r.cmd(ctx, nil, &out, r.tools.redisBenchmark, args...); err != nil {
				return fmt.Errorf("redis-benchmark %s: %w\n%s", strings.Join(t.args, " "), err, out.Bytes())
			}
			var b strings.Builder
			for _, l := range strings.Split(strings.ReplaceAll(out.String(), "\r", ""), "\n") {
				if l == "" {
					continue
				}
				l = strings.ReplaceAll(l, trivial, "<sha:return 1>")
				l = strings.ReplaceAll(l, fixed, "<sha:fixed-window>")
				b.WriteString(t.label + "," + l + "\n")
			}
			if err := appendFile(r.path("redis-benchmark.csv"), b.String()); err != nil {
				return err
			}
		}
	}
	return nil
}

// ---------------------------------------------------------------- wrk

func (r *run) wrkSection(ctx context.Context) error {
	o := r.opts
	port, err := pickPort(o.httpPort)
	if err != nil {
		return fmt.Errorf("HTTP server: %w (set -http-port)", err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	url := "http://" + addr + "/api/items"
	if err := os.MkdirAll(r.path("wrk"), 0o755); err != nil {
		return err
	}
	srvLog, err := os.OpenFile(r.path("httpserve.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer srvLog.Close()
	mws := r.middlewares()
	for rep := 1; rep <= o.wrkReps; rep++ {
		for _, m := range mws {
			logf("wrk, repetition %d of %d: %s", rep, o.wrkReps, m.Name)
			var script []string
			if m.Body != nil {
				lua := r.path(filepath.Join("wrk", m.Name+".lua"))
				body := fmt.Sprintf("wrk.method = \"POST\"\nwrk.headers[\"Content-Type\"] = \"application/json\"\nwrk.body = [==[%s]==]\n", m.Body)
				if err := os.WriteFile(lua, []byte(body), 0o644); err != nil {
					return err
				}
				script = []string{"-s", lua}
			}
			name, args := r.pinned(o.wrkServerCPUs, filepath.Join(r.bin, "httpserve"), "-mw", m.Name, "-addr", addr,
				"-lifetime", (2*o.wrkDur + time.Minute).String())
			srv, err := r.start(srvLog, name, args...)
			if err != nil {
				return err
			}
			if err := waitFor(ctx, 10*time.Second, func() error {
				c, err := net.DialTimeout("tcp", addr, time.Second)
				if err == nil {
					c.Close()
				}
				return err
			}); err != nil {
				r.stop(srv)
				return fmt.Errorf("httpserve -mw %s did not listen on %s: %w; see %s", m.Name, addr, err, r.path("httpserve.log"))
			}
			wrk := func(d time.Duration, out io.Writer) error {
				args := append([]string{"-t" + strconv.Itoa(o.wrkThreads), "-c" + strconv.Itoa(o.wrkConns), "-d" + wrkDuration(d), "--latency"}, script...)
				name, args := r.pinned(o.wrkLoadCPUs, r.tools.wrk, append(args, url)...)
				return r.cmd(ctx, nil, out, name, args...)
			}
			err = wrk(2*time.Second, io.Discard) // warm-up
			var out bytes.Buffer
			if err == nil {
				err = wrk(o.wrkDur, &out)
			}
			r.stop(srv)
			if err != nil {
				return fmt.Errorf("wrk against %s: %w\n%s", m.Name, err, out.Bytes())
			}
			if err := os.WriteFile(r.path(filepath.Join("wrk", fmt.Sprintf("%s.%d.txt", m.Name, rep))), out.Bytes(), 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// pinNote is the settings line's note of -wrk-cpus, if set.
func pinNote(o options) string {
	if o.wrkServerCPUs == "" {
		return ""
	}
	return fmt.Sprintf(" -wrk-cpus %s:%s (HTTP server on CPUs %s, wrk on %s)", o.wrkServerCPUs, o.wrkLoadCPUs, o.wrkServerCPUs, o.wrkLoadCPUs)
}

// pinned returns the command line name args... run on the CPUs in cpus (a
// taskset CPU list), or unchanged when cpus is empty. A Go program started
// so sizes GOMAXPROCS to the CPUs it may run on.
func (r *run) pinned(cpus, name string, args ...string) (string, []string) {
	if cpus == "" {
		return name, args
	}
	return r.tools.taskset, append([]string{"-c", cpus, name}, args...)
}

// wrkDuration is d in wrk's syntax (whole seconds, at least 1).
func wrkDuration(d time.Duration) string {
	return strconv.Itoa(max(1, int(d.Round(time.Second)/time.Second))) + "s"
}

// ---------------------------------------------------------------- processes

// cmd runs a program to completion, its output (stdout and stderr) to out
// when non-nil, else to this process's stderr.
func (r *run) cmd(ctx context.Context, env []string, out io.Writer, name string, args ...string) error {
	if out == nil {
		out = os.Stderr
	}
	return r.cmdErr(ctx, env, out, out, name, args...)
}

func (r *run) cmdErr(ctx context.Context, env []string, stdout, stderr io.Writer, name string, args ...string) error {
	c := exec.CommandContext(ctx, name, args...)
	c.Env = append(os.Environ(), env...)
	c.Stdout, c.Stderr = stdout, stderr
	c.SysProcAttr = childAttr()
	c.Cancel = func() error { return c.Process.Signal(syscall.SIGTERM) }
	c.WaitDelay = 5 * time.Second
	if err := c.Run(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%s: %w", filepath.Base(name), err)
	}
	return nil
}

// start starts a server process, remembered by PID until stop.
func (r *run) start(log io.Writer, name string, args ...string) (*exec.Cmd, error) {
	c := exec.Command(name, args...)
	c.Stdout, c.Stderr = log, log
	c.SysProcAttr = childAttr()
	if err := c.Start(); err != nil {
		return nil, err
	}
	r.mu.Lock()
	if r.children == nil {
		r.children = map[int]*exec.Cmd{}
	}
	r.children[c.Process.Pid] = c
	r.mu.Unlock()
	return c, nil
}

// stop ends a process started by start: SIGTERM to its PID, SIGKILL if it
// has not exited 5 s later.
func (r *run) stop(c *exec.Cmd) {
	r.mu.Lock()
	_, ours := r.children[c.Process.Pid]
	delete(r.children, c.Process.Pid)
	r.mu.Unlock()
	if !ours {
		return
	}
	_ = c.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = c.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = c.Process.Kill()
		<-done
	}
}

// stopAll stops every process still running.
func (r *run) stopAll() {
	r.mu.Lock()
	var cs []*exec.Cmd
	for _, c := range r.children {
		cs = append(cs, c)
	}
	r.mu.Unlock()
	for _, c := range cs {
		r.stop(c)
	}
}

// pickPort returns port when it is free on 127.0.0.1, or a free port the
// kernel chooses when port is 0.
func pickPort(port int) (int, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return 0, fmt.Errorf("port %d on 127.0.0.1 is not free: %w", port, err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// waitFor retries f every 50 ms until it succeeds or timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ---------------------------------------------------------------- small helpers

func appendFile(path, s string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(s)
	return errors.Join(err, f.Close())
}

// output is what a program prints on stdout, even when it exits non-zero
// (wrk --version does); "" when it cannot run.
func output(name string, args ...string) string {
	b, _ := exec.Command(name, args...).Output()
	return string(b)
}

// gitDescribe names the rampmeter commit measured (the module's parent).
func gitDescribe() string {
	s := strings.TrimSpace(output("git", "-C", "..", "describe", "--always", "--dirty", "--abbrev=12"))
	if s == "" {
		return "unknown (not a git checkout)"
	}
	if b := strings.TrimSpace(output("git", "-C", "..", "rev-parse", "--abbrev-ref", "HEAD")); b != "" {
		s += " (" + b + ")"
	}
	return s
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func cpuModel() string {
	model := "unknown"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("%s x %d logical", model, runtime.NumCPU())
}

func memTotal() string {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "unknown"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return fmt.Sprintf("%.1f GiB", kb/(1<<20))
		}
	}
	return "unknown"
}
