package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// On Linux, CMD is started by a small reaper: spannerlock itself, run again
// with reaperArg. The reaper is what makes "no orphan survives spannerlock"
// and "CMD stops at the lease's deadline" hold whatever happens to
// spannerlock:
//
//   - The kernel sends the reaper SIGTERM when spannerlock dies
//     (PR_SET_PDEATHSIG), and its control pipe from spannerlock closes; the
//     reaper then SIGKILLs CMD's whole process group, and gives the terminal
//     back to spannerlock's group if CMD's had it. Pdeathsig on CMD alone
//     would kill CMD but not what CMD started (the commands of a script).
//   - It runs CMD's groupGuard: spannerlock passes it the lease's local
//     deadline after every renewal, and the reaper stops CMD's group when
//     that passes, also while spannerlock is stopped or paused.
//   - The reaper is a child subreaper (PR_SET_CHILD_SUBREAPER): processes
//     CMD leaves behind are reparented to it, not to init, and it reaps
//     them, so spannerlock can wait until CMD's group is really empty, also
//     in containers whose PID 1 reaps nothing. It exits only once it has no
//     child left: a daemon that left CMD's group (setsid) is stopped with
//     the group, at the deadline or when CMD exits, rather than outliving
//     the lease.
//   - spannerlock is a child subreaper too: if the reaper is killed, what
//     CMD left comes to spannerlock, which kills it and waits for it before
//     it releases the lease (sweep).
//   - It sees CMD stop and continue (job control) and tells spannerlock.
//
// The reaper has a process group of its own, so that neither signals
// spannerlock sends to CMD's group nor those a terminal or a kill of a job
// sends to spannerlock's reach it. It tells spannerlock CMD's pid, stops and
// exit status on a pipe (its fd 3), takes the deadline and stop requests on
// another (its fd 4), and exits once CMD's group is empty.
const reaperArg = "__spannerlock_reaper"

// reaperPoll is how often the reaper looks for the last process of CMD's
// group after CMD exited, when no SIGCHLD says so.
const reaperPoll = 50 * time.Millisecond

// startChild starts CMD through the reaper, whose guard has deadline, the
// lease's local deadline, before CMD starts: spannerlock may be paused from
// the moment CMD runs, before it passes on a deadline of its own.
func startChild(spec *childSpec, killAfter time.Duration, foreground bool, deadline time.Time) (*child, error) {
	reports, reportW, err := os.Pipe()
	if err != nil {
		return nil, exitWith(exitCannotRun, "starting %s: %v", spec.argv[0], err)
	}
	controlR, control, err := os.Pipe()
	if err != nil {
		_ = reports.Close()
		_ = reportW.Close()
		return nil, exitWith(exitCannotRun, "starting %s: %v", spec.argv[0], err)
	}
	// Processes of CMD's that the reaper's death orphans come to spannerlock,
	// not to init, so that it can kill them and wait until they are gone.
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	mode := "background"
	if foreground {
		mode = "foreground"
	}
	args := append([]string{reaperArg, strconv.Itoa(os.Getpid()), mode, killAfter.String(), spec.path}, spec.argv...)
	// /proc/self/exe is this binary even if its file was replaced since.
	reaper := exec.Command("/proc/self/exe", args...)
	reaper.Args[0] = "spannerlock"
	reaper.Env = spec.env
	reaper.Stdin, reaper.Stdout, reaper.Stderr = os.Stdin, os.Stdout, os.Stderr
	reaper.ExtraFiles = []*os.File{reportW, controlR}
	reaper.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, Setpgid: true}
	// In the pipe before the reaper starts, so read before CMD can run long.
	guard := &reaperControl{w: control}
	guard.setDeadline(deadline)
	err = reaper.Start()
	_ = reportW.Close()
	_ = controlR.Close()
	if err != nil {
		_ = reports.Close()
		_ = control.Close()
		return nil, exitWith(exitCannotRun, "starting %s: %v", spec.argv[0], err)
	}
	report := bufio.NewReader(reports)
	kind, value, msg := readReport(report)
	if kind != "pid" {
		_ = reports.Close()
		_ = control.Close()
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
	c := &child{pgid: pid, exited: make(chan struct{}), gone: make(chan struct{}), stopped: make(chan syscall.Signal, 1),
		foreground: foreground, guard: guard}
	go func() {
		defer close(c.gone)
		defer func() { _ = control.Close() }()
		// A reaper that did not exit of its own accord (someone killed it)
		// left CMD's processes without their guard: spannerlock kills them
		// and waits until they are gone before the lease is released.
		defer func() {
			if !reaper.ProcessState.Success() {
				sweep(pid)
			}
		}()
		for {
			kind, value, _ := readReport(report)
			switch kind {
			case "deadline":
				c.guardStopped.Store(true)
				continue
			case "stopped":
				n, _ := strconv.Atoi(value)
				select {
				case c.stopped <- syscall.Signal(n):
				default: // one pending stop says it all
				}
				continue
			case "exit":
				status, at, _ := strings.Cut(value, "@")
				c.status, _ = strconv.Atoi(status)
				c.exitedAt = time.Now()
				if ns, err := strconv.ParseInt(at, 10, 64); err == nil {
					c.exitedAt = c.exitedAt.Add(time.Duration(ns - monotonicNow()))
				}
				close(c.exited)
				_ = reports.Close()
				_ = reaper.Wait()
				return
			}
			// The reaper died before CMD did (someone killed it); its
			// death took CMD with it (CMD's Pdeathsig).
			_ = reports.Close()
			_ = reaper.Wait()
			c.status, c.exitedAt = exitFailure, time.Now()
			if ws, ok := reaper.ProcessState.Sys().(syscall.WaitStatus); ok {
				c.status = waitStatus(ws)
			}
			close(c.exited)
			return
		}
	}()
	return c, nil
}

