//go:build unix

package main

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// Against a closed port every command fails at once with exit status 1,
// naming the endpoint and the cause, instead of retrying for a minute and
// blaming a session pool; lock --timeout does not call that "held".
func TestClosedPort(t *testing.T) {
	addr := emulator.ClosedPort(t)
	envv := append(env("projects/p/instances/i/databases/d"), "SPANNER_EMULATOR_HOST="+addr)
	for _, args := range commandsThatConnect() {
		start := time.Now()
		r := run(t, t.TempDir(), envv, nil, args...)
		t.Logf("%v: exit %d after %s", args, r.code, time.Since(start).Round(time.Millisecond))
		if r.code != exitFailure || !strings.Contains(r.stderr, "cannot connect to Spanner at "+addr+" (SPANNER_EMULATOR_HOST)") ||
			!strings.Contains(r.stderr, "connection refused") {
			t.Errorf("%v against a closed port: exit %d, stderr:\n%s\nwant exit 1 naming %s and the refused connection", args, r.code, r.stderr, addr)
		}
	}
}

// commandsThatConnect are a call of every command that talks to Spanner.
func commandsThatConnect() [][]string {
	return [][]string{
		{"lock", "x", "--", "true"},
		{"lock", "--timeout", "3s", "x", "--", "true"},
		{"lock", "--try", "x"},
		{"permit", "sem", "--", "true"},
		{"permit", "--timeout", "3s", "sem", "--", "true"},
		{"run-once", "job", "--every", "1h", "--", "true"},
		{"run-once", "--timeout", "3s", "job", "--every", "1h", "--", "true"},
		{"elect", "x", "--", "true"},
		{"elect", "--observe", "x"},
		{"holder", "x"},
		{"status"},
		{"status", "--watch"},
		{"init"},
	}
}

// An endpoint that accepts connections and drops them (a load balancer with
// nothing behind it) is as good as down: every command gives up within a
// few seconds of connecting, naming the endpoint and what the last call
// said, not the session pool's advice about leaks.
func TestEndpointThatNeverAnswers(t *testing.T) {
	addr := droppingListener(t)
	envv := append(env("projects/p/instances/i/databases/d"), "SPANNER_EMULATOR_HOST="+addr)
	for _, args := range commandsThatConnect() {
		start := time.Now()
		r := run(t, t.TempDir(), envv, nil, args...)
		t.Logf("%v: exit %d after %s", args, r.code, time.Since(start).Round(time.Millisecond))
		if r.code != exitFailure || !strings.Contains(r.stderr, "no answer from Spanner at "+addr+" (SPANNER_EMULATOR_HOST)") ||
			!strings.Contains(r.stderr, "the last failed call said: ") || strings.Contains(r.stderr, "TrackSessionHandles") {
			t.Errorf("%v against an endpoint that drops connections: exit %d, stderr:\n%s", args, r.code, r.stderr)
		}
	}
}

// --timeout bounds the whole call, connecting included: against an endpoint
// that never answers, lock, permit and run-once give up when their --timeout
// passes (not at the few seconds a connection gets without one), with exit
// status 1 naming the endpoint: never 75, since nobody was seen holding.
func TestTimeoutBoundsTheConnection(t *testing.T) {
	addr := droppingListener(t)
	envv := append(env("projects/p/instances/i/databases/d"), "SPANNER_EMULATOR_HOST="+addr)
	for _, args := range [][]string{
		{"lock", "--timeout", "1s", "x", "--", "true"},
		{"permit", "--timeout", "1s", "sem", "--", "true"},
		{"run-once", "--timeout", "1s", "job", "--every", "1h", "--", "true"},
	} {
		start := time.Now()
		r := run(t, t.TempDir(), envv, nil, args...)
		t.Logf("%v: exit %d after %s", args, r.code, time.Since(start).Round(time.Millisecond))
		if r.code != exitFailure || !strings.Contains(r.stderr, "no answer from Spanner at "+addr+" (SPANNER_EMULATOR_HOST) within --timeout 1s") {
			t.Errorf("%v against an endpoint that never answers: exit %d, stderr:\n%s\nwant exit 1, no answer within --timeout 1s", args, r.code, r.stderr)
		}
	}
}

