// Command fleetsim simulates a fleet of 100 instances sharing limits
// through store/lease over one in-process backing store, on a fake clock,
// for several lease lifetimes, and draws the result as an SVG (the
// README's plot):
//
//	go run ./internal/cmd/fleetsim -o internal/cmd/fleetsim/fleetsim.svg
//
// It prints a table of the runs: requests, admitted by the fleet and by a
// single global bucket deciding the same requests, the refusals that
// bucket would have admitted, backing-store calls per decision, units
// idle in leases, the crashed instance's units, the units of bucket leases
// that drained while held (not given back: see store/lease, Bounds), and
// the over-admission bound on the hottest key. The
// scenario is described in sim.go. The test TestSVGUpToDate fails when
// the committed SVG is not what this command draws.
package main

//go:generate go run . -o fleetsim.svg

import (
	"flag"
	"fmt"
	"os"
	"time"
)

// lifetimes are the runs: no leasing, then lease lifetimes.
var lifetimes = []time.Duration{0, 50 * time.Millisecond, 200 * time.Millisecond, time.Second, 5 * time.Second}

// seriesRun is the lifetime whose time series the plot shows.
const seriesRun = time.Second

func main() {
	outPath := flag.String("o", "", "write the SVG to this file")
	flag.Parse()
	runs, err := simulateAll()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleetsim:", err)
		os.Exit(1)
	}
	fmt.Print(table(runs))
	if *outPath != "" {
		if err := os.WriteFile(*outPath, render(runs), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "fleetsim:", err)
			os.Exit(1)
		}
	}
}

func simulateAll() ([]*Run, error) {
	var runs []*Run
	for _, l := range lifetimes {
		r, err := simulate(l)
		if err != nil {
			return nil, fmt.Errorf("lifetime %v: %w", l, err)
		}
		runs = append(runs, r)
	}
	return runs, nil
}

func lifetimeName(l time.Duration) string {
	if l == 0 {
		return "no lease"
	}
	return "L=" + l.String()
}

func table(runs []*Run) string {
	s := fmt.Sprintf("%-9s %8s %8s %8s %7s %6s %9s %7s %5s %8s %13s %10s\n",
		"lifetime", "requests", "admitted", "global", "missed", "extra", "calls/dec", "maxHeld", "lost", "drained", "hot 1s span", "overcharge")
	for _, r := range runs {
		s += fmt.Sprintf("%-9s %8d %8d %8d %7d %6d %9.4f %7d %5d %8d %6d ≤ %-4d %10d\n",
			lifetimeName(r.Lifetime), r.Requests, r.Admitted, r.Global, r.Missed, r.Extra, r.CallsPerDecision(),
			r.MaxHeld, r.Lost, r.Stats.Drained, r.Span, r.SpanBound, r.OverCharged)
	}
	return s
}
