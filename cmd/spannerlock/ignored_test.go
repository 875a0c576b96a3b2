//go:build unix

package main

import (
	"errors"
	"syscall"
	"testing"
)

// ignoredCMD notes SIGUSR1, which spannerlock forwards, and exits 0 on
// SIGTERM; SIGHUP and SIGINT keep their disposition, inherited or default.
const ignoredCMD = `echo $$ > child; trap 'echo usr1 >> noted' USR1; trap 'exit 0' TERM; while :; do sleep 0.05; done`

// startWithSignals starts spannerlock in a process group of its own through
// sh, which first runs traps (trap "" HUP INT leaves them ignored, as nohup
// and a non-interactive shell's background job do), and waits until CMD
// runs.
func startWithSignals(c *cli, traps string, args ...string) (p *proc, child int) {
	c.t.Helper()
	p = startProgramWith(c.t, &syscall.SysProcAttr{Setpgid: true}, c.dir, c.env, nil,
		"sh", append([]string{"-c", traps + `; exec "$0" "$@"`, binary}, args...)...)
	c.waitFile("child")
	return p, c.pid("child")
}

// The hangup and the interrupt a terminal sends its group (sent here with
// kill to spannerlock's group and to CMD's) do not stop `nohup spannerlock
// …` or a script's `spannerlock … &`: the signals that spannerlock started
// with ignored stay ignored, by spannerlock and by CMD, as with flock. CMD
// runs on and the lock stays held. SIGUSR1 sent after them, and forwarded,
// shows that spannerlock has handled what came before.
func TestIgnoredSignalsStayIgnored(t *testing.T) {
	c := newCLI(t)
	lc := c.client()
	p, child := startWithSignals(c, `trap "" HUP INT`, "--holder-id", "nohup", "--ttl", "1m", "lock", "x", "--shell", "--", ignoredCMD)
	spannerlock := p.cmd.Process.Pid
	for _, pgid := range []int{spannerlock, child} {
		for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGINT} {
			// A group gone already died of a signal before: said below.
			if err := syscall.Kill(-pgid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
				t.Fatalf("kill -%d -%d: %v", sig, pgid, err)
			}
		}
	}
	p.signal(syscall.SIGUSR1)
	waitFor(t, "CMD to note the SIGUSR1 sent after SIGHUP and SIGINT", func() bool {
		return len(c.lines("noted")) > 0 || dead(child)
	})
	select {
	case <-p.done:
		t.Fatalf("spannerlock exited %d after SIGHUP and SIGINT it was started with ignored\nstderr:\n%s", p.wait(), p.stderr)
	default:
	}
	if dead(child) {
		t.Fatal("CMD died of SIGHUP or SIGINT that spannerlock was started with ignored")
	}
	if h := holderOf(t, lc, "x"); h == nil || h.HolderID != "nohup" {
		t.Fatalf("the lock is held by %+v, want nohup", h)
	}
	p.signal(syscall.SIGTERM)
	p.expect(0)
}

// The control: a hangup that spannerlock was not started with ignored
// reaches CMD, which dies of it, and spannerlock releases the lock and
// exits 129.
func TestHangupNotIgnored(t *testing.T) {
	c := newCLI(t)
	lc := c.client()
	p, child := startWithSignals(c, `:`, "--ttl", "1m", "lock", "x", "--shell", "--", ignoredCMD)
	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.expect(128 + int(syscall.SIGHUP))
	if !dead(child) {
		t.Fatalf("CMD (pid %d) outlived spannerlock", child)
	}
	if h := holderOf(t, lc, "x"); h != nil {
		t.Fatalf("still held by %q after SIGHUP", h.HolderID)
	}
}

// Ctrl-C stops a script's loop around spannerlock, as around flock:
// spannerlock, interrupted, releases its lease and dies of SIGINT, and bash
// ends a loop only for a child that died of it (one that exits 130 handled
// the interrupt itself). The second iteration would run at once, and the
// loop would print what it did.
func TestInterruptStopsTheCallingLoop(t *testing.T) {
	c := newCLI(t)
	lc := c.client()
	p := startProgramWith(t, &syscall.SysProcAttr{Setpgid: true}, c.dir, c.env, nil, "bash", "-c", `
		for i in 1 2; do
			"$0" --ttl 1m lock x --shell -- '[ -e child ] && exit 0; echo $$ > child; exec sleep 300'
			echo "iteration $i exit $?"
		done`, binary)
	c.waitFile("child")
	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(); code != 128+int(syscall.SIGINT) || p.stdout.String() != "" {
		t.Fatalf("after Ctrl-C, the loop exited %d, want death by SIGINT, and printed %q, want nothing\nstderr:\n%s", code, p.stdout, p.stderr)
	}
	if h := holderOf(t, lc, "x"); h != nil {
		t.Fatalf("still held by %q: not released before dying of SIGINT", h.HolderID)
	}
	if pid := c.pid("child"); !dead(pid) {
		t.Fatalf("CMD (pid %d) outlived the interrupt", pid)
	}
}
