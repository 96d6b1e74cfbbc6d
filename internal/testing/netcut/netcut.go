// Package netcut is a TCP proxy for tests that cut a network between two processes (a fleet
// spoke's agent and its hub's API server): it listens on a local port, dials the upstream for
// every connection it accepts and copies both ways, and a switch says what the network does:
//
//   - Pass: bytes go through.
//   - Cut: every open connection is closed at once and every new one is reset as it is
//     accepted (the peer sees the connection fail fast, as when a host is down and says so).
//   - Blackhole: nothing answers. Open connections stop moving bytes; new ones are accepted
//     and held without dialling the upstream. The ends see silence until their own timeouts, as
//     in a partition where packets are dropped on the way. Nothing is thrown away: TCP under a
//     real partition retransmits what it sent, so when the network heals (Pass) the held bytes
//     go on and the held connections are connected, unless an end gave up meanwhile.
//   - Delay: every chunk is passed on d after it was read, each way.
//
// toxiproxy does the same and more, with an HTTP API, metrics and logging brought into the test
// module; docs/fleet.md ("The proxy") says why this is enough.
package netcut

import (
	"net"
	"sync"
	"time"
)

// Mode is what the network does.
type Mode int

// The switch's positions (the package's doc says what each does).
const (
	Pass Mode = iota
	Cut
	Blackhole
	Delay
)

func (m Mode) String() string {
	return [...]string{"pass", "cut", "blackhole", "delay"}[m]
}

// Proxy is a TCP proxy with a switch. Its methods are safe for concurrent use.
type Proxy struct {
	ln       net.Listener
	upstream string

	mu      sync.Mutex
	mode    Mode
	delay   time.Duration
	changed chan struct{} // closed, and replaced, at every change of mode
	conns   map[net.Conn]struct{}
	closed  bool
	wg      sync.WaitGroup
}

// chunk is bytes read from one end, to be written to the other at due.
type chunk struct {
	b   []byte
	due time.Time
}

// New listens on a free port of 127.0.0.1 and proxies to upstream (host:port), in Pass.
func New(upstream string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, upstream: upstream, changed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address to dial instead of the upstream's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Pass lets bytes through (again); held connections go on.
func (p *Proxy) Pass() { p.set(Pass, 0) }

// Cut closes every connection and resets new ones until the next change.
func (p *Proxy) Cut() { p.set(Cut, 0) }

// Blackhole holds every connection, open and new, until the next change.
func (p *Proxy) Blackhole() { p.set(Blackhole, 0) }

// Delay passes each chunk on d after it was read.
func (p *Proxy) Delay(d time.Duration) { p.set(Delay, d) }

// Mode is the switch's position.
func (p *Proxy) Mode() Mode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// Conns is how many connections from clients are open (held ones included).
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for c := range p.conns {
		if c.LocalAddr().String() == p.Addr() {
			n++
		}
	}
	return n
}

// Close stops listening, closes every connection and waits for the proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.closeAll()
	close(p.changed) // wakes what the blackhole holds
	p.changed = make(chan struct{})
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *Proxy) set(m Mode, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode, p.delay = m, d
	if m == Cut {
		p.closeAll()
	}
	close(p.changed)
	p.changed = make(chan struct{})
}

// closeAll closes every connection, both ends; p.mu is held.
func (p *Proxy) closeAll() {
	for c := range p.conns {
		_ = c.Close()
	}
}

// track adds c to the open connections; false when the proxy is closed or cut (c is then closed).
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.mode == Cut {
		reset(c)
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

// reset closes c with a TCP reset, as a host that refuses the connection answers.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		if !p.track(c) {
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve holds c while the network is blackholed, then dials the upstream and copies both ways.
func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	defer p.untrack(c)
	if !p.await(time.Time{}) {
		return
	}
	up, err := net.Dial("tcp", p.upstream)
	if err != nil {
		reset(c)
		return
	}
	if !p.track(up) {
		return
	}
	defer p.untrack(up)
	done := make(chan struct{}, 2)
	go func() { p.pipe(c, up); done <- struct{}{} }()
	go func() { p.pipe(up, c); done <- struct{}{} }()
	<-done
	<-done
}

// pipe copies src to dst: a reader queues what it reads, stamped with when it is due, and the
// writer passes it on when the network lets it. At src's end dst's write side is closed; when
// the network cuts, both are.
func (p *Proxy) pipe(src, dst net.Conn) {
	queue := make(chan chunk, 16)
	go func() {
		defer close(queue)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				p.mu.Lock()
				d := p.delay
				p.mu.Unlock()
				queue <- chunk{b: buf[:n], due: time.Now().Add(d)}
			}
			if err != nil {
				return
			}
		}
	}()
	for ch := range queue {
		if !p.await(ch.due) {
			_ = src.Close()
			_ = dst.Close()
			break
		}
		if _, err := dst.Write(ch.b); err != nil {
			_ = src.Close()
			break
		}
	}
	for range queue { // drain: the reader ends with src closed
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}

// await waits until the network lets bytes due at due through: false when it is cut or the
// proxy closed. While blackholed it waits for the next change; while delayed, for due.
func (p *Proxy) await(due time.Time) bool {
	for {
		p.mu.Lock()
		mode, changed, closed := p.mode, p.changed, p.closed
		p.mu.Unlock()
		switch {
		case closed || mode == Cut:
			return false
		case mode == Blackhole:
			<-changed
			continue
		case mode == Delay:
			if wait := time.Until(due); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-t.C:
				case <-changed:
					t.Stop()
					continue
				}
			}
		}
		return true
	}
}