// reaperControl writes to the reaper's control pipe.
type reaperControl struct {
	mu sync.Mutex
	w  io.Writer
}

// setDeadline passes the deadline on as CLOCK_MONOTONIC, the clock of Go's
// timers, in both processes. The clock is read before the time left, so the
// reaper's deadline is never later than the lease's.
func (r *reaperControl) setDeadline(t time.Time) {
	now := monotonicNow()
	r.send(fmt.Sprintf("%s %d", ctlDeadline, now+int64(time.Until(t))))
}

func (r *reaperControl) stop() { r.send(ctlStop) }

func (r *reaperControl) send(line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// A reaper that is gone has nothing left to stop.
	_, _ = io.WriteString(r.w, line+"\n")
}

func monotonicNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// readReport reads one line of the reaper's report: "pid N", "stopped N"
// (CMD stopped by signal N), "deadline" (the guard stopped CMD's group at
// the lease's deadline), "exit N@T" (CMD exited with status N at T on
// CLOCK_MONOTONIC) or "error N message".
func readReport(r *bufio.Reader) (kind, value, msg string) {
	line, err := r.ReadString('\n')
	if err != nil && (err != io.EOF || line == "") {
		return "", "", ""
	}
	fields := strings.SplitN(strings.TrimSpace(line), " ", 3)
	switch len(fields) {
	case 3:
		msg = fields[2]
		fallthrough
	case 2:
		value = fields[1]
	}
	return fields[0], value, msg
}

