package lease_test

import (
	"context"
	"errors"
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
