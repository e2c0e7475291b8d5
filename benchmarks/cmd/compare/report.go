package main

// The report: one results directory to Markdown tables of medians across
// repetitions, ratios within the run, and the run-to-run spread, so that
// noise is visible next to every figure.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// The rows every ratio of the report is taken against.
const (
	rmDecision   = "rampmeter-limiter-mem" // Limiter.Take, the API users call
	rmMiddleware = "rampmeter"             // the one-limit middleware with default headers
	rmRedis      = "rampmeter-redis"
	bareMW       = "bare"
	trivialRedis = "ref-evalsha-trivial"
	rampmeterMod = "github.com/rampmeter/ratelimit"
)

// printReport writes the report of results directory dir to w.
func printReport(w io.Writer, dir string) error {
	env, err := os.ReadFile(filepath.Join(dir, "env.txt"))
	if err != nil {
		return fmt.Errorf("%s is not a results directory: %w", dir, err)
	}
	rep := &report{w: w, info: readAdapters(filepath.Join(dir, "adapters.json"))}
	rep.decision = readBench(filepath.Join(dir, "decision.txt"))
	rep.middleware = readBench(filepath.Join(dir, "middleware.txt"))
	rep.wrk = readWrk(filepath.Join(dir, "wrk"))
	rep.redis = readRedis(filepath.Join(dir, "redis.jsonl"))

	rep.printf("# rampmeter side by side with the Go rate limiters (%s)\n\n", filepath.Base(dir))
	rep.printf("```\n%s```\n\n", env)
	rep.printf("Every figure is from this one run on this one machine: compare within a column, as ratios, never with another run's absolute numbers. " +
		"Cells are medians over the repetitions; `x` is a ratio to the row a table names; `±` is (max − min) / median over the repetitions. " +
		"Rows marked † are floors (part of a library's path, or no library at all), never counted as the best peer.\n\n")
	rep.summary()
	rep.decisionTable()
	rep.middlewareTable()
	rep.wrkTable()
	rep.redisTable()
	rep.refbenchTable(filepath.Join(dir, "redis-benchmark.csv"))
	rep.adapterNotes()
	return nil
}

type report struct {
	w          io.Writer
	info       map[string]adapterInfo
	decision   benchData
	middleware benchData
	wrk        map[string]*wrkAgg
	redis      redisData
}

func (r *report) printf(format string, args ...any) { fmt.Fprintf(r.w, format, args...) }

func readAdapters(path string) map[string]adapterInfo {
	out := map[string]adapterInfo{}
	b, err := os.ReadFile(path)
	if err != nil {
		return out
	}
	var all []adapterInfo
	if json.Unmarshal(b, &all) != nil {
		return out
	}
	for _, a := range all {
		key := a.Name
		if a.Kind == "middleware" {
			key = "mw:" + a.Name
		}
		out[key] = a
	}
	return out
}

// isRampmeter, isPeer: a peer is another library's complete path.
func (r *report) isRampmeter(name string, mw bool) bool {
	if mw {
		return r.info["mw:"+name].Module == rampmeterMod
	}
	return r.info[name].Module == rampmeterMod
}

func (r *report) isPeer(name string, mw bool) bool {
	if mw {
		a, ok := r.info["mw:"+name]
		return ok && a.Module != rampmeterMod && !a.Reference
	}
	a, ok := r.info[name]
	return ok && a.Module != rampmeterMod && !a.LowerBound && !a.SingleKey
}

// label is a row's name, with † for floors.
func (r *report) label(name string, mw bool) string {
	if r.isRampmeter(name, mw) || r.isPeer(name, mw) {
		return name
	}
	return name + " †"
}

// order puts rampmeter's rows first, then the peers, then the floors.
func (r *report) order(names []string, mw bool) []string {
	rank := func(n string) int {
		switch {
		case r.isRampmeter(n, mw):
			return 0
		case r.isPeer(n, mw):
			return 1
		}
		return 2
	}
	sort.SliceStable(names, func(i, j int) bool {
		if a, b := rank(names[i]), rank(names[j]); a != b {
			return a < b
		}
		return names[i] < names[j]
	})
	return names
}