// An endpoint that accepts connections and never answers on them (a
// tunnel or a load balancer holding them open with nothing behind) fails
// every command within connectTimeout (3s) of connecting, as the README
// says, naming the endpoint and that it sent nothing back: not at the
// lease's call timeout (9s at the default TTL, saying no more than "no
// answer"), nor at gRPC's own 20s connect timeout (init took 23s).
func TestNeverAnswersWithinConnectTimeout(t *testing.T) {
	addr := silentListener(t)
	envv := append(env("projects/p/instances/i/databases/d"), "SPANNER_EMULATOR_HOST="+addr)
	for _, args := range commandsThatConnect() {
		if slices.Contains(args, "--timeout") {
			continue // a --timeout as short as connectTimeout may end it first, saying so
		}
		start := time.Now()
		r := run(t, t.TempDir(), envv, nil, args...)
		took := time.Since(start)
		t.Logf("%v: exit %d after %s", args, r.code, took.Round(time.Millisecond))
		// Only the watch for a Spanner that never answered says "within 3s
		// of connecting", which the calls' own timeouts do not; the bound
		// on the time leaves 12s beyond connectTimeout for starting and
		// stopping the process on a loaded machine, and is still below
		// gRPC's 20s, after which the watch used to say the same.
		if r.code != exitFailure || !strings.Contains(r.stderr, "no answer from Spanner at "+addr+" (SPANNER_EMULATOR_HOST) within 3s of connecting") ||
			!strings.Contains(r.stderr, "the endpoint accepted the connection but sent nothing back within 3s") || took > connectTimeout+12*time.Second {
			t.Errorf("%v against an endpoint that accepts connections and never answers: exit %d after %s, stderr:\n%s\n"+
				"want exit 1 within about 3s, no answer within 3s of connecting", args, r.code, took.Round(time.Millisecond), r.stderr)
		}
	}
}

// silentListener accepts connections on a loopback port and keeps them
// open without ever writing to them, until the test ends.
func silentListener(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	return l.Addr().String()
}

// droppingListener accepts connections on a loopback port and closes them
// at once, until the test ends.
func droppingListener(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	return l.Addr().String()
}

// proxy relays TCP connections to the emulator until it is cut: then its
// port is closed and every connection through it is dropped, as when
// Spanner becomes unreachable under a running command.
type proxy struct {
	t      *testing.T
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns []net.Conn
	cut   bool
}

func newProxy(t *testing.T) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{t: t, ln: ln, target: emulator.Shared(t).Host()}
	t.Cleanup(p.cutOff)
	go p.accept()
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) accept() {
	for {
		down, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = down.Close()
			continue
		}
		if !p.track(down, up) {
			return
		}
		go p.pipe(down, up)
		go p.pipe(up, down)
	}
}

func (p *proxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		for _, c := range conns {
			_ = c.Close()
		}
		return false
	}
	p.conns = append(p.conns, conns...)
	return true
}

func (p *proxy) pipe(dst, src net.Conn) {
	_, err := io.Copy(dst, src)
	if err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, os.ErrDeadlineExceeded) {
		p.t.Logf("proxy: %v", err)
	}
	_ = dst.Close()
	_ = src.Close()
}

// cutOff closes the port and every connection through it.
func (p *proxy) cutOff() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	_ = p.ln.Close()
	for _, c := range p.conns {
		_ = c.Close()
	}
}

// through returns the environment of c with Spanner reached through p.
func (c *cli) through(p *proxy) []string {
	return append(append([]string(nil), c.env...), "SPANNER_EMULATOR_HOST="+p.addr())
}

// A command that waits while another holds what it wants, and then loses
// Spanner, gives up after --max-outage with exit status 1, naming the
// endpoint and the cause; it never reports the outage as "held" (75), also
// with --timeout; a leader whose Spanner goes away stops CMD and gives up
// the same way.
func TestOutageWhileWaiting(t *testing.T) {
	inEachDialect(t, func(t *testing.T, d locktable.Dialect) {
		c := newCLIIn(t, d)
		lc := c.client(lease.WithHolderID("other"))
		if err := lc.SetPermits(testContext(t), "sem", 1); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"x", "leader"} {
			if _, err := lc.Acquire(testContext(t), name); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := lc.AcquirePermit(testContext(t), "sem"); err != nil {
			t.Fatal(err)
		}
		slotTaken := make(chan struct{})
		release := make(chan struct{})
		go func() {
			_, _ = lc.RunOnce(testContext(t), "job", mustParseTime(t, slot), func(ctx context.Context) error {
				close(slotTaken)
				select {
				case <-release:
				case <-ctx.Done():
				}
				return nil
			})
		}()
		defer close(release)
		<-slotTaken

		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"lock", "x", "--", "touch", "ran"}, "for 2s (--max-outage)"},
			{[]string{"lock", "--max-outage", "1m", "--timeout", "5s", "x", "--", "touch", "ran"}, "within --timeout 5s"},
			{[]string{"permit", "sem", "--", "touch", "ran"}, "for 2s (--max-outage)"},
			{[]string{"run-once", "job", "--slot", slot, "--", "touch", "ran"}, "for 2s (--max-outage)"},
			{[]string{"elect", "leader", "--", "touch", "ran"}, "for 2s (--max-outage)"},
		} {
			t.Run(tc.args[0], func(t *testing.T) {
				p := newProxy(t)
				w := start(t, c.dir, c.through(p), nil, append([]string{"--verbose", "--max-outage", "2s", "--poll-interval", "100ms"}, tc.args...)...)
				t0 := time.Now()
				waitFor(t, "spannerlock to wait", func() bool { return strings.Contains(w.stderr.String(), "waiting") })
				t1 := time.Now()
				p.cutOff()
				w.expect(exitFailure)
				t.Logf("%v: waiting after %s, exit 1 %s after the cut", tc.args, t1.Sub(t0).Round(time.Millisecond), time.Since(t1).Round(time.Millisecond))
				if !strings.Contains(w.stderr.String(), "no answer from Spanner at "+p.addr()) || !strings.Contains(w.stderr.String(), tc.want) {
					t.Errorf("%v: stderr does not name the endpoint and %q:\n%s", tc.args, tc.want, w.stderr)
				}
				if c.exists("ran") {
					t.Fatal("CMD ran")
				}
			})
		}
	})
}

