//go:build linux

package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// emulatorClockLead is how far the emulator's commit timestamps may run
// ahead of this machine's wall clock (up to 11 ms measured under load; see
// lease's randomized test): a commit timestamp is at most this much later
// than the moment of the commit.
const emulatorClockLead = 50 * time.Millisecond

// TestNextHolderNeverOverlaps: a holder's CMD that ignores SIGTERM is dead
// before the next holder acquires, at the default --kill-after (issue 28,
// item 1: SIGTERM came at the lease's local deadline and SIGKILL 10 s
// later, while a rival could acquire TTL/10 after that SIGTERM: 2.5 s of
// overlap at the default TTL). spannerlock is paused (SIGSTOP), or Spanner
// falls silent, so that its lease expires while CMD runs on; CMD writes the
// time every 20 ms. Its last write
// must come before the rival's acquisition (its commit timestamp, less the
// emulator's clock lead). The bound is the lease's own: SIGKILL lands at the
// lease's local deadline, TTL/10 (400 ms at --ttl 4s) before the lease can
// expire on Spanner's clock, a margin the reaper's timer keeps on a loaded
// machine.
func TestNextHolderNeverOverlaps(t *testing.T) {
	for _, tc := range []struct {
		name string
		// lose makes the holder's lease run out while CMD runs.
		lose func(p *proc, silence *silentProxy)
	}{
		{"paused", func(p *proc, _ *silentProxy) { p.signal(syscall.SIGSTOP) }},
		{"outage", func(_ *proc, silence *silentProxy) { silence.silent.Store(true) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCLI(t)
			silence := newSilentProxy(t)
			killLeftovers(t, c, "child")
			p := start(t, c.dir, append(c.env, "SPANNER_EMULATOR_HOST="+silence.addr()), nil, "--ttl", "4s", "lock", "x", "--shell", "--",
				`trap '' TERM; echo $$ > child; while :; do date +%s%N >> ts; sleep 0.02; done`)
			c.waitFile("child")
			waitFor(t, "CMD's first write", func() bool { return len(c.lines("ts")) > 0 })
			tc.lose(p, silence)
			rival := c.client(lease.WithHolderID("rival"), lease.WithPollInterval(20*time.Millisecond))
			taken, err := rival.Acquire(testContext(t), "x") // once the holder's lease expires
			if err != nil {
				t.Fatal(err)
			}
			child := c.pid("child")
			waitFor(t, fmt.Sprintf("CMD's group (pgid %d) to be gone", child), func() bool {
				return errors.Is(syscall.Kill(-child, 0), syscall.ESRCH)
			})
			lines := c.lines("ts")
			ns, err := strconv.ParseInt(lines[len(lines)-1], 10, 64)
			if err != nil {
				t.Fatalf("CMD's last write %q: %v", lines[len(lines)-1], err)
			}
			last, acquired := time.Unix(0, ns), taken.AcquiredAt().Add(-emulatorClockLead)
			if !last.Before(acquired) {
				t.Errorf("CMD ran beside the next holder: its last write at %s, %s after the rival acquired at %s (commit timestamp less %s)",
					last.Format(time.RFC3339Nano), last.Sub(acquired), acquired.Format(time.RFC3339Nano), emulatorClockLead)
			} else {
				t.Logf("CMD's last write came %s before the rival acquired", acquired.Sub(last))
			}
			_ = p.cmd.Process.Signal(syscall.SIGCONT) // a paused spannerlock goes on
			p.expect(exitLost)
		})
	}
}

