package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"syscall"
	"time"

	"cloud.google.com/go/spanner"
)

// Nemeses the driver schedules.
const (
	// NKill SIGKILLs a holder; a new process takes its slot.
	NKill = "kill"
	// NPause SIGSTOPs a holder for longer than the TTL, then SIGCONTs it.
	NPause = "pause"
	// NPausePoint stops a worker inside a guarded write, right after Guard
	// passed, until a rival has written, so that its commit comes after
	// the rival's: the case a broken fence lets through.
	NPausePoint = "pause-after-guard"
	// NCut resets every connection between a worker and the emulator.
	NCut = "proxy-cut"
	// NDelay slows a worker's connection down.
	NDelay = "proxy-delay"
	// NBlackhole holds a worker's traffic for about a TTL, then either
	// delivers it late or resets the connections.
	NBlackhole = "proxy-blackhole"
	// NAmbiguous makes a worker's next successful Commit fail with
	// DEADLINE_EXCEEDED.
	NAmbiguous = "ambiguous-commit"
	// NAmbiguousBlackhole is a fault during the recovery from another: a
	// worker's next successful Commit fails with DEADLINE_EXCEEDED, and
	// then every RPC of its recovery (the read that would settle the
	// outcome, the retries, the renewals) is blackholed for a quarter of a
	// TTL to a TTL and a quarter.
	NAmbiguousBlackhole = "ambiguous-then-blackhole"
	// NAmbiguousPause is another: a worker's next successful Commit fails
	// with DEADLINE_EXCEEDED, and the process stops right then, before it
	// can recover, for longer than the TTL.
	NAmbiguousPause = "ambiguous-then-pause"
)

// AllNemeses are the nemeses a run uses unless told otherwise.
var AllNemeses = []string{NKill, NPause, NPausePoint, NCut, NDelay, NBlackhole, NAmbiguous, NAmbiguousBlackhole, NAmbiguousPause}

// Fault is one fault the run injected.
type Fault struct {
	At       time.Time
	Kind     string
	Target   string // holder ID
	Duration time.Duration
	Detail   string
	// For NPausePoint: the worker held the lease when it stopped, and a
	// rival's write committed while it was stopped.
	Held, RivalWrote bool
}

// nemesis runs the scheduled faults of one run.
type nemesis struct {
	r   *runner
	rng *rand.Rand
	// pauses counts pause points, which alternate between locks and
	// permits when there is a semaphore.
	pauses int
}

// schedule runs nemeses one after another, with gaps, until end. Every
// enabled kind runs once, in a seeded order, before any runs twice.
func (n *nemesis) schedule(ctx context.Context, end time.Time) {
	kinds := n.r.cfg.Nemeses
	if len(kinds) == 0 {
		return
	}
	var queue []string
	for ctx.Err() == nil {
		gap := n.r.cfg.TTL/2 + time.Duration(n.rng.Int64N(int64(n.r.cfg.TTL)))
		if time.Now().Add(gap + 3*n.r.cfg.TTL).After(end) {
			return
		}
		if !sleepCtx(ctx, gap) {
			return
		}
		if len(queue) == 0 {
			for _, i := range n.rng.Perm(len(kinds)) {
				queue = append(queue, kinds[i])
			}
		}
		kind := queue[0]
		queue = queue[1:]
		n.run(ctx, kind, end)
	}
}

// target picks a slot holding something when there is one.
func (n *nemesis) target() *slot {
	var holders, alive []*slot
	for _, s := range n.r.slots {
		if cmd, _ := s.current(); cmd == nil {
			continue
		}
		alive = append(alive, s)
		if len(s.holding()) > 0 {
			holders = append(holders, s)
		}
	}
	switch {
	case len(holders) > 0:
		return holders[n.rng.IntN(len(holders))]
	case len(alive) > 0:
		return alive[n.rng.IntN(len(alive))]
	}
	return nil
}

