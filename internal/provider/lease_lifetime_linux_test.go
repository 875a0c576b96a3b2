package provider

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// The tests here run Terraform as users do and end it as their world does:
// killed, interrupted, failing. Their leases have a TTL of an hour, so a
// lease that is free again within the test was released: expiry cannot
// explain it.
const longTTL = `  ttl = "1h"` + "\n"

// processGone reports whether pid has exited: it does not exist, or it is
// a zombie that its new parent has not reaped yet.
func processGone(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true
	}
	// The state follows the command name, which is in parentheses.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(fields) > 0 && (fields[0] == "Z" || fields[0] == "X")
}

// released waits until no one holds name, which with longTTL means that
// someone released it.
func released(ctx context.Context, t *testing.T, observer *lease.Client, name string) {
	t.Helper()
	waitUntil(ctx, t, func() (bool, string) {
		h, err := observer.Holder(ctx, name)
		return errors.Is(err, lease.ErrNoHolder), fmt.Sprintf("lease %q is still held by %q with token %d (%v)", name, h.HolderID, h.Token, err)
	})
}

// Terraform killed with SIGKILL, alone, as the OOM killer or kill -9 PID
// does it: its provider process is orphaned, and must keep the lease only
// while the command Terraform ran still runs (see
// coversTheWorkAfterTerraformEnds), then release it and exit.
func TestAccLeaseEphemeralResource_terraformKilled(t *testing.T) {
	eachDialect(t, locktable.Dialects, testAccLeaseEphemeralResourceTerraformKilled)
}

func testAccLeaseEphemeralResourceTerraformKilled(t *testing.T, d locktable.Dialect) {
	db, prov := accDatabaseIn(t, d, d.DDL("locks")...)
	sc := emulator.Client(t, db)
	tf := newTerraformCLI(t)
	ctx := cliContext(t)
	tf.require(ctx, tfversion.Version1_10_0)
	observer := appClient(t, sc, "observer")
	dir := t.TempDir()
	tf.write(leaseConfig(prov, longTTL+`  holder_id = "pipeline-1"`+"\n", blockingCommand(dir)))

	apply := startApply(ctx, t, tf, dir)
	token := apply.token(ctx)
	if h, err := observer.Holder(ctx, "deploy"); err != nil || h.Token != token {
		t.Fatalf("while the apply runs, the holder of deploy is %+v, %v; want the apply's token %d", h, err, token)
	}
	providers := tf.providerPIDs()
	killed := time.Now()
	apply.signal(syscall.SIGKILL)
	apply.wait()
	t.Logf("terraform exited %s after it was killed", time.Since(killed).Round(time.Millisecond))
	// The command runs on; the lease ends with it.
	ended := time.Now()
	apply.finish()
	released(ctx, t, observer, "deploy")
	t.Logf("the lease was free %s after the command was told to end", time.Since(ended).Round(time.Millisecond))
	providersGone(ctx, t, providers, "after terraform was killed")
}

