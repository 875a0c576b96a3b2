//go:build unix

package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// spannerlock exits with CMD's status, 128+N when CMD died of signal N, and
// releases the lock when CMD exits: with a TTL of a minute, only a release
// explains a free lock right after.
func TestLockExitStatus(t *testing.T) {
	inEachDialect(t, func(t *testing.T, d locktable.Dialect) {
		c := newCLIIn(t, d)
		lc := c.client()
		for _, tc := range []struct {
			cmd  []string
			want int
		}{
			{[]string{"true"}, 0},
			{[]string{"sh", "-c", "exit 7"}, 7},
			{[]string{"sh", "-c", "kill -USR1 $$"}, 128 + int(syscall.SIGUSR1)},
		} {
			c.expect(tc.want, append([]string{"--ttl", "1m", "lock", "job", "--"}, tc.cmd...)...)
			if h := holderOf(t, lc, "job"); h != nil {
				t.Fatalf("after %v, %q still holds the lock: it was not released", tc.cmd, h.HolderID)
			}
		}
	})
}

// CMD's environment is spannerlock's own, unchanged, plus the three
// SPANNERLOCK_* variables and SPANNERLOCK_SET_FOR_CMD listing them; the
// token grows with each acquisition.
func TestLockEnvironment(t *testing.T) {
	c := newCLI(t)
	// Without OpenTelemetry set up, a trace context passes through as it is.
	c.env = append(c.env, "FOO=bar baz", "TRACEPARENT=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	for token := 1; token <= 2; token++ {
		r := c.expect(0, "--holder-id", "worker-7", "lock", "report", "--", "env")
		got := strings.Split(strings.TrimSpace(r.stdout), "\n")
		want := append(slices.Clone(c.env),
			"SPANNERLOCK_NAME=report", "SPANNERLOCK_TOKEN="+strconv.Itoa(token), "SPANNERLOCK_HOLDER_ID=worker-7",
			"SPANNERLOCK_SET_FOR_CMD=SPANNERLOCK_NAME SPANNERLOCK_TOKEN SPANNERLOCK_HOLDER_ID")
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("CMD's environment differs from spannerlock's plus SPANNERLOCK_*:\nonly in CMD's: %q\nmissing: %q",
				minus(got, want), minus(want, got))
		}
	}
}

func minus(a, b []string) []string {
	var out []string
	for _, s := range a {
		if !slices.Contains(b, s) {
			out = append(out, s)
		}
	}
	return out
}

