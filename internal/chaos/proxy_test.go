package chaos

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// echo serves an echo server on loopback until the test ends.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatalf("write: %v", err)
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != msg {
		t.Fatalf("read %q, %v; want %q", buf, err, msg)
	}
}

func TestProxyCutsHoldsAndDelays(t *testing.T) {
	p, err := NewProxy(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Close() }()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	roundTrip(t, c, "hello")

	// Held bytes are not delivered until the hold ends, then they are.
	p.Hold(true)
	if _, err := c.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, err := c.Read(make([]byte, 4)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read during a hold: %d bytes, %v; want nothing", n, err)
	}
	_ = c.SetReadDeadline(time.Time{})
	p.Hold(false)
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "held" {
		t.Fatalf("after the hold: %q, %v", buf, err)
	}

	// A delay applies to each direction.
	p.SetDelay(50 * time.Millisecond)
	start := time.Now()
	roundTrip(t, c, "slow")
	if took := time.Since(start); took < 100*time.Millisecond {
		t.Fatalf("round trip with a 50ms delay each way took %s", took)
	}
	p.SetDelay(0)

	// A cut resets the connection; a new one works.
	if n := p.Cut(); n != 1 {
		t.Fatalf("Cut closed %d connections, want 1", n)
	}
	if _, err := io.ReadFull(c, make([]byte, 1)); err == nil {
		t.Fatal("read on a cut connection succeeded")
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c2.Close() }()
	roundTrip(t, c2, "again")
}
