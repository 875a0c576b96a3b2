package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// TestRunOnceWithoutWaiting: a RunOnce that must not wait (spannerlock
// run-once --try) finds the slot running elsewhere, returns ErrNotAcquired
// without running its job, and leaves nothing behind: no place in the
// slot's line while the runner runs, so that after the runner fails the
// slot is the next caller's, not a leftover waiter's (issue 28, item 11:
// a --try that had returned took the slot later).
func TestRunOnceWithoutWaiting(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		slot := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
		name := lease.JobSlotName("report", slot)
		started, finish := make(chan struct{}), make(chan struct{})
		runner := newClient(t, db, lease.WithHolderID("runner"))
		done := make(chan error, 1)
		go func() {
			_, err := runner.RunOnce(ctx, "report", slot, func(context.Context) error {
				close(started)
				<-finish
				return errors.New("the run fails, so the slot stays open")
			})
			done <- err
		}()
		<-started

		tryer := newClient(t, db, lease.WithHolderID("tryer"))
		// Without the option, RunOnce would wait for the runner, which
		// never finishes meanwhile: the timeout only keeps a regression
		// from hanging the test.
		tctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		ran, err := tryer.RunOnce(tctx, "report", slot, func(context.Context) error {
			t.Error("a RunOnce that must not wait ran the job of a slot running elsewhere")
			return nil
		}, lease.WithoutWaiting())
		if tctx.Err() != nil {
			t.Fatalf("RunOnce without waiting waited for the slot running elsewhere until its context ended (%v)", err)
		}
		var held *lease.HeldError
		if ran || !errors.Is(err, lease.ErrNotAcquired) || !errors.As(err, &held) || held.Holder.HolderID != "runner" {
			t.Fatalf("RunOnce without waiting, the slot running elsewhere = %t, %v; want false and ErrNotAcquired naming the runner", ran, err)
		}
		waiters, err := runner.Waiters(ctx)
		fatalIf(t, err, "Waiters")
		for _, w := range waiters {
			if w.Name == name {
				t.Errorf("a RunOnce without waiting left a waiter in the slot's line: %+v", w)
			}
		}

		// The runner fails; the slot is open, and the next caller, not
		// the tryer, takes it.
		close(finish)
		if err := <-done; err == nil {
			t.Fatal("the failing runner's RunOnce returned no error")
		}
		ran, err = newClient(t, db, lease.WithHolderID("next")).RunOnce(ctx, "report", slot, func(ctx context.Context) error {
			l, _ := lease.LeaseFromContext(ctx)
			h, err := runner.Holder(ctx, name)
			if err != nil || h.HolderID != "next" || h.Token != l.Token() {
				t.Errorf("the slot's holder while the next caller runs it = %+v, %v; want the next caller, token %d", h, err, l.Token())
			}
			return nil
		})
		if !ran || err != nil {
			t.Fatalf("RunOnce of the open slot = %t, %v; want true, nil", ran, err)
		}
		// A slot done is done for a RunOnce without waiting too.
		ran, err = tryer.RunOnce(ctx, "report", slot, func(context.Context) error {
			t.Error("a done slot ran again")
			return nil
		}, lease.WithoutWaiting())
		if ran || err != nil {
			t.Fatalf("RunOnce without waiting of a done slot = %t, %v; want false, nil", ran, err)
		}
	})
}
