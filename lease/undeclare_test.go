package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// A waiter on a semaphore that is undeclared while it waits gets
// ErrUnknownSemaphore, as AcquirePermit does on one never declared, at its
// next look at the line, and leaves the line; it used to wait until its
// context ended and then report that Spanner did not answer.
func TestWaiterOnASemaphoreUndeclaredWhileItWaits(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		holder := newClient(t, db, lease.WithTTL(2*time.Second))
		fatalIf(t, holder.SetPermits(ctx, "sem", 1), "SetPermits")
		p, err := holder.TryAcquirePermit(ctx, "sem")
		fatalIf(t, err, "TryAcquirePermit")
		defer func() { _ = p.Release(ctx) }()
		c := newClient(t, db, lease.WithTTL(2*time.Second), lease.WithPollInterval(200*time.Millisecond))
		actx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		got := make(chan error, 1)
		go func() {
			l, err := c.AcquirePermit(actx, "sem")
			if err == nil {
				_ = l.Release(ctx)
			}
			got <- err
		}()
		waitForWaiter(t, ctx, holder, "sem")
		fatalIf(t, holder.Undeclare(ctx, "sem"), "Undeclare")
		err = <-got
		switch {
		case !errors.Is(err, lease.ErrUnknownSemaphore):
			t.Fatalf("AcquirePermit waiting on a semaphore undeclared meanwhile: %v, want ErrUnknownSemaphore", err)
		case actx.Err() != nil:
			t.Fatalf("AcquirePermit returned only when its context ended: %v", err)
		}
		ws, err := holder.Waiters(ctx)
		fatalIf(t, err, "Waiters")
		for _, w := range ws {
			if w.Name == "sem" {
				t.Errorf("the waiter is still in line: %+v", w)
			}
		}
	})
}