// providersGone waits until every provider process in pids has exited. One
// that does not is killed when the test ends, so that a failure leaves no
// orphan behind (the test kills terraform's process group only while
// terraform runs).
func providersGone(ctx context.Context, t *testing.T, pids []int, what string) {
	t.Helper()
	t.Cleanup(func() {
		for _, pid := range pids {
			if !processGone(pid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	for _, pid := range pids {
		waitUntil(ctx, t, func() (bool, string) {
			return processGone(pid), fmt.Sprintf("provider process %d still runs %s", pid, what)
		})
	}
}

// Terraform killed while its provider waits for a lease another holder
// has: the wait must not outlive Terraform, neither as a process nor as an
// acquisition that spends a token once the other holder lets go.
func TestAccLeaseEphemeralResource_terraformKilledWhileWaiting(t *testing.T) {
	skipOnOpenTofu(t, "on OpenTofu 1.11.5 this test's tofu apply was still running after 5 minutes (not investigated; "+
		"as with interruptWhileWaiting, the wait for the lease may look different there)")
	t.Parallel()
	db, prov := accDatabase(t, locktable.DDL("locks")...)
	sc := emulator.Client(t, db)
	tf := newTerraformCLI(t)
	ctx := cliContext(t)
	tf.require(ctx, tfversion.Version1_10_0)
	held := holdLease(t, sc, "deploy", "other-pipeline")
	tf.write(leaseConfig(prov, `  wait = "1h"`+"\n", "true"))

	run := tf.start(ctx, "apply", "-auto-approve", "-json")
	run.waitForOpens(ctx, 1)
	providers := tf.providerPIDs()
	killed := time.Now()
	run.signal(syscall.SIGKILL)
	run.wait()
	providersGone(ctx, t, providers, "waiting for the lease after terraform was killed")
	t.Logf("the provider exited %s after terraform was killed", time.Since(killed).Round(time.Millisecond))
	noTokenSpent(ctx, t, sc, held)
}

// exited waits until the command and every provider process it started
// have exited.
func exited(ctx context.Context, t *testing.T, tf *terraformCLI, c *command, what string) {
	t.Helper()
	waitUntil(ctx, t, func() (bool, string) {
		select {
		case <-c.done:
			return true, ""
		default:
			return false, fmt.Sprintf("terraform %s still runs %s", strings.Join(c.args, " "), what)
		}
	})
	for _, pid := range tf.providerPIDs() {
		waitUntil(ctx, t, func() (bool, string) {
			return processGone(pid), fmt.Sprintf("provider process %d still runs after terraform exited %s", pid, what)
		})
	}
}

// noTokenSpent checks that nothing acquired name since held did: the next
// acquisition after held's release gets the next token.
func noTokenSpent(ctx context.Context, t *testing.T, sc *spanner.Client, held *lease.Lease) {
	t.Helper()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	next, err := appClient(t, sc, "next").TryAcquire(ctx, held.Name())
	if err != nil {
		t.Fatal(err)
	}
	if next.Token() != held.Token()+1 {
		t.Errorf("the acquisition after the interrupted run got token %d, want %d: the run acquired lease %q after the interrupt",
			next.Token(), held.Token()+1, held.Name())
	}
}

// Ctrl-C while Terraform waits for a lease another holder has: the wait
// ends within seconds, and the lease is not acquired (no token is spent).
// Terraform asks its providers to stop (StopProvider) in terraform plan and
// while applying, but not during the plan of terraform apply; there the
// interrupt reaches the provider only as the terminal sends it, to the
// whole process group, and otherwise the second Ctrl-C, which makes
// Terraform exit, must end the provider's wait.
func TestAccLeaseEphemeralResource_interruptWhileWaiting(t *testing.T) {
	skipOnOpenTofu(t, "on OpenTofu 1.11.5 the plan_sigint case did not end within 8 minutes (not investigated yet)")
	t.Parallel()
	for _, c := range []struct {
		name string
		args []string
		// acquire is the ephemeral resource's acquire attribute.
		acquire string
		// opens is how many times Terraform opens the lease before the one
		// that waits.
		opens int
		// group sends SIGINT to terraform's process group, as a terminal
		// does, rather than to terraform alone.
		group bool
		// repeat sends SIGINT every second until terraform exits, as an
		// impatient user does.
		repeat bool
	}{
		{name: "apply_plan_ctrl_c", args: []string{"apply", "-auto-approve"}, group: true},
		{name: "plan_sigint", args: []string{"plan"}},
		{name: "apply_sigint_while_applying", args: []string{"apply", "-auto-approve"}, acquire: "terraform.applying", opens: 1},
		{name: "apply_plan_sigint_twice", args: []string{"apply", "-auto-approve"}, repeat: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db, prov := accDatabase(t, locktable.DDL("locks")...)
			sc := emulator.Client(t, db)
			tf := newTerraformCLI(t)
			ctx := cliContext(t)
			tf.require(ctx, tfversion.Version1_10_0)
			held := holdLease(t, sc, "deploy", "other-pipeline")
			attrs := `  wait = "1h"` + "\n"
			if c.acquire != "" {
				attrs += "  acquire = " + c.acquire + "\n"
			}
			tf.write(leaseConfig(prov, attrs, "true"))

			run := tf.start(ctx, append(c.args, "-json")...)
			run.waitForOpens(ctx, c.opens+1)
			switch {
			case c.group:
				run.signalGroup(syscall.SIGINT)
			case c.repeat:
				for stopped := false; !stopped; {
					run.signal(syscall.SIGINT)
					select {
					case <-run.done:
						stopped = true
					case <-ctx.Done():
						t.Fatal(ctx.Err())
					case <-time.After(time.Second):
					}
				}
			default:
				run.signal(syscall.SIGINT)
			}
			exited(ctx, t, tf, run, "after Ctrl-C while waiting for the lease")
			r := run.wait().failed(t)
			if !c.repeat {
				// Terraform was there to report it.
				r.has(t, "error", "Cannot acquire lease", `stopped waiting for lease "deploy" because terraform was interrupted; it was not acquired`)
			}
			noTokenSpent(ctx, t, sc, held)
		})
	}
}

// A run that fails or is interrupted while it holds the lease releases it
// when it ends, not a TTL later: Terraform does not close ephemeral
// resources then, and the provider lets go of what it holds as it exits.
func TestAccLeaseEphemeralResource_releasedWhenTheRunEnds(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		// fail makes the command fail once it has the token.
		fail bool
		// interrupt, when not 0, is sent once the command has the token:
		// to the process group with group, as from a terminal, else to
		// terraform alone.
		interrupt syscall.Signal
		group     bool
	}{
		{name: "command_fails", fail: true},
		{name: "ctrl_c", interrupt: syscall.SIGINT, group: true},
		{name: "sigint", interrupt: syscall.SIGINT},
		{name: "sigterm", interrupt: syscall.SIGTERM},
		// The terminal closed: its hangup reaches the provider too.
		{name: "terminal_closed", interrupt: syscall.SIGHUP, group: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db, prov := accDatabase(t, locktable.DDL("locks")...)
			sc := emulator.Client(t, db)
			tf := newTerraformCLI(t)
			ctx := cliContext(t)
			tf.require(ctx, tfversion.Version1_10_0)
			observer := appClient(t, sc, "observer")
			dir := t.TempDir()
			command := blockingCommand(dir)
			if c.fail {
				command = fmt.Sprintf(`echo "$TOKEN" > %[1]s/token.tmp && mv %[1]s/token.tmp %[1]s/token && exit 3`, dir)
			}
			tf.write(leaseConfig(prov, longTTL, command))

			apply := startApply(ctx, t, tf, dir)
			apply.token(ctx)
			switch {
			case c.group:
				apply.signalGroup(c.interrupt)
			case c.interrupt != 0:
				apply.signal(c.interrupt)
			}
			exited(ctx, t, tf, apply.command, "after the run failed")
			apply.wait().failed(t)
			released(ctx, t, observer, "deploy")
		})
	}
}

// guardedJob is a local-exec command that stands for the work a lease
// guards: it writes $TOKEN to dir/token, the time it starts (Unix
// nanoseconds) to dir/start, runs until dir/done exists (or dir is gone),
// and writes the time it ends to dir/end. It runs in a subshell of the
// shell Terraform starts, as a script's children do, so that it outlives
// that shell when Terraform kills it (as Terraform does when it is
// interrupted).
func guardedJob(dir string) string {
	return fmt.Sprintf(`(date +%%s%%N > %[1]s/start.tmp && mv %[1]s/start.tmp %[1]s/start && `+
		`echo "$TOKEN" > %[1]s/token.tmp && mv %[1]s/token.tmp %[1]s/token && `+
		`while [ ! -e %[1]s/done ] && [ -d %[1]s ]; do sleep 0.05; done; `+
		`date +%%s%%N > %[1]s/end.tmp && mv %[1]s/end.tmp %[1]s/end); true`, dir)
}

// jobTime reads a time guardedJob wrote.
func jobTime(t *testing.T, file string) time.Time {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return time.Unix(0, ns)
}

// The lease covers the work it guards to its end, however Terraform ends:
// pipeline A holds the lease while its local-exec job runs, Terraform A is
// killed (kill -9) or interrupted (SIGINT to terraform alone, as a CI
// runner sends it) mid-job, and the job runs on, as Terraform's children
// do. Pipeline B waits for the same lease: its job must start only after
// A's has ended. The TTL is 3s and A's job runs on for 3 TTLs after
// Terraform A has exited, so a lease that was merely not released (left
// to expire) would not cover it: it must be renewed while the job runs.
func TestAccLeaseEphemeralResource_coversTheWorkAfterTerraformEnds(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		sig  syscall.Signal
	}{
		{name: "killed", sig: syscall.SIGKILL},
		{name: "sigint", sig: syscall.SIGINT},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db, prov := accDatabase(t, locktable.DDL("locks")...)
			sc := emulator.Client(t, db)
			a := newTerraformCLI(t)
			ctx := cliContext(t)
			a.require(ctx, tfversion.Version1_10_0)
			observer := appClient(t, sc, "observer")
			dirA, dirB := t.TempDir(), t.TempDir()
			const ttl = 3 * time.Second
			attrs := fmt.Sprintf("  ttl = %q\n  wait = \"5m\"\n", ttl)
			a.write(leaseConfig(prov, attrs+`  holder_id = "pipeline-a"`+"\n", guardedJob(dirA)))
			b := newTerraformCLI(t)
			b.write(leaseConfig(prov, attrs+`  holder_id = "pipeline-b"`+"\n",
				fmt.Sprintf(`date +%%s%%N > %[1]s/start.tmp && mv %[1]s/start.tmp %[1]s/start`, dirB)))

			applyA := startApply(ctx, t, a, dirA)
			tokenA := applyA.token(ctx)
			providers := a.providerPIDs()
			applyA.signal(c.sig)
			applyB := b.start(ctx, "apply", "-auto-approve", "-json")
			applyA.wait()
			endedA := time.Now()
			// A's job runs on for 3 TTLs after Terraform A has exited: not a
			// wait for something to happen, but the length of the job.
			time.Sleep(3 * ttl)
			if _, err := os.Stat(filepath.Join(dirB, "start")); err == nil {
				t.Errorf("pipeline B's job started while pipeline A's still ran, %s after terraform A exited",
					time.Since(endedA).Round(time.Millisecond))
			}
			if h, err := observer.Holder(ctx, "deploy"); err != nil || h.Token != tokenA {
				t.Errorf("3 TTLs after terraform A exited, with A's job still running, the holder of deploy is %+v, %v; "+
					"want pipeline A with token %d", h, err, tokenA)
			}
			if err := os.WriteFile(filepath.Join(dirA, "done"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
			applyB.wait().ok(t)
			endA, startB := jobTime(t, filepath.Join(dirA, "end")), jobTime(t, filepath.Join(dirB, "start"))
			if !startB.After(endA) {
				t.Fatalf("pipeline B's job started %s before pipeline A's ended", endA.Sub(startB).Round(time.Millisecond))
			}
			t.Logf("A's job started %s, ended %s after terraform A exited; B's job started %s after A's ended",
				jobTime(t, filepath.Join(dirA, "start")).Format(time.StampMilli), endA.Sub(endedA).Round(time.Millisecond),
				startB.Sub(endA).Round(time.Millisecond))
			providersGone(ctx, t, providers, "after pipeline A's job ended")
		})
	}
}

