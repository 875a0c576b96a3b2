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

// ForceRelease ends a live holder's lease: its token moves on, so its
// guarded writes fail at once, its Context ends at its next renewal, and
// the next acquisition gets a larger token.
func TestForceReleaseEndsTheHoldersLease(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		sc := emulator.Client(t, db)
		holder := newClientWith(t, sc, lease.WithTTL(2*time.Second), lease.WithHolderID("stuck"))
		l := mustAcquire(t, ctx, holder, "job")
		operator := newClient(t, db)

		h, err := operator.ForceRelease(ctx, "job")
		fatalIf(t, err, "ForceRelease")
		if h.HolderID != "stuck" || h.Token != l.Token() {
			t.Fatalf("ForceRelease reported %+v, want holder stuck with token %d", h, l.Token())
		}
		_, err = sc.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
			return l.Guard(ctx, tx)
		})
		if !errors.Is(err, lease.ErrLeaseLost) {
			t.Fatalf("Guard after ForceRelease: %v, want ErrLeaseLost", err)
		}
		waitDone(t, l.Context(), "the force-released lease")
		next := mustAcquire(t, ctx, operator, "job")
		if next.Token() <= l.Token() {
			t.Fatalf("the next token %d is not above the force-released %d", next.Token(), l.Token())
		}
		if _, err := operator.ForceRelease(ctx, "free"); !errors.Is(err, lease.ErrNoHolder) {
			t.Fatalf("ForceRelease of a free name: %v, want ErrNoHolder", err)
		}
	})
}

// The Context of a lease force-released without a Guard ends at the
// holder's next renewal.
func TestForceReleaseEndsTheHoldersContextAtItsNextRenewal(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		holder := newClient(t, db, lease.WithTTL(2*time.Second))
		l := mustAcquire(t, ctx, holder, "job")
		_, err := newClient(t, db).ForceRelease(ctx, "job")
		fatalIf(t, err, "ForceRelease")
		waitDone(t, l.Context(), "the force-released lease")
		if !errors.Is(context.Cause(l.Context()), lease.ErrLeaseLost) {
			t.Fatalf("cause %v, want ErrLeaseLost", context.Cause(l.Context()))
		}
	})
}

// ForceReleasePermit ends one permit; a worker ID keeps its holder's mark,
// so the next holder still waits past it.
func TestForceReleasePermitAndWorkerID(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		holder := newClient(t, db, lease.WithTTL(2*time.Second))
		operator := newClient(t, db)
		fatalIf(t, operator.SetPermits(ctx, "sem", 1), "SetPermits")
		p, err := holder.TryAcquirePermit(ctx, "sem")
		fatalIf(t, err, "TryAcquirePermit")
		h, err := operator.ForceReleasePermit(ctx, "sem", 0)
		fatalIf(t, err, "ForceReleasePermit")
		if h.Token != p.Token() || h.Kind != "permit" {
			t.Fatalf("ForceReleasePermit reported %+v, want the permit with token %d", h, p.Token())
		}
		waitDone(t, p.Context(), "the force-released permit")
		if _, err := operator.TryAcquirePermit(ctx, "sem"); err != nil {
			t.Fatalf("TryAcquirePermit after ForceReleasePermit: %v", err)
		}

		w, err := holder.AcquireWorkerID(ctx, "ids", 1)
		fatalIf(t, err, "AcquireWorkerID")
		_, err = operator.ForceReleasePermit(ctx, "ids", 0)
		fatalIf(t, err, "ForceReleasePermit of a worker ID")
		waitDone(t, w.Context(), "the force-released worker ID")
		lastUse := lease.EndedAt(w.Lease()) // Use refuses from here on
		next, err := operator.AcquireWorkerID(ctx, "ids", 1)
		fatalIf(t, err, "the next AcquireWorkerID")
		if next.NotBefore().Before(lastUse) {
			t.Fatalf("the next holder waits only until %s; the force-released one could use the ID until %s",
				next.NotBefore().Format(time.StampMicro), lastUse.Format(time.StampMicro))
		}
	})
}

// Jobs lists RunOnce slots with their runs and failures; WithMaxFailures
// stops trying a slot that failed that often.
func TestJobsAndMaxFailures(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		c := newClient(t, db)
		slot := time.Date(2026, 11, 25, 3, 0, 0, 0, time.UTC)
		failing := errors.New("job failed")
		for range 2 {
			if ran, err := c.RunOnce(ctx, "export", slot, func(context.Context) error { return failing }, lease.WithMaxFailures(2)); ran || !errors.Is(err, failing) {
				t.Fatalf("a failing run: ran=%v err=%v", ran, err)
			}
		}
		ran, err := c.RunOnce(ctx, "export", slot, func(context.Context) error {
			t.Fatal("a slot that failed twice ran a third time under WithMaxFailures(2)")
			return nil
		}, lease.WithMaxFailures(2))
		if ran || !errors.Is(err, lease.ErrTooManyFailures) {
			t.Fatalf("RunOnce after two failures: ran=%v err=%v, want ErrTooManyFailures", ran, err)
		}
		if ran, err := c.RunOnce(ctx, "report", slot, func(context.Context) error { return nil }); !ran || err != nil {
			t.Fatalf("a succeeding run: ran=%v err=%v", ran, err)
		}
		// A lock whose name looks like a slot is not a job.
		mustAcquire(t, ctx, c, "export@2026-11-25T04:00:00Z")

		jobs, err := c.Jobs(ctx)
		fatalIf(t, err, "Jobs")
		want := []lease.JobSlot{
			{Job: "export", Slot: slot, Runs: 2, Failures: 2},
			{Job: "report", Slot: slot, Done: true, Runs: 1},
		}
		if len(jobs) != len(want) {
			t.Fatalf("Jobs = %+v, want %d slots", jobs, len(want))
		}
		for i, j := range jobs {
			w := want[i]
			if j.Job != w.Job || !j.Slot.Equal(w.Slot) || j.Done != w.Done || j.Runs != w.Runs || j.Failures != w.Failures || j.Runner != nil {
				t.Errorf("Jobs[%d] = %+v, want %+v", i, j, w)
			}
			if j.Done == j.CompletedAt.IsZero() {
				t.Errorf("Jobs[%d]: Done %v but CompletedAt %v", i, j.Done, j.CompletedAt)
			}
		}
	})
}
