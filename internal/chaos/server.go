// Package chaos runs the fault-injection tests of rampmeter against real
// redis-server processes that the tests start themselves, each on a free
// loopback port (never the shared server on 6379), and stop by process ID.
// Some tests put a loopback proxy of their own in front of the server, to
// lose traffic on demand (faultProxy).
//
// The tests skip when no redis-server binary is on PATH, unless
// RAMPMETER_REQUIRE_REDIS=1 (set by CI), in which case they fail.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a redis-server process started for one test.
type Server struct {
	t    testing.TB
	bin  string
	Addr string // 127.0.0.1:port, the same across restarts
	args []string

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	stopped bool // SIGSTOP sent, SIGCONT not yet
}

// StartRedis starts a redis-server without persistence on a free loopback
// port and stops it (by its PID) when t ends. Extra arguments are passed as
// configuration ("--maxmemory", "1mb", ...).
func StartRedis(t testing.TB, extra ...string) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("RAMPMETER_REQUIRE_REDIS") == "1" {
			t.Fatalf("redis-server required (RAMPMETER_REQUIRE_REDIS=1) but not on PATH: %v", err)
		}
		t.Skipf("no redis-server on PATH (%v)", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	s := &Server{t: t, bin: bin, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	s.args = append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--protected-mode", "no", "--loglevel", "warning", "--dir", t.TempDir()}, extra...)
	t.Cleanup(s.Kill)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	return s
}

// Start starts the server (again, after Kill or Shutdown) on its port and
// waits until it answers PING (at most 5 s).
func (s *Server) Start() error {
	s.mu.Lock()
	cmd := exec.Command(s.bin, s.args...)
	cmd.Stdout, cmd.Stderr = nil, nil
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.cmd, s.exited, s.stopped = cmd, exited, false
	s.mu.Unlock()

	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("redis-server on %s exited at start", s.Addr)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s does not answer: %w", s.Addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// PID returns the process ID of the running server.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd.Process.Pid
}

// signal sends sig to the server's process (by PID) if it runs.
func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return errors.New("not running")
	}
	select {
	case <-s.exited:
		return errors.New("exited")
	default:
	}
	switch sig {
	case syscall.SIGSTOP:
		s.stopped = true
	case syscall.SIGCONT:
		s.stopped = false
	}
	return syscall.Kill(s.cmd.Process.Pid, sig)
}

// Pause freezes the process (SIGSTOP): it keeps its sockets, accepts
// connections and answers nothing, as a hung server would.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume continues a paused process (SIGCONT).
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT) }

// Kill ends the process with SIGKILL (no shutdown: connections drop) and
// waits for it to exit. It is safe to call when the server is not running.
func (s *Server) Kill() { s.end(syscall.SIGKILL) }

// Shutdown ends the process with SIGTERM (a clean shutdown, without
// saving) and waits for it to exit.
func (s *Server) Shutdown() { s.end(syscall.SIGTERM) }

func (s *Server) end(sig syscall.Signal) {
	s.mu.Lock()
	cmd, exited, stopped := s.cmd, s.exited, s.stopped
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-exited:
		return
	default:
	}
	_ = syscall.Kill(cmd.Process.Pid, sig)
	if stopped {
		_ = syscall.Kill(cmd.Process.Pid, syscall.SIGCONT) // a stopped process acts on SIGTERM only once continued
	}
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	}
}
