//go:build unix

package main

import (
	"strings"
	"testing"

	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// A spannerlock that CMD runs is configured by its own command line, not by
// what the outer spannerlock set for CMD: the outer run-once's
// SPANNERLOCK_SLOT is not the inner run-once's --slot (which would clash
// with its --every) nor break's (which would break a slot, not the lock),
// and the outer SPANNERLOCK_HOLDER_ID is not the inner --holder-id.
func TestNestedSpannerlock(t *testing.T) {
	c := newCLI(t)
	if _, err := c.client(lease.WithHolderID("stuck")).Acquire(testContext(t), "victim"); err != nil {
		t.Fatal(err)
	}
	c.env = append(c.env, "BIN="+binary)
	r := c.expect(0, "--holder-id", "outer", "run-once", "outer-job", "--every", "1d", "--shell", "--", `
		"$BIN" run-once inner-job --every 1d -- sh -c 'echo "inner-run $SPANNERLOCK_NAME"'; echo "run-once exit $?"
		"$BIN" break victim; echo "break exit $?"
		"$BIN" lock inner-lock -- sh -c 'echo "inner-holder $SPANNERLOCK_HOLDER_ID"'`)
	if !strings.Contains(r.stdout, "inner-run inner-job\nrun-once exit 0\n") {
		t.Errorf("the nested run-once did not run:\n%s\n%s", r.stdout, r.stderr)
	}
	if h := holderOf(t, c.client(), "victim"); h != nil || !strings.Contains(r.stdout, "break exit 0\n") {
		t.Errorf("the nested break left lock victim held by %+v:\n%s\n%s", h, r.stdout, r.stderr)
	}
	if strings.Contains(r.stdout, "inner-holder outer\n") || !strings.Contains(r.stdout, "inner-holder ") {
		t.Errorf("the nested lock's holder ID is the outer one's, or missing:\n%s", r.stdout)
	}
}

// Flags set in the environment for some commands do not break the others:
// SPANNERLOCK_OUTPUT=table, status's format, is left alone by the commands
// that have no table, and SPANNERLOCK_TIMEOUT=0 ("try once" for lock)
// means the default for the commands that only read. An output format that
// no command has is an error naming the variable.
func TestEnvironmentForOtherCommands(t *testing.T) {
	c := newCLI(t)
	lc := c.client(lease.WithHolderID("the-holder"))
	if _, err := lc.Acquire(testContext(t), "x"); err != nil {
		t.Fatal(err)
	}
	if err := lc.SetPermits(testContext(t), "sem", 2); err != nil {
		t.Fatal(err)
	}
	envv := c.env
	t.Run("output", func(t *testing.T) {
		c.t, c.env = t, append(envv, "SPANNERLOCK_OUTPUT=table")
		if r := c.expect(0, "status"); strings.HasPrefix(r.stdout, "{") || !strings.Contains(r.stdout, "the-holder") {
			t.Errorf("status with SPANNERLOCK_OUTPUT=table did not print a table naming the holder:\n%s", r.stdout)
		}
		c.expect(0, "semaphore", "get", "sem")
		c.expect(exitNoHolder, "break", "nobody")
		c.env = append(c.env, "SPANNERLOCK_OUTPUT=yaml")
		if r := c.expect(exitUsage, "status"); !strings.Contains(r.stderr, "SPANNERLOCK_OUTPUT=yaml") {
			t.Errorf("an output format no command has is not refused naming the variable:\n%s", r.stderr)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		c.t, c.env = t, append(envv, "SPANNERLOCK_TIMEOUT=0")
		c.expect(0, "status")
		if r := c.expect(0, "holder", "x"); !strings.Contains(r.stdout, "the-holder") {
			t.Errorf("holder x printed %q", r.stdout)
		}
		c.expect(exitNotAcquired, "lock", "x", "--", "true")
	})
}
