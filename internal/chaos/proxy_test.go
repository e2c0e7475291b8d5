package chaos

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// proxyMode is what a faultProxy does with the traffic of its connections.
type proxyMode int32

const (
	// forwarding passes every command to Redis and every reply back.
	forwarding proxyMode = iota
	// swallowing reads every byte clients send, on open connections and
	// on new ones (which it still accepts: the TCP handshake completes),
	// and drops it: nothing reaches Redis and nothing is answered, as
	// with a black-holed route or a dead server whose kernel still
	// accepts.
	swallowing
	// droppingReplies passes commands to Redis, which runs them, and
	// drops their replies: a timeout after send whose outcome is "it
	// happened".
	droppingReplies
	// resettingScripts passes every other command on, and each script
	// (EVALSHA, EVAL) too, which Redis runs; then it closes the client's
	// connection before the reply: a connection lost after send, whose
	// outcome is "it happened", and which go-redis would retry.
	resettingScripts
)

// faultProxy is a loopback TCP proxy in front of a redis-server that
// counts the commands clients send through it, by name, whether it
// forwards them or not, and can be switched to lose traffic (proxyMode).
// A connection that lost any traffic (a request swallowed, or one whose
// reply is to be lost) stays cut for good, both ways: its byte stream is
// out of step, and the client must replace it.
type faultProxy struct {
	ln       net.Listener
	upstream string
	mode     atomic.Int32 // a proxyMode

	mu       sync.Mutex
	closed   bool
	commands map[string]int // lower-case command name -> commands received
	conns    []*proxyConn
}

// proxyConn is one client connection and its connection to Redis.
type proxyConn struct {
	client, up net.Conn
	cut        atomic.Bool
	pumps      sync.WaitGroup // the two copy loops
	done       chan struct{}  // closed when both loops have ended
}

// startProxy starts a faultProxy in forwarding mode in front of upstream
// and closes it (every connection, every goroutine) when t ends.
func startProxy(t testing.TB, upstream string) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{ln: ln, upstream: upstream, commands: map[string]int{}}
	accepting := make(chan struct{})
	go func() {
		defer close(accepting)
		p.accept()
	}()
	t.Cleanup(func() {
		p.close()
		<-accepting
	})
	return p
}

// Addr is the address clients dial.
func (p *faultProxy) Addr() string { return p.ln.Addr().String() }

// set switches the mode, for open connections and new ones.
func (p *faultProxy) set(m proxyMode) { p.mode.Store(int32(m)) }

func (p *faultProxy) current() proxyMode { return proxyMode(p.mode.Load()) }

// count returns how many commands with any of the names (lower case) the
// proxy has received.
func (p *faultProxy) count(names ...string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, name := range names {
		n += p.commands[name]
	}
	return n
}

// scripts returns how many script calls (FCALL, EVALSHA, EVAL) the proxy
// received.
func (p *faultProxy) scripts() int { return p.count("fcall", "evalsha", "eval") }

// accepted returns how many connections the proxy has accepted.
func (p *faultProxy) accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// settle waits (at most 5 s in all) until the proxy has received at least
// scripts EVALSHA and EVAL commands and every connection that lost
// traffic has been closed by its client and its Redis connection has
// ended. A client writes a command before it waits for the reply, so a
// call that returned has written all it will; once the proxy has read it
// and the lost connections have ended, the counts are final for them and
// Redis has run every command forwarded on them.
func (p *faultProxy) settle(scripts int) error {
	deadline := time.Now().Add(5 * time.Second)
	for p.scripts() < scripts {
		if time.Now().After(deadline) {
			return fmt.Errorf("the proxy received %d scripts, want at least %d", p.scripts(), scripts)
		}
		time.Sleep(time.Millisecond)
	}
	p.mu.Lock()
	conns := append([]*proxyConn(nil), p.conns...)
	p.mu.Unlock()
	timeout := time.After(time.Until(deadline))
	for i, c := range conns {
		if !c.cut.Load() {
			continue
		}
		select {
		case <-c.done:
		case <-timeout:
			return fmt.Errorf("proxy connection %d lost traffic but its client has not closed it within 5 s", i)
		}
	}
	return nil
}

