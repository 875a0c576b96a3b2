//go:build unix && !linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Outside Linux, spannerlock starts CMD itself in a process group of its
// own. If spannerlock is killed with SIGKILL, nothing stops CMD there: run
// spannerlock under a supervisor that kills the whole process tree
// (launchd, a container runtime) where that matters.
const reaperArg = "__spannerlock_reaper"

// groupPoll is how often spannerlock looks for the last process of CMD's
// group after CMD exited.
const groupPoll = 25 * time.Millisecond

func reaperMain([]string) int {
	fmt.Fprintln(os.Stderr, "spannerlock: the reaper runs only on Linux")
	return exitUsage
}

func startChild(spec *childSpec, foreground bool) (*child, error) {
	attr := &syscall.SysProcAttr{Setpgid: true}
	if foreground {
		attr.Foreground, attr.Ctty = true, 0
	}
	cmd := &exec.Cmd{Path: spec.path, Args: spec.argv, Env: spec.env, Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, SysProcAttr: attr}
	if err := cmd.Start(); err != nil {
		return nil, exitWith(exitCannotRun, "cannot run %s: %v", spec.argv[0], err)
	}
	c := &child{pgid: cmd.Process.Pid, exited: make(chan struct{}), gone: make(chan struct{}), foreground: foreground}
	go func() {
		_ = cmd.Wait()
		c.status = exitFailure
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok {
			c.status = waitStatus(ws)
		}
		close(c.exited)
		for c.groupAlive() {
			time.Sleep(groupPoll)
		}
		close(c.gone)
	}()
	return c, nil
}
