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

// ForceRelease with IfToken breaks only the holder the operator read: when
// the lease changed hands since, nothing is released, the error matches
// ErrHolderChanged, and the current holder is returned; its fenced writes
// go on. Without IfToken, an operator asked about token 1 broke token 2.
func TestForceReleaseIfTokenBreaksOnlyTheHolderRead(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		sc := emulator.Client(t, db)
		first := newClient(t, db, lease.WithHolderID("first"))
		operator := newClient(t, db)
		read := mustAcquire(t, ctx, first, "deploy")
		fatalIf(t, read.Release(ctx), "Release")
		second := newClientWith(t, sc, lease.WithTTL(2*time.Second), lease.WithHolderID("second"))
		now := mustAcquire(t, ctx, second, "deploy")

		h, err := operator.ForceRelease(ctx, "deploy", lease.IfToken(read.Token()))
		if !errors.Is(err, lease.ErrHolderChanged) || h.HolderID != "second" || h.Token != now.Token() {
			t.Fatalf("ForceRelease(IfToken(%d)) with token %d holding: %+v, %v; want ErrHolderChanged and the current holder",
				read.Token(), now.Token(), h, err)
		}
		_, err = sc.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
			return now.Guard(ctx, tx)
		})
		fatalIf(t, err, "the current holder's Guard after a refused ForceRelease")

		h, err = operator.ForceRelease(ctx, "deploy", lease.IfToken(now.Token()))
		fatalIf(t, err, "ForceRelease(IfToken) of the current holder")
		if h.Token != now.Token() {
			t.Fatalf("broke token %d, want %d", h.Token, now.Token())
		}
		waitDone(t, now.Context(), "the force-released lease")

		// The same for a permit.
		fatalIf(t, operator.SetPermits(ctx, "sem", 1), "SetPermits")
		p, err := second.TryAcquirePermit(ctx, "sem")
		fatalIf(t, err, "TryAcquirePermit")
		const slot = 0 // the one permit
		if _, err := operator.ForceReleasePermit(ctx, "sem", slot, lease.IfToken(p.Token()+1)); !errors.Is(err, lease.ErrHolderChanged) {
			t.Fatalf("ForceReleasePermit with another token: %v, want ErrHolderChanged", err)
		}
		if err := p.Context().Err(); err != nil {
			t.Fatalf("the permit ended although ForceReleasePermit was refused: %v", context.Cause(p.Context()))
		}
		_, err = operator.ForceReleasePermit(ctx, "sem", slot, lease.IfToken(p.Token()))
		fatalIf(t, err, "ForceReleasePermit(IfToken) of the holder")
	})
}
