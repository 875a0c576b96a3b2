package lease_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

func TestAcquireAllTakesEveryNameOrNone(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		a := newClient(t, db, lease.WithHolderID("a"))
		b := newClient(t, db, lease.WithHolderID("b"))
		observer := newClient(t, db)
		held := mustAcquire(t, ctx, a, "beta")

		got := make(chan *lease.LeaseSet, 1)
		go func() {
			set, err := b.AcquireAll(ctx, "beta", "alpha")
			if err != nil {
				t.Errorf("AcquireAll: %v", err)
			}
			got <- set
		}()
		inLine(t, ctx, observer, "beta", "b")
		// While one name is held, the other is not taken either.
		if h, err := observer.Holder(ctx, "alpha"); !errors.Is(err, lease.ErrNoHolder) {
			t.Fatalf("Holder(alpha) while AcquireAll waits for beta = %+v, %v; want ErrNoHolder", h, err)
		}
		fatalIf(t, held.Release(ctx), "Release beta")
		var set *lease.LeaseSet
		select {
		case set = <-got:
		case <-time.After(30 * time.Second):
			t.Fatal("AcquireAll did not return 30s after the last name was released")
		}
		if set == nil {
			return
		}
		for _, name := range []string{"alpha", "beta"} {
			h, err := observer.Holder(ctx, name)
			fatalIf(t, err, "Holder(%s)", name)
			if h.HolderID != "b" || h.Token != set.Lease(name).Token() {
				t.Fatalf("Holder(%s) = %+v, want b with token %d", name, h, set.Lease(name).Token())
			}
		}
		if set.Lease("beta").Token() <= held.Token() {
			t.Fatalf("beta's token %d not above its previous holder's %d", set.Lease("beta").Token(), held.Token())
		}
		fatalIf(t, set.Release(ctx), "Release the set")
		for _, name := range []string{"alpha", "beta"} {
			if _, err := observer.Holder(ctx, name); !errors.Is(err, lease.ErrNoHolder) {
				t.Fatalf("Holder(%s) after the set's Release: err = %v, want ErrNoHolder", name, err)
			}
		}
		if !errors.Is(context.Cause(set.Context()), lease.ErrReleased) {
			t.Fatalf("set's context cause = %v, want ErrReleased", context.Cause(set.Context()))
		}
	})
}

func TestAcquireAllInOppositeOrdersDoesNotDeadlock(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		orders := [][]string{{"left", "right"}, {"right", "left"}}
		var wg sync.WaitGroup
		for i, names := range orders {
			c := newClient(t, db)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for round := range 5 {
					actx, cancel := context.WithTimeout(ctx, 60*time.Second)
					set, err := c.AcquireAll(actx, names...)
					cancel()
					if err != nil {
						t.Errorf("caller %d, round %d: AcquireAll(%v): %v", i, round, names, err)
						return
					}
					if err := set.Release(ctx); err != nil {
						t.Errorf("caller %d, round %d: Release: %v", i, round, err)
						return
					}
				}
			}()
		}
		wg.Wait()
	})
}

func TestAcquireAllRefusesASemaphoreName(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		c := newClient(t, db)
		fatalIf(t, c.SetPermits(ctx, "pool", 2), "SetPermits")
		if _, err := c.AcquireAll(ctx, "x", "pool"); !errors.Is(err, lease.ErrWrongKind) {
			t.Fatalf("AcquireAll with a semaphore's name: err = %v, want ErrWrongKind", err)
		}
		if _, err := c.Holder(ctx, "x"); !errors.Is(err, lease.ErrNoHolder) {
			t.Fatalf("Holder(x) after a refused AcquireAll: err = %v, want ErrNoHolder", err)
		}
	})
}

func TestGuardRejectsALostSharedLease(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx, db, sc := counterDatabase(t)
		c := newClientWith(t, sc, lease.WithTTL(time.Minute))
		l, err := c.TryAcquireShared(ctx, "counter")
		fatalIf(t, err, "TryAcquireShared")
		fatalIf(t, guardedIncrement(ctx, sc, l), "guarded write by a live reader")
		// A rival's grant over the reader's row, as after the reader expired.
		thief := emulator.Client(t, db)
		_, err = thief.ReadWriteTransaction(ctx, func(ctx context.Context, txn *spanner.ReadWriteTransaction) error {
			_, err := txn.Update(ctx, testStatement(t,
				"UPDATE locks_permits SET token = token + 1, session_id = 'thief' WHERE name = @name",
				"UPDATE locks_permits SET token = token + 1, session_id = 'thief' WHERE name = $1",
				[]string{"name"}, map[string]any{"name": "counter"}))
			return err
		})
		fatalIf(t, err, "take the reader's row")
		if err := guardedIncrement(ctx, sc, l); !errors.Is(err, lease.ErrLeaseLost) {
			t.Fatalf("guarded write by a reader whose row was taken: err = %v, want ErrLeaseLost", err)
		}
	})
}
