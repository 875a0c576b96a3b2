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

// ForceRelease of a lock held shared ends every reader's lease, as Holder
// reports it held: it returns the first reader, as Holder does, the readers'
// Guards fail and their Contexts end, and the next writer gets a larger
// token. It used to return ErrNoHolder while Holder said "shared".
func TestForceReleaseOfALockHeldShared(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		sc := emulator.Client(t, db)
		var readers []*lease.Lease
		for range 2 {
			r, err := newClient(t, db, lease.WithTTL(2*time.Second)).AcquireShared(ctx, "x")
			fatalIf(t, err, "AcquireShared")
			readers = append(readers, r)
		}
		op := newClient(t, db)
		before, err := op.Holder(ctx, "x")
		fatalIf(t, err, "Holder")
		h, err := op.ForceRelease(ctx, "x")
		fatalIf(t, err, "ForceRelease of a lock Holder reports held %q", before.Kind)
		if h.Kind != "shared" || h.Token != before.Token || h.HolderID != before.HolderID {
			t.Errorf("ForceRelease returned %+v, want Holder's %+v", h, before)
		}
		for i, r := range readers {
			_, err := sc.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error { return r.Guard(ctx, tx) })
			if !errors.Is(err, lease.ErrLeaseLost) {
				t.Errorf("reader %d's Guard after ForceRelease: %v, want ErrLeaseLost", i, err)
			}
			waitDone(t, r.Context(), "a force-released reader's Context")
		}
		if _, err := op.Holder(ctx, "x"); !errors.Is(err, lease.ErrNoHolder) {
			t.Errorf("Holder after ForceRelease: %v, want ErrNoHolder", err)
		}
		w := mustAcquire(t, ctx, op, "x")
		for i, r := range readers {
			if w.Token() <= r.Token() {
				t.Errorf("the next writer's token %d is not above reader %d's %d", w.Token(), i, r.Token())
			}
		}
		if _, err := op.ForceRelease(ctx, "nobody"); !errors.Is(err, lease.ErrNoHolder) {
			t.Errorf("ForceRelease of a free lock: %v, want ErrNoHolder", err)
		}
	})
}