// ---------------------------------------------------------------- statistics

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func spread(v []float64) float64 {
	if len(v) < 2 {
		return 0
	}
	lo, hi := v[0], v[0]
	for _, x := range v {
		lo, hi = math.Min(lo, x), math.Max(hi, x)
	}
	m := median(v)
	if m == 0 {
		return 0
	}
	return (hi - lo) / m
}

// num formats a figure with 3 significant digits at most (whole numbers
// from 100 on).
func num(x float64) string {
	switch {
	case math.IsNaN(x):
		return "–"
	case math.Abs(x) >= 100 || x == math.Trunc(x):
		return strconv.FormatFloat(x, 'f', 0, 64)
	case math.Abs(x) >= 10:
		return strconv.FormatFloat(x, 'f', 1, 64)
	default:
		return strconv.FormatFloat(x, 'f', 2, 64)
	}
}

func signed(x float64) string {
	if math.IsNaN(x) {
		return "–"
	}
	if x >= 0 {
		return "+" + num(x)
	}
	return num(x)
}

// times is x/base as "1.23x", "" when either is unknown.
func times(x, base float64) string {
	if math.IsNaN(x) || math.IsNaN(base) || base == 0 {
		return ""
	}
	return fmt.Sprintf("%.2fx", x/base)
}

// withRatio is "x (1.23x)", or "x" when the ratio is unknown.
func withRatio(x, base float64) string {
	if t := times(x, base); t != "" {
		return num(x) + " (" + t + ")"
	}
	return num(x)
}

func pct(x float64) string { return fmt.Sprintf("±%.0f%%", 100*x) }

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// ---------------------------------------------------------------- go test -bench output

// benchData: row (the lib= or mw= label) -> case -> unit -> values, and
// the top-level benchmarks (BenchmarkNoiseProbe) under row "".
type benchData map[string]map[string]map[string][]float64