// reaperMain is the reaper's whole life; args are spannerlock's pid,
// "foreground" or "background", --kill-after, the executable and CMD's argv.
func reaperMain(args []string) int {
	if len(args) < 5 {
		fmt.Fprintln(os.Stderr, "spannerlock: the reaper is started by spannerlock itself, not by hand")
		return exitUsage
	}
	parent, err := strconv.Atoi(args[0])
	if err != nil {
		return exitUsage
	}
	killAfter, err := time.ParseDuration(args[2])
	if err != nil {
		return exitUsage
	}
	foreground, path, argv := args[1] == "foreground", args[3], args[4:]
	report := os.NewFile(3, "report")
	syscall.CloseOnExec(3)
	control := os.NewFile(4, "control")
	syscall.CloseOnExec(4)

	// Every signal that could reach this process: the parent-death signal,
	// and what a kill of its group sends. None may kill the reaper while
	// spannerlock lives. The job-control ones are caught, not ignored: CMD
	// would inherit an ignored signal, and Ctrl-Z would not stop it. For the
	// same reason, those spannerlock left ignored (nohup's SIGHUP) stay so.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, notIgnored([]os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2})...)
	signal.Notify(make(chan os.Signal, 1), syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU)
	childSignals := make(chan os.Signal, 1)
	signal.Notify(childSignals, syscall.SIGCHLD)
	if os.Getppid() != parent {
		return exitFailure // spannerlock died before the handlers were in place
	}
	parentGroup, _ := syscall.Getpgid(parent)
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
	// The guard stops what CMD left outside its group too: the reaper, a
	// subreaper, is the parent of every orphan of CMD's, setsid daemons
	// included, and a lease must not outlive any of them.
	guard := newGuard(killAfter, func(sig syscall.Signal) { signalDescendants(pid, sig) })
	commands := readCommands(control)

	// orphaned gives the terminal back to spannerlock's group if CMD's had
	// it, so that the shell that ran spannerlock can read it again, and
	// kills CMD's group once spannerlock is gone. The terminal goes first:
	// the shell learned of spannerlock's death when the reaper did, and may
	// be reading already.
	orphaned := func() int {
		if fg, err := unix.IoctlGetInt(0, unix.TIOCGPGRP); err == nil && fg == pid && parentGroup > 0 {
			giveTerminal(parentGroup)
		}
		// Killed until none is left, reaping as they go: a process whose
		// parent was killed comes to the reaper, and gets SIGKILL then.
		giveUp := time.Now().Add(survivorWait)
		for time.Now().Before(giveUp) {
			signalDescendants(pid, syscall.SIGKILL)
			var ws syscall.WaitStatus
			if _, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); errors.Is(err, syscall.ECHILD) {
				break
			}
			time.Sleep(reaperPoll / 5)
		}
		return exitFailure
	}
	exited := false
	// Polled only after CMD exited: until then SIGCHLD is enough.
	var poll <-chan time.Time
	// leftovers fires leftoverGrace after CMD exited: what is left of it
	// then (its group, or children of the reaper's in other groups) is
	// stopped as a lost lease's CMD is.
	var leftovers <-chan time.Time
	// killedAt is when the guard sent SIGKILL.
	var killedAt time.Time
	for {
		children := true
		for {
			var ws syscall.WaitStatus
			reaped, err := syscall.Wait4(-1, &ws, syscall.WNOHANG|syscall.WUNTRACED, nil)
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			if errors.Is(err, syscall.ECHILD) {
				children = false
			}
			if err != nil || reaped <= 0 {
				break
			}
			switch {
			case reaped != pid:
			case ws.Stopped():
				_, _ = fmt.Fprintf(report, "stopped %d\n", int(ws.StopSignal()))
			default:
				_, _ = fmt.Fprintf(report, "exit %d@%d\n", waitStatus(ws), monotonicNow())
				exited = true
				ticker := time.NewTicker(reaperPoll)
				defer ticker.Stop()
				poll = ticker.C
				leftovers = time.After(leftoverGrace)
			}
		}
		// Not finished while any child is left: a daemon CMD started
		// (setsid) runs on without the lease otherwise.
		if exited && !children && !groupAlive(pid) {
			return exitOK
		}
		if exited && !killedAt.IsZero() && time.Since(killedAt) > survivorWait {
			// Stuck in the kernel: SIGKILL cannot end it, and waiting
			// would keep the lease forever.
			fmt.Fprintln(os.Stderr, "spannerlock: processes CMD left survived SIGKILL; not waiting for them")
			return exitOK
		}
		guard.killAgain()
		select {
		case <-childSignals:
		case <-poll:
		case <-leftovers:
			leftovers = nil
			guard.stop()
		case <-guard.deadlineC():
			if !exited {
				_, _ = fmt.Fprintln(report, "deadline")
			}
			guard.stop()
		case <-guard.killC():
			guard.killNow()
			killedAt = time.Now()
		case cmd, ok := <-commands:
			switch {
			case !ok && os.Getppid() != parent:
				return orphaned()
			case !ok:
				// spannerlock closed the pipe: it no longer waits for CMD.
				commands = nil
			case cmd.stop:
				guard.stop()
			default:
				guard.setDeadline(cmd.deadline)
			}
		case <-sigs:
			if os.Getppid() != parent {
				return orphaned()
			}
		}
	}
}