func (n *nemesis) run(ctx context.Context, kind string, end time.Time) {
	ttl := n.r.cfg.TTL
	s := n.target()
	if s == nil {
		return
	}
	_, holder := s.current()
	f := Fault{At: time.Now(), Kind: kind, Target: holder}
	held := describeHeld(s.holding())
	switch kind {
	case NKill:
		if err := s.signal(syscall.SIGKILL); err != nil {
			return
		}
		<-s.exited
		f.Detail = "holding " + held
		delay := time.Duration(n.rng.Int64N(int64(ttl)))
		if time.Now().Add(delay + 2*ttl).Before(end) {
			sleepCtx(ctx, delay)
			if err := n.r.restart(s); err != nil {
				f.Detail += "; restart failed: " + err.Error()
			} else {
				_, h := s.current()
				f.Detail += fmt.Sprintf("; replaced by %s after %s", h, delay.Round(time.Millisecond))
			}
		}
	case NPause:
		d := ttl + time.Duration(n.rng.Float64()*1.5*float64(ttl)) + ttl/10
		if err := n.r.stop(s); err != nil {
			return
		}
		sleepCtx(ctx, d)
		n.r.cont(s)
		f.Duration, f.Detail = d, "holding "+held
	case NPausePoint:
		n.pausePoint(ctx, s, &f)
	case NCut:
		f.Detail = fmt.Sprintf("%d connections reset", s.proxy.Cut())
	case NDelay:
		lat := time.Duration(20+n.rng.IntN(280)) * time.Millisecond
		d := ttl + time.Duration(n.rng.Float64()*2*float64(ttl))
		s.proxy.SetDelay(lat)
		sleepCtx(ctx, d)
		s.proxy.SetDelay(0)
		f.Duration, f.Detail = d, fmt.Sprintf("%s per chunk, holding %s", lat, held)
	case NBlackhole:
		d := ttl/2 + time.Duration(n.rng.Float64()*1.5*float64(ttl))
		reset := n.rng.IntN(2) == 0
		s.proxy.Hold(true)
		sleepCtx(ctx, d)
		how := "held traffic delivered late"
		if reset {
			how = fmt.Sprintf("then %d connections reset", s.proxy.Cut())
		}
		s.proxy.Hold(false)
		f.Duration, f.Detail = d, how+", holding "+held
	case NAmbiguous:
		if err := s.command("ambiguous"); err != nil {
			return
		}
		f.Detail = "next successful Commit reported as DEADLINE_EXCEEDED, holding " + held
	case NAmbiguousBlackhole:
		if err := s.command("ambiguous blackhole"); err != nil {
			return
		}
		f.Detail = "next successful Commit reported as DEADLINE_EXCEEDED, then its recovery blackholed, holding " + held
	case NAmbiguousPause:
		n.pauseRecovery(ctx, s, &f)
	}
	n.r.record(f)
}

// stopOutcome is how arming a worker to stop itself ended.
type stopOutcome int

const (
	stopReached stopOutcome = iota
	stopTimedOut
	stopAbandoned // the command failed or the run ended
)

// armStop sends a worker a command that makes it stop itself at its next
// matching point, and waits until it reports having stopped, for up to six
// TTLs.
func (n *nemesis) armStop(ctx context.Context, s *slot, command string) (stopNote, stopOutcome) {
	wait := make(chan stopNote, 1)
	s.mu.Lock()
	s.waiter = wait
	s.mu.Unlock()
	if err := s.command(command); err != nil {
		return stopNote{}, stopAbandoned
	}
	select {
	case note := <-wait:
		return note, stopReached
	case <-time.After(6 * n.r.cfg.TTL):
		s.mu.Lock()
		s.waiter = nil
		s.mu.Unlock()
		return stopNote{}, stopTimedOut
	case <-ctx.Done():
		return stopNote{}, stopAbandoned
	}
}

// pauseRecovery has a worker report its next successful Commit as
// DEADLINE_EXCEEDED and stop itself at once, and keeps it stopped for
// longer than the TTL, so that it recovers from the ambiguous commit only
// after its leases may have expired and been taken.
func (n *nemesis) pauseRecovery(ctx context.Context, s *slot, f *Fault) {
	ttl := n.r.cfg.TTL
	note, outcome := n.armStop(ctx, s, "ambiguous pause")
	if outcome == stopTimedOut {
		f.Detail = "armed, but the worker committed nothing in time (it will stop at its next commit)"
	}
	if outcome != stopReached {
		return
	}
	n.r.markStopped(s, true)
	d := ttl + time.Duration(n.rng.Float64()*float64(ttl))
	sleepCtx(ctx, d)
	n.r.cont(s)
	f.Duration = d
	f.Detail = fmt.Sprintf("stopped in the %s after an ambiguous commit", note.op)
}