// TestKillAfterBoundedByTTL: a --kill-after that cannot keep the promise
// (more than TTL/3, so SIGTERM would come while renewals keep the lease
// healthy) is a usage error naming the flag, from the command line or the
// environment; the default fits any TTL.
func TestKillAfterBoundedByTTL(t *testing.T) {
	c := newCLI(t)
	for _, args := range [][]string{
		{"--ttl", "3s", "lock", "--kill-after", "2s", "x", "--", "true"},
		{"lock", "--kill-after", "10s", "x", "--", "true"}, // the default TTL, 10s
		{"--ttl", "3s", "run-once", "--kill-after", "1100ms", "job", "--slot", slot, "--", "true"},
		{"--ttl", "3s", "elect", "--kill-after", "2s", "x", "--", "true"},
	} {
		r := c.expect(exitUsage, args...)
		if !strings.Contains(r.stderr, "--kill-after") {
			t.Errorf("spannerlock %v: the usage error does not name --kill-after:\n%s", args, r.stderr)
		}
	}
	c.env = append(c.env, "SPANNERLOCK_KILL_AFTER=5s")
	c.expect(exitUsage, "lock", "x", "--", "true")
	c.env = c.env[:len(c.env)-1]
	c.expect(0, "--ttl", "3s", "lock", "--kill-after", "1s", "x", "--", "true")
	c.expect(0, "--ttl", "1s", "lock", "x", "--", "true")
}

// reaperOf returns the pid of spannerlock's reaper: its child.
func reaperOf(t *testing.T, p *proc) int {
	t.Helper()
	var reaper int
	waitFor(t, "spannerlock's reaper", func() bool {
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if st, err := procStat(pid); err == nil && st.ppid == p.cmd.Process.Pid && st.state != "Z" {
				reaper = pid
				return true
			}
		}
		return false
	})
	return reaper
}

// killLeftovers kills, when the test ends, the processes whose pids the
// named files hold, should a failing test leave them running.
func killLeftovers(t *testing.T, c *cli, files ...string) {
	t.Cleanup(func() {
		for _, f := range files {
			var pid int
			if _, err := fmt.Sscan(c.read(f), &pid); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
}

// TestReaperKilled: when CMD's guard goes, CMD's processes go before the
// lease does (issue 28, item 2: with the reaper killed, as `pkill -9 -f
// spannerlock` does, CMD's background process ran on with ppid 1 and
// spannerlock released the lock at once). No process of CMD's lives when a
// rival acquires: not the background process in CMD's group, nor a daemon
// that left it (setsid).
func TestReaperKilled(t *testing.T) {
	const script = `sleep 300 & echo $! > grandchild; setsid sh -c 'echo $$ > daemon; exec sleep 300' </dev/null >/dev/null 2>&1 &
echo $$ > child; wait`
	for _, tc := range []struct {
		name string
		kill func(t *testing.T, p *proc)
	}{
		{"reaper", func(t *testing.T, p *proc) {
			if err := syscall.Kill(reaperOf(t, p), syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}},
		{"spannerlock", func(t *testing.T, p *proc) { p.signal(syscall.SIGKILL) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCLI(t)
			killLeftovers(t, c, "child", "grandchild", "daemon")
			p := c.start("--ttl", "2s", "lock", "x", "--shell", "--", script)
			for _, f := range []string{"child", "grandchild", "daemon"} {
				c.waitFile(f)
			}
			tc.kill(t, p)
			rival := c.client(lease.WithHolderID("rival"), lease.WithPollInterval(20*time.Millisecond))
			if _, err := rival.Acquire(testContext(t), "x"); err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{"child", "grandchild", "daemon"} {
				if pid := c.pid(f); !dead(pid) {
					t.Errorf("CMD's %s (pid %d) lives when a rival acquires", f, pid)
				}
			}
			p.wait()
		})
	}
}

// TestSetsidDaemonStopped: a daemon CMD started in a session of its own
// (setsid) is stopped, SIGTERM then SIGKILL, before spannerlock releases
// the lease and exits (issue 28, item 3: it ran on after the lock was
// released). The daemon ignores SIGTERM, so SIGKILL must end it.
func TestSetsidDaemonStopped(t *testing.T) {
	c := newCLI(t)
	killLeftovers(t, c, "daemon")
	c.expect(0, "--ttl", "3s", "lock", "x", "--shell", "--",
		`setsid sh -c 'trap "" TERM; echo $$ > daemon; while :; do sleep 0.05; done' </dev/null >/dev/null 2>&1 &
while [ ! -s daemon ]; do sleep 0.02; done`)
	if pid := c.pid("daemon"); !dead(pid) {
		t.Fatalf("CMD's setsid daemon (pid %d) runs on after spannerlock released the lock and exited", pid)
	}
}
