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

// commitOnly counts the Commit RPCs of every transaction but renewals.
func commitOnly(r rpc) bool { return notRenewals(r) && r.method == "/google.spanner.v1.Spanner/Commit" }

func TestAmbiguousAcquireCommitIsResolvedByReading(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		f := &faults{}
		a := newClientWith(t, spannerClient(t, db, f.options()...))
		rival := newClient(t, db)

		f.arm(commitOnly, map[int]fault{0: replyLost})
		l, err := a.TryAcquire(ctx, "job")
		if _, hits := f.disarm(); hits != 1 {
			t.Fatal("the injected fault was never hit")
		}
		if err != nil {
			t.Fatalf("TryAcquire whose commit applied but reported DEADLINE_EXCEEDED: %v; it holds the lease and must say so", err)
		}
		if l.Token() != 1 {
			t.Fatalf("token = %d, want 1", l.Token())
		}
		h, err := rival.Holder(ctx, "job")
		fatalIf(t, err, "Holder")
		if h.Token != l.Token() || h.HolderID != a.HolderID() {
			t.Fatalf("Spanner says %+v holds it; the resolved lease says token %d", h, l.Token())
		}
	})
}

func TestFailedAcquireCommitIsNotMistakenForSuccess(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		f := &faults{}
		a := newClientWith(t, spannerClient(t, db, f.options()...))
		rival := newClient(t, db)

		f.arm(commitOnly, map[int]fault{0: delayed})
		if _, err := a.TryAcquire(ctx, "job"); err == nil {
			t.Fatal("TryAcquire whose commit never reached Spanner reported success")
		}
		f.disarm()
		l, err := rival.TryAcquire(ctx, "job")
		fatalIf(t, err, "rival TryAcquire after the failed attempt")
		if l.Token() != 1 {
			t.Fatalf("rival token = %d, want 1: the failed attempt must not have taken one", l.Token())
		}
	})
}

func TestAmbiguousReleaseCommitIsResolvedByReading(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		f := &faults{}
		a := newClientWith(t, spannerClient(t, db, f.options()...))
		rival := newClient(t, db)
		l := mustAcquire(t, ctx, a, "job")

		f.arm(commitOnly, map[int]fault{0: replyLost})
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release whose commit applied but reported DEADLINE_EXCEEDED: %v", err)
		}
		f.disarm()
		if _, err := rival.TryAcquire(ctx, "job"); err != nil {
			t.Fatalf("rival TryAcquire after the release: %v", err)
		}
	})
}

// A RunOnce completion whose transaction fails is settled by reading the
// slot's row. A slot completed by a holder that took it after this one's
// lease was lost is not this run's success: RunOnce reports the loss.
func TestUnknownCompletionOfASlotCompletedElsewhereIsALoss(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		f := &faults{}
		a := newClientWith(t, spannerClient(t, db, f.options()...), lease.WithTTL(3*time.Second))
		slot := time.Date(2026, 11, 23, 3, 0, 0, 0, time.UTC)
		name := "job@" + slot.Format(time.RFC3339)

		ran, err := a.RunOnce(ctx, "job", slot, func(context.Context) error {
			// Another holder takes the slot and completes it.
			stealLease(t, ctx, db, name)
			_, err := emulator.Client(t, db).Apply(ctx, []*spanner.Mutation{spanner.Update("locks",
				[]string{"name", "session_id", "completed_at"}, []any{name, nil, spanner.CommitTimestamp})})
			fatalIf(t, err, "complete the slot as the other holder")
			// The completion's transaction times out; the read after it works.
			f.arm(notRenewals, map[int]fault{0: delayed})
			return nil
		})
		if trace, hits := f.disarm(); hits != 1 {
			t.Fatalf("faults hit %d of 1: %v", hits, trace)
		}
		if !ran || !errors.Is(err, lease.ErrLeaseLost) {
			t.Fatalf("RunOnce = %v, %v; want true and an error matching ErrLeaseLost", ran, err)
		}
	})
}