// readCommands reads the control pipe; the channel closes at its end, which
// comes when spannerlock exits or dies.
func readCommands(r io.Reader) <-chan guardCommand {
	ch := make(chan guardCommand, 8)
	go func() {
		defer close(ch)
		s := bufio.NewScanner(r)
		for s.Scan() {
			kind, value, _ := strings.Cut(s.Text(), " ")
			switch kind {
			case ctlStop:
				ch <- guardCommand{stop: true}
			case ctlDeadline:
				ns, err := strconv.ParseInt(value, 10, 64)
				if err != nil {
					continue
				}
				// CLOCK_MONOTONIC in both processes: the time left is the
				// same here as in spannerlock.
				ch <- guardCommand{deadline: time.Now().Add(time.Duration(ns - monotonicNow()))}
			}
		}
	}()
	return ch
}

// sweep kills what a reaper that was killed left of CMD: CMD's process
// group, and every process reparented to spannerlock (a subreaper) since,
// such as CMD's children and the daemons CMD started, and their
// descendants. It reaps those that are spannerlock's children, and returns
// once none is left, or after survivorWait for a process that SIGKILL
// cannot end (stuck in the kernel).
func sweep(pgid int) {
	self := os.Getpid()
	giveUp := time.Now().Add(survivorWait)
	for {
		left := 0
		procs := processTable()
		for pid, st := range procs {
			if st.pgrp != pgid && !descendsFrom(procs, pid, self) {
				continue
			}
			if st.state != "Z" && st.state != "X" {
				left++
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			if st.ppid == self {
				var ws syscall.WaitStatus
				_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
			}
		}
		if left == 0 || time.Now().After(giveUp) {
			return
		}
		time.Sleep(reaperPoll)
	}
}

// processTable reads every process's state, parent and group from /proc.
func processTable() map[int]procStatus {
	procs := map[int]procStatus{}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return procs
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := procStat(pid); err == nil {
			procs[pid] = st
		}
	}
	return procs
}

// descendsFrom reports whether pid is a descendant of ancestor in procs.
func descendsFrom(procs map[int]procStatus, pid, ancestor int) bool {
	seen := map[int]bool{}
	for st, ok := procs[pid]; ok && !seen[pid]; st, ok = procs[pid] {
		seen[pid] = true
		if st.ppid == ancestor {
			return true
		}
		pid = st.ppid
	}
	return false
}

// signalDescendants sends sig to CMD's group and to every live descendant of
// the calling process (the reaper): what CMD left in other groups and
// sessions (setsid daemons) as well.
func signalDescendants(pgid int, sig syscall.Signal) {
	_ = syscall.Kill(-pgid, sig)
	self := os.Getpid()
	procs := processTable()
	for pid, st := range procs {
		if st.state != "Z" && st.state != "X" && descendsFrom(procs, pid, self) {
			_ = syscall.Kill(pid, sig)
		}
	}
}

// aloneInGroup reports whether spannerlock's process group holds nothing
// but spannerlock and the shells that ran it: then CMD is the whole job and
// may have the terminal. In a pipeline (spannerlock lock x -- seq 100 |
// less) the other commands are in the group too, and need the terminal.
// It looks through /proc; where it cannot, it assumes so.
func aloneInGroup() bool {
	pgrp := syscall.Getpgrp()
	ancestors := map[int]bool{}
	for pid := os.Getpid(); pid > 1 && !ancestors[pid]; {
		ancestors[pid] = true
		st, err := procStat(pid)
		if err != nil {
			break
		}
		pid = st.ppid
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || ancestors[pid] {
			continue
		}
		st, err := procStat(pid)
		if err == nil && st.pgrp == pgrp && st.state != "Z" && st.state != "X" {
			return false
		}
	}
	return true
}

type procStatus struct {
	state      string
	ppid, pgrp int
}

// procStat reads a process's state, parent and process group.
func procStat(pid int) (procStatus, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStatus{}, err
	}
	// pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses.
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(fields) < 3 {
		return procStatus{}, fmt.Errorf("/proc/%d/stat: too short", pid)
	}
	ppid, err1 := strconv.Atoi(fields[1])
	pgrp, err2 := strconv.Atoi(fields[2])
	if err := errors.Join(err1, err2); err != nil {
		return procStatus{}, err
	}
	return procStatus{state: fields[0], ppid: ppid, pgrp: pgrp}, nil
}

// stopThread sends sig to the calling thread, which then stops with the
// whole process before it returns from the system call, and returns once
// the process is continued.
func stopThread(sig syscall.Signal) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.Tgkill(os.Getpid(), unix.Gettid(), sig); err != nil {
		_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
	}
}
