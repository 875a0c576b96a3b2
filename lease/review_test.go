package lease_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"google.golang.org/grpc/codes"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// The defects a review of the acquisition pipeline against real Spanner
// found, one test each (the lock-wait ones are in lockwait_test.go).

// plantMark gives worker ID 0 of pool a previous holder whose mark is ahead
// of this machine's clock by ahead, as a holder with a fast clock leaves it,
// and returns the mark.
func plantMark(t *testing.T, ctx context.Context, db string, pool string, ahead time.Duration) time.Time {
	t.Helper()
	c := newClient(t, db)
	w, err := c.AcquireWorkerID(ctx, pool, 1)
	fatalIf(t, err, "the previous holder's AcquireWorkerID")
	fatalIf(t, w.Release(ctx), "the previous holder's Release")
	mark := time.Now().Add(ahead).Truncate(time.Microsecond)
	_, err = emulator.Client(t, db).Apply(ctx, []*spanner.Mutation{spanner.Update("locks_permits",
		[]string{"name", "slot", "high_water"}, []any{pool, int64(0), mark})})
	fatalIf(t, err, "plant the mark")
	return mark
}

func markOf(t *testing.T, ctx context.Context, db, pool string) time.Time {
	t.Helper()
	r, err := emulator.Client(t, db).Single().ReadRow(ctx, "locks_permits", spanner.Key{pool, int64(0)}, []string{"high_water"})
	fatalIf(t, err, "read the mark")
	var mark spanner.NullTime
	fatalIf(t, r.Column(0, &mark), "decode the mark")
	return mark.Time
}

// A holder that gives up while it waits past its predecessor's mark never
// used the ID: its release must leave the predecessor's mark, not move it
// back to now, or the next holder would wait too little.
func TestAWorkerIDGivenUpWhileWaitingKeepsThePreviousMark(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		mark := plantMark(t, ctx, db, "ids", 30*time.Second)

		short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		if _, err := newClient(t, db).AcquireWorkerID(short, "ids", 1); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("AcquireWorkerID whose context ended while waiting: %v, want context.DeadlineExceeded", err)
		}
		if got := markOf(t, ctx, db, "ids"); got.Before(mark) {
			t.Fatalf("the ID's mark went back from %s to %s: its next holder would wait too little", mark.Format(time.StampMicro), got.Format(time.StampMicro))
		}
	})
}

// Close makes blocked calls return ErrClosed, AcquireWorkerID's wait past a
// mark included, and keeps the mark.
func TestCloseEndsAWorkerIDWaitWithErrClosed(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		mark := plantMark(t, ctx, db, "ids", 30*time.Second)

		b := newClient(t, db)
		got := make(chan error, 1)
		go func() {
			w, err := b.AcquireWorkerID(ctx, "ids", 1)
			if err == nil && w.Context().Err() != nil {
				err = errors.New("a nil error with a WorkerID whose Context had ended")
			}
			got <- err
		}()
		watcher := newClient(t, db)
		waitFor(t, "the waiter to hold the ID", 10*time.Second, func() bool {
			h, err := watcher.Holders(ctx)
			return err == nil && len(h) == 1
		})
		fatalIf(t, b.Close(), "Close")
		select {
		case err := <-got:
			if !errors.Is(err, lease.ErrClosed) {
				t.Fatalf("AcquireWorkerID after Close: %v, want ErrClosed", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("AcquireWorkerID did not return after Close")
		}
		if m := markOf(t, ctx, db, "ids"); m.Before(mark) {
			t.Fatalf("Close moved the ID's mark back from %s to %s", mark.Format(time.StampMicro), m.Format(time.StampMicro))
		}
	})
}

// A TryAcquire that finds the name held ends its transaction with a
// Rollback. The Spanner client sends its own with context.Background() and
// a 30s timeout: an unanswered Rollback must not hold TryAcquire past its
// bound.
func TestAnUnansweredRollbackDoesNotHoldTryAcquire(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		holder := newClient(t, db)
		mustAcquire(t, ctx, holder, "x")
		f := &faults{}
		a := newClientWith(t, spannerClient(t, db, f.options()...), lease.WithTTL(time.Second))
		if _, err := a.TryAcquire(ctx, "x"); !errors.Is(err, lease.ErrNotAcquired) {
			t.Fatalf("TryAcquire of a held name: %v", err)
		}
		plan := map[int]fault{}
		for i := range 20 {
			plan[i] = delayed
		}
		f.arm(func(r rpc) bool { return strings.HasSuffix(r.method, "/Rollback") }, plan)
		call, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		began := time.Now()
		_, err := a.TryAcquire(call, "x")
		took := time.Since(began)
		_, hits := f.disarm()
		if !errors.Is(err, lease.ErrNotAcquired) {
			t.Fatalf("TryAcquire of a held name with Rollback unanswered: %v", err)
		}
		if hits == 0 {
			t.Fatal("no Rollback was sent: the test did not test anything")
		}
		if u := f.unboundedRPCs(); len(u) > 0 {
			t.Fatalf("RPCs without a deadline within %s: %v", maxBound, u)
		}
		if call.Err() != nil {
			t.Fatalf("TryAcquire took %s, past its caller's 3s deadline (its own bound is 0.9s)", took)
		}
	})
}

