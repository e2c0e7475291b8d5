// Package sdktest drives rampmeter's demo API (../_example) with the
// official OpenAI SDKs over real HTTP: openai-go here, the Node openai
// package in node/ (TestNodeSDK). It is a module of its own so that the
// SDKs never reach the library's users' builds; CI runs it (.ci/run).
//
// TestMain builds the demo and serves it on a free loopback port with
// -rpm 60 -tpd 2000 (the free plan, sk-free-…) on its embedded miniredis;
// every test uses API keys of its own, so each starts from full budgets.
// The demo's fake model is deterministic (see ../_example/model.go):
//
//	prompt tokens     = Σ ceil(bytes of each message's content / 4)
//	completion tokens = min(max_tokens, 50)
//	estimate          = prompt tokens + max_tokens, reserved (at most 1,000: half of -tpd)
//
// so every figure below follows from the request.
package sdktest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	demoRPM = 60   // -rpm: free plan requests per minute
	demoTPD = 2000 // -tpd: free plan tokens per day
)

// demoURL is the base URL of the OpenAI-style API (…/v1) once TestMain
// has started the demo.
var demoURL string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "rampmeter-sdktest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "demo")
	build := exec.Command("go", "build", "-o", bin, "./_example")
	build.Dir = ".." // the library's module
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the demo: %v\n%s", err, out)
		return 1
	}
	addr, err := freeAddr()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var log strings.Builder
	demo := exec.Command(bin, "-addr", addr, "-rpm", fmt.Sprint(demoRPM), "-tpd", fmt.Sprint(demoTPD))
	out := &syncWriter{w: &log} // one lock for both streams
	demo.Stdout, demo.Stderr = out, out
	if err := demo.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "starting the demo:", err)
		return 1
	}
	defer func() {
		_ = demo.Process.Kill()
		_ = demo.Wait()
	}()
	if err := waitHealthy("http://"+addr+"/healthz", 60*time.Second); err != nil {
		fmt.Fprintf(os.Stderr, "the demo did not come up: %v\n%s", err, out.String())
		return 1
	}
	demoURL = "http://" + addr + "/v1"
	return m.Run()
}

// freeAddr returns a loopback address with a port nobody listens on.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func waitHealthy(url string, within time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (last error: %v)", url, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

type syncWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.String()
}

// newKey returns an API key of the free plan that no other test uses.
func newKey(t *testing.T) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "sk-free-" + hex.EncodeToString(b[:])
}

// attempt is one HTTP exchange an SDK made.
type attempt struct {
	sent, answered time.Time
	status         int
	header         http.Header
}

// recorder is an http.RoundTripper that records every attempt. Closing a
// response's body reads it to its end first: the SDKs stop reading a
// stream at "data: [DONE]", but the demo settles a stream's usage when its
// handler returns, which is after [DONE] and before the response's end, so
// a client that reads to the end sees the settled state in its next call
// (one that does not may see the reservation for a few milliseconds).
type recorder struct {
	mu       sync.Mutex
	attempts []attempt
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	sent := time.Now()
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.attempts = append(r.attempts, attempt{sent: sent, answered: time.Now(), status: resp.StatusCode, header: resp.Header.Clone()})
	r.mu.Unlock()
	resp.Body = drainOnClose{resp.Body}
	return resp, nil
}

type drainOnClose struct{ io.ReadCloser }

func (b drainOnClose) Close() error {
	_, _ = io.Copy(io.Discard, b.ReadCloser)
	return b.ReadCloser.Close()
}

func (r *recorder) all() []attempt {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]attempt(nil), r.attempts...)
}

func (r *recorder) statuses() []int {
	var s []int
	for _, a := range r.all() {
		s = append(s, a.status)
	}
	return s
}
