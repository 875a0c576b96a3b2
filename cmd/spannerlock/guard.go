//go:build unix

package main

import (
	"syscall"
	"time"
)

// groupGuard stops CMD's process group when the lease's local deadline
// passes, or when told to: SIGTERM, with SIGCONT so that a stopped group
// gets it, then SIGKILL after killAfter. It is the one place that stops
// CMD's group. On Linux it runs in the reaper, a process of its own, so that
// CMD stops at the deadline whatever happens to spannerlock (paused with
// SIGSTOP, a job stopped for longer than the TTL, a debugger); elsewhere it
// runs inside spannerlock.
//
// The deadline is the lease's local one: the start of its last confirmed
// renewal plus the TTL minus a safety margin (lease.Lease.Deadline), which
// passes before any rival can acquire the lease, so CMD has that margin to
// stop before another holder starts. spannerlock moves it forward after
// every renewal.
type groupGuard struct {
	pgid      int
	killAfter time.Duration

	deadline *time.Timer
	// kill fires SIGKILL once the group has had SIGTERM.
	kill     <-chan time.Time
	stopping bool
}

func newGroupGuard(pgid int, killAfter time.Duration) *groupGuard {
	return &groupGuard{pgid: pgid, killAfter: killAfter}
}

// setDeadline moves the deadline to t.
func (g *groupGuard) setDeadline(t time.Time) {
	d := time.Until(t)
	if g.deadline == nil {
		g.deadline = time.NewTimer(d)
		return
	}
	g.deadline.Reset(d)
}

// deadlineC fires when the deadline passes; nil before one is set.
func (g *groupGuard) deadlineC() <-chan time.Time {
	if g.deadline == nil {
		return nil
	}
	return g.deadline.C
}

// killC fires when the group is due for SIGKILL.
func (g *groupGuard) killC() <-chan time.Time { return g.kill }

// stop sends the group SIGTERM and SIGCONT, once, and arms SIGKILL.
func (g *groupGuard) stop() {
	if g.stopping {
		return
	}
	g.stopping = true
	_ = syscall.Kill(-g.pgid, syscall.SIGTERM)
	_ = syscall.Kill(-g.pgid, syscall.SIGCONT)
	g.kill = time.After(g.killAfter)
}

// killNow sends the group SIGKILL.
func (g *groupGuard) killNow() {
	g.kill = nil
	_ = syscall.Kill(-g.pgid, syscall.SIGKILL)
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