func mustParseTime(t *testing.T, s string) time.Time {
	t.Helper()
	ts, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// A leader that loses Spanner loses its lease: CMD is stopped, and the
// campaign that follows gives up after --max-outage with exit status 1.
func TestOutageWhileLeading(t *testing.T) {
	c := newCLI(t)
	p := newProxy(t)
	leader := start(t, c.dir, c.through(p), nil, "--ttl", "2s", "--max-outage", "3s", "elect", "scheduler", "--shell", "--",
		`trap 'echo term > got; exit 0' TERM; echo $$ > child; sleep 300 & wait`)
	c.waitFile("child")
	p.cutOff()
	leader.expect(exitFailure)
	if !strings.Contains(leader.stderr.String(), "no answer from Spanner at "+p.addr()) || c.read("got") != "term\n" {
		t.Fatalf("CMD got %q; stderr:\n%s", c.read("got"), leader.stderr)
	}
	if pid := c.pid("child"); !dead(pid) {
		t.Fatalf("CMD (pid %d) outlived the leader", pid)
	}
}

// elect --observe, watching a leader, gives up like a waiting command once
// Spanner has not answered for --max-outage: exit 1, naming the endpoint,
// instead of printing nothing for as long as it runs.
func TestOutageWhileObserving(t *testing.T) {
	c := newCLI(t)
	if _, err := c.client(lease.WithHolderID("the-leader")).Acquire(testContext(t), "scheduler"); err != nil {
		t.Fatal(err)
	}
	p := newProxy(t)
	w := start(t, c.dir, c.through(p), nil, "--max-outage", "2s", "--poll-interval", "100ms", "elect", "--observe", "scheduler")
	waitFor(t, "the leader line", func() bool { return strings.Contains(w.stdout.String(), "the-leader leads") })
	t0 := time.Now()
	p.cutOff()
	w.expect(exitFailure)
	t.Logf("exit 1 %s after the cut", time.Since(t0).Round(time.Millisecond))
	if !strings.Contains(w.stderr.String(), "no answer from Spanner at "+p.addr()) || !strings.Contains(w.stderr.String(), "for 2s (--max-outage)") {
		t.Errorf("stderr does not name the endpoint and --max-outage:\n%s", w.stderr)
	}
}

// A call that failed at the --timeout deadline is the timeout, also when
// the context's timer has not ended the context yet (a loaded machine):
// spannerlock then says "within --timeout" rather than blaming Spanner.
func TestDeadlinePassed(t *testing.T) {
	past := timerNotFired{Context: context.Background(), deadline: time.Now().Add(-time.Millisecond)}
	if !deadlinePassed(past) {
		t.Error("a context whose deadline passed, before its timer ended it, is not past its deadline")
	}
	if deadlinePassed(timerNotFired{Context: context.Background(), deadline: time.Now().Add(time.Hour)}) {
		t.Error("a context whose deadline is an hour away is past it")
	}
	if deadlinePassed(context.Background()) {
		t.Error("a context without a deadline is past it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	if !deadlinePassed(ctx) {
		t.Error("an expired context is not past its deadline")
	}
}

// timerNotFired is a context whose deadline may have passed but which has
// not ended: how a context.WithTimeout looks between its deadline and the
// moment its timer runs.
type timerNotFired struct {
	context.Context
	deadline time.Time
}

func (c timerNotFired) Deadline() (time.Time, bool) { return c.deadline, true }

// A --timeout that passes while Spanner has not answered since before it is
// the outage's (exit 1), even when Spanner said "held" earlier; calls that
// failed only at the deadline failed for it, and leave "held" (75) standing.
func TestUnansweredBeforeDeadline(t *testing.T) {
	now := time.Now()
	ctx, cancel := context.WithDeadline(context.Background(), now)
	defer cancel()
	for _, tc := range []struct {
		name string
		h    *health
		want bool
	}{
		{"answering", &health{answered: true}, false},
		{"failing since before the deadline", &health{answered: true, failingSince: now.Add(-3 * time.Second)}, true},
		{"failing since the deadline", &health{answered: true, failingSince: now}, false},
		{"failing since after the deadline", &health{answered: true, failingSince: now.Add(time.Millisecond)}, false},
	} {
		if got := unansweredBeforeDeadline(ctx, tc.h); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if unansweredBeforeDeadline(context.Background(), &health{failingSince: now}) {
		t.Error("without a deadline (no --timeout), an outage is --max-outage's business")
	}
}
