//go:build linux

package resourcelock_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"k8s.io/client-go/tools/leaderelection"

	"github.com/spannerlock/terraform-provider-spannerlock/kubernetes/resourcelock"
	"github.com/spannerlock/terraform-provider-spannerlock/lease/leasetest"
)

// The electors are separate processes (this test binary run again), as
// replicas in different clusters are: client-go's LeaderElector on a
// resourcelock.Lock, reporting its callbacks as JSON lines on stdout.
const (
	electorEnv = "RESOURCELOCK_ELECTOR"
	dbEnv      = "RESOURCELOCK_DATABASE"
	timingEnv  = "RESOURCELOCK_TIMING"            // lease duration, renew deadline and retry period in ms
	releaseEnv = "RESOURCELOCK_RELEASE_ON_CANCEL" // "false" turns ReleaseOnCancel off
	loopEnv    = "RESOURCELOCK_LOOP"              // "true": run for election again after each Run
)

type electorEvent struct {
	Event    string    `json:"event"`    // started, ctxdone, leasedone, stopped, leader, ran
	At       time.Time `json:"at"`       // the elector's wall clock when it happened (one host: one clock)
	Identity string    `json:"identity"` // the elector reporting it
	Leader   string    `json:"leader,omitempty"`
	Token    int64     `json:"token,omitempty"`
	at       time.Time // when the test received it
}

type timing struct{ leaseDuration, renewDeadline, retryPeriod time.Duration }

func (tm timing) String() string {
	return fmt.Sprintf("%d,%d,%d", tm.leaseDuration.Milliseconds(), tm.renewDeadline.Milliseconds(), tm.retryPeriod.Milliseconds())
}

// runElector is the elector process: it runs for election until SIGTERM,
// then steps down if it leads (ReleaseOnCancel), reports it and waits to
// be killed.
func runElector() int {
	identity := os.Getenv(electorEnv)
	var ms [3]int64
	if _, err := fmt.Sscanf(os.Getenv(timingEnv), "%d,%d,%d", &ms[0], &ms[1], &ms[2]); err != nil {
		fmt.Fprintln(os.Stderr, "bad timing:", err)
		return 2
	}
	out := json.NewEncoder(os.Stdout)
	var outMu sync.Mutex
	emit := func(e electorEvent) {
		e.Identity, e.At = identity, time.Now()
		outMu.Lock()
		defer outMu.Unlock()
		_ = out.Encode(e)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	db, err := spanner.NewClient(context.Background(), os.Getenv(dbEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer db.Close()
	ld, rd, rp := time.Duration(ms[0])*time.Millisecond, time.Duration(ms[1])*time.Millisecond, time.Duration(ms[2])*time.Millisecond
	lock, err := resourcelock.New(db, leasetest.DefaultTable, "controller", identity, resourcelock.WithElectorTimings(ld, rd, rp))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   ld,
		RenewDeadline:   rd,
		RetryPeriod:     rp,
		ReleaseOnCancel: os.Getenv(releaseEnv) != "false",
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				// Stamped first, before anything that could delay it.
				started := time.Now()
				var token int64
				l := lock.Lease()
				if l != nil {
					token = l.Token()
				}
				e := electorEvent{Event: "started", Token: token}
				e.Identity = identity
				outMu.Lock()
				e.At = started
				_ = out.Encode(e)
				outMu.Unlock()
				if l != nil {
					go func() {
						<-l.Context().Done()
						emit(electorEvent{Event: "leasedone", Token: token})
					}()
				}
				<-ctx.Done()
				emit(electorEvent{Event: "ctxdone", Token: token})
			},
			OnStoppedLeading: func() { emit(electorEvent{Event: "stopped"}) },
			OnNewLeader:      func(id string) { emit(electorEvent{Event: "leader", Leader: id}) },
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	for {
		le.Run(ctx)
		// Run has returned, after stepping down. The process stays, its
		// lock not closed, so only the elector's own release can hand over.
		var token int64
		if l := lock.Lease(); l != nil {
			token = l.Token()
		}
		emit(electorEvent{Event: "ran", Token: token})
		if os.Getenv(loopEnv) != "true" || ctx.Err() != nil {
			select {}
		}
	}
}

type elector struct {
	identity string
	cmd      *exec.Cmd
	exited   chan struct{} // closed when the process has exited
	err      error         // cmd.Wait's, once exited is closed
}

// startElectors starts one elector process per identity on db; every event
// any of them reports arrives on the returned channel, stamped on receipt.
func startElectors(t *testing.T, db *spanner.Client, tm timing, ids ...string) (map[string]*elector, <-chan electorEvent) {
	t.Helper()
	s := newElectorSet(t, db, tm)
	for _, id := range ids {
		s.start(id)
	}
	return s.electors, s.events
}

// electorSet starts elector processes that report on one channel.
type electorSet struct {
	t        *testing.T
	db       *spanner.Client
	tm       timing
	events   chan electorEvent
	stop     chan struct{} // closed when the test ends and nobody reads events
	electors map[string]*elector
}

func newElectorSet(t *testing.T, db *spanner.Client, tm timing) *electorSet {
	s := &electorSet{t: t, db: db, tm: tm, events: make(chan electorEvent, 100), stop: make(chan struct{}), electors: map[string]*elector{}}
	t.Cleanup(func() { close(s.stop) })
	return s
}

// start starts an elector process with identity id; env is added to its
// environment (a later entry overrides an earlier one of the same name).
func (s *electorSet) start(id string, env ...string) {
	t := s.t
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), electorEnv+"="+id, dbEnv+"="+s.db.DatabaseName(), timingEnv+"="+s.tm.String())
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = testLog{t, id}
	// Killed with the test binary, whatever happens to it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting elector %s: %v", id, err)
	}
	e := &elector{identity: id, cmd: cmd, exited: make(chan struct{})}
	s.electors[id] = e
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var ev electorEvent
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				ev.at = time.Now()
				select {
				case s.events <- ev:
				case <-s.stop:
				}
			}
		}
		e.err = cmd.Wait()
		close(e.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-e.exited
	})
}

