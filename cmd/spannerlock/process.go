//go:build unix

package main

import (
	"context"
	"errors"
	"log/slog"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// survivorWait bounds the wait for CMD's process group after SIGKILL: a
// process stuck in the kernel (uninterruptible I/O) cannot be waited for.
const survivorWait = 10 * time.Second

// leftoverGrace is how long processes of CMD's group may take to go after
// CMD exited before they count as left behind: a process that got the same
// signal as CMD, or a pipeline's last command, is usually on its way out.
const leftoverGrace = 250 * time.Millisecond

// child is CMD running in a process group of its own, so that signals
// reach everything it started and nothing it started outlives spannerlock.
type child struct {
	// pgid is CMD's pid and its process group's ID.
	pgid int
	// exited is closed when CMD itself has exited; status is set then.
	exited chan struct{}
	// status is CMD's exit status, or 128+N if it died of signal N.
	status int
	// gone is closed after exited, once no process of CMD's group is left
	// (or, on Linux, could still be started by one spannerlock waits for).
	gone chan struct{}
	// foreground is set when CMD's group was given the terminal.
	foreground bool
}

func (c *child) signal(sig syscall.Signal) {
	_ = syscall.Kill(-c.pgid, sig)
}

// groupAlive reports whether any process of CMD's group is left.
func (c *child) groupAlive() bool {
	return groupAlive(c.pgid)
}

func groupAlive(pgid int) bool {
	err := syscall.Kill(-pgid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// waitStatus is the exit status a shell would report for ws.
func waitStatus(ws syscall.WaitStatus) int {
	switch {
	case ws.Exited():
		return ws.ExitStatus()
	case ws.Signaled():
		return 128 + int(ws.Signal())
	}
	return exitFailure
}

// runOutcome is how a run of CMD ended.
type runOutcome struct {
	// status is CMD's exit status, or 128+N if it died of signal N.
	status int
	// lost reports that the lease ended before CMD exited, so CMD was
	// stopped (or may have run on after the lease was gone).
	lost bool
}

// runChild runs CMD under l until CMD and every process it left in its
// group have exited. Signals spannerlock receives go to CMD's group. If
// the lease is lost first, the group gets SIGTERM, then SIGKILL after
// killAfter; processes CMD leaves behind when it exits are stopped the
// same way, so that none runs on without the lease.
func (a *app) runChild(l *lease.Lease, spec *childSpec, killAfter time.Duration, log *slog.Logger) (runOutcome, error) {
	c, err := startChild(spec, foregroundTerminal())
	if err != nil {
		return runOutcome{}, err
	}
	if c.foreground {
		defer takeTerminalBack()
	}
	var (
		out       runOutcome
		leaseDone = l.Context().Done()
		exited    = c.exited
		// stopping is set once the group has had SIGTERM; kill fires
		// SIGKILL, and giveUp ends the wait for what survives it.
		stopping bool
		kill     <-chan time.Time
		giveUp   <-chan time.Time
		// leftovers fires when CMD's group outlived CMD by leftoverGrace.
		leftovers <-chan time.Time
	)
	stop := func() {
		if stopping {
			return
		}
		stopping = true
		c.signal(syscall.SIGTERM)
		kill = time.After(killAfter)
	}
	onExit := func() {
		exited = nil
		out.status = c.status
		// The Context ends before any rival can acquire, so a CMD that
		// exited while it was live ran entirely under the lease.
		if l.Context().Err() != nil {
			out.lost = true
		}
	}
	for {
		select {
		case sig := <-a.sigs.ch:
			if s, ok := sig.(syscall.Signal); ok {
				c.signal(s)
			}
		case <-leaseDone:
			leaseDone = nil
			if exited != nil {
				log.Warn("the lease ended while CMD ran; stopping CMD's process group: SIGTERM now, SIGKILL after --kill-after",
					"name", l.Name(), "token", l.Token(), "cause", context.Cause(l.Context()), "kill_after", killAfter)
				stop()
			}
		case <-exited:
			onExit()
			if !stopping {
				leftovers = time.After(leftoverGrace)
			}
		case <-leftovers:
			leftovers = nil
			if !stopping && c.groupAlive() {
				log.Warn("CMD exited and left processes in its process group; stopping them: SIGTERM now, SIGKILL after --kill-after",
					"pgid", c.pgid, "kill_after", killAfter)
				stop()
			}
		case <-kill:
			kill = nil
			c.signal(syscall.SIGKILL)
			giveUp = time.After(survivorWait)
		case <-giveUp:
			log.Warn("processes of CMD's group survived SIGKILL; not waiting for them", "pgid", c.pgid)
			if exited != nil {
				out = runOutcome{status: 128 + int(syscall.SIGKILL), lost: l.Context().Err() != nil}
			}
			return out, nil
		case <-c.gone:
			if exited != nil {
				onExit()
			}
			return out, nil
		}
	}
}

// foregroundTerminal reports whether spannerlock's stdin is its terminal
// and its process group is in the terminal's foreground. CMD's group then
// gets the terminal, so that an interactive CMD can read it (a background
// group that reads it is stopped) and Ctrl-C reaches it directly.
func foregroundTerminal() bool {
	pgrp, err := unix.IoctlGetInt(0, unix.TIOCGPGRP)
	return err == nil && pgrp == syscall.Getpgrp()
}

// takeTerminalBack makes spannerlock's group the terminal's foreground
// again, so that whatever runs after spannerlock in the same shell script
// can read the terminal. A background group may do that only with SIGTTOU
// ignored.
func takeTerminalBack() {
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	_ = unix.IoctlSetPointerInt(0, unix.TIOCSPGRP, syscall.Getpgrp())
}