// A RunOnce job that panics must not leave its slot held (and renewed for
// the life of the Client): another replica runs the slot at once.
func TestRunOnceReleasesTheSlotOfAJobThatPanics(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		slot := time.Date(2026, 11, 25, 3, 0, 0, 0, time.UTC)
		a := newClient(t, db, lease.WithTTL(2*time.Second))
		func() {
			defer func() {
				if p := recover(); p != "job failed" {
					t.Fatalf("RunOnce's panic: %v, want the job's", p)
				}
			}()
			_, _ = a.RunOnce(ctx, "report", slot, func(context.Context) error { panic("job failed") })
		}()
		b := newClient(t, db)
		short, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		ran, err := b.RunOnce(short, "report", slot, func(context.Context) error { return nil })
		if err != nil || !ran {
			t.Fatalf("another replica's RunOnce after a panic: ran=%v err=%v, want it to run the slot", ran, err)
		}
	})
}

// A session that ends while a TryAcquire's transaction runs (its renewals
// landed but none was confirmed, so its local deadline passed) leaves a row
// naming it. The retry, on a new session, must take that orphan rather than
// refuse, naming this very Client as the holder.
func TestARetryAfterTheSessionEndedMidAcquisitionTakesItsOwnOrphan(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		f := &faults{}
		a := newClientWith(t, spannerClient(t, db, f.options()...), lease.WithTTL(2*time.Second))
		anchor := mustAcquire(t, ctx, a, "anchor")
		var once sync.Once
		f.setReply(func(r rpc) {
			if r.tag == "spannerlock-acquire" && strings.HasSuffix(r.method, "/Commit") {
				// The first commit lands; its reply waits until the session
				// has ended locally.
				once.Do(func() { <-anchor.Context().Done() })
			}
		})
		plan := map[int]fault{}
		for i := range 100 {
			plan[i] = replyLost // renewals land, but the Client never learns
		}
		f.arm(renewals, plan)
		l, err := a.TryAcquire(ctx, "y")
		f.disarm()
		f.setReply(nil)
		if err != nil {
			t.Fatalf("TryAcquire after its session ended mid-transaction: %v (want a lease on a new session)", err)
		}
		if l.Context().Err() != nil {
			t.Fatalf("TryAcquire returned a lease already ended: %v", context.Cause(l.Context()))
		}
	})
}

// Guard's read of the session runs outside the caller's transaction, and
// the documented pattern runs that transaction under l.Context(), which has
// no deadline: the read needs a bound of its own.
func TestGuardBoundsItsSessionRead(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		f := &faults{}
		sc := spannerClient(t, db, f.options()...)
		l := mustAcquire(t, ctx, newClientWith(t, sc), "x")
		f.arm(func(r rpc) bool { return r.tag == "" && strings.HasSuffix(r.method, "/ExecuteStreamingSql") }, map[int]fault{})
		_, err := sc.ReadWriteTransactionWithOptions(l.Context(), func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
			return l.Guard(ctx, tx)
		}, spanner.TransactionOptions{TransactionTag: "app"})
		trace, _ := f.disarm()
		fatalIf(t, err, "the guarded transaction")
		if len(trace) == 0 {
			t.Fatal("Guard read no session outside the transaction: the test did not test anything")
		}
		if u := f.unboundedRPCs(); len(u) > 0 {
			t.Fatalf("Guard's read of the session had no deadline within %s: %v", maxBound, u)
		}
	})
}

