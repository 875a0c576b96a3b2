//go:build linux

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// Ctrl-Z stops CMD and spannerlock together, as a shell stops the
// processes of a job: the shell says the job stopped and gives its prompt
// back, the lock stays held (within the TTL), and fg continues the job with
// CMD in the foreground again, reading the terminal.
func TestJobControlCtrlZAndFg(t *testing.T) {
	c := newCLI(t)
	lc := c.client()
	sh := interactiveShell(t, c)
	// What CMD prints is computed, so that the terminal's echo of the
	// command line never matches it.
	sh.typeIn(`"$SPANNERLOCK" --holder-id job --ttl 1m lock tty -- sh -c 'echo "$((40+2))-started"; read a; echo "got:$a"'` + "\n")
	sh.waitOutput("42-started")
	sh.typeIn("\x1a") // Ctrl-Z
	sh.waitOutput("Stopped")
	sh.typeIn("echo prompt-$((40+2))\n")
	sh.waitOutput("prompt-42")
	if h := holderOf(t, lc, "tty"); h == nil || h.HolderID != "job" {
		t.Fatalf("the stopped job's lock is held by %+v, want job", h)
	}
	sh.typeIn("fg\n")
	sh.typeIn("hello\n")
	sh.waitOutput("got:hello")
	sh.typeIn(`echo "rc=$?"` + "\n")
	sh.waitOutput("rc=0")
	if h := holderOf(t, lc, "tty"); h != nil {
		t.Fatalf("still held by %q after the job ended", h.HolderID)
	}
}

// bg continues a stopped job in the background: CMD runs on, and when it
// reads the terminal it stops again, and spannerlock with it, until fg
// gives it the terminal. Ctrl-C then reaches CMD.
func TestJobControlBgAndCtrlC(t *testing.T) {
	c := newCLI(t)
	sh := interactiveShell(t, c)
	sh.typeIn(`"$SPANNERLOCK" --ttl 1m lock tty -- sh -c 'echo $$ > child; while [ ! -e go ]; do sleep 0.05; done; echo "$((40+2))-reading"; read a; echo "got:$a"; sleep 300'` + "\n")
	c.waitFile("child")
	cmd := c.pid("child")
	holder := spannerlockOf(t, cmd)
	sh.typeIn("\x1a")
	sh.waitOutput("Stopped")
	sh.typeIn("bg; touch go\n")
	sh.waitOutput("42-reading")
	waitFor(t, "CMD, reading the terminal in the background, and spannerlock to stop", func() bool {
		return processState(cmd) == "T" && processState(holder) == "T"
	})
	sh.typeIn("fg\n")
	sh.typeIn("hello\n")
	sh.waitOutput("got:hello")
	sh.typeIn("\x03") // Ctrl-C
	sh.typeIn(`echo "rc=$?"` + "\n")
	sh.waitOutput("rc=130")
}

// spannerlockOf returns the pid of the spannerlock that runs CMD pid: CMD's
// parent is the reaper, whose parent is spannerlock.
func spannerlockOf(t *testing.T, cmd int) int {
	t.Helper()
	cmdStat, err := procStat(cmd)
	if err != nil {
		t.Fatal(err)
	}
	reaperStat, err := procStat(cmdStat.ppid)
	if err != nil {
		t.Fatal(err)
	}
	return reaperStat.ppid
}

// processState is a process's state letter (R, S, T, Z...), "" if gone.
func processState(pid int) string {
	st, err := procStat(pid)
	if err != nil {
		return ""
	}
	return st.state
}

// In a pipeline, CMD is not the whole job: the pipeline's other commands
// keep the terminal (less, or anything that reads it), instead of stopping
// when they read it because spannerlock gave it to CMD.
func TestJobControlPipeline(t *testing.T) {
	c := newCLI(t)
	sh := interactiveShell(t, c)
	sh.typeIn(`"$SPANNERLOCK" --ttl 1m lock x -- sh -c 'seq 1 3; while [ ! -e done ]; do sleep 0.05; done' | ` +
		`{ head -n 1; read -r a </dev/tty; echo "typed:$a"; touch done; cat >/dev/null; }; echo "rc=${PIPESTATUS[0]}"` + "\n")
	sh.waitOutput("1\r\n")
	sh.typeIn("hello\n")
	sh.waitOutput("typed:hello")
	sh.waitOutput("rc=0")
	if strings.Contains(sh.out.String(), "Stopped") {
		t.Fatalf("the pipeline stopped:\n%s", sh.out)
	}
}