// CMD runs without a shell unless --shell; stdin, stdout and stderr pass
// through.
func TestLockShellAndStdio(t *testing.T) {
	c := newCLI(t)
	c.env = append(c.env, "FOO=bar")
	if r := c.expect(0, "lock", "x", "--", "echo", "$FOO", "*"); r.stdout != "$FOO *\n" {
		t.Errorf("without --shell, echo printed %q, want the arguments verbatim", r.stdout)
	}
	if r := c.expect(0, "lock", "--shell", "x", "--", "echo $FOO;", "echo", "two"); r.stdout != "bar\ntwo\n" {
		t.Errorf("with --shell, printed %q, want the shell's expansion", r.stdout)
	}
	r := run(t, c.dir, c.env, strings.NewReader("hello\nworld\n"), "lock", "x", "--", "sh", "-c", "cat; echo oops >&2")
	if r.code != 0 || r.stdout != "hello\nworld\n" || !strings.Contains(r.stderr, "oops") {
		t.Errorf("stdin/stdout/stderr: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// Command flags may come before or after NAME, global flags before or after
// the command.
func TestLockFlagsAnywhere(t *testing.T) {
	c := newCLI(t)
	for _, args := range [][]string{
		{"--holder-id", "a", "lock", "--try", "x", "--", "env"},
		{"lock", "x", "--try", "--holder-id", "a", "--", "env"},
		{"lock", "--holder-id=a", "x", "--try", "--", "env"},
	} {
		if r := c.expect(0, args...); !strings.Contains(r.stdout, "SPANNERLOCK_HOLDER_ID=a\n") {
			t.Errorf("%v: holder ID not taken from the flag:\n%s", args, r.stdout)
		}
	}
	held, err := c.client(lease.WithHolderID("other")).Acquire(testContext(t), "x")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Release(testContext(t)) }()
	for _, args := range [][]string{{"lock", "--try", "x", "--", "true"}, {"lock", "x", "--try", "--", "true"}} {
		c.expect(exitNotAcquired, args...)
	}
}

// --try exits 75 at once when the lock is held, naming the holder, without
// running CMD; --timeout gives up with 75, or runs CMD once the lock is
// released in time.
func TestLockTryAndTimeout(t *testing.T) {
	inEachDialect(t, func(t *testing.T, d locktable.Dialect) {
		c := newCLIIn(t, d)
		held, err := c.client(lease.WithHolderID("the-holder")).Acquire(testContext(t), "x")
		if err != nil {
			t.Fatal(err)
		}
		r := c.expect(exitNotAcquired, "lock", "--try", "x", "--", "touch", "ran")
		if !strings.Contains(r.stderr, `"the-holder"`) {
			t.Errorf("--try does not name the holder:\n%s", r.stderr)
		}
		c.expect(exitNotAcquired, "lock", "--timeout", "1s", "x", "--", "touch", "ran")
		if c.exists("ran") {
			t.Fatal("CMD ran without the lock")
		}

		waiter := c.start("--poll-interval", "100ms", "lock", "--timeout", "1m", "x", "--", "touch", "ran")
		if err := held.Release(testContext(t)); err != nil {
			t.Fatal(err)
		}
		waiter.expect(0)
		if !c.exists("ran") {
			t.Fatal("the waiter exited 0 without running CMD")
		}
	})
}

// Three shell loops contend for one lock: their critical sections never
// overlap and each sees a larger token than the one before.
func TestLockMutualExclusion(t *testing.T) {
	inEachDialect(t, func(t *testing.T, d locktable.Dialect) {
		c := newCLIIn(t, d)
		const loops, rounds = 3, 3
		script := fmt.Sprintf(`for i in $(seq %d); do
		  %s --poll-interval 100ms lock counter --shell -- 'echo "start $SPANNERLOCK_TOKEN" >> log; sleep 0.1; echo "end $SPANNERLOCK_TOKEN" >> log' || exit $?
		done`, rounds, binary)
		var procs []*proc
		for range loops {
			procs = append(procs, startProgram(t, c.dir, c.env, nil, "sh", "-c", script))
		}
		for _, p := range procs {
			p.expect(0)
		}
		lines := c.lines("log")
		if len(lines) != 2*loops*rounds {
			t.Fatalf("log has %d lines, want %d:\n%s", len(lines), 2*loops*rounds, c.read("log"))
		}
		last := 0
		for i := 0; i < len(lines); i += 2 {
			var start, end int
			if _, err := fmt.Sscanf(lines[i]+" "+lines[i+1], "start %d end %d", &start, &end); err != nil || start != end {
				t.Fatalf("critical sections overlap at line %d:\n%s", i+1, c.read("log"))
			}
			if start <= last {
				t.Fatalf("token %d after token %d:\n%s", start, last, c.read("log"))
			}
			last = start
		}
	})
}

// A holder killed with SIGKILL cannot release: a waiter takes the lock once
// its lease expires, and nothing the dead holder ran survives it.
func TestLockTakeoverAfterSIGKILL(t *testing.T) {
	c := newCLI(t)
	first := c.start("--ttl", "2s", "lock", "x", "--shell", "--",
		"sleep 300 & echo $! > grandchild; echo $$ > child; wait")
	c.waitFile("child")
	second := c.start("--ttl", "2s", "--poll-interval", "100ms", "lock", "x", "--", "touch", "second-ran")
	first.signal(syscall.SIGKILL)
	first.wait()
	second.expect(0)
	if !c.exists("second-ran") {
		t.Fatal("the waiter did not run CMD")
	}
	for _, f := range []string{"child", "grandchild"} {
		pid := c.pid(f)
		waitFor(t, fmt.Sprintf("the killed holder's %s (pid %d) to die", f, pid), func() bool { return dead(pid) })
	}
}

// SIGTERM and SIGINT to spannerlock reach CMD's whole process group; CMD's
// status becomes spannerlock's, and the lock is released before it exits.
func TestLockForwardsSignals(t *testing.T) {
	c := newCLI(t)
	lc := c.client()
	p := c.start("--ttl", "1m", "lock", "x", "--shell", "--", `
		(trap 'echo grandchild >> got; exit 0' TERM; echo ready > grandchild-ready; while :; do sleep 0.05; done) &
		trap 'echo child >> got; wait; exit 5' TERM
		echo ready > child-ready
		while :; do sleep 0.05; done`)
	c.waitFile("child-ready")
	c.waitFile("grandchild-ready")
	p.signal(syscall.SIGTERM)
	p.expect(5)
	if got := c.lines("got"); !slices.Contains(got, "child") || !slices.Contains(got, "grandchild") {
		t.Fatalf("SIGTERM reached %q of CMD's group, want child and grandchild", got)
	}
	if h := holderOf(t, lc, "x"); h != nil {
		t.Fatalf("the lock is still held by %q: not released on the way out", h.HolderID)
	}

	p = c.start("lock", "x", "--shell", "--", "echo ready > ready2; exec sleep 300")
	c.waitFile("ready2")
	p.signal(syscall.SIGINT)
	p.expect(128 + int(syscall.SIGINT))

	// The other forwarded signals, one after the other, to a CMD that
	// notes each.
	p = c.start("lock", "x", "--shell", "--", `
		for sig in HUP QUIT USR1 USR2; do trap "echo $sig >> noted" $sig; done
		echo ready > ready3
		while :; do sleep 0.05; done`)
	c.waitFile("ready3")
	var want []string
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2} {
		p.signal(sig)
		want = append(want, strings.TrimPrefix(unix.SignalName(sig), "SIG"))
		waitFor(t, "CMD to note "+unix.SignalName(sig), func() bool { return len(c.lines("noted")) == len(want) })
	}
	if got := c.lines("noted"); !slices.Equal(got, want) {
		t.Errorf("CMD noted %q, want %q", got, want)
	}
	p.signal(syscall.SIGTERM)
	p.expect(128 + int(syscall.SIGTERM))
}

// A stopping signal ends the wait for a held lock: exit 128+N, CMD never
// runs.
func TestLockInterruptedWhileWaiting(t *testing.T) {
	c := newCLI(t)
	if _, err := c.client().Acquire(testContext(t), "x"); err != nil {
		t.Fatal(err)
	}
	p := c.start("--verbose", "lock", "x", "--", "touch", "ran")
	waitFor(t, "spannerlock to wait", func() bool { return strings.Contains(p.stderr.String(), "waiting") })
	p.signal(syscall.SIGINT)
	p.expect(128 + int(syscall.SIGINT))
	if !strings.Contains(p.stderr.String(), "interrupted by SIGINT before running anything") || c.exists("ran") {
		t.Fatalf("stderr %q, CMD ran: %v", p.stderr.String(), c.exists("ran"))
	}
}

// When the lease is lost while CMD runs (spannerlock stopped past its TTL,
// and another process took the lock), CMD gets SIGTERM, then SIGKILL after
// --kill-after, and spannerlock exits 76.
func TestLockLostWhileRunning(t *testing.T) {
	inEachDialect(t, func(t *testing.T, d locktable.Dialect) {
		for _, tc := range []struct {
			name, script string
			// term reports whether CMD sees SIGTERM, or ignores it and needs
			// SIGKILL.
			term bool
		}{
			{"cmd-exits-on-sigterm", `trap 'echo term > got; exit 0' TERM; echo $$ > child; sleep 300 & wait`, true},
			{"cmd-ignores-sigterm", `trap '' TERM; echo $$ > child; sleep 300 & wait`, false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				c := newCLIIn(t, d)
				p := c.start("--ttl", "2s", "lock", "--kill-after", "500ms", "x", "--shell", "--", tc.script)
				c.waitFile("child")
				p.signal(syscall.SIGSTOP)
				rival := c.client(lease.WithHolderID("rival"), lease.WithPollInterval(50*time.Millisecond))
				taken, err := rival.Acquire(testContext(t), "x") // once the stopped holder's lease expires
				if err != nil {
					t.Fatal(err)
				}
				p.signal(syscall.SIGCONT)
				p.expect(exitLost)
				if tc.term && c.read("got") != "term\n" {
					t.Errorf("CMD did not get SIGTERM (got %q)", c.read("got"))
				}
				if pid := c.pid("child"); !dead(pid) {
					t.Errorf("CMD (pid %d) outlived spannerlock", pid)
				}
				if taken.Context().Err() != nil {
					t.Errorf("the rival's lease ended: %v", taken.Context().Err())
				}
			})
		}
	})
}