var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+(.+)$`)

func readBench(path string) benchData {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	d := benchData{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		row, cs := "", m[1]
		parts := strings.Split(m[1], "/")
		for _, p := range parts[1:] {
			if k, v, ok := strings.Cut(p, "="); ok {
				switch k {
				case "lib", "mw":
					row = v
				case "case":
					cs = v
				}
			}
		}
		if d[row] == nil {
			d[row] = map[string]map[string][]float64{}
		}
		if d[row][cs] == nil {
			d[row][cs] = map[string][]float64{}
		}
		f := strings.Fields(m[2])
		for i := 0; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				d[row][cs][f[i+1]] = append(d[row][cs][f[i+1]], v)
			}
		}
	}
	return d
}

// med is the median of one cell's unit, NaN when absent.
func (d benchData) med(row, cs, unit string) float64 { return median(d[row][cs][unit]) }

func (d benchData) rows() []string {
	var out []string
	for k := range d {
		if k != "" {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// ---------------------------------------------------------------- summary

var decisionCases = []struct{ key, title string }{
	{"serial-hot", "serial, 1 key"}, {"parallel-10k", "parallel, 10k keys"}, {"parallel-hot", "parallel, 1 hot key"},
}

var middlewareCases = []struct{ key, title string }{
	{"serial-1ip", "serial, 1 IP"}, {"parallel-10kip", "parallel, 10k IPs"},
}

// best returns the row among names that pred accepts with the lowest
// (lower true) or highest value, NaN if none.
func best(names []string, pred func(string) bool, value func(string) float64, lower bool) (string, float64) {
	bn, bv := "", math.NaN()
	for _, n := range names {
		v := value(n)
		if !pred(n) || math.IsNaN(v) {
			continue
		}
		if math.IsNaN(bv) || (lower && v < bv) || (!lower && v > bv) {
			bn, bv = n, v
		}
	}
	return bn, bv
}

func (r *report) summary() {
	type row struct{ what, rm, peer, ratio string }
	var rows []row
	peerCell := func(name string, v string) string {
		if name == "" {
			return "–"
		}
		return v + " (" + name + ")"
	}
	if d := r.decision; d != nil {
		names := d.rows()
		for _, c := range decisionCases {
			val := func(n string) float64 { return d.med(n, c.key, "ns/op") }
			pn, pv := best(names, func(n string) bool { return r.isPeer(n, false) }, val, true)
			rv := val(rmDecision)
			rows = append(rows, row{"In-memory decision, `Limiter.Take`, " + c.title + " (ns)", num(rv), peerCell(pn, num(pv)), times(rv, pv)})
		}
		pn, _ := best(names, func(n string) bool { return r.isPeer(n, false) }, func(n string) float64 { return d.med(n, "serial-hot", "ns/op") }, true)
		allocs := func(n string) string {
			return fmt.Sprintf("%s B, %s allocs", num(d.med(n, "serial-hot", "B/op")), num(d.med(n, "serial-hot", "allocs/op")))
		}
		rows = append(rows, row{"In-memory decision: memory per decision (serial)", allocs(rmDecision), peerCell(pn, allocs(pn)), ""})
	}
	if d := r.middleware; d != nil {
		names := d.rows()
		var pnSerial string
		for _, c := range middlewareCases {
			added := func(n string) float64 { return d.med(n, c.key, "ns/op") - d.med(bareMW, c.key, "ns/op") }
			pn, pv := best(names, func(n string) bool { return r.isPeer(n, true) }, added, true)
			if pnSerial == "" {
				pnSerial = pn
			}
			rv := added(rmMiddleware)
			rows = append(rows, row{"Middleware: time added over the bare handler, " + c.title + " (ns)", signed(rv), peerCell(pn, signed(pv)), times(rv, pv)})
		}
		beyond := func(n string) string {
			return fmt.Sprintf("%s B, %s allocs", signed(d.med(n, "serial-1ip", "B/op")-d.med(bareMW, "serial-1ip", "B/op")),
				signed(d.med(n, "serial-1ip", "allocs/op")-d.med(bareMW, "serial-1ip", "allocs/op")))
		}
		rows = append(rows, row{"Middleware: memory added per request (serial)", beyond(rmMiddleware), peerCell(pnSerial, beyond(pnSerial)), ""})
	}
	if d := r.redis; d.rows != nil {
		names := sortedKeys(d.rows)
		for _, c := range d.cfgs {
			ratio := func(n string) float64 { return d.med(n, c, "ops") / d.med(trivialRedis, c, "ops") }
			pn, pv := best(names, func(n string) bool { return r.isPeer(n, false) && r.info[n].Kind == "redis" }, ratio, false)
			rv := ratio(rmRedis)
			rows = append(rows, row{fmt.Sprintf("Redis, 1 limit: decisions/s ÷ trivial EVALSHA's, c=%d, %s (higher is better)", c.c, keysTitle(c.keys)),
				xOrDash(rv), peerCell(pn, xOrDash(pv)), times(rv, pv)})
		}
		if hi, ok := d.hi(); ok {
			cpu := func(n string) float64 { return d.med(n, hi, "srv") }
			pn, pv := best(names, func(n string) bool { return r.isPeer(n, false) && r.info[n].Kind == "redis" }, cpu, true)
			rv := cpu(rmRedis)
			rows = append(rows, row{fmt.Sprintf("Redis CPU per decision, c=%d, %s (µs; the trivial EVALSHA: %s)", hi.c, keysTitle(hi.keys), num(cpu(trivialRedis))),
				num(rv), peerCell(pn, num(pv)), times(rv, pv)})
		}
	}
	if d := r.wrk; d != nil && d[bareMW] != nil {
		base := median(d[bareMW].rps)
		names := sortedKeys(d)
		ratio := func(n string) float64 { return median(d[n].rps) / base }
		pn, pv := best(names, func(n string) bool { return r.isPeer(n, true) }, ratio, false)
		if d[rmMiddleware] != nil || pn != "" {
			rv := math.NaN()
			if d[rmMiddleware] != nil {
				rv = ratio(rmMiddleware)
			}
			rows = append(rows, row{"Real HTTP server under wrk: requests/s ÷ the bare server's (higher is better)", xOrDash(rv), peerCell(pn, xOrDash(pv)), times(rv, pv)})
		}
	}
	if len(rows) == 0 {
		return
	}
	r.printf("## Summary: rampmeter and the best peer in this run\n\n")
	r.printf("The best peer is chosen per line, among the other libraries' complete paths. In the last column, below 1 is better for rampmeter where lower is better (time, CPU), above 1 where higher is better (throughput).\n\n")
	r.printf("| measure (lower is better unless said) | rampmeter | best peer | rampmeter ÷ best peer |\n|---|---|---|---|\n")
	for _, x := range rows {
		r.printf("| %s | %s | %s | %s |\n", x.what, x.rm, x.peer, x.ratio)
	}
	r.printf("\n")
	r.selfRatios()
}

// selfRatios: rampmeter's richer paths against its one-limit path.
func (r *report) selfRatios() {
	var lines []string
	if d := r.decision; d != nil {
		var cells []string
		for _, c := range decisionCases {
			cells = append(cells, orDash(times(d.med("rampmeter-limiter-mem-stack2", c.key, "ns/op"), d.med(rmDecision, c.key, "ns/op"))))
		}
		lines = append(lines, "| `Limiter.Take`, two stacked limits ÷ one (serial 1 key / parallel 10k keys / parallel 1 hot key) | "+strings.Join(cells, " / ")+" |")
		cells = cells[:0]
		for _, c := range decisionCases {
			cells = append(cells, orDash(times(d.med("rampmeter-mem", c.key, "ns/op"), d.med(rmDecision, c.key, "ns/op"))))
		}
		lines = append(lines, "| `memory.Store.Take` through the `Store` interface ÷ `Limiter.Take` (same cases) | "+strings.Join(cells, " / ")+" |")
	}
	if d := r.middleware; d != nil {
		var cells []string
		for _, c := range middlewareCases {
			bare := d.med(bareMW, c.key, "ns/op")
			cells = append(cells, orDash(times(d.med("rampmeter-ai", c.key, "ns/op")-bare, d.med(rmMiddleware, c.key, "ns/op")-bare)))
		}
		lines = append(lines, "| Middleware, the AI path's added time ÷ the one-limit path's (serial 1 IP / parallel 10k IPs) | "+strings.Join(cells, " / ")+" |")
	}
	if d := r.redis; d.rows != nil {
		var cells, titles []string
		for _, c := range d.cfgs {
			titles = append(titles, fmt.Sprintf("c=%d %s", c.c, keysTitle(c.keys)))
			cells = append(cells, xOrDash(d.med("rampmeter-redis-stack2", c, "ops")/d.med(trivialRedis, c, "ops")))
		}
		lines = append(lines, "| Redis, two stacked limits: decisions/s ÷ trivial EVALSHA's ("+strings.Join(titles, " / ")+") | "+strings.Join(cells, " / ")+" |")
	}
	if len(lines) == 0 {
		return
	}
	r.printf("| rampmeter against itself | ratio |\n|---|---|\n%s\n\n", strings.Join(lines, "\n"))
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}

func xOrDash(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "–"
	}
	return fmt.Sprintf("%.2fx", x)
}

func keysTitle(keys int) string {
	if keys == 1 {
		return "1 hot key"
	}
	if keys%1000 == 0 {
		return fmt.Sprintf("%dk keys", keys/1000)
	}
	return fmt.Sprintf("%d keys", keys)
}

// ---------------------------------------------------------------- 1. decision

func (r *report) decisionTable() {
	d := r.decision
	if d == nil {
		return
	}
	r.printf("## 1. In-memory decision (ns per decision; x = vs %s, rampmeter's `Limiter.Take`)\n\n", rmDecision)
	r.printf("One \"may key K do one more request?\" decision, the limit so high that nothing is refused. Serial: one goroutine, one key. Parallel: `b.RunParallel` on GOMAXPROCS goroutines, over 10,000 existing keys at random or all on one key. B/op and allocs/op are the serial case's.\n\n")
	r.printf("| adapter | serial, 1 key | parallel, 10k keys | parallel, 1 hot key | B/op | allocs/op | errors/op (hot) | ± per case |\n|---|---|---|---|---|---|---|---|\n")
	for _, n := range r.order(d.rows(), false) {
		cells := []string{r.label(n, false)}
		var spreads []string
		for _, c := range decisionCases {
			v := d[n][c.key]["ns/op"]
			if len(v) == 0 {
				cells = append(cells, "n/a")
				spreads = append(spreads, "–")
				continue
			}
			cells = append(cells, withRatio(median(v), d.med(rmDecision, c.key, "ns/op")))
			spreads = append(spreads, fmt.Sprintf("%.0f", 100*spread(v)))
		}
		cells = append(cells, num(d.med(n, "serial-hot", "B/op")), num(d.med(n, "serial-hot", "allocs/op")))
		e := "0"
		if h := d[n]["parallel-hot"]; len(h["errors/op"]) > 0 {
			e = fmt.Sprintf("%.2g in %d of %d runs", median(h["errors/op"]), len(h["errors/op"]), len(h["ns/op"]))
		}
		cells = append(cells, e, strings.Join(spreads, "/")+"%")
		r.printf("| %s |\n", strings.Join(cells, " | "))
	}
	if p := d[""]["BenchmarkNoiseProbe"]; p != nil {
		r.printf("\nNoise probe (CRC-32 of 4 KiB, pure CPU): median %s ns, spread %s over %d runs: the machine's noise floor for this table.", num(median(p["ns/op"])), pct(spread(p["ns/op"])), len(p["ns/op"]))
	}
	if p := d[""]["BenchmarkClockNow"]; p != nil {
		r.printf(" `time.Now()` costs %s ns here.", num(median(p["ns/op"])))
	}
	r.printf("\n\n")
}

// ---------------------------------------------------------------- 2. middleware

func (r *report) middlewareTable() {
	d := r.middleware
	if d == nil {
		return
	}
	r.printf("## 2. Middleware, in process (ns per request; added = over the bare handler; x = added time vs %s's)\n\n", rmMiddleware)
	r.printf("A trivial handler behind each middleware keyed by client IP, `httptest` requests and a reusable ResponseWriter, so that the figures are the middleware's own cost plus the trivial handler's (the `bare` row). B/op and allocs/op are the serial case's, with what the middleware adds over bare.\n\n")
	r.printf("| middleware | serial, 1 IP | added | parallel, 10k IPs | added | B/op (added) | allocs/op (added) | max ± |\n|---|---|---|---|---|---|---|---|\n")
	bare := func(c, unit string) float64 { return d.med(bareMW, c, unit) }
	for _, n := range r.order(d.rows(), true) {
		cells := []string{r.label(n, true)}
		var sp float64
		for _, c := range middlewareCases {
			v := d.med(n, c.key, "ns/op")
			added := v - bare(c.key, "ns/op")
			cell := signed(added)
			if n != bareMW {
				if t := times(added, d.med(rmMiddleware, c.key, "ns/op")-bare(c.key, "ns/op")); t != "" {
					cell += " (" + t + ")"
				}
			} else {
				cell = "–"
			}
			cells = append(cells, num(v), cell)
			sp = math.Max(sp, spread(d[n][c.key]["ns/op"]))
		}
		for _, u := range []string{"B/op", "allocs/op"} {
			v := d.med(n, "serial-1ip", u)
			cells = append(cells, fmt.Sprintf("%s (%s)", num(v), signed(v-bare("serial-1ip", u))))
		}
		cells = append(cells, pct(sp))
		r.printf("| %s |\n", strings.Join(cells, " | "))
	}
	r.printf("\n")
}

// ---------------------------------------------------------------- 3. wrk

var (
	wrkRPS     = regexp.MustCompile(`Requests/sec:\s+([\d.]+)`)
	wrkNon2xx  = regexp.MustCompile(`Non-2xx or 3xx responses:\s+(\d+)`)
	wrkPct     = regexp.MustCompile(`^\s+(50|99)%\s+([\d.]+)(us|ms|s)\s*$`)
	wrkFileRex = regexp.MustCompile(`^(.+)\.(\d+)\.txt$`)
)

type wrkAgg struct {
	rps, p50, p99 []float64
	non2xx        float64
}

func readWrk(dir string) map[string]*wrkAgg {
	files, _ := filepath.Glob(filepath.Join(dir, "*.txt"))
	if len(files) == 0 {
		return nil
	}
	data := map[string]*wrkAgg{}
	for _, f := range files {
		m := wrkFileRex.FindStringSubmatch(filepath.Base(f))
		b, err := os.ReadFile(f)
		if m == nil || err != nil {
			continue
		}
		a := data[m[1]]
		if a == nil {
			a = &wrkAgg{}
			data[m[1]] = a
		}
		txt := string(b)
		if x := wrkRPS.FindStringSubmatch(txt); x != nil {
			v, _ := strconv.ParseFloat(x[1], 64)
			a.rps = append(a.rps, v)
		}
		if x := wrkNon2xx.FindStringSubmatch(txt); x != nil {
			v, _ := strconv.ParseFloat(x[1], 64)
			a.non2xx += v
		}
		for _, line := range strings.Split(txt, "\n") {
			if x := wrkPct.FindStringSubmatch(line); x != nil {
				v, _ := strconv.ParseFloat(x[2], 64)
				switch x[3] {
				case "ms":
					v *= 1e3
				case "s":
					v *= 1e6
				}
				if x[1] == "50" {
					a.p50 = append(a.p50, v)
				} else {
					a.p99 = append(a.p99, v)
				}
			}
		}
	}
	return data
}

func (r *report) wrkTable() {
	d := r.wrk
	if d == nil {
		return
	}
	base := math.NaN()
	if b := d[bareMW]; b != nil {
		base = median(b.rps)
	}
	r.printf("## 3. Real HTTP server on loopback under wrk (requests/s; x = vs the bare server)\n\n")
	r.printf("cmd/httpserve serves the same trivial handler behind each middleware; wrk and the server share the machine's cores unless the settings line shows -wrk-cpus (then each has its own CPUs, and the server's throughput is its CPU cost per request), so this is the throughput a middleware leaves to a small handler. All requests come from one client IP: one hot key.\n\n")
	r.printf("| middleware | requests/s | p50 µs | p99 µs | non-2xx | runs | ± |\n|---|---|---|---|---|---|---|\n")
	for _, n := range r.order(sortedKeys(d), true) {
		a := d[n]
		r.printf("| %s | %s | %s | %s | %.0f | %d | %s |\n", r.label(n, true), withRatio(median(a.rps), base),
			num(median(a.p50)), num(median(a.p99)), a.non2xx, len(a.rps), pct(spread(a.rps)))
	}
	r.printf("\n")
}

// ---------------------------------------------------------------- 4. Redis

type redisRow struct {
	Adapter   string  `json:"adapter"`
	Kind      string  `json:"kind"`
	C         int     `json:"c"`
	Keys      int     `json:"keys"`
	OpsPerSec float64 `json:"ops_per_s"`
	P50       float64 `json:"p50_us"`
	P99       float64 `json:"p99_us"`
	Ops       int64   `json:"ops"`
	Errors    int64   `json:"errors"`
	Denied    int64   `json:"denied"`
	RTT       float64 `json:"rtt_per_op"`
	Cmds      float64 `json:"redis_cmds_per_op"`
	CliCPU    float64 `json:"client_cpu_us_per_op"`
	SrvCPU    float64 `json:"server_cpu_us_per_op"`
}

type redisAgg struct {
	v         map[string][]float64 // ops, p50, p99, rtt, cmds, cli, srv
	errs, ops int64
	kind      string
}

type redisData struct {
	rows map[string]map[redisConfig]*redisAgg
	cfgs []redisConfig // by concurrency, then most keys first
}

func readRedis(path string) redisData {
	b, err := os.ReadFile(path)
	if err != nil {
		return redisData{}
	}
	d := redisData{rows: map[string]map[redisConfig]*redisAgg{}}
	seen := map[redisConfig]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var x redisRow
		if json.Unmarshal(sc.Bytes(), &x) != nil || x.Adapter == "" {
			continue
		}
		c := redisConfig{x.C, x.Keys}
		if !seen[c] {
			seen[c] = true
			d.cfgs = append(d.cfgs, c)
		}
		if d.rows[x.Adapter] == nil {
			d.rows[x.Adapter] = map[redisConfig]*redisAgg{}
		}
		a := d.rows[x.Adapter][c]
		if a == nil {
			a = &redisAgg{v: map[string][]float64{}, kind: x.Kind}
			d.rows[x.Adapter][c] = a
		}
		for k, v := range map[string]float64{"ops": x.OpsPerSec, "p50": x.P50, "p99": x.P99, "rtt": x.RTT, "cmds": x.Cmds, "cli": x.CliCPU, "srv": x.SrvCPU} {
			a.v[k] = append(a.v[k], v)
		}
		a.errs += x.Errors
		a.ops += x.Ops
	}
	sort.Slice(d.cfgs, func(i, j int) bool {
		if d.cfgs[i].c != d.cfgs[j].c {
			return d.cfgs[i].c < d.cfgs[j].c
		}
		return d.cfgs[i].keys > d.cfgs[j].keys
	})
	if len(d.rows) == 0 {
		return redisData{}
	}
	return d
}

func (d redisData) med(name string, c redisConfig, k string) float64 {
	a := d.rows[name][c]
	if a == nil {
		return math.NaN()
	}
	return median(a.v[k])
}

// hi is the configuration the per-decision costs are taken from: the
// highest concurrency, and among those the most keys.
func (d redisData) hi() (redisConfig, bool) {
	if len(d.cfgs) == 0 {
		return redisConfig{}, false
	}
	h := d.cfgs[0]
	for _, c := range d.cfgs {
		if c.c > h.c || (c.c == h.c && c.keys > h.keys) {
			h = c
		}
	}
	return h, true
}

func (r *report) redisTable() {
	d := r.redis
	if d.rows == nil {
		return
	}
	r.printf("## 4. Redis-backed decisions (decisions/s on a local redis-server; x = vs %s, `return 1` through the same go-redis client)\n\n", trivialRedis)
	r.printf("cmd/redisbench runs c goroutines for a fixed time over the keys, one go-redis client (pool size c) shared by every adapter's settings; the limit is so high that nothing is refused. The load generator, go-redis and redis-server share the machine's cores, so c=64 is CPU-bound, not network-bound.\n\n")
	hdr, sep := "| adapter |", "|---|"
	for _, c := range d.cfgs {
		hdr += fmt.Sprintf(" c=%d, %s: dec/s | p50 / p99 µs |", c.c, keysTitle(c.keys))
		sep += "---|---|"
	}
	hi, _ := d.hi()
	hdr += " round trips / dec | Redis commands / dec | Redis CPU µs / dec | client CPU µs / dec | errors | max ± |"
	sep += "---|---|---|---|---|---|"
	r.printf("%s\n%s\n", hdr, sep)
	names := r.order(sortedKeys(d.rows), false)
	for _, n := range names {
		line := "| " + r.label(n, false) + " |"
		var errs []string
		var sp float64
		for _, c := range d.cfgs {
			a := d.rows[n][c]
			if a == nil {
				line += " – | – |"
				continue
			}
			line += fmt.Sprintf(" %s | %s / %s |", withRatio(median(a.v["ops"]), d.med(trivialRedis, c, "ops")), num(median(a.v["p50"])), num(median(a.v["p99"])))
			if a.errs > 0 && a.ops > 0 {
				errs = append(errs, fmt.Sprintf("%.1f%% at c=%d %s", 100*float64(a.errs)/float64(a.ops), c.c, keysTitle(c.keys)))
			}
			sp = math.Max(sp, spread(a.v["ops"]))
		}
		if d.rows[n][hi] == nil {
			line += " – | – | – | – |"
		} else {
			line += fmt.Sprintf(" %.2f | %.2f | %s | %s |", d.med(n, hi, "rtt"), d.med(n, hi, "cmds"),
				withRatio(d.med(n, hi, "srv"), d.med(trivialRedis, hi, "srv")), num(d.med(n, hi, "cli")))
		}
		e := "0"
		if len(errs) > 0 {
			e = strings.Join(errs, "; ")
		}
		line += fmt.Sprintf(" %s | %s |", e, pct(sp))
		r.printf("%s\n", line)
	}
	r.printf("\nRound trips, commands and CPU per decision are from c=%d, %s; the Redis CPU's x is vs the trivial EVALSHA's. Client CPU is the whole load generator (go-redis, the library and the harness); Redis CPU is redis-server's used_cpu_user + used_cpu_sys (INFO).\n\n", hi.c, keysTitle(hi.keys))
}

// ---------------------------------------------------------------- 4b. redis-benchmark

func (r *report) refbenchTable(path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	type agg struct{ rps, p50, p99 []float64 }
	data := map[string]*agg{}
	var order []string
	for _, line := range strings.Split(string(b), "\n") {
		// label,"test","rps","avg_latency_ms","min","p50","p95","p99","max"
		label, rest, ok := strings.Cut(line, ",")
		if !ok || strings.Contains(rest, `"rps"`) {
			continue
		}
		f := strings.Split(strings.ReplaceAll(rest, `"`, ""), ",")
		if len(f) < 8 {
			continue
		}
		rps, _ := strconv.ParseFloat(f[1], 64)
		p50, _ := strconv.ParseFloat(f[4], 64)
		p99, _ := strconv.ParseFloat(f[6], 64)
		key := label + " " + f[0]
		a := data[key]
		if a == nil {
			a = &agg{}
			data[key] = a
			order = append(order, key)
		}
		a.rps = append(a.rps, rps)
		a.p50 = append(a.p50, p50*1e3)
		a.p99 = append(a.p99, p99*1e3)
	}
	if len(order) == 0 {
		return
	}
	r.printf("### 4b. Physical reference: redis-benchmark (the C client, same server)\n\n")
	r.printf("| test | requests/s | p50 µs | p99 µs | runs | ± |\n|---|---|---|---|---|---|\n")
	for _, k := range order {
		a := data[k]
		r.printf("| %s | %s | %s | %s | %d | %s |\n", k, num(median(a.rps)), num(median(a.p50)), num(median(a.p99)), len(a.rps), pct(spread(a.rps)))
	}
	r.printf("\n")
}