type testLog struct {
	t  *testing.T
	id string
}

func (w testLog) Write(p []byte) (int, error) {
	w.t.Logf("%s: %s", w.id, p)
	return len(p), nil
}

// next waits for the next event of kind, failing after within.
func next(t *testing.T, events <-chan electorEvent, kind string, within time.Duration) electorEvent {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case ev := <-events:
			if ev.Event == kind {
				return ev
			}
		case <-deadline:
			t.Fatalf("no %q event within %v", kind, within)
		}
	}
}

// electorTiming is short enough for quick failovers and long enough for
// renewals on a loaded machine.
var electorTiming = timing{leaseDuration: 6 * time.Second, renewDeadline: 4 * time.Second, retryPeriod: time.Second}

// aRetry is the longest an elector waits between two tries: client-go
// jitters the retry period by up to JitterFactor of it.
func aRetry(tm timing) time.Duration {
	return time.Duration(float64(tm.retryPeriod) * (1 + leaderelection.JitterFactor))
}

// rpcSlack covers the Spanner calls of one try on a loaded machine.
const rpcSlack = 2 * time.Second

func TestOneLeaderAmongElectorProcesses(t *testing.T) {
	db, locks := leasetest.New(t)
	_, events := startElectors(t, db, electorTiming, "a", "b", "c")
	// Until a leader starts, then three lease durations of its renewals: one
	// leader only, and every follower learns who it is.
	var first *electorEvent
	told := map[string]string{} // follower -> the leader it was told of
	window := time.After(time.Minute)
	for done := false; !done; {
		select {
		case ev := <-events:
			switch {
			case ev.Event == "leader":
				told[ev.Identity] = ev.Leader
			case ev.Event == "started" && first == nil:
				first = &ev
				t.Logf("%s leads with token %d", ev.Identity, ev.Token)
				window = time.After(3 * electorTiming.leaseDuration)
			default:
				t.Fatalf("%s %s while %v leads", ev.Identity, ev.Event, first)
			}
		case <-window:
			done = true
		}
	}
	if first == nil {
		t.Fatal("no elector started leading within a minute")
	}
	for _, id := range []string{"a", "b", "c"} {
		if id != first.Identity && told[id] != first.Identity {
			t.Errorf("follower %s was told %q leads, want %s", id, told[id], first.Identity)
		}
	}
	h, err := locks.Holder(timeout(t), "controller")
	if err != nil || h.HolderID != first.Identity || h.Token != first.Token {
		t.Fatalf("Spanner says %+v (%v); want %s with token %d", h, err, first.Identity, first.Token)
	}
}