// Processes CMD leaves behind in its group are stopped before spannerlock
// releases the lock and exits.
func TestLockStopsLeftoverProcesses(t *testing.T) {
	c := newCLI(t)
	c.expect(3, "lock", "x", "--shell", "--", "sleep 300 & echo $! > leftover; exit 3")
	if pid := c.pid("leftover"); !dead(pid) {
		t.Fatalf("CMD's background process (pid %d) runs on after spannerlock exited", pid)
	}
}

// Without CMD, lock prints the token and holds the lock until SIGTERM or
// SIGINT, then releases it and exits 0.
func TestLockWithoutCommand(t *testing.T) {
	c := newCLI(t)
	lc := c.client()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		p := c.start("--holder-id", "by-hand", "--ttl", "1m", "lock", "maintenance")
		waitFor(t, "the token on stdout", func() bool { return strings.HasSuffix(p.stdout.String(), "\n") })
		h := holderOf(t, lc, "maintenance")
		if h == nil || h.HolderID != "by-hand" || p.stdout.String() != fmt.Sprintf("%d\n", h.Token) {
			t.Fatalf("stdout %q, holder %+v: want the holder's token", p.stdout.String(), h)
		}
		p.signal(sig)
		p.expect(0)
		if h := holderOf(t, lc, "maintenance"); h != nil {
			t.Fatalf("still held by %q after %v", h.HolderID, sig)
		}
	}

	// Lost while held: exit 76.
	p := c.start("--ttl", "2s", "lock", "maintenance")
	waitFor(t, "the token on stdout", func() bool { return strings.HasSuffix(p.stdout.String(), "\n") })
	p.signal(syscall.SIGSTOP)
	rival := c.client(lease.WithPollInterval(50 * time.Millisecond))
	if _, err := rival.Acquire(testContext(t), "maintenance"); err != nil {
		t.Fatal(err)
	}
	p.signal(syscall.SIGCONT)
	p.expect(exitLost)
}

