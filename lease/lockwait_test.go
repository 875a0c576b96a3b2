package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// On Spanner a read-write transaction keeps a shared lock on every row it
// read until it ends, and a transaction whose end is lost keeps it until its
// deadline. These tests stall a transaction that way (the lock model holds
// back the writers that Spanner would make wait) while a Client renews, and
// check that no renewal waits and that the Client's leases stay held: a
// renewal that waited would time out, again and again, until the leases
// were lost with Spanner reachable throughout.

// lockWaitTTL makes renewals come every second, each bounded at 500ms, while
// a stalled transaction holds its locks for its whole bound (2.7s): longer
// than a renewal interval, so a renewal that waited for them would be seen
// (the lock model records every wait). At a 2s TTL (renewals bounded at
// 333ms), two make test runs at once timed three renewals in a row out on
// load alone, and the lease was lost with no renewal having waited.
const lockWaitTTL = 3 * time.Second

// checkRenewedThrough checks, after a stall, that the Client's renewals
// never waited and that its leases are still held.
func checkRenewedThrough(t *testing.T, m *lockModel, held ...*lease.Lease) {
	t.Helper()
	for _, w := range m.waitsBy("spannerlock-renew") {
		t.Errorf("a renewal waited for a lock: %s", w)
	}
	for _, l := range held {
		if err := context.Cause(l.Context()); err != nil {
			t.Errorf("lease %q was lost while a transaction stalled: %v", l.Name(), err)
		}
	}
}

// A Release whose transaction stalls (its Commit lost in the network, say)
// must not hold up the renewal of the Client's other leases.
func TestAStalledReleaseDoesNotHoldUpRenewals(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		m := newLockModel()
		f := &faults{model: m}
		a := newClientWith(t, spannerClient(t, db, f.options()...), lease.WithTTL(lockWaitTTL))
		anchor := mustAcquire(t, ctx, a, "anchor")
		x := mustAcquire(t, ctx, a, "x")

		before := m.renewalsCommitted()
		f.arm(func(r rpc) bool { return r.tag == "spannerlock-release" }, map[int]fault{0: holdsLocks})
		if err := x.Release(ctx); err == nil {
			t.Fatal("a Release whose transaction stalled reported success")
		}
		if trace, hits := f.disarm(); hits != 1 {
			t.Fatalf("the stall hit %d times: %v", hits, trace)
		}
		checkRenewedThrough(t, m, anchor)
		if m.renewalsCommitted() == before {
			t.Fatal("no renewal committed while the release stalled")
		}
	})
}

// A rival whose acquisition stalls mid-transaction, after reading the
// holder's lease, must not hold up the holder's renewals.
func TestARivalsStalledAcquisitionDoesNotHoldUpTheHoldersRenewals(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		m := newLockModel()
		holder := newClientWith(t, spannerClient(t, db, (&faults{model: m}).options()...), lease.WithTTL(lockWaitTTL))
		x := mustAcquire(t, ctx, holder, "x")
		f := &faults{model: m}
		rival := newClientWith(t, spannerClient(t, db, f.options()...), lease.WithTTL(lockWaitTTL))
		if _, err := rival.TryAcquire(ctx, "y"); err != nil { // the rival's session exists
			t.Fatalf("rival TryAcquire(y): %v", err)
		}
		if _, err := rival.TryAcquire(ctx, "x"); !errors.Is(err, lease.ErrNotAcquired) { // the rival knows x exists
			t.Fatalf("rival TryAcquire(x): %v, want ErrNotAcquired", err)
		}

		before := m.renewalsCommitted()
		// The rival's acquisition reads x's row, then stalls.
		f.arm(func(r rpc) bool { return r.tag == "spannerlock-acquire" }, map[int]fault{0: holdsLocks})
		if _, err := rival.TryAcquire(ctx, "x"); err == nil {
			t.Fatal("a stalled TryAcquire of a held name succeeded")
		}
		f.disarm()
		checkRenewedThrough(t, m, x)
		if m.renewalsCommitted() == before {
			t.Fatal("no renewal committed while the rival stalled")
		}
	})
}

