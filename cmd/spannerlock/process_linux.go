package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// On Linux, CMD is started by a small reaper: spannerlock itself, run again
// with reaperArg. The reaper is what makes "no orphan survives spannerlock"
// hold even when spannerlock is killed with SIGKILL:
//
//   - The kernel sends the reaper SIGTERM when spannerlock dies
//     (PR_SET_PDEATHSIG), and the reaper then SIGKILLs CMD's whole process
//     group. Pdeathsig on CMD alone would kill CMD but not what CMD started
//     (the commands of a script).
//   - The reaper is a child subreaper (PR_SET_CHILD_SUBREAPER): processes
//     CMD leaves behind are reparented to it, not to init, and it reaps
//     them, so spannerlock can wait until CMD's group is really empty, also
//     in containers whose PID 1 reaps nothing.
//
// The reaper stays in spannerlock's process group, so signals spannerlock
// sends to CMD's group never reach it. It tells spannerlock CMD's pid and
// exit status on a pipe (its fd 3) and exits once CMD's group is empty.
const reaperArg = "__spannerlock_reaper"

// reaperPoll is how often the reaper looks for the last process of CMD's
// group after CMD exited, when no SIGCHLD says so.
const reaperPoll = 50 * time.Millisecond

func startChild(spec *childSpec, foreground bool) (*child, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, exitWith(exitCannotRun, "starting %s: %v", spec.argv[0], err)
	}
	mode := "background"
	if foreground {
		mode = "foreground"
	}
	args := append([]string{reaperArg, strconv.Itoa(os.Getpid()), mode, spec.path}, spec.argv...)
	// /proc/self/exe is this binary even if its file was replaced since.
	reaper := exec.Command("/proc/self/exe", args...)
	reaper.Args[0] = "spannerlock"
	reaper.Env = spec.env
	reaper.Stdin, reaper.Stdout, reaper.Stderr = os.Stdin, os.Stdout, os.Stderr
	reaper.ExtraFiles = []*os.File{w}
	reaper.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	err = reaper.Start()
	_ = w.Close()
	if err != nil {
		_ = r.Close()
		return nil, exitWith(exitCannotRun, "starting %s: %v", spec.argv[0], err)
	}
	report := bufio.NewReader(r)
	kind, value, msg := readReport(report)
	if kind != "pid" {
		_ = r.Close()
	}
	switch kind {
	case "pid":
	case "error":
		_ = reaper.Wait()
		code, _ := strconv.Atoi(value)
		return nil, exitWith(code, "cannot run %s: %s", spec.argv[0], msg)
	default:
		_ = reaper.Wait()
		return nil, exitWith(exitCannotRun, "starting %s: the reaper process failed (%v)", spec.argv[0], reaper.ProcessState)
	}
	pid, _ := strconv.Atoi(value)
	c := &child{pgid: pid, exited: make(chan struct{}), gone: make(chan struct{}), foreground: foreground}
	go func() {
		kind, value, _ := readReport(report)
		_ = r.Close()
		if kind == "exit" {
			c.status, _ = strconv.Atoi(value)
			close(c.exited)
			_ = reaper.Wait()
		} else {
			// The reaper died before CMD did (someone killed it); its death
			// took CMD with it (CMD's Pdeathsig).
			_ = reaper.Wait()
			c.status = exitFailure
			if ws, ok := reaper.ProcessState.Sys().(syscall.WaitStatus); ok {
				c.status = waitStatus(ws)
			}
			close(c.exited)
		}
		close(c.gone)
	}()
	return c, nil
}

// readReport reads one line of the reaper's report: "pid N", "exit N" or
// "error N message".
func readReport(r *bufio.Reader) (kind, value, msg string) {
	line, err := r.ReadString('\n')
	if err != nil && (err != io.EOF || line == "") {
		return "", "", ""
	}
	fields := strings.SplitN(strings.TrimSpace(line), " ", 3)
	if len(fields) < 2 {
		return "", "", ""
	}
	if len(fields) == 3 {
		msg = fields[2]
	}
	return fields[0], fields[1], msg
}

// reaperMain is the reaper's whole life; args are spannerlock's pid,
// "foreground" or "background", the executable and CMD's argv.
func reaperMain(args []string) int {
	if len(args) < 4 {
		fmt.Fprintln(os.Stderr, "spannerlock: the reaper is started by spannerlock itself, not by hand")
		return exitUsage
	}
	parent, err := strconv.Atoi(args[0])
	if err != nil {
		return exitUsage
	}
	foreground, path, argv := args[1] == "foreground", args[2], args[3:]
	report := os.NewFile(3, "report")
	syscall.CloseOnExec(3)

	// Every signal that could reach this process: the parent-death signal,
	// and what a terminal or a kill of spannerlock's group sends. None may
	// kill the reaper while spannerlock lives.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	children := make(chan os.Signal, 1)
	signal.Notify(children, syscall.SIGCHLD)
	if os.Getppid() != parent {
		return exitFailure // spannerlock died before the handlers were in place
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintf(os.Stderr, "spannerlock: processes CMD leaves behind will not be reaped: %v\n", err)
	}

	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if foreground {
		attr.Foreground, attr.Ctty = true, 0
	}
	// Never Wait on cmd: the loop below reaps every child with wait4(-1).
	cmd := &exec.Cmd{Path: path, Args: argv, Env: os.Environ(), Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, SysProcAttr: attr}
	if err := cmd.Start(); err != nil {
		code := exitCannotRun
		if errors.Is(err, syscall.ENOENT) {
			code = exitNotFound
		}
		_, _ = fmt.Fprintf(report, "error %d %v\n", code, err)
		return code
	}
	pid := cmd.Process.Pid
	_, _ = fmt.Fprintf(report, "pid %d\n", pid)

	exited := false
	// Polled only after CMD exited: until then SIGCHLD is enough.
	var poll <-chan time.Time
	for {
		for {
			var ws syscall.WaitStatus
			reaped, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			if err != nil || reaped <= 0 {
				break
			}
			if reaped == pid {
				_, _ = fmt.Fprintf(report, "exit %d\n", waitStatus(ws))
				exited = true
				ticker := time.NewTicker(reaperPoll)
				defer ticker.Stop()
				poll = ticker.C
			}
		}
		if exited && !groupAlive(pid) {
			return exitOK
		}
		select {
		case <-children:
		case <-poll:
		case <-sigs:
			if os.Getppid() != parent {
				// spannerlock is gone: so is everything it ran.
				_ = syscall.Kill(-pid, syscall.SIGKILL)
				return exitFailure
			}
		}
	}
}
