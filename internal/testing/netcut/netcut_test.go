package netcut

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// echo is an upstream that writes back what it reads, and closes its write side at the
// client's end. It counts the connections it accepted.
type echo struct {
	ln       net.Listener
	accepted atomic.Int32
}

func newEcho(t *testing.T) *echo {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echo{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.accepted.Add(1)
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
				_ = c.(*net.TCPConn).CloseWrite()
			}()
		}
	}()
	t.Cleanup(func() { _ = ln.Close() })
	return e
}

func newProxy(t *testing.T, upstream string) *Proxy {
	t.Helper()
	p, err := New(upstream)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func dial(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// roundTrip writes msg and reads it back within d.
func roundTrip(c net.Conn, msg string, d time.Duration) (string, error) {
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, len(msg))
	n, err := io.ReadFull(c, buf)
	return string(buf[:n]), err
}

// patience is how long an answer that must come may take on a loaded machine; silence is how
// long a connection that must stay silent is watched.
const (
	patience = 30 * time.Second
	silence  = 300 * time.Millisecond
)

func timedOut(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

func TestPass(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, e.ln.Addr().String())
	c := dial(t, p)
	if got, err := roundTrip(c, "hello", patience); err != nil || got != "hello" {
		t.Fatalf("round trip = %q, %v", got, err)
	}
	// A half-close goes through: the upstream sees the end, ends too, and the client reads EOF.
	_ = c.(*net.TCPConn).CloseWrite()
	_ = c.SetReadDeadline(time.Now().Add(patience))
	if rest, err := io.ReadAll(c); err != nil || len(rest) != 0 {
		t.Fatalf("after the half-close: %q, %v; want EOF", rest, err)
	}
}

func TestCut(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, e.ln.Addr().String())
	open := dial(t, p)
	if _, err := roundTrip(open, "a", patience); err != nil {
		t.Fatal(err)
	}
	p.Cut()
	// The open connection ends: the read fails at once, not at its deadline.
	if _, err := roundTrip(open, "b", patience); err == nil || timedOut(err) {
		t.Fatalf("an open connection after the cut: %v, want it closed", err)
	}
	// A new one is reset as it is accepted: the reset can come before connect returns (the
	// dial fails) or after (the first read fails).
	if fresh, err := net.Dial("tcp", p.Addr()); err == nil {
		t.Cleanup(func() { _ = fresh.Close() })
		if _, err := roundTrip(fresh, "c", patience); err == nil || timedOut(err) {
			t.Fatalf("a new connection during the cut: %v, want it reset", err)
		}
	} else if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("a new connection during the cut: %v, want it reset", err)
	}
	if n := e.accepted.Load(); n != 1 {
		t.Errorf("the upstream accepted %d connections, want 1 (none during the cut)", n)
	}
	p.Pass()
	again := dial(t, p)
	if got, err := roundTrip(again, "d", patience); err != nil || got != "d" {
		t.Fatalf("after Pass: %q, %v", got, err)
	}
}

func TestBlackhole(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, e.ln.Addr().String())
	open := dial(t, p)
	if _, err := roundTrip(open, "a", patience); err != nil {
		t.Fatal(err)
	}
	p.Blackhole()
	// Nothing answers on the open connection, and it is not closed either.
	if got, err := roundTrip(open, "held", silence); !timedOut(err) {
		t.Fatalf("an open connection in the blackhole: %q, %v; want silence", got, err)
	}
	// A new one is accepted and held: the upstream never hears of it.
	fresh := dial(t, p)
	if got, err := roundTrip(fresh, "new", silence); !timedOut(err) {
		t.Fatalf("a new connection in the blackhole: %q, %v; want silence", got, err)
	}
	if n := e.accepted.Load(); n != 1 {
		t.Errorf("the upstream accepted %d connections, want 1 (the held one is not dialled)", n)
	}
	if n := p.Conns(); n != 2 {
		t.Errorf("Conns() = %d, want 2 (both held)", n)
	}
	// The network heals: what was held goes on, as TCP retransmitting after a partition.
	p.Pass()
	for _, tc := range []struct {
		c    net.Conn
		want string
	}{{open, "held"}, {fresh, "new"}} {
		_ = tc.c.SetReadDeadline(time.Now().Add(patience))
		buf := make([]byte, len(tc.want))
		if _, err := io.ReadFull(tc.c, buf); err != nil || string(buf) != tc.want {
			t.Errorf("after Pass: %q, %v; want %q", buf, err, tc.want)
		}
	}
}

func TestDelay(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, e.ln.Addr().String())
	c := dial(t, p)
	const d = 200 * time.Millisecond
	p.Delay(d)
	start := time.Now()
	if got, err := roundTrip(c, "slow", patience); err != nil || got != "slow" {
		t.Fatalf("round trip = %q, %v", got, err)
	}
	// Each way waits d: a lower bound only (a loaded machine makes it longer, never shorter).
	if took := time.Since(start); took < 2*d {
		t.Errorf("a round trip took %s, want at least %s", took, 2*d)
	}
	// Pass releases what a delay holds at once.
	p.Delay(time.Hour)
	if _, err := c.Write([]byte("late")); err != nil {
		t.Fatal(err)
	}
	p.Pass()
	_ = c.SetReadDeadline(time.Now().Add(patience))
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || !bytes.Equal(buf, []byte("late")) {
		t.Fatalf("after Pass: %q, %v", buf, err)
	}
}

// TestClose: Close ends held and open connections and returns (nothing of the proxy's is left
// waiting).
func TestClose(t *testing.T) {
	e := newEcho(t)
	p, err := New(e.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	open := dial(t, p)
	if _, err := roundTrip(open, "a", patience); err != nil {
		t.Fatal(err)
	}
	p.Blackhole()
	held := dial(t, p)
	_, _ = held.Write([]byte("x"))
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []net.Conn{open, held} {
		_ = c.SetReadDeadline(time.Now().Add(patience))
		if _, err := c.Read(make([]byte, 1)); err == nil || timedOut(err) {
			t.Errorf("after Close: %v, want the connection closed", err)
		}
	}
	if _, err := net.Dial("tcp", p.Addr()); err == nil {
		t.Error("the closed proxy still accepts")
	}
}