// When spannerlock is killed with SIGKILL while CMD has the terminal, CMD's
// group dies with it and the reaper gives the terminal back to the shell
// that ran spannerlock, which can read it again. The shell learns of the
// death when the reaper does, so a script that reads the terminal at once
// may find it still with CMD's group for a moment: this one waits until the
// terminal is back. (A shell with job control takes it back itself.)
func TestTerminalBackAfterSIGKILL(t *testing.T) {
	c := newCLI(t)
	term := newTerminal(t, c, `"$SPANNERLOCK" lock tty -- sh -c 'echo $$ > child; echo ready; exec sleep 300'
		echo "rc=$?"
		while [ ! -e go ]; do sleep 0.05; done
		read b; echo "after:$b"`)
	term.waitOutput("ready")
	cmd := c.pid("child")
	if err := syscall.Kill(spannerlockOf(t, cmd), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	term.waitOutput("rc=137")
	shell := term.cmd.Process.Pid // a session leader: its group's ID is its pid
	waitFor(t, "the terminal to be the shell's again", func() bool {
		fg, err := unix.IoctlGetInt(int(term.master.Fd()), unix.TIOCGPGRP)
		return err == nil && fg == shell
	})
	if err := touch(c, "go"); err != nil {
		t.Fatal(err)
	}
	term.typeIn("world\n")
	term.waitOutput("after:world")
	waitFor(t, "CMD to die with spannerlock", func() bool { return dead(cmd) })
}

// Ctrl-Z on a pipeline, whose commands keep the terminal, stops CMD too:
// spannerlock passes SIGTSTP on to CMD's group and stops once CMD has; fg
// continues both.
func TestJobControlPipelineCtrlZ(t *testing.T) {
	c := newCLI(t)
	sh := interactiveShell(t, c)
	sh.typeIn(`"$SPANNERLOCK" --ttl 1m lock x -- sh -c 'echo $$ > child; while [ ! -e done ]; do sleep 0.05; done; echo "$((40+2))-done"' | cat` + "\n")
	c.waitFile("child")
	cmd := c.pid("child")
	holder := spannerlockOf(t, cmd)
	sh.typeIn("\x1a")
	sh.waitOutput("Stopped")
	waitFor(t, "CMD and spannerlock to stop", func() bool { return processState(cmd) == "T" && processState(holder) == "T" })
	sh.typeIn("touch done; fg\n")
	sh.waitOutput("42-done")
	sh.typeIn(`echo "rc=${PIPESTATUS[0]}"` + "\n")
	sh.waitOutput("rc=0")
}

// Ctrl-Z while spannerlock waits for the lock stops it like any process;
// fg continues the wait, and CMD runs once the lock is free.
func TestJobControlWhileWaiting(t *testing.T) {
	c := newCLI(t)
	held, err := c.client().Acquire(testContext(t), "x")
	if err != nil {
		t.Fatal(err)
	}
	sh := interactiveShell(t, c)
	sh.typeIn(`"$SPANNERLOCK" --verbose --poll-interval 100ms lock x -- sh -c 'echo "$((40+2))-ran"'` + "\n")
	sh.waitOutput("waiting")
	sh.typeIn("\x1a")
	sh.waitOutput("Stopped")
	sh.typeIn("echo prompt-$((40+2))\n")
	sh.waitOutput("prompt-42")
	if err := held.Release(testContext(t)); err != nil {
		t.Fatal(err)
	}
	sh.typeIn("fg\n")
	sh.waitOutput("42-ran")
	sh.typeIn(`echo "rc=$?"` + "\n")
	sh.waitOutput("rc=0")
}

// On a terminal, break says who holds the lease and breaks it only when the
// answer is yes.
func TestBreakAsksOnATerminal(t *testing.T) {
	c := newCLI(t)
	lc := c.client(lease.WithHolderID("stuck-host"))
	if _, err := lc.Acquire(testContext(t), "deploy"); err != nil {
		t.Fatal(err)
	}
	term := newTerminal(t, c, `"$SPANNERLOCK" break deploy; echo "rc=$?"
		"$SPANNERLOCK" break deploy; echo "rc=$?"`)
	term.waitOutput(`lock "deploy" is held by stuck-host`)
	term.waitOutput("Break it? [y/N] ")
	term.typeIn("n\n")
	term.waitOutput("rc=1")
	if h := holderOf(t, lc, "deploy"); h == nil {
		t.Fatal("break broke the lock although the answer was no")
	}
	waitFor(t, "the second question", func() bool { return strings.Count(term.out.String(), "Break it? [y/N] ") == 2 })
	term.typeIn("y\n")
	term.waitOutput("rc=0")
	if h := holderOf(t, lc, "deploy"); h != nil {
		t.Fatalf("still held by %q after yes", h.HolderID)
	}
}

// break breaks only the holder it asked about: when the lease changes hands
// while the question waits for its answer, the "y" breaks nothing, break
// exits 1 naming both holders, and the new holder keeps the lease. It broke
// the new holder before.
func TestBreakBreaksOnlyTheHolderItAskedAbout(t *testing.T) {
	c := newCLI(t)
	first := c.client(lease.WithHolderID("first-host"))
	asked, err := first.Acquire(testContext(t), "deploy")
	if err != nil {
		t.Fatal(err)
	}
	term := newTerminal(t, c, `"$SPANNERLOCK" break deploy; echo "rc=$?"`)
	term.waitOutput(`lock "deploy" is held by first-host`)
	term.waitOutput("Break it? [y/N] ")
	if err := asked.Release(testContext(t)); err != nil {
		t.Fatal(err)
	}
	second := c.client(lease.WithHolderID("second-host"))
	now, err := second.Acquire(testContext(t), "deploy")
	if err != nil {
		t.Fatal(err)
	}
	term.typeIn("y\n")
	term.waitOutput("rc=")
	if !strings.Contains(term.out.String(), "rc=1") {
		t.Errorf("break exited other than 1 after the holder changed:\n%s", term.out.String())
	}
	if !strings.Contains(term.out.String(), "now by second-host with token "+strconv.FormatInt(now.Token(), 10)) {
		t.Errorf("break does not say who holds it now:\n%s", term.out.String())
	}
	if h := holderOf(t, second, "deploy"); h == nil || h.Token != now.Token() {
		t.Fatalf("the new holder (token %d) lost the lock to a break asked about token %d: holder now %+v", now.Token(), asked.Token(), h)
	}
	if err := now.Context().Err(); err != nil {
		t.Fatalf("the new holder's lease ended: %v", err)
	}
}

// A job stopped with Ctrl-Z for longer than the TTL loses its lease, and
// CMD, stopped as it is, does not outlive the lease: the reaper ends it at
// the lease's local deadline (SIGTERM cannot reach a stopped process, so
// SIGKILL after --kill-after), before a rival can acquire. fg then ends
// the job with 76.
func TestJobStoppedPastTTL(t *testing.T) {
	c := newCLI(t)
	sh := interactiveShell(t, c)
	sh.typeIn(`"$SPANNERLOCK" --holder-id job --ttl 2s lock --kill-after 500ms tty -- sh -c 'echo $$ > child; echo "$((40+2))-started"; sleep 300'` + "\n")
	sh.waitOutput("42-started")
	c.waitFile("child")
	child := c.pid("child")
	sh.typeIn("\x1a") // Ctrl-Z
	sh.waitOutput("Stopped")
	rival := c.client(lease.WithHolderID("rival"), lease.WithPollInterval(50*time.Millisecond))
	if _, err := rival.Acquire(testContext(t), "tty"); err != nil {
		t.Fatal(err)
	}
	if !dead(child) {
		t.Fatalf("the stopped job's CMD (pid %d) is alive while a rival holds its lock", child)
	}
	sh.typeIn("fg\n")
	sh.typeIn(`echo "rc=$?"` + "\n")
	sh.waitOutput("rc=76")
}

// spannerlock paused just as it starts CMD, before it could pass the lease's
// deadline on to the reaper itself, still has CMD stopped at that deadline:
// the reaper has the deadline before CMD starts. (The test stops
// spannerlock as soon as the reaper is forked, which is before the reaper
// has started CMD in all but the rarest schedules.) The reaper exits once
// CMD's group is gone, so CMD, which would sleep for 300s, is gone when the
// reaper is; and it is gone before a rival acquires.
func TestPausedAsCMDStarts(t *testing.T) {
	c := newCLI(t)
	p := c.start("--ttl", "2s", "lock", "x", "--shell", "--", `trap 'exit 0' TERM; echo $$ > child; sleep 300 & wait`)
	spannerlock := p.cmd.Process.Pid
	deadline := time.Now().Add(conditionTimeout)
	var reaper []int
	for reaper = childrenOf(spannerlock); len(reaper) == 0; reaper = childrenOf(spannerlock) {
		if time.Now().After(deadline) {
			t.Fatal("spannerlock started no reaper")
		}
		time.Sleep(time.Millisecond)
	}
	p.signal(syscall.SIGSTOP)
	waitFor(t, fmt.Sprintf("the reaper (pid %d) to stop CMD at the lease's deadline, and exit, while spannerlock is paused", reaper[0]),
		func() bool { return dead(reaper[0]) })
	if c.exists("child") && !dead(c.pid("child")) {
		t.Fatalf("CMD (pid %d) outlived its reaper", c.pid("child"))
	}
	rival := c.client(lease.WithHolderID("rival"), lease.WithPollInterval(50*time.Millisecond))
	if _, err := rival.Acquire(testContext(t), "x"); err != nil {
		t.Fatal(err)
	}
	p.signal(syscall.SIGCONT)
	p.expect(exitLost)
}

// childrenOf returns the children of process pid, from all its threads.
func childrenOf(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, field := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(field); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}
