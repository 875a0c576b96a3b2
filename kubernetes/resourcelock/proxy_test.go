package resourcelock_test

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
)

// pausingProxy relays TCP connections on loopback to target, and while
// paused holds every byte in either direction without closing anything:
// a network partition, in which calls hang until their deadlines rather
// than fail fast.
type pausingProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	open  chan struct{} // closed while not paused
	conns []net.Conn
}

func newPausingProxy(t *testing.T, target string) *pausingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &pausingProxy{ln: ln, target: target, open: make(chan struct{})}
	close(p.open)
	go p.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		p.resume()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			_ = c.Close()
		}
	})
	return p
}

// addr is the proxy's host:port.
func (p *pausingProxy) addr() string { return p.ln.Addr().String() }

func (p *pausingProxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = in.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, in, out)
		p.mu.Unlock()
		go p.pump(out, in)
		go p.pump(in, out)
	}
}

// pump copies src to dst, holding each chunk while the proxy is paused.
func (p *pausingProxy) pump(dst, src net.Conn) {
	defer func() { _ = dst.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			open := p.open
			p.mu.Unlock()
			<-open
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				_ = src.Close()
			}
			return
		}
	}
}

func (p *pausingProxy) pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
		p.open = make(chan struct{})
	default:
	}
}

func (p *pausingProxy) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
	default:
		close(p.open)
	}
}
