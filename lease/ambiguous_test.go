package lease_test

import (
	"testing"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
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
