//go:build unix

package main

import (
	"syscall"
	"time"
)

// groupGuard stops CMD's process group before the lease can pass to
// another holder, or when told to: SIGTERM (with SIGCONT, so that a stopped
// group gets it) --kill-after before the lease's local deadline, and SIGKILL
// at that deadline. It is the one place that stops CMD's group. On Linux it
// runs in the reaper, a process of its own, so that CMD stops in time
// whatever happens to spannerlock (paused with SIGSTOP, a job stopped for
// longer than the TTL, a debugger); elsewhere it runs inside spannerlock.
//
// The deadline is the lease's local one: the start of its last confirmed
// renewal plus the TTL minus a safety margin (lease.Lease.Deadline), which
// passes before any rival can acquire the lease. SIGKILL there leaves CMD's
// group dead with that margin to spare; SIGTERM comes early enough that a
// CMD which stops on it has --kill-after to do so. spannerlock moves the
// deadline forward after every renewal, so with renewals every TTL/3 and
// --kill-after at most TTL/3, a healthy lease never gets that far.
//
//	renewal   SIGTERM             SIGKILL         earliest takeover
//	   |---------|--- --kill-after ---|--- TTL/10 ---|
//	   0   0.9·TTL − --kill-after   0.9·TTL         TTL
//
// A stop asked for (the lease ended early, CMD left processes behind) sends
// SIGTERM at once, and SIGKILL --kill-after later, or at the deadline if
// that comes first.
type groupGuard struct {
	killAfter time.Duration
	// signal sends a signal to what the guard stops: CMD's group, and in
	// the reaper every process CMD left.
	signal func(syscall.Signal)

	deadline time.Time
	// term fires when SIGTERM is due; kill, once the group has had SIGTERM,
	// when SIGKILL is.
	term, kill *time.Timer
	stopping   bool
	stoppedAt  time.Time
	// killed is set once SIGKILL went out; processes that turn up since
	// (reparented from a killed parent) get it too.
	killed bool
}

func newGuard(killAfter time.Duration, signal func(syscall.Signal)) *groupGuard {
	return &groupGuard{killAfter: killAfter, signal: signal}
}

// setDeadline moves the lease's local deadline to t.
func (g *groupGuard) setDeadline(t time.Time) {
	g.deadline = t
	if g.stopping {
		g.armKill()
		return
	}
	g.term = reset(g.term, time.Until(t)-g.killAfter)
}

// deadlineC fires when SIGTERM is due because the deadline nears; nil
// before a deadline is set, or once the group is being stopped.
func (g *groupGuard) deadlineC() <-chan time.Time {
	if g.term == nil || g.stopping {
		return nil
	}
	return g.term.C
}

// killC fires when the group is due for SIGKILL.
func (g *groupGuard) killC() <-chan time.Time {
	if g.kill == nil || g.killed {
		return nil
	}
	return g.kill.C
}

// stop sends the group SIGTERM and SIGCONT, once, and arms SIGKILL.
func (g *groupGuard) stop() {
	if g.stopping {
		return
	}
	g.stopping, g.stoppedAt = true, time.Now()
	if g.term != nil {
		g.term.Stop()
	}
	g.signal(syscall.SIGTERM)
	g.signal(syscall.SIGCONT)
	g.armKill()
}

// armKill sets SIGKILL for --kill-after after SIGTERM, or the deadline if
// that is sooner.
func (g *groupGuard) armKill() {
	at := g.stoppedAt.Add(g.killAfter)
	if !g.deadline.IsZero() && g.deadline.Before(at) {
		at = g.deadline
	}
	g.kill = reset(g.kill, time.Until(at))
}

// killNow sends the group SIGKILL, and again each time it is called after.
func (g *groupGuard) killNow() {
	g.killed = true
	g.signal(syscall.SIGKILL)
}

// killAgain sends SIGKILL to what turned up since killNow, if it ran.
func (g *groupGuard) killAgain() {
	if g.killed {
		g.signal(syscall.SIGKILL)
	}
}

func reset(t *time.Timer, d time.Duration) *time.Timer {
	if t == nil {
		return time.NewTimer(d)
	}
	t.Reset(d)
	return t
}

// guardCommand is one request to a guard: stop the group now, or a new
// deadline.
type guardCommand struct {
	stop     bool
	deadline time.Time
}

// Messages on the reaper's control pipe.
const (
	ctlDeadline = "deadline" // ctlDeadline NANOSECONDS: the deadline on CLOCK_MONOTONIC
	ctlStop     = "stop"     // stop the group now
)