// A Terraform stopped while its provider waits in line for a lease leaves
// the line as it goes: otherwise the next release would hand the lease to
// a waiter nobody answers for, and no one could acquire it until that
// waiter's session expired, a TTL (an hour here) later. After the holder
// releases, a third acquirer must get the lease at once; 60 seconds is far
// more than one acquisition takes on a loaded machine and far less than
// the hour.
func TestAccLeaseEphemeralResource_stoppedWhileWaitingLeavesTheLine(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		// stop stops terraform.
		stop func(ctx context.Context, t *testing.T, run *command)
		// reported is whether terraform lives to report the provider's
		// error.
		reported bool
	}{
		{name: "sigterm_to_group", reported: true, stop: func(_ context.Context, _ *testing.T, run *command) {
			// A CI system's cancel, or timeout(1).
			run.signalGroup(syscall.SIGTERM)
		}},
		{name: "sigint_twice", stop: func(ctx context.Context, t *testing.T, run *command) {
			// To terraform alone, which the provider does not hear: the
			// second makes Terraform exit.
			for {
				run.signal(syscall.SIGINT)
				select {
				case <-run.done:
					return
				case <-ctx.Done():
					t.Fatal(ctx.Err())
				case <-time.After(time.Second):
				}
			}
		}},
		{name: "killed", stop: func(_ context.Context, _ *testing.T, run *command) {
			run.signal(syscall.SIGKILL)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db, prov := accDatabase(t, locktable.DDL("locks")...)
			sc := emulator.Client(t, db)
			tf := newTerraformCLI(t)
			ctx := cliContext(t)
			tf.require(ctx, tfversion.Version1_10_0)
			held := holdLease(t, sc, "deploy", "other-pipeline")
			observer := appClient(t, sc, "observer")
			tf.write(leaseConfig(prov, longTTL+`  wait = "1h"`+"\n  holder_id = \"pipeline\"\n", "true"))

			run := tf.start(ctx, "apply", "-auto-approve", "-json")
			waitUntil(ctx, t, func() (bool, string) {
				ws, err := observer.Waiters(ctx)
				for _, w := range ws {
					if w.Name == "deploy" && w.HolderID == "pipeline" {
						return true, ""
					}
				}
				return false, fmt.Sprintf("terraform is not in deploy's line: waiters %+v, %v", ws, err)
			})
			providers := tf.providerPIDs()
			c.stop(ctx, t, run)
			exited(ctx, t, tf, run, "after it was stopped while waiting for the lease")
			providersGone(ctx, t, providers, "after terraform was stopped while waiting for the lease")
			r := run.wait().failed(t)
			// Checked last: the line matters more.
			if c.reported {
				defer r.has(t, "error", "Cannot acquire lease", `stopped waiting for lease "deploy" because`, "it was not acquired")
			}

			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			released := time.Now()
			actx, cancel := context.WithTimeout(ctx, 60*time.Second)
			defer cancel()
			third, err := appClient(t, sc, "third").Acquire(actx, "deploy")
			if err != nil {
				h, herr := observer.Holder(ctx, "deploy")
				t.Fatalf("a third acquirer did not get the lease within 60s of its release: %v; the holder is %+v, %v", err, h, herr)
			}
			t.Logf("a third acquirer got the lease %s after the holder released it", time.Since(released).Round(time.Millisecond))
			if third.Token() != held.Token()+1 {
				t.Errorf("the third acquirer got token %d, want %d: terraform acquired the lease after it was stopped", third.Token(), held.Token()+1)
			}
		})
	}
}