// A blocking acquisition that gives up says what it last saw: a holder, or
// an outage, which is never reported as contention.
func TestAGivenUpWaitSaysWhetherItSawAHolderOrAnOutage(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		holder := newClient(t, db, lease.WithHolderID("holder"))
		mustAcquire(t, ctx, holder, "x")
		f := &faults{}
		a := newClientWith(t, spannerClient(t, db, f.options()...), lease.WithPollInterval(100*time.Millisecond))

		held, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := a.Acquire(held, "x")
		var h *lease.HeldError
		if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &h) || h.Holder.HolderID != "holder" {
			t.Fatalf("Acquire of a held name whose context ended: %v; want context.DeadlineExceeded and a *HeldError naming holder", err)
		}

		// The same wait, cut off from Spanner once its first look put it in
		// line (its entry is in Spanner: that look ended, and found x held).
		// Until then it is not cut off, however slow the machine: a look
		// that never ended before the context did has seen nothing.
		before := map[time.Time]bool{}
		ws, err := holder.Waiters(ctx)
		fatalIf(t, err, "Waiters")
		for _, w := range ws {
			before[w.Since] = true
		}
		// A poll Spanner does not answer gives up after 2×100ms, at least
		// 1s; the context leaves room for the first look on a loaded machine.
		down, cancelDown := context.WithTimeout(ctx, 8*time.Second)
		defer cancelDown()
		inLine := make(chan struct{})
		go func() {
			defer close(inLine)
			for down.Err() == nil {
				ws, err := holder.Waiters(down)
				for _, w := range ws {
					if err == nil && w.Name == "x" && !before[w.Since] {
						f.partition(true)
						return
					}
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
		_, err = a.Acquire(down, "x")
		<-inLine
		f.partition(false)
		var gaveUp *lease.WaitError
		switch {
		case !errors.As(err, &gaveUp) || !errors.Is(err, context.DeadlineExceeded):
			t.Fatalf("Acquire whose context ended during an outage: %v; want a *WaitError wrapping context.DeadlineExceeded", err)
		case errors.Is(err, lease.ErrNotAcquired):
			t.Fatalf("Acquire whose context ended during an outage reports contention: %v", err)
		case gaveUp.Last == nil:
			t.Fatalf("Acquire whose context ended during an outage does not say what failed: %v", err)
		}

		// A context that ends before Spanner answers at all: neither.
		none, cancelNone := context.WithTimeout(ctx, time.Nanosecond)
		defer cancelNone()
		<-none.Done()
		_, err = a.Acquire(none, "free")
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, lease.ErrNotAcquired) {
			t.Fatalf("Acquire under an expired context: %v; want context.DeadlineExceeded, not ErrNotAcquired", err)
		}
	})
}

// Holder on a semaphore's name says it is a semaphore, rather than that
// nobody holds it.
func TestHolderOfASemaphoreSaysItIsOne(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		c := newClient(t, db)
		fatalIf(t, c.SetPermits(ctx, "sem", 2), "SetPermits")
		if _, err := c.TryAcquirePermit(ctx, "sem"); err != nil {
			t.Fatalf("TryAcquirePermit: %v", err)
		}
		_, err := c.Holder(ctx, "sem")
		if !errors.Is(err, lease.ErrWrongKind) || errors.Is(err, lease.ErrNoHolder) {
			t.Fatalf("Holder of a semaphore: %v, want ErrWrongKind", err)
		}
	})
}

// A CANCELLED answer is not retried: the Client's own contexts end with
// DeadlineExceeded at their deadlines, so a CANCELLED that the caller's
// context did not cause comes from the connection, which a retry does not
// mend (a closing one never opens again). Acquire fails with it at once,
// after the one attempt, and does not report it as contention. (It was
// retried while a context copied for a read outside a transaction could
// say Canceled at its deadline.)
func TestAcquireDoesNotRetryAnRPCCancelledByOtherThanItsCaller(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		f := &faults{}
		c := newClientWith(t, spannerClient(t, db, f.options()...), lease.WithTTL(2*time.Second))
		f.arm(func(r rpc) bool { return r.tag == "spannerlock-acquire" }, map[int]fault{0: cancelled})
		_, err := c.Acquire(ctx, "job")
		if trace, hits := f.disarm(); hits != 1 {
			t.Fatalf("faults hit %d of 1: %v", hits, trace)
		}
		switch {
		case spanner.ErrCode(err) != codes.Canceled:
			t.Fatalf("Acquire after an RPC answered CANCELLED: %v, want that CANCELLED", err)
		case errors.Is(err, lease.ErrNotAcquired):
			t.Fatalf("Acquire reported a cancelled RPC as contention: %v", err)
		}
		l, err := c.Acquire(ctx, "job")
		fatalIf(t, err, "Acquire once the connection answers again")
		fatalIf(t, l.Release(ctx), "Release")
	})
}