// pausePoint arms a worker's pause point, waits until it has stopped itself
// inside a guarded write, checks in Spanner that it still held the lease
// then, and keeps it stopped until the TTL has passed and a rival's write
// to the same name committed, so that whatever it commits on waking comes
// after the rival's.
func (n *nemesis) pausePoint(ctx context.Context, s *slot, f *Fault) {
	ttl := n.r.cfg.TTL
	kind := "lock"
	if n.r.semaphore != "" && n.pauses%2 == 1 {
		kind = "sem"
	}
	n.pauses++
	note, outcome := n.armStop(ctx, s, "pause "+kind)
	if outcome == stopTimedOut {
		f.Detail = "armed for a " + kind + ", but the worker made no guarded write with a fresh one in time (it will stop at its next)"
	}
	if outcome != stopReached {
		return
	}
	stoppedAt := time.Now()
	n.r.markStopped(s, true)
	cmd, _ := s.current()
	for cmd != nil && processState(cmd.Process.Pid) != "T" && time.Since(stoppedAt) < 2*time.Second {
		time.Sleep(5 * time.Millisecond)
	}
	f.Held = n.r.holds(ctx, note.name, note.token, f.Target)
	since := n.r.spannerNow(ctx)
	deadline := stoppedAt.Add(10 * ttl)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if time.Since(stoppedAt) > ttl+ttl/5 && n.r.rivalWrote(ctx, note.name, note.token, since) {
			f.RivalWrote = true
			break
		}
		sleepCtx(ctx, ttl/10)
	}
	n.r.cont(s)
	f.Duration = time.Since(stoppedAt)
	f.Detail = fmt.Sprintf("stopped in %s on %s token %d; held in Spanner when stopped: %v; a rival wrote meanwhile: %v",
		note.op, note.name, note.token, f.Held, f.RivalWrote)
}

// late handles a pause point reached after its nemesis gave up waiting: the
// worker is stopped, so it gets an ordinary long pause.
func (r *runner) late(s *slot, note stopNote) {
	r.markStopped(s, true)
	time.Sleep(r.cfg.TTL + r.cfg.TTL/2)
	r.cont(s)
	_, holder := s.current()
	r.record(Fault{At: time.Now(), Kind: NPausePoint, Target: holder, Duration: r.cfg.TTL + r.cfg.TTL/2,
		Detail: fmt.Sprintf("stopped in %s on %s token %d after its nemesis had moved on", note.op, note.name, note.token)})
}

// holds reports whether Spanner says holder holds name with token.
func (r *runner) holds(ctx context.Context, name string, token int64, holder string) bool {
	if name == r.semaphore {
		sem, err := r.lc.Semaphore(ctx, name)
		if err != nil {
			return false
		}
		for _, h := range sem.Holders {
			if h.Token == token && h.HolderID == holder {
				return true
			}
		}
		return false
	}
	h, err := r.lc.Holder(ctx, name)
	return err == nil && h.Token == token && h.HolderID == holder
}

// spannerNow is Spanner's clock, to compare with commit timestamps.
func (r *runner) spannerNow(ctx context.Context) time.Time {
	var now time.Time
	_ = r.db.Single().Query(ctx, r.sql.Now()).Do(func(row *spanner.Row) error {
		return row.Column(0, &now)
	})
	return now
}

// rivalWrote reports whether another token's write to name committed after since.
func (r *runner) rivalWrote(ctx context.Context, name string, token int64, since time.Time) bool {
	found := false
	err := r.db.Single().Query(ctx, r.sql.RivalWrite(name, token, since)).Do(func(*spanner.Row) error { found = true; return nil })
	return err == nil && found
}

func describeHeld(m map[string]int64) string {
	if len(m) == 0 {
		return "nothing"
	}
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	out := ""
	for i, k := range names {
		if i > 0 {
			out += ", "
		}
		out += fmt.Sprintf("%s token %d", k, m[k])
	}
	return out
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