// CMD's own status 2 (ls, grep and argparse use it for their usage errors)
// passes through without spannerlock's usage hint, which is for
// spannerlock's own command line.
func TestCommandExitTwoIsNotAUsageError(t *testing.T) {
	c := newCLI(t)
	r := c.expect(2, "lock", "x", "--", "ls", "/nonexistent-spannerlock-test")
	if strings.Contains(r.stderr, "spannerlock lock --help") || strings.Contains(r.stderr, "for usage") {
		t.Fatalf("CMD's exit status 2 got spannerlock's usage hint:\n%s", r.stderr)
	}
}

// --timeout 0 tries once, as flock -w 0 does: with the lock held it exits
// 75 at once instead of waiting forever.
func TestLockTimeoutZero(t *testing.T) {
	c := newCLI(t)
	if _, err := c.client(lease.WithHolderID("the-holder")).Acquire(testContext(t), "x"); err != nil {
		t.Fatal(err)
	}
	r := c.expect(exitNotAcquired, "lock", "--timeout", "0", "x", "--", "touch", "ran")
	if c.exists("ran") || !strings.Contains(r.stderr, `"the-holder"`) {
		t.Fatalf("--timeout 0 on a held lock: ran %v, stderr:\n%s", c.exists("ran"), r.stderr)
	}
	c.expect(0, "lock", "--timeout", "0", "free", "--", "touch", "ran")
	if !c.exists("ran") {
		t.Fatal("--timeout 0 on a free lock did not run CMD")
	}
}

// A NAME that starts with "-" comes right after --, and CMD after a second
// --; every command that takes a NAME accepts it so.
func TestNameStartingWithDash(t *testing.T) {
	c := newCLI(t)
	r := c.expect(0, "lock", "--", "-x", "--", "sh", "-c", `echo "$SPANNERLOCK_NAME"`)
	if r.stdout != "-x\n" {
		t.Fatalf("CMD saw the name %q, want -x", r.stdout)
	}
	held := c.start("--holder-id", "by-hand", "lock", "--", "-x")
	waitFor(t, "the token", func() bool { return strings.HasSuffix(held.stdout.String(), "\n") })
	if r := c.expect(0, "holder", "--", "-x"); !strings.Contains(r.stdout, `"name":"-x"`) {
		t.Fatalf("holder -- -x printed %s", r.stdout)
	}
	held.signal(syscall.SIGTERM)
	held.expect(0)
}