func (p *faultProxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.upstream)
		if err != nil {
			_ = client.Close()
			continue
		}
		c := &proxyConn{client: client, up: up, done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = client.Close()
			_ = up.Close()
			return
		}
		p.conns = append(p.conns, c)
		p.mu.Unlock()
		c.pumps.Add(2)
		go p.requests(c)
		go p.replies(c)
		go func() {
			c.pumps.Wait()
			close(c.done)
		}()
	}
}

// requests copies commands from the client to Redis, counting them, and
// decides each command's fate by the mode when it reads it (the test may
// switch modes as soon as a reply is back, before this loop goes on). When
// the client closes, it half-closes the Redis connection, so that Redis
// still runs what it received and then closes its side.
func (p *faultProxy) requests(c *proxyConn) {
	defer c.pumps.Done()
	r := bufio.NewReader(c.client)
	for {
		name, raw, err := readRESPCommand(r)
		if err != nil {
			_ = c.up.(*net.TCPConn).CloseWrite()
			return
		}
		mode := p.current()
		p.mu.Lock()
		p.commands[name]++
		p.mu.Unlock()
		if c.cut.Load() {
			continue
		}
		reset := mode == resettingScripts && (name == "fcall" || name == "evalsha" || name == "eval")
		switch {
		case mode == swallowing:
			c.cut.Store(true)
			continue
		case mode == droppingReplies || reset:
			c.cut.Store(true) // before the write: no reply may get through
		}
		if _, err := c.up.Write(raw); err != nil {
			c.cut.Store(true)
		}
		if reset {
			// Redis got the script before the half-close that follows
			// the client's EOF: it runs it.
			_ = c.client.Close()
		}
	}
}

// replies copies Redis's replies to the client, unless the connection is
// cut, until Redis closes the connection; then it closes both.
func (p *faultProxy) replies(c *proxyConn) {
	defer c.pumps.Done()
	defer c.client.Close()
	defer c.up.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := c.up.Read(buf)
		if n > 0 && !c.cut.Load() {
			if _, werr := c.client.Write(buf[:n]); werr != nil {
				c.cut.Store(true)
			}
		}
		if err != nil {
			return
		}
	}
}

// close stops accepting, closes every connection and waits for their
// goroutines.
func (p *faultProxy) close() {
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.mu.Unlock()
	_ = p.ln.Close()
	for _, c := range conns {
		_ = c.client.Close()
		_ = c.up.Close()
		<-c.done
	}
}

// readRESPCommand reads one command, a RESP array of bulk strings (what
// go-redis sends), and returns its lower-case name and its raw bytes.
func readRESPCommand(r *bufio.Reader) (name string, raw []byte, err error) {
	line, err := r.ReadBytes('\n')
	if err != nil {
		return "", nil, err
	}
	raw = line
	if len(line) < 4 || line[0] != '*' {
		return "", nil, fmt.Errorf("not a RESP array: %q", line)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(line[1:])))
	if err != nil || n < 1 {
		return "", nil, fmt.Errorf("bad array header %q", line)
	}
	for i := 0; i < n; i++ {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return "", nil, err
		}
		if len(line) < 4 || line[0] != '$' {
			return "", nil, fmt.Errorf("not a bulk string: %q", line)
		}
		size, err := strconv.Atoi(strings.TrimSpace(string(line[1:])))
		if err != nil || size < 0 {
			return "", nil, fmt.Errorf("bad bulk header %q", line)
		}
		raw = append(raw, line...)
		start := len(raw)
		raw = append(raw, make([]byte, size+2)...)
		if _, err := io.ReadFull(r, raw[start:]); err != nil {
			return "", nil, err
		}
		if i == 0 {
			name = strings.ToLower(string(raw[start : start+size]))
		}
	}
	if name == "" {
		return "", nil, errors.New("empty command name")
	}
	return name, raw, nil
}
