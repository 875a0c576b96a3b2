//go:build unix

package main

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// break ends a stuck holder's lease: it says who held it, the lock is free
// for the next holder at once with a larger token, the old holder's fenced
// writes fail, and a spannerlock holding it stops CMD at its next renewal
// and exits 76. Nobody holding it is exit 3.
func TestBreak(t *testing.T) {
	inEachDialect(t, func(t *testing.T, d locktable.Dialect) {
		c := newCLIIn(t, d)
		stuck := c.start("--holder-id", "stuck", "--ttl", "6s", "lock", "deploy", "--shell", "--",
			`echo $SPANNERLOCK_TOKEN > token; trap 'echo term > got; exit 0' TERM; sleep 300 & wait`)
		c.waitFile("token")
		r := c.expect(0, "break", "deploy")
		if !strings.Contains(r.stderr, `Broke lock "deploy": it was held by stuck with token `+strings.TrimSpace(c.read("token"))) {
			t.Errorf("break does not say who held it:\n%s", r.stderr)
		}
		r = c.expect(0, "lock", "--try", "deploy", "--", "sh", "-c", "echo $SPANNERLOCK_TOKEN")
		if before, _ := strconv.Atoi(strings.TrimSpace(c.read("token"))); mustAtoi(t, r.stdout) <= before {
			t.Errorf("the next holder's token %s is not larger than the broken one's %d", r.stdout, before)
		}
		stuck.expect(exitLost)
		if c.read("got") != "term\n" {
			t.Errorf("the broken holder's CMD did not get SIGTERM (%q)", c.read("got"))
		}
		c.expect(exitNoHolder, "break", "deploy")

		// A holder's Guard-fenced writes fail once its lease is broken.
		lc := c.client(lease.WithHolderID("fenced-app"))
		l, err := lc.Acquire(testContext(t), "fenced")
		if err != nil {
			t.Fatal(err)
		}
		c.expect(0, "break", "fenced")
		_, err = emulator.Client(t, c.db).ReadWriteTransaction(testContext(t), func(ctx context.Context, txn *spanner.ReadWriteTransaction) error {
			return l.Guard(ctx, txn)
		})
		if !errors.Is(err, lease.ErrLeaseLost) {
			t.Errorf("Guard after break: %v, want ErrLeaseLost", err)
		}
	})
}

// break --permit ends one permit of a semaphore, and break --slot the run of
// a run-once slot, which then counts as a failed run.
func TestBreakPermitAndSlot(t *testing.T) {
	c := newCLI(t)
	lc := c.client(lease.WithHolderID("app"), lease.WithTTL(3*time.Second))
	if err := lc.SetPermits(testContext(t), "sem", 2); err != nil {
		t.Fatal(err)
	}
	p, err := lc.AcquirePermit(testContext(t), "sem")
	if err != nil {
		t.Fatal(err)
	}
	c.expect(exitNoHolder, "break", "--permit", "1", "sem")
	if r := c.expect(exitFailure, "break", "sem"); !strings.Contains(r.stderr, `"sem" is not a lock: break one of its permits`) {
		t.Errorf("break of a semaphore as a lock:\n%s", r.stderr)
	}
	r := c.expect(0, "break", "-o", "json", "--permit", "0", "sem")
	var broken struct {
		HolderID string `json:"holder_id"`
		Token    int64  `json:"token"`
		Slot     *int64 `json:"slot"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &broken); err != nil || broken.HolderID != "app" || broken.Token != p.Token() || broken.Slot == nil || *broken.Slot != 0 {
		t.Fatalf("break -o json: %q (%v)", r.stdout, err)
	}
	waitFor(t, "the broken permit's lease to end", func() bool { return p.Context().Err() != nil })

	// A worker ID of a pool is broken as a permit is, by its ID.
	w, err := lc.AcquireWorkerID(testContext(t), "pool", 4)
	if err != nil {
		t.Fatal(err)
	}
	if r := c.expect(0, "break", "--permit", "0", "pool"); !strings.Contains(r.stderr, `Broke permit 0 of "pool": it was held by app`) {
		t.Errorf("break of a worker ID does not say who held it:\n%s", r.stderr)
	}
	waitFor(t, "the broken worker ID's lease to end", func() bool { return w.Context().Err() != nil })

	slotTime := mustParseTime(t, slot)
	running, stop := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := lc.RunOnce(testContext(t), "job", slotTime, func(ctx context.Context) error {
			close(running)
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-stop:
				return nil
			}
		})
		done <- err
	}()
	defer close(stop)
	<-running
	c.expect(0, "break", "--slot", slot, "job")
	if err := <-done; !errors.Is(err, lease.ErrLeaseLost) {
		t.Fatalf("the broken run ended with %v, want ErrLeaseLost", err)
	}
	r = c.expect(0, "status", "-o", "json")
	if !strings.Contains(r.stdout, `"job":"job"`) || !strings.Contains(r.stdout, `"failures":1`) {
		t.Errorf("status does not count the broken run as a failure:\n%s", r.stdout)
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// break on an election ends the leader's term: the leader's CMD gets
// SIGTERM at its next renewal, and its spannerlock campaigns again, so the
// next term (its own here, with no rival) runs CMD under a larger token.
func TestBreakLeadership(t *testing.T) {
	c := newCLI(t)
	leader := c.start("--holder-id", "leader", "--ttl", "3s", "elect", "scheduler", "--shell", "--",
		`echo "$SPANNERLOCK_TOKEN" >> terms; trap 'echo term >> terms; exit 0' TERM; sleep 300 & wait`)
	waitFor(t, "the first term", func() bool { return len(c.lines("terms")) == 1 })
	if r := c.expect(0, "break", "scheduler"); !strings.Contains(r.stderr, `Broke lock "scheduler": it was held by leader`) {
		t.Errorf("break does not say who led:\n%s", r.stderr)
	}
	waitFor(t, "the next term", func() bool { return len(c.lines("terms")) == 3 })
	terms := c.lines("terms")
	if terms[1] != "term" || mustAtoi(t, terms[2]) <= mustAtoi(t, terms[0]) {
		t.Fatalf("terms %q: want the first CMD terminated, then a term with a larger token", terms)
	}
	leader.signal(syscall.SIGTERM)
	leader.expect(0) // CMD's status: it exits 0 on SIGTERM
}
