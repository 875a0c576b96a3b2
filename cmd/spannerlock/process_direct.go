//go:build unix && !linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"golang.org/x/term"
)

// Outside Linux, spannerlock starts CMD itself in a process group of its
// own, and CMD's groupGuard runs inside spannerlock. If spannerlock is
// killed with SIGKILL, nothing stops CMD there, and while spannerlock is
// stopped, nothing stops CMD at the lease's deadline: run spannerlock under a
// supervisor that kills the whole process tree (launchd, a container
// runtime) where that matters.
const reaperArg = "__spannerlock_reaper"

// groupPoll is how often spannerlock looks for the last process of CMD's
// group after CMD exited.
const groupPoll = 25 * time.Millisecond

func reaperMain([]string) int {
	fmt.Fprintln(os.Stderr, "spannerlock: the reaper runs only on Linux")
	return exitUsage
}

// startChild starts CMD with a guard that has deadline, the lease's local
// deadline, from the start.
func startChild(spec *childSpec, killAfter time.Duration, foreground bool, deadline time.Time) (*child, error) {
	attr := &syscall.SysProcAttr{Setpgid: true}
	if foreground {
		attr.Foreground, attr.Ctty = true, 0
	}
	cmd := &exec.Cmd{Path: spec.path, Args: spec.argv, Env: spec.env, Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, SysProcAttr: attr}
	if err := cmd.Start(); err != nil {
		return nil, exitWith(exitCannotRun, "cannot run %s: %v", spec.argv[0], err)
	}
	pid := cmd.Process.Pid
	gone := make(chan struct{})
	ctl := &localGuard{commands: make(chan guardCommand), gone: gone}
	c := &child{pgid: pid, exited: make(chan struct{}), gone: gone, stopped: make(chan syscall.Signal, 1),
		foreground: foreground, guard: ctl}
	guard := newGuard(killAfter, func(sig syscall.Signal) { _ = syscall.Kill(-pid, sig) })
	guard.setDeadline(deadline)
	go ctl.run(c, guard)
	go func() {
		// Reaped here, not by cmd.Wait, to see CMD stop as well as exit.
		for {
			var ws syscall.WaitStatus
			_, err := syscall.Wait4(pid, &ws, syscall.WUNTRACED, nil)
			if err == syscall.EINTR {
				continue
			}
			if err == nil && ws.Stopped() {
				select {
				case c.stopped <- ws.StopSignal():
				default:
				}
				continue
			}
			c.status, c.exitedAt = exitFailure, time.Now()
			if err == nil {
				c.status = waitStatus(ws)
			}
			break
		}
		close(c.exited)
		for c.groupAlive() {
			time.Sleep(groupPoll)
		}
		close(c.gone)
	}()
	return c, nil
}

// localGuard runs CMD's groupGuard in a goroutine of spannerlock's, until
// CMD's group is gone.
type localGuard struct {
	commands chan guardCommand
	gone     <-chan struct{}
}

func (l *localGuard) setDeadline(t time.Time) { l.send(guardCommand{deadline: t}) }
func (l *localGuard) stop()                   { l.send(guardCommand{stop: true}) }

func (l *localGuard) send(cmd guardCommand) {
	select {
	case l.commands <- cmd:
	case <-l.gone:
	}
}

func (l *localGuard) run(c *child, g *groupGuard) {
	for {
		select {
		case <-l.gone:
			return
		case <-g.deadlineC():
			c.guardStopped.Store(true)
			g.stop()
		case <-g.killC():
			g.killNow()
		case cmd := <-l.commands:
			if cmd.stop {
				g.stop()
			} else {
				g.setDeadline(cmd.deadline)
			}
		}
	}
}

// aloneInGroup cannot list the processes of a group here; a pipeline's
// commands have a pipe on stdout or stdin, so CMD may have the terminal
// only when both are the terminal.
func aloneInGroup() bool {
	return term.IsTerminal(int(os.Stdin.Fd())) && term.IsTerminal(int(os.Stdout.Fd()))
}

// stopThread stops the process with sig, and returns once it is continued.
func stopThread(sig syscall.Signal) {
	_ = syscall.Kill(os.Getpid(), sig)
}