// ---------------------------------------------------------------- notes

func (r *report) adapterNotes() {
	if len(r.info) == 0 {
		return
	}
	r.printf("<details><summary>What each row drives</summary>\n\n| row | kind | module@version | how it is driven |\n|---|---|---|---|\n")
	for _, k := range sortedKeys(r.info) {
		a := r.info[k]
		mod := "–"
		if a.Module != "" {
			mod = "`" + a.Module + "@" + a.Version + "`"
		}
		r.printf("| %s | %s | %s | %s |\n", r.label(a.Name, a.Kind == "middleware"), a.Kind, mod, strings.ReplaceAll(a.Note, "|", "\\|"))
	}
	r.printf("\n</details>\n")
}

// ---------------------------------------------------------------- drift between runs

// compareRuns prints how much the medians of run b moved from run a's, per
// section: the size of run-to-run noise on this machine.
func compareRuns(w io.Writer, a, b string) {
	ma, mb := medians(a), medians(b)
	type change struct {
		key string
		r   float64
	}
	bySec := map[string][]change{}
	for k, va := range ma {
		vb, ok := mb[k]
		if !ok || va == 0 || math.IsNaN(va) || math.IsNaN(vb) {
			continue
		}
		sec, _, _ := strings.Cut(k, " | ")
		bySec[sec] = append(bySec[sec], change{k, vb / va})
	}
	fmt.Fprintf(w, "## Run-to-run drift of medians: %s against %s\n\n", filepath.Base(b), filepath.Base(a))
	fmt.Fprintf(w, "| section | metric | rows | median absolute change | largest change (row) |\n|---|---|---|---|---|\n")
	for _, sec := range []string{"decision", "middleware", "wrk", "redis"} {
		cs := bySec[sec]
		if len(cs) == 0 {
			continue
		}
		var abs []float64
		worst := cs[0]
		for _, c := range cs {
			abs = append(abs, math.Abs(c.r-1))
			if math.Abs(c.r-1) > math.Abs(worst.r-1) {
				worst = c
			}
		}
		metric := map[string]string{"decision": "ns/op", "middleware": "ns/op", "wrk": "requests/s", "redis": "decisions/s"}[sec]
		_, row, _ := strings.Cut(worst.key, " | ")
		fmt.Fprintf(w, "| %s | %s | %d | %.0f%% | %+.0f%% (%s) |\n", sec, metric, len(cs), 100*median(abs), 100*(worst.r-1), row)
	}
	fmt.Fprintln(w)
}

// medians flattens a results directory into "section | row" -> median.
func medians(dir string) map[string]float64 {
	out := map[string]float64{}
	for _, sec := range []string{"decision", "middleware"} {
		for row, cases := range readBench(filepath.Join(dir, sec+".txt")) {
			for cs, units := range cases {
				out[sec+" | "+row+" "+cs] = median(units["ns/op"])
			}
		}
	}
	for n, a := range readWrk(filepath.Join(dir, "wrk")) {
		out["wrk | "+n] = median(a.rps)
	}
	d := readRedis(filepath.Join(dir, "redis.jsonl"))
	for n, cs := range d.rows {
		for c := range cs {
			out[fmt.Sprintf("redis | %s c=%d keys=%d", n, c.c, c.keys)] = d.med(n, c, "ops")
		}
	}
	return out
}
