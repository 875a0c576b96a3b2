package lease_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// A replica waiting in line for a RunOnce slot whose run then fails past
// its bound gets ErrTooManyFailures and leaves no entry in the slot's
// line: the slot is never taken again, so no later grant would take it out.
func TestATooManyFailuresWaiterLeavesTheLine(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		runner := newClient(t, db, lease.WithHolderID("runner"))
		waiting := newClient(t, db, lease.WithHolderID("waiting"), lease.WithPollInterval(50*time.Millisecond))
		observer := newClient(t, db)
		slot := time.Date(2026, 12, 3, 3, 0, 0, 0, time.UTC)
		name := lease.JobSlotName("report", slot)
		running, fail := make(chan struct{}), make(chan struct{})
		ran := make(chan error, 1)
		go func() {
			_, err := runner.RunOnce(ctx, "report", slot, func(context.Context) error {
				close(running)
				<-fail
				return errors.New("the job failed")
			})
			ran <- err
		}()
		<-running
		wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		waited := make(chan error, 1)
		go func() {
			_, err := waiting.RunOnce(wctx, "report", slot, func(context.Context) error {
				t.Error("the waiting replica ran a slot past its bound")
				return nil
			}, lease.WithMaxFailures(1))
			waited <- err
		}()
		inLine(t, ctx, observer, name, "waiting")
		close(fail)
		if err := <-ran; err == nil {
			t.Fatal("the failing run reported success")
		}
		select {
		case err := <-waited:
			if !errors.Is(err, lease.ErrTooManyFailures) {
				t.Fatalf("the waiting replica: err = %v, want ErrTooManyFailures", err)
			}
		case <-wctx.Done():
			t.Fatal("the waiting replica did not return within 60s")
		}
		// Out of line by the time the call returned (its leave runs before
		// it returns while Spanner answers; no background retry is waited for).
		if n := waiterRows(t, ctx, emulator.Client(t, db), name); n != 0 {
			t.Fatalf("the slot's line holds %d entries after the waiter got ErrTooManyFailures", n)
		}
	})
}

// A waiter that died in the line of a RunOnce slot while its last allowed
// run failed is taken out by the next RunOnce of the slot, which finds it
// failed out: nothing takes the slot again, so no other transaction writes
// its line, and the entry would stay as long as the slot's row (as for a
// completed slot, TestADeadWaiterLeavesACompletedRunOnceSlotsLine).
func TestADeadWaiterLeavesAFailedOutRunOnceSlotsLine(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		ttl := 2 * time.Second
		slot := time.Date(2026, 12, 3, 4, 0, 0, 0, time.UTC)
		name := lease.JobSlotName("report", slot)
		runner := newClient(t, db, lease.WithTTL(ttl), lease.WithHolderID("runner"))
		f := &faults{}
		// The doomed waiter's entry must still be live when the failed run
		// lets go, just after the doomed Client is cut off: its TTL bounds
		// how long that may take on a loaded machine.
		doomedTTL := 10 * time.Second
		doomed := newClientWith(t, spannerClient(t, db, f.options()...), lease.WithTTL(doomedTTL), lease.WithHolderID("doomed"),
			lease.WithPollInterval(50*time.Millisecond))
		late := newClient(t, db, lease.WithTTL(ttl), lease.WithHolderID("late"))
		observer := newClient(t, db)
		sc := emulator.Client(t, db)
		running, fail := make(chan struct{}), make(chan struct{})
		ran := make(chan error, 1)
		go func() {
			_, err := runner.RunOnce(ctx, "report", slot, func(context.Context) error {
				close(running)
				<-fail
				return errors.New("the job failed")
			})
			ran <- err
		}()
		<-running
		dctx, dcancel := context.WithCancel(ctx)
		defer dcancel()
		gave := make(chan error, 1)
		go func() {
			_, err := doomed.RunOnce(dctx, "report", slot, func(context.Context) error { return nil }, lease.WithMaxFailures(1))
			gave <- err
		}()
		inLine(t, ctx, observer, name, "doomed")
		// The doomed waiter is cut off: its leave and renewals never land,
		// and its session expires in Spanner. The run fails meanwhile, and
		// its let-go leaves the still live entry in line.
		f.partition(true)
		close(fail)
		if err := <-ran; err == nil {
			t.Fatal("the failing run reported success")
		}
		if n := waiterRows(t, ctx, sc, name); n != 1 {
			t.Fatalf("the slot's line holds %d entries once the run failed, want the doomed one", n)
		}
		dcancel()
		select {
		case err := <-gave:
			if err == nil {
				t.Fatal("the doomed waiter, cut off from Spanner, reported success")
			}
		case <-time.After(2 * doomedTTL):
			t.Fatal("the doomed waiter did not give up within two TTLs of its context ending")
		}
		inLine(t, ctx, observer, name) // the doomed session expired: no live waiter
		if n := waiterRows(t, ctx, sc, name); n != 1 {
			t.Fatalf("the slot's line holds %d entries before the late RunOnce, want the doomed one", n)
		}
		// The first late call takes the dead entry out; the second, which
		// does not wait, finds the line empty.
		for _, opts := range [][]lease.RunOnceOption{{lease.WithMaxFailures(1)}, {lease.WithMaxFailures(1), lease.WithoutWaiting()}} {
			didRun, err := late.RunOnce(ctx, "report", slot, func(context.Context) error {
				t.Error("the late replica ran a slot past its bound")
				return nil
			}, opts...)
			if didRun || !errors.Is(err, lease.ErrTooManyFailures) {
				t.Fatalf("the late RunOnce = %t, %v; want false, ErrTooManyFailures", didRun, err)
			}
			if n := waiterRows(t, ctx, sc, name); n != 0 {
				t.Fatalf("the slot's line holds %d entries after a RunOnce found the slot failed out", n)
			}
		}
		ws, err := observer.Waiters(ctx)
		fatalIf(t, err, "Waiters")
		if i := slices.IndexFunc(ws, func(w lease.Waiter) bool { return w.Name == name }); i >= 0 {
			t.Fatalf("Waiters lists %+v for a failed-out slot", ws[i])
		}
	})
}