// Every flag can be set by its SPANNERLOCK_* environment variable; the
// command line wins, and a variable that conflicts with a flag given on the
// command line gives way to it.
func TestFlagsFromEnvironment(t *testing.T) {
	c := newCLI(t)
	c.env = append(c.env, "SPANNERLOCK_HOLDER_ID=from-env", "SPANNERLOCK_SHELL=true")
	r := c.expect(0, "lock", "x", "--", `echo "$SPANNERLOCK_HOLDER_ID" && echo shell`)
	if r.stdout != "from-env\nshell\n" {
		t.Fatalf("SPANNERLOCK_HOLDER_ID and SPANNERLOCK_SHELL: CMD printed %q", r.stdout)
	}
	r = c.expect(0, "--holder-id", "from-flag", "lock", "x", "--", `echo "$SPANNERLOCK_HOLDER_ID"`)
	if r.stdout != "from-flag\n" {
		t.Fatalf("the command line does not win over the environment: %q", r.stdout)
	}

	if _, err := c.client(lease.WithHolderID("the-holder")).Acquire(testContext(t), "held"); err != nil {
		t.Fatal(err)
	}
	c.env = append(c.env, "SPANNERLOCK_TRY=1")
	c.expect(exitNotAcquired, "lock", "held", "--", "touch", "ran")
	c.env = append(c.env, "SPANNERLOCK_TIMEOUT=1h")
	c.expect(exitUsage, "lock", "held", "--", "touch", "ran") // both from the environment
	c.expect(exitNotAcquired, "lock", "--try", "held", "--", "touch", "ran")
	if c.exists("ran") {
		t.Fatal("CMD ran without the lock")
	}
}

// --conflict-exit-code replaces 75, as flock -E does, for a cron wrapper
// that counts a held lock as success; only a lock Spanner said was held
// gets it. With 0 nothing is written (cron would mail it), as flock -n -E 0;
// other codes still say who holds it.
func TestConflictExitCode(t *testing.T) {
	c := newCLI(t)
	if _, err := c.client(lease.WithHolderID("the-holder")).Acquire(testContext(t), "x"); err != nil {
		t.Fatal(err)
	}
	r := c.expect(0, "lock", "--try", "--conflict-exit-code", "0", "x", "--", "touch", "ran")
	if c.exists("ran") || r.stderr != "" || r.stdout != "" {
		t.Fatalf("ran %v, stdout %q, stderr %q: want nothing", c.exists("ran"), r.stdout, r.stderr)
	}
	if r := c.expect(9, "lock", "--try", "--conflict-exit-code", "9", "x", "--", "true"); !strings.Contains(r.stderr, `"the-holder"`) {
		t.Fatalf("--conflict-exit-code 9 does not name the holder:\n%s", r.stderr)
	}
	lc := c.client()
	if err := lc.SetPermits(testContext(t), "sem", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := lc.AcquirePermit(testContext(t), "sem"); err != nil {
		t.Fatal(err)
	}
	c.expect(3, "permit", "--try", "--conflict-exit-code", "3", "sem", "--", "true")
	c.expect(exitFailure, "permit", "--try", "--conflict-exit-code", "3", "undeclared", "--", "true")
}

// spannerlock paused (SIGSTOP, a suspended VM, a debugger) cannot renew its
// lease, and the reaper stops CMD when the lease's local deadline passes,
// before any rival can acquire: SIGTERM, then SIGKILL after --kill-after
// for a CMD that ignores it, all while spannerlock stays stopped. Resumed,
// spannerlock exits 76.
func TestPausedHolderStopsCMD(t *testing.T) {
	for _, tc := range []struct {
		name, script string
		term         bool
	}{
		{"cmd-exits-on-sigterm", `trap 'echo term > got; exit 0' TERM; echo $$ > child; sleep 300 & wait`, true},
		{"cmd-ignores-sigterm", `trap '' TERM; echo $$ > child; sleep 300 & echo $! > grandchild; wait`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCLI(t)
			p := c.start("--ttl", "2s", "lock", "--kill-after", "500ms", "x", "--shell", "--", tc.script)
			c.waitFile("child")
			p.signal(syscall.SIGSTOP)
			for _, f := range []string{"child", "grandchild"} {
				if c.exists(f) {
					pid := c.pid(f)
					waitFor(t, fmt.Sprintf("CMD's %s (pid %d) to be stopped while spannerlock is paused", f, pid), func() bool { return dead(pid) })
				}
			}
			if tc.term && c.read("got") != "term\n" {
				t.Errorf("CMD did not get SIGTERM first (got %q)", c.read("got"))
			}
			rival := c.client(lease.WithHolderID("rival"), lease.WithPollInterval(50*time.Millisecond))
			if _, err := rival.Acquire(testContext(t), "x"); err != nil {
				t.Fatal(err)
			}
			p.signal(syscall.SIGCONT)
			p.expect(exitLost)
		})
	}
}

