package chaos

import (
	"fmt"
	"net"
	"sync"
	"time"
)

// Proxy forwards TCP connections from one worker to the emulator, and can
// cut them, slow them down, or hold their bytes (a blackhole) on demand.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	cond   *sync.Cond // signalled when hold, delay or links change
	links  map[*link]struct{}
	delay  time.Duration
	hold   bool
	closed bool
	wg     sync.WaitGroup
}

// link is one proxied connection: the worker's side and the emulator's.
type link struct {
	down, up net.Conn
	dead     bool // cut: pumps must stop even while held
}

// NewProxy listens on a free loopback port and forwards to target.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("chaos: proxy listen: %w", err)
	}
	p := &Proxy{ln: ln, target: target, links: map[*link]struct{}{}}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// Addr is the host:port workers dial instead of the emulator.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.handle(c)
		}()
	}
}

func (p *Proxy) handle(down net.Conn) {
	up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		_ = down.Close()
		return
	}
	l := &link{down: down, up: up}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		_ = down.Close()
		_ = up.Close()
		return
	}
	p.links[l] = struct{}{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pump(l, up, down) }()
	go func() { defer wg.Done(); p.pump(l, down, up) }()
	wg.Wait()
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// pump copies src to dst chunk by chunk, each chunk waiting out a hold and
// the current delay.
func (p *Proxy) pump(l *link, dst, src net.Conn) {
	defer p.kill(l)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.gate(l) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			// EOF included: gRPC never half-closes, so either end closing
			// ends the link.
			return
		}
	}
}

// gate blocks while the proxy holds traffic, then applies the delay; it
// reports false when the link was cut meanwhile.
func (p *Proxy) gate(l *link) bool {
	p.mu.Lock()
	for p.hold && !l.dead && !p.closed {
		p.cond.Wait()
	}
	d, ok := p.delay, !l.dead && !p.closed
	p.mu.Unlock()
	if ok && d > 0 {
		time.Sleep(d)
	}
	return ok
}

func (p *Proxy) kill(l *link) {
	p.mu.Lock()
	l.dead = true
	p.cond.Broadcast()
	p.mu.Unlock()
	_ = l.down.Close()
	_ = l.up.Close()
}

// Cut closes every open connection at once, as a reset would; new ones are
// accepted.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	var links []*link
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		p.kill(l)
	}
	return len(links)
}

// SetDelay delays every chunk by d from now on (0 restores).
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Hold stops (true) or resumes (false) forwarding: held bytes are kept and
// delivered on resume, as a partition that heals before TCP gives up.
func (p *Proxy) Hold(on bool) {
	p.mu.Lock()
	p.hold = on
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Heal ends every fault: no hold, no delay.
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.hold, p.delay = false, 0
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Close stops listening and cuts every connection.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	p.closed = true
	p.cond.Broadcast()
	p.mu.Unlock()
	p.Cut()
	p.wg.Wait()
	return err
}
