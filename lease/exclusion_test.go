package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// counterDDL is the fenced resource: a counter and the last token that wrote it.
func counterDDL(t *testing.T) string {
	return inDialect(t,
		`CREATE TABLE counters (name STRING(MAX) NOT NULL, value INT64 NOT NULL, last_token INT64 NOT NULL) PRIMARY KEY (name)`,
		`CREATE TABLE counters (name varchar NOT NULL, value bigint NOT NULL, last_token bigint NOT NULL, PRIMARY KEY (name))`)
}

// guardedIncrement adds one to the counter inside a transaction protected by
// Guard. It fails if the token is not larger than the last one that wrote:
// the order of accepted writes is Spanner's commit order, so this checks that
// tokens grow in the order the critical sections really happened.
func guardedIncrement(ctx context.Context, sc *spanner.Client, l *lease.Lease) error {
	_, err := sc.ReadWriteTransaction(ctx, func(ctx context.Context, txn *spanner.ReadWriteTransaction) error {
		if err := l.Guard(ctx, txn); err != nil {
			return err
		}
		r, err := txn.ReadRow(ctx, "counters", spanner.Key{"c"}, []string{"value", "last_token"})
		if err != nil {
			return err
		}
		var value, last int64
		if err := r.Columns(&value, &last); err != nil {
			return err
		}
		if l.Token() <= last {
			return fmt.Errorf("token %d is not larger than the previous writer's %d", l.Token(), last)
		}
		return txn.BufferWrite([]*spanner.Mutation{spanner.Update("counters",
			[]string{"name", "value", "last_token"}, []any{"c", value + 1, l.Token()})})
	})
	return err
}

func TestMutualExclusionWithGuardedWrites(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx, db, setup := counterDatabase(t)
		checkGuardedIncrements(t, ctx, setup, 8, 6, func(i int) (*lease.Client, guardedWrite) {
			sc := emulator.Client(t, db)
			c := newClientWith(t, sc, lease.WithHolderID(fmt.Sprintf("worker-%d", i)))
			return c, func(ctx context.Context, l *lease.Lease) error { return guardedIncrement(ctx, sc, l) }
		})
	})
}

// guardedWrite increments the counter under l, fenced by l.
type guardedWrite func(ctx context.Context, l *lease.Lease) error

// checkGuardedIncrements has clients workers, each with the Client and the
// write newWorker gives it, acquire "counter" increments times and make one
// guarded increment under each lease. A lease may be lost under load (the
// emulator aborts all but one transaction at a time, so renewals can
// starve); then the guard must refuse its write. What must hold is that
// every accepted write counted once, in token order, and that most were
// accepted.
func checkGuardedIncrements(t *testing.T, ctx context.Context, sc *spanner.Client, clients, increments int, newWorker func(i int) (*lease.Client, guardedWrite)) {
	t.Helper()
	var (
		wg       sync.WaitGroup
		accepted atomic.Int64
	)
	errs := make(chan error, clients)
	for i := range clients {
		c, write := newWorker(i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range increments {
				l, err := c.Acquire(ctx, "counter")
				if err != nil {
					errs <- err
					return
				}
				err = write(l.Context(), l)
				switch {
				case err == nil:
					accepted.Add(1)
				case errors.Is(err, lease.ErrLeaseLost) || errors.Is(context.Cause(l.Context()), lease.ErrLeaseLost):
					t.Logf("worker %d token %d lost its lease; its write was refused: %v", i, l.Token(), err)
				default:
					errs <- fmt.Errorf("worker %d token %d: %w", i, l.Token(), err)
					return
				}
				if err := l.Release(ctx); err != nil && !errors.Is(err, lease.ErrLeaseLost) {
					errs <- fmt.Errorf("worker %d token %d: %w", i, l.Token(), err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	value, last := readCounter(t, ctx, sc)
	if value != accepted.Load() {
		t.Fatalf("counter = %d, but %d guarded increments were accepted", value, accepted.Load())
	}
	if last > int64(clients*increments) || value < int64(clients*increments/2) {
		t.Fatalf("counter %d, last token %d after %d acquisitions: tokens beyond the acquisitions, or most writes refused", value, last, clients*increments)
	}
}

func TestGuardRejectsALostLease(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t, counterDDL(t))
		sc := emulator.Client(t, db)
		_, err := sc.Apply(ctx, []*spanner.Mutation{spanner.Insert("counters", []string{"name", "value", "last_token"}, []any{"c", 0, 0})})
		fatalIf(t, err, "seed counter")
		// A renewal interval far away, so only Guard can notice the theft.
		a := newClientWith(t, sc, lease.WithTTL(time.Minute))
		l := mustAcquire(t, ctx, a, "counter")
		stealLease(t, ctx, db, "counter")

		if err := guardedIncrement(ctx, sc, l); !errors.Is(err, lease.ErrLeaseLost) {
			t.Fatalf("guarded write after the lease was taken: err = %v, want ErrLeaseLost", err)
		}
		if !errors.Is(context.Cause(l.Context()), lease.ErrLeaseLost) {
			t.Fatalf("after Guard saw the loss, context cause = %v, want ErrLeaseLost", context.Cause(l.Context()))
		}
		r, err := sc.Single().ReadRow(ctx, "counters", spanner.Key{"c"}, []string{"value"})
		fatalIf(t, err, "read counter")
		var value int64
		fatalIf(t, r.Column(0, &value), "decode")
		if value != 0 {
			t.Fatalf("counter = %d after a rejected write, want 0", value)
		}
	})
}

// stealLease does to the row what a rival's acquisition does after the
// holder's lease expired: the next token, under the rival's live session.
func stealLease(t *testing.T, ctx context.Context, db, name string) {
	t.Helper()
	sc := emulator.Client(t, db)
	_, err := sc.ReadWriteTransaction(ctx, func(ctx context.Context, txn *spanner.ReadWriteTransaction) error {
		_, err := txn.Update(ctx, testStatement(t,
			"UPDATE locks SET token = token + 1, session_id = 'thief', holder_id = 'thief' WHERE name = @name",
			"UPDATE locks SET token = token + 1, session_id = 'thief', holder_id = 'thief' WHERE name = $1",
			[]string{"name"}, map[string]any{"name": name}))
		if err != nil {
			return err
		}
		return txn.BufferWrite([]*spanner.Mutation{spanner.InsertOrUpdate("locks_sessions",
			[]string{"session_id", "holder_id", "ttl_ms", "renewed_at"}, []any{"thief", "thief", 60000, spanner.CommitTimestamp})})
	})
	fatalIf(t, err, "steal %s", name)
}