func TestFailoverAfterTheLeaderIsKilled(t *testing.T) {
	db, _ := leasetest.New(t)
	electors, events := startElectors(t, db, electorTiming, "a", "b", "c")
	first := next(t, events, "started", time.Minute)
	// Let a renewal or two pass, so the kill lands mid-term.
	time.Sleep(electorTiming.leaseDuration / 2)
	killed := time.Now()
	if err := electors[first.Identity].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	bound := electorTiming.leaseDuration + aRetry(electorTiming) + rpcSlack
	second := next(t, events, "started", 2*bound)
	took := second.at.Sub(killed)
	t.Logf("SIGKILLed leader %s (token %d); %s leads with token %d after %v (bound %v)", first.Identity, first.Token, second.Identity, second.Token, took, bound)
	if took > bound {
		t.Errorf("failover took %v, more than the lease duration (%v) plus a retry (%v) and %v of RPCs", took, electorTiming.leaseDuration, aRetry(electorTiming), rpcSlack)
	}
	if second.Identity == first.Identity || second.Token <= first.Token {
		t.Errorf("new leader %s token %d after %s token %d", second.Identity, second.Token, first.Identity, first.Token)
	}
}

func TestReleaseOnCancelHandsOver(t *testing.T) {
	// A long lease duration: a hand-over that waited for expiry would show.
	tm := timing{leaseDuration: 20 * time.Second, renewDeadline: 10 * time.Second, retryPeriod: time.Second}
	db, _ := leasetest.New(t)
	electors, events := startElectors(t, db, tm, "a", "b")
	first := next(t, events, "started", time.Minute)
	// Once the follower knows who leads, it only polls.
	for ev := next(t, events, "leader", time.Minute); ev.Identity == first.Identity || ev.Leader != first.Identity; ev = next(t, events, "leader", time.Minute) {
	}
	leader := electors[first.Identity]
	stepped := time.Now()
	if err := leader.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	bound := aRetry(tm) + rpcSlack
	// The old leader's Run returns and the follower starts, in either order.
	var second, ran *electorEvent
	deadline := time.After(tm.leaseDuration)
	for second == nil || ran == nil {
		select {
		case ev := <-events:
			switch {
			case ev.Event == "started":
				second = &ev
			case ev.Event == "ran" && ev.Identity == first.Identity:
				ran = &ev
			}
		case <-deadline:
			t.Fatalf("within the lease duration %v after SIGTERM to %s: new leader %v, old leader's Run returned %v", tm.leaseDuration, first.Identity, second, ran)
		}
	}
	took := second.at.Sub(stepped)
	t.Logf("%s stepped down; %s leads with token %d after %v (bound %v, lease duration %v)", first.Identity, second.Identity, second.Token, took, bound, tm.leaseDuration)
	if took > bound {
		t.Errorf("hand-over took %v, more than a retry (%v) and %v of RPCs: the lease was not released", took, aRetry(tm), rpcSlack)
	}
	if ran.Token != 0 || second.Identity == first.Identity {
		t.Errorf("after stepping down, %s still has the lease with token %d", ran.Identity, ran.Token)
	}
}
