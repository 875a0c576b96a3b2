//go:build linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// terminal is a pseudo-terminal whose session runs a shell script, as a
// user's terminal runs their commands.
type terminal struct {
	t      *testing.T
	master *os.File
	out    *syncBuffer
	cmd    *exec.Cmd
	done   chan struct{}
}

func newTerminal(t *testing.T, c *cli, script string) *terminal {
	t.Helper()
	return startInTerminal(t, c, "sh", "-c", script)
}

// interactiveShell is a terminal with an interactive bash in it, with job
// control, as a user has: Ctrl-Z, fg, bg and jobs work as they do for them.
// Its prompt is "$ ".
func interactiveShell(t *testing.T, c *cli) *terminal {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skipf("no bash here: %v", err)
	}
	// --noediting: no readline, whose escape sequences would clutter the
	// output.
	term := startInTerminal(t, c, "bash", "--norc", "--noprofile", "--noediting", "-i")
	term.typeIn("PS1='$ '; set +o history\n")
	return term
}

func startInTerminal(t *testing.T, c *cli, program string, args ...string) *terminal {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { _ = master.Close() })
	if err := unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	// A size, as a terminal window has: wide enough for the longest line a
	// test expects whole.
	if err := unix.IoctlSetWinsize(int(master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 40, Col: 200}); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	slave, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = slave.Close() }()
	term := &terminal{t: t, master: master, out: &syncBuffer{}, done: make(chan struct{})}
	term.cmd = exec.Command(program, args...)
	term.cmd.Dir, term.cmd.Env = c.dir, append(c.env, "SPANNERLOCK="+binary)
	term.cmd.Stdin, term.cmd.Stdout, term.cmd.Stderr = slave, slave, slave
	// A session of its own with the terminal as its controlling terminal,
	// in the foreground, as a login shell has it.
	term.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := term.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			_, _ = term.out.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	go func() {
		_ = term.cmd.Wait()
		close(term.done)
	}()
	t.Cleanup(func() {
		// The shell's jobs have process groups of their own, in its
		// session: a test that failed may leave them behind.
		killSession(term.cmd.Process.Pid)
		<-term.done
	})
	return term
}

func (term *terminal) waitOutput(s string) {
	term.t.Helper()
	deadline := time.Now().Add(conditionTimeout)
	for !strings.Contains(term.out.String(), s) {
		if time.Now().After(deadline) {
			// The transcript says where the session stood.
			term.t.Fatalf("timed out after %s waiting for %q on the terminal; it shows:\n%s", conditionTimeout, s, term.out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (term *terminal) typeIn(s string) {
	term.t.Helper()
	if _, err := term.master.Write([]byte(s)); err != nil {
		term.t.Fatal(err)
	}
}

// On a terminal, CMD can read what the user types (a process group in the
// background of a terminal is stopped when it reads), and the terminal is
// given back to the shell after spannerlock.
func TestTerminalInput(t *testing.T) {
	c := newCLI(t)
	term := newTerminal(t, c, `"$SPANNERLOCK" lock tty -- sh -c 'echo prompt; read a; echo "got:$a"'
		echo "rc=$?"
		read b; echo "after:$b"`)
	term.waitOutput("prompt")
	term.typeIn("hello\n")
	term.waitOutput("got:hello")
	term.waitOutput("rc=0")
	term.typeIn("world\n")
	term.waitOutput("after:world")
}

// Ctrl-C on the terminal stops CMD, which has the terminal, and spannerlock
// dies of SIGINT (130) after passing it on to the shell that ran it, as the
// terminal would have without spannerlock, so that a script's loop stops.
// The trap keeps the shell alive to report that, and spannerlock's status.
func TestTerminalInterrupt(t *testing.T) {
	c := newCLI(t)
	term := newTerminal(t, c, `trap 'echo "shell $((40+2)) interrupted"' INT
		"$SPANNERLOCK" lock tty -- sh -c 'echo running; exec sleep 300'
		echo "rc=$?"`)
	term.waitOutput("running")
	term.typeIn("\x03")
	term.waitOutput("rc=130")
	if !strings.Contains(term.out.String(), "shell 42 interrupted") {
		t.Fatalf("the shell that ran spannerlock did not get the SIGINT:\n%s", term.out)
	}
}

// Ctrl-C stops a bash loop around spannerlock whose CMD has the terminal:
// bash ends the loop because it got the SIGINT too and its child died of
// it. The second iteration would run at once and print.
func TestTerminalInterruptStopsLoop(t *testing.T) {
	c := newCLI(t)
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skipf("no bash here: %v", err)
	}
	term := newTerminal(t, c, `trap : INT
		bash -c 'for i in 1 2; do
			"$SPANNERLOCK" lock tty -- sh -c "[ -e child ] && exit 0; echo \$\$ > child; echo running; exec sleep 300"
			echo "iteration $i"
		done'
		echo "loop rc=$?"`)
	term.waitOutput("running")
	term.typeIn("\x03")
	term.waitOutput("loop rc=")
	if out := term.out.String(); strings.Contains(out, "iteration") || !strings.Contains(out, "loop rc=130") {
		t.Fatalf("the loop went on after Ctrl-C, or did not die of SIGINT:\n%s", out)
	}
}

// On a terminal, status --watch clears the screen once, then redraws each
// read in place (cursor home, each line cleared to its end, the rest of the
// screen cleared), so a lease acquired while it watches appears on the same
// screen; a failed read is shown there above the last good one; Ctrl-C ends
// it with status 0.
func TestTerminalStatusWatch(t *testing.T) {
	c := newCLI(t)
	// Ctrl-C reaches the shell too (it runs without job control, so
	// spannerlock is in its process group): the trap keeps it alive to
	// report spannerlock's status.
	term := newTerminal(t, c, `trap 'echo shell interrupted' INT
		"$SPANNERLOCK" status --watch; echo "rc=$?"`)
	term.waitOutput("No live leases in table locks.")
	l, err := c.client(lease.WithHolderID("web-1")).Acquire(testContext(t), "deploy")
	if err != nil {
		t.Fatal(err)
	}
	term.waitOutput("web-1")
	if err := l.Release(testContext(t)); err != nil {
		t.Fatal(err)
	}
	if err := emulator.Shared(t).UpdateDDL(testContext(t), c.db, locktable.DropDDL(table)...); err != nil {
		t.Fatal(err)
	}
	term.waitOutput("Reading the table failed at ")
	term.waitOutput("Showing the read at ")
	term.typeIn("\x03")
	term.waitOutput("rc=0")
	out := term.out.String()
	draws := strings.Split(out, cursorHome)
	if len(draws) < 3 || !strings.HasPrefix(draws[1], clearScreen) || strings.Contains(strings.Join(draws[2:], ""), clearScreen) {
		t.Fatalf("want a first draw that clears the screen and redraws that do not:\n%q", out)
	}
	for _, d := range draws[1:] {
		read := strings.Contains(d, watchHeader+c.db+clearLineEnd) || strings.HasPrefix(d, "Reading the table failed at ")
		if !read || !strings.Contains(d, clearLineEnd+"\r\n") ||
			!strings.Contains(d, clearScreenEnd) {
			t.Errorf("a draw without its header line, line clearing or screen clearing:\n%q", d)
		}
	}
}

// killSession kills every process of the session sid with SIGKILL.
func killSession(sid int) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if s, err := unix.Getsid(pid); err == nil && s == sid {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
