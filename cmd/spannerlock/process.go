//go:build unix

package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
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

// Bounds of the interval at which spannerlock passes the lease's local
// deadline on to the guard: often enough that a renewal confirmed just
// before the old deadline reaches the guard in time, rarely enough to cost
// nothing while the deadline is far.
const (
	minDeadlineCheck = 10 * time.Millisecond
	maxDeadlineCheck = 250 * time.Millisecond
)

// child is CMD running in a process group of its own, so that signals
// reach everything it started and nothing it started outlives spannerlock.
type child struct {
	// pgid is CMD's pid and its process group's ID.
	pgid int
	// exited is closed when CMD itself has exited; status is set then.
	exited chan struct{}
	// status is CMD's exit status, or 128+N if it died of signal N, and
	// exitedAt when CMD was seen to exit.
	status   int
	exitedAt time.Time
	// guardStopped is set when the groupGuard stopped CMD's group because
	// the lease's local deadline passed.
	guardStopped atomic.Bool
	// gone is closed after exited, once no process of CMD's group is left
	// (or, on Linux, could still be started by one spannerlock waits for).
	gone chan struct{}
	// stopped receives the signal that stopped CMD (job control: Ctrl-Z,
	// a read of the terminal from the background, SIGSTOP).
	stopped chan syscall.Signal
	// guard takes the lease's local deadline and stop requests to the
	// groupGuard.
	guard guardControl
	// terminal is set when CMD's group may have the terminal: spannerlock's
	// stdin is its controlling terminal, and CMD is the whole job, nothing
	// else of spannerlock's process group (a pipeline's other commands)
	// needing the terminal. foreground is set while CMD's group has it.
	terminal, foreground bool
}

// guardControl tells CMD's groupGuard the lease's local deadline, or to stop
// the group now.
type guardControl interface {
	setDeadline(time.Time)
	stop()
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
	// stoppedBy is the last stopping signal spannerlock passed on to CMD.
	stoppedBy os.Signal
}