// A long transaction of the application that Guards a lease reads the
// lease's row, and holds its lock as long as it runs. A lock row due for a
// restamp (cleanup judges rows by renewed_at) must not make the holder's
// renewals wait for it.
func TestALongGuardedTransactionDoesNotHoldUpRenewals(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		m := newLockModel()
		sc := spannerClient(t, db, (&faults{model: m}).options()...)
		a := newClientWith(t, sc, lease.WithTTL(lockWaitTTL))
		x := mustAcquire(t, ctx, a, "x")
		// Make x's row old enough that the next renewal restamps it.
		_, err := emulator.Client(t, db).Apply(ctx, []*spanner.Mutation{spanner.Update("locks",
			[]string{"name", "renewed_at"}, []any{"x", time.Now().Add(-2 * time.Hour)})})
		fatalIf(t, err, "age x's row")

		before := m.renewalsCommitted()
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err = sc.ReadWriteTransactionWithOptions(tctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
			if err := x.Guard(ctx, tx); err != nil {
				return err
			}
			// The application works for a while, its transaction open.
			for m.renewalsCommitted() < before+2 {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				time.Sleep(10 * time.Millisecond)
			}
			return nil
		}, spanner.TransactionOptions{TransactionTag: "app"})
		checkRenewedThrough(t, m, x)
		fatalIf(t, err, "the guarded transaction (renewals that committed while it ran: %d)", m.renewalsCommitted()-before)
	})
}

// A Commit holds exclusive locks on the rows it writes while it waits for
// older readers, and a read of those rows waits for it. A rival's stalled
// acquisition of a permit (its locks held until Spanner aborts it as idle,
// about 10 s) holds up a second rival's grant, which writes the
// semaphore's rows; the holder of another permit, whose renewal checks its
// row, must not wait behind that grant: its renewals would time out until
// the idle abort, and its leases be lost with Spanner reachable.
func TestAStalledGrantOfAnotherPermitDoesNotHoldUpTheHoldersRenewals(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		m := newLockModel()
		holder := newClientWith(t, spannerClient(t, db, (&faults{model: m}).options()...), lease.WithTTL(lockWaitTTL))
		fatalIf(t, holder.SetPermits(ctx, "sem", 3), "SetPermits")
		anchor := mustAcquire(t, ctx, holder, "anchor")
		permit, err := holder.AcquirePermit(ctx, "sem")
		fatalIf(t, err, "the holder's AcquirePermit")

		f := &faults{model: m}
		stalled := newClientWith(t, spannerClient(t, db, f.options()...), lease.WithTTL(lockWaitTTL))
		if _, err := stalled.TryAcquire(ctx, "y"); err != nil { // its session exists
			t.Fatalf("stalled rival TryAcquire(y): %v", err)
		}
		second := newClientWith(t, spannerClient(t, db, (&faults{model: m}).options()...), lease.WithTTL(lockWaitTTL))
		if _, err := second.TryAcquire(ctx, "z"); err != nil {
			t.Fatalf("second rival TryAcquire(z): %v", err)
		}

		before := m.renewalsCommitted()
		// The stalled rival reads the semaphore's rows, then stalls.
		f.arm(func(r rpc) bool { return r.tag == "spannerlock-acquire" }, map[int]fault{0: holdsLocks})
		stalledAt := time.Now()
		if _, err := stalled.TryAcquirePermit(ctx, "sem"); err == nil {
			t.Fatal("a stalled TryAcquirePermit succeeded")
		}
		f.disarm()
		// The second rival's grant waits for the stalled rival's locks,
		// attempt after attempt, until the idle abort frees them.
		gctx, cancel := context.WithTimeout(ctx, spannerIdleAbort+5*time.Second)
		defer cancel()
		l, err := second.AcquirePermit(gctx, "sem")
		fatalIf(t, err, "the second rival's AcquirePermit")
		// The check below is meaningful only if renewals came due while
		// the grant waited: it waited for the idle abort (timers never
		// fire early).
		if waited := time.Since(stalledAt); waited < spannerIdleAbort {
			t.Fatalf("the second rival's grant was through after %s, before the stalled rival's idle abort", waited)
		}
		checkRenewedThrough(t, m, anchor, permit)
		if m.renewalsCommitted() == before {
			t.Fatal("no renewal committed while the grant waited")
		}
		fatalIf(t, l.Release(ctx), "the second rival's Release")
	})
}
