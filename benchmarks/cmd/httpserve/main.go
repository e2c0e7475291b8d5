// Command httpserve serves a trivial handler wrapped by one registered
// middleware on a loopback address, for wrk. It exits by itself after
// -lifetime so a forgotten server never lingers.
//
//	httpserve -mw httprate-LimitByIP -addr 127.0.0.1:18080
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	_ "github.com/rampmeter/ratelimit/benchmarks/adapters"
	"github.com/rampmeter/ratelimit/benchmarks/decider"
)

var okBody = []byte("ok\n")

func main() {
	name := flag.String("mw", "bare", "middleware name (see -list)")
	addr := flag.String("addr", "127.0.0.1:18080", "listen address (loopback only)")
	lifetime := flag.Duration("lifetime", 2*time.Minute, "exit after this long")
	list := flag.Bool("list", false, "list middlewares and exit")
	flag.Parse()
	if *list {
		for _, m := range decider.Middlewares() {
			v := ""
			if m.Module != "" {
				v = m.Module + "@" + decider.ModuleVersion(m.Module)
			}
			fmt.Printf("%-24s %-42s %s\n", m.Name, v, m.Note)
		}
		return
	}
	host, _, err := net.SplitHostPort(*addr)
	if err != nil || !net.ParseIP(host).IsLoopback() {
		fmt.Fprintln(os.Stderr, "refusing non-loopback address", *addr)
		os.Exit(2)
	}
	m, ok := decider.LookupMiddleware(*name)
	if !ok {
		fmt.Fprintln(os.Stderr, "unknown middleware", *name)
		os.Exit(2)
	}
	mw, closeFn, err := m.New(decider.HighLimit())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if closeFn != nil {
		defer closeFn()
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(okBody)
	}))
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		select {
		case <-ctx.Done():
		case <-time.After(*lifetime):
		}
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	fmt.Fprintf(os.Stderr, "httpserve: %s on %s\n", m.Name, ln.Addr())
	if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
