package lease_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

func TestRunOnceSurvivesACrashAndRunsToSuccessOnce(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		ttl := time.Second
		slot := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)

		// The first replica, a separate process, takes the slot and crashes mid-run.
		crashed, line := startHolderProcess(t, db, ttl, holderRunOnceEnv+"="+slot.Format(time.RFC3339))
		if line != "running" {
			t.Fatalf("crashing replica said %q", line)
		}
		fatalIf(t, crashed.Process.Signal(syscall.SIGKILL), "kill")

		// The other two race for the slot; exactly one runs it, after the crashed
		// replica's lease expires.
		var runs atomic.Int32
		type result struct {
			ran bool
			err error
		}
		results := make(chan result, 2)
		var wg sync.WaitGroup
		for range 2 {
			c := newClient(t, db, lease.WithTTL(ttl))
			wg.Add(1)
			go func() {
				defer wg.Done()
				ran, err := c.RunOnce(ctx, "report", slot, func(ctx context.Context) error {
					runs.Add(1)
					if _, ok := lease.LeaseFromContext(ctx); !ok {
						t.Error("the job's context carries no lease")
					}
					return nil
				})
				results <- result{ran, err}
			}()
		}
		wg.Wait()
		close(results)
		ranCount := 0
		for r := range results {
			fatalIf(t, r.err, "RunOnce")
			if r.ran {
				ranCount++
			}
		}
		if runs.Load() != 1 || ranCount != 1 {
			t.Fatalf("the job ran %d times and %d replicas reported ran; want exactly one of each", runs.Load(), ranCount)
		}

		// A replica that arrives late does not run a completed slot.
		late := newClient(t, db)
		ran, err := late.RunOnce(ctx, "report", slot, func(context.Context) error {
			t.Error("a completed slot ran again")
			return nil
		})
		if ran || err != nil {
			t.Fatalf("late RunOnce = %t, %v; want false, nil", ran, err)
		}
		// The next slot is a different run.
		ran, err = late.RunOnce(ctx, "report", slot.Add(12*time.Hour), func(context.Context) error { return nil })
		if !ran || err != nil {
			t.Fatalf("RunOnce of the next slot = %t, %v; want true, nil", ran, err)
		}
	})
}

func TestRunOnceFailureLeavesTheSlotOpen(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		c := newClient(t, newDatabase(t))
		slot := time.Date(2026, 11, 22, 15, 0, 0, 0, time.UTC)
		boom := errors.New("gas price too high")
		ran, err := c.RunOnce(ctx, "settle", slot, func(context.Context) error { return boom })
		if ran || !errors.Is(err, boom) {
			t.Fatalf("failing RunOnce = %t, %v; want false and the job's error", ran, err)
		}
		ran, err = c.RunOnce(ctx, "settle", slot, func(context.Context) error { return nil })
		if !ran || err != nil {
			t.Fatalf("retry after failure = %t, %v; want true, nil", ran, err)
		}
	})
}

func TestRunOnceWaitersReturnWhenTheRunnerSucceeds(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		slot := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
		started, finish := make(chan struct{}), make(chan struct{})
		runner := newClient(t, db)
		done := make(chan error, 1)
		go func() {
			_, err := runner.RunOnce(ctx, "report", slot, func(context.Context) error {
				close(started)
				<-finish
				return nil
			})
			done <- err
		}()
		<-started
		waiter := make(chan bool, 1)
		go func() {
			ran, err := newClient(t, db).RunOnce(ctx, "report", slot, func(context.Context) error {
				t.Error("the slot ran twice")
				return nil
			})
			if err != nil {
				t.Error(err)
			}
			waiter <- ran
		}()
		select {
		case <-waiter:
			t.Fatal("the waiting replica returned while the job was running")
		case <-time.After(200 * time.Millisecond):
		}
		close(finish)
		fatalIf(t, <-done, "runner")
		if <-waiter {
			t.Fatal("the waiting replica reported it ran the job")
		}
	})
}