// runChild runs CMD under l until CMD and every process it left have
// exited. Signals spannerlock receives go to CMD's group. The group gets
// SIGTERM killAfter before the lease's local deadline and SIGKILL at it
// (see groupGuard), or SIGTERM at once if the lease ends early; processes
// CMD leaves behind when it exits are stopped the same way, so that none
// runs on without the lease. CMD and spannerlock
// stop and continue together, as the processes of a shell's job do.
func (a *app) runChild(l *lease.Lease, spec *childSpec, killAfter time.Duration, log *slog.Logger) (runOutcome, error) {
	terminal := controllingTerminal() && aloneInGroup()
	c, err := startChild(spec, killAfter, terminal && foregroundGroup(), l.Deadline())
	if err != nil {
		return runOutcome{}, err
	}
	c.terminal = terminal
	defer func() {
		if c.foreground {
			takeTerminalBack()
		}
	}()
	jobs := a.sigs.jobs
	jobs.start()
	defer jobs.done()
	var (
		out       runOutcome
		leaseDone = l.Context().Done()
		exited    = c.exited
		// giveUp ends the wait for a group that was stopped, once SIGKILL
		// had time to act.
		giveUp <-chan time.Time
		// leftovers fires when CMD's group outlived CMD by leftoverGrace.
		leftovers <-chan time.Time
		stopped   bool
		// sent is the deadline the guard has; check fires when it is time
		// to look whether the lease's moved.
		sent  time.Time
		check = time.NewTimer(0)
		// lostSeen is when this loop saw the lease end, if it did.
		lostSeen time.Time
	)
	defer check.Stop()
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		c.guard.stop()
		giveUp = time.After(killAfter + survivorWait)
	}
	onExit := func() {
		exited = nil
		out.status = c.status
		// Ctrl-C reached CMD alone, its group having the terminal: the
		// shells that ran spannerlock get SIGINT from it as they exit.
		a.interruptGroup = c.foreground && c.status == signalStatus(syscall.SIGINT)
		out.lost = lostBefore(c, l, lostSeen)
		log.Info("CMD exited", "status", c.status, "pid", c.pgid)
	}
	for {
		select {
		case sig := <-a.sigs.ch:
			if s, ok := sig.(syscall.Signal); ok {
				c.signal(s)
			}
			if stopping(sig) {
				out.stoppedBy = sig
			}
		case <-check.C:
			if d := l.Deadline(); !d.Equal(sent) {
				c.guard.setDeadline(d)
				sent = d
			}
			check.Reset(min(max(time.Until(sent)/8, minDeadlineCheck), maxDeadlineCheck))
		case <-leaseDone:
			leaseDone, lostSeen = nil, time.Now()
			if exited != nil {
				log.Warn("the lease ended while CMD ran; stopping CMD's process group: SIGTERM now, SIGKILL after --kill-after or at the lease's local deadline",
					"name", l.Name(), "token", l.Token(), "cause", context.Cause(l.Context()), "kill_after", killAfter)
				stop()
			}
		case <-jobs.suspend:
			// Ctrl-Z with spannerlock's group in the foreground, or kill
			// -TSTP: CMD stops first, and spannerlock once it has.
			c.signal(syscall.SIGTSTP)
		case sig := <-c.stopped:
			if c.foreground {
				takeTerminalBack()
				c.foreground = false
			}
			jobs.stopSelf(sig)
		case <-jobs.resumed:
			// fg or bg: CMD gets the terminal back if it had it and
			// spannerlock is now in the foreground, and continues.
			if c.terminal && !c.foreground && foregroundGroup() {
				c.foreground = giveTerminal(c.pgid)
			}
			c.signal(syscall.SIGCONT)
		case <-exited:
			onExit()
			if !stopped {
				leftovers = time.After(leftoverGrace)
			}
		case <-leftovers:
			leftovers = nil
			if !stopped && c.groupAlive() {
				log.Warn("CMD exited and left processes in its process group; stopping them: SIGTERM now, SIGKILL after --kill-after or at the lease's local deadline",
					"pgid", c.pgid, "kill_after", killAfter)
				stop()
			}
		case <-giveUp:
			log.Warn("processes of CMD's group survived SIGKILL; not waiting for them", "pgid", c.pgid)
			if exited != nil {
				out.status, out.lost = 128+int(syscall.SIGKILL), true
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

// lostBefore reports whether the lease ended before CMD exited, so that CMD
// was stopped, or ran on without it: the guard stopped CMD at the lease's
// local deadline, or CMD exited after that deadline, or after this process
// saw the lease end. A CMD that exited while the lease was live ran entirely
// under it (the Context ends before any rival can acquire), even when
// spannerlock, stopped or paused meanwhile, learns of the exit only later.
func lostBefore(c *child, l *lease.Lease, lostSeen time.Time) bool {
	if c.guardStopped.Load() {
		return true
	}
	if l.Context().Err() == nil {
		return false
	}
	return !c.exitedAt.Before(l.Deadline()) || !lostSeen.IsZero() && !c.exitedAt.Before(lostSeen)
}

// jobControl receives the job-control signals from start-up on: Go's
// runtime handles SIGTSTP for good once asked to, so spannerlock does what
// the default action would. While CMD runs (between start and done),
// SIGTSTP and SIGCONT go to runChild: spannerlock passes SIGTSTP on to CMD
// and stops once CMD has, and after SIGCONT continues CMD. Otherwise
// SIGTSTP stops spannerlock, as it would any process.
type jobControl struct {
	suspend, resumed chan os.Signal

	mu      sync.Mutex
	running bool
}

func notifyJobControl() *jobControl {
	j := &jobControl{suspend: make(chan os.Signal, 1), resumed: make(chan os.Signal, 1)}
	raw := make(chan os.Signal, 4)
	signal.Notify(raw, syscall.SIGTSTP, syscall.SIGCONT)
	go j.route(raw)
	return j
}

func (j *jobControl) route(raw <-chan os.Signal) {
	for sig := range raw {
		j.mu.Lock()
		running := j.running
		j.mu.Unlock()
		to := j.resumed
		switch {
		case sig == syscall.SIGTSTP && !running:
			stopThread(syscall.SIGSTOP)
			continue
		case !running:
			continue
		case sig == syscall.SIGTSTP:
			to = j.suspend
		}
		select {
		case to <- sig:
		default: // one pending says it all
		}
	}
}

// start routes the signals to runChild until done.
func (j *jobControl) start() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.running = true
	// Drop what a run before this one left.
	for _, ch := range []chan os.Signal{j.suspend, j.resumed} {
		select {
		case <-ch:
		default:
		}
	}
}

func (j *jobControl) done() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.running = false
}

// stopSelf stops spannerlock as CMD was stopped, so that the shell sees the
// job stopped and gives its prompt back, and returns once spannerlock is
// continued. Go's runtime keeps handling SIGTSTP once spannerlock has asked
// for it, and giveTerminal leaves SIGTTOU ignored, so neither would stop
// it: SIGSTOP does ("Stopped (signal)" in bash). SIGTTIN keeps its default
// action, and with it the shell's "Stopped (tty input)".
func (j *jobControl) stopSelf(sig syscall.Signal) {
	if sig != syscall.SIGTTIN {
		sig = syscall.SIGSTOP
	}
	stopThread(sig)
}

// controllingTerminal reports whether spannerlock's stdin is its
// controlling terminal.
func controllingTerminal() bool {
	_, err := unix.IoctlGetInt(0, unix.TIOCGPGRP)
	return err == nil
}

// foregroundGroup reports whether spannerlock's stdin is its terminal and
// its process group is in the terminal's foreground.
func foregroundGroup() bool {
	pgrp, err := unix.IoctlGetInt(0, unix.TIOCGPGRP)
	return err == nil && pgrp == syscall.Getpgrp()
}

// giveTerminal makes pgid the terminal's foreground group, and reports
// whether it did.
func giveTerminal(pgid int) bool {
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	return unix.IoctlSetPointerInt(0, unix.TIOCSPGRP, pgid) == nil
}

// takeTerminalBack makes spannerlock's group the terminal's foreground
// again, so that whatever runs after spannerlock in the same shell script
// can read the terminal. A background group may do that only with SIGTTOU
// ignored.
func takeTerminalBack() {
	giveTerminal(syscall.Getpgrp())
}
