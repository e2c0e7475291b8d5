// Command plot draws docs/algorithms.svg, the README's picture of the six
// rate-limit algorithms under the same traffic: for each algorithm and each
// traffic pattern of the README's algorithm table (a burst after idle, a
// steady twice the rate, bursts at window boundaries), the requests offered,
// admitted and, for the leaky bucket, sent, over time. Every number comes
// from the library's Limiter on the memory store, driven by a fake clock;
// the drawing is deterministic, and a test fails when the committed file
// is not what this command draws.
//
// Run it from the repository root:
//
//	go run ./internal/cmd/plot
//
// The -o flag names another output file.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
)

// output is the committed picture, relative to the repository root.
const output = "docs/algorithms.svg"

func main() {
	out := flag.String("o", output, "the SVG `file` to write")
	flag.Parse()
	if err := write(*out, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "plot:", err)
		os.Exit(1)
	}
}

// write draws the picture into the file out and says so on log.
func write(out string, log io.Writer) error {
	svg, err := draw()
	if err != nil {
		return err
	}
	if err := os.WriteFile(out, svg, 0o644); err != nil {
		return fmt.Errorf("%w (run from the repository root, or name the file with -o)", err)
	}
	_, err = fmt.Fprintf(log, "wrote %s (%d bytes)\n", out, len(svg))
	return err
}