// --verbose logs each step with its time, CMD's exit status and the
// release included, and without the Spanner client's banner; with
// --log-format json every line is a JSON object.
func TestVerboseLog(t *testing.T) {
	c := newCLI(t)
	r := c.expect(3, "--verbose", "lock", "x", "--", "sh", "-c", "exit 3")
	for _, line := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
		if !strings.HasPrefix(line, "time=") {
			t.Errorf("a log line without its time: %q", line)
		}
	}
	if strings.Contains(r.stderr, "Client Options") {
		t.Errorf("--verbose prints the Spanner client's banner:\n%s", r.stderr)
	}

	r = c.expect(3, "--verbose", "--log-format", "json", "lock", "x", "--", "sh", "-c", "exit 3")
	var exited, released bool
	for _, line := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil || rec["time"] == nil {
			t.Fatalf("not a JSON log record with a time: %q (%v)", line, err)
		}
		exited = exited || rec["msg"] == "CMD exited" && rec["status"] == float64(3)
		released = released || rec["msg"] == "released" && rec["name"] == "x"
	}
	if !exited || !released {
		t.Errorf("the log does not say that CMD exited 3 (%v) and the lock was released (%v):\n%s", exited, released, r.stderr)
	}
}

// A --timeout too short for Spanner to answer is not "held": on a free lock
// spannerlock either acquires it in time or says that Spanner did not
// answer within the timeout (exit 1); it never exits 75.
func TestLockTimeoutShorterThanAnAnswer(t *testing.T) {
	c := newCLI(t)
	r := c.run("lock", "--timeout", "10ms", "free", "--", "true")
	switch {
	case r.code == 0:
	case r.code == exitFailure && strings.Contains(r.stderr, "no answer from Spanner at ") && strings.Contains(r.stderr, "within --timeout 10ms"):
	default:
		t.Fatalf("lock --timeout 10ms on a free lock: exit %d, stderr:\n%s", r.code, r.stderr)
	}
}

// lock --shared holds a name with other readers (the library's and the
// CLI's) and no writer; a writer waits in line, and status shows it there.
func TestLockShared(t *testing.T) {
	inEachDialect(t, func(t *testing.T, d locktable.Dialect) {
		c := newCLIIn(t, d)
		ctx := testContext(t)
		reader, err := c.client(lease.WithHolderID("library-reader")).AcquireShared(ctx, "catalog")
		if err != nil {
			t.Fatal(err)
		}
		c.expect(0, "lock", "--shared", "--try", "catalog", "--", "touch", "shared-ran")
		if !c.exists("shared-ran") {
			t.Fatal("lock --shared --try exited 0 without running CMD")
		}
		c.expect(exitNotAcquired, "lock", "--try", "catalog", "--", "touch", "writer-ran")
		if c.exists("writer-ran") {
			t.Fatal("an exclusive lock ran CMD while a reader held the name")
		}

		writer := c.start("--holder-id", "cli-writer", "--poll-interval", "100ms", "lock", "--timeout", "1m", "catalog", "--", "touch", "writer-ran")
		var st struct {
			Waiters []waiterJSON `json:"waiters"`
		}
		deadline := time.Now().Add(30 * time.Second)
		for len(st.Waiters) == 0 && time.Now().Before(deadline) {
			r := c.expect(0, "status", "-o", "json")
			if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
				t.Fatalf("status -o json: %v\n%s", err, r.stdout)
			}
		}
		if len(st.Waiters) != 1 || st.Waiters[0].Name != "catalog" || st.Waiters[0].HolderID != "cli-writer" || st.Waiters[0].Shared {
			t.Fatalf("status waiters = %+v, want the exclusive cli-writer in line for catalog", st.Waiters)
		}
		if r := c.expect(0, "status"); !strings.Contains(r.stdout, "WAITING FOR") || !strings.Contains(r.stdout, "cli-writer") {
			t.Fatalf("status table does not show the line:\n%s", r.stdout)
		}
		// A reader that comes after a waiting writer waits behind it.
		c.expect(exitNotAcquired, "lock", "--shared", "--try", "catalog", "--", "true")
		if err := reader.Release(ctx); err != nil {
			t.Fatal(err)
		}
		writer.expect(0)
		if !c.exists("writer-ran") {
			t.Fatal("the waiting writer exited 0 without running CMD")
		}
	})
}
