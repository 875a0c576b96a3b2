package lease_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	spannerdriver "github.com/googleapis/go-sql-spanner"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// sqlDB opens db through Spanner's database/sql driver, as an application
// using database/sql (or an ORM on it) does; the emulator is the one
// SPANNER_EMULATOR_HOST names, which emulator.Main sets.
func sqlDB(t *testing.T, db string) *sql.DB {
	t.Helper()
	emulator.Shared(t)
	sdb, err := sql.Open("spanner", db)
	if err != nil {
		t.Fatalf("sql.Open: %v", err)
	}
	t.Cleanup(func() { _ = sdb.Close() })
	return sdb
}

// sqlGuardedIncrement is guardedIncrement through database/sql: GuardSQL,
// then a read and a write of the counter in the same transaction, retried
// by spannerdriver.RunTransaction when Spanner aborts it.
func sqlGuardedIncrement(ctx context.Context, t testing.TB, sdb *sql.DB, l *lease.Lease) error {
	return spannerdriver.RunTransaction(ctx, sdb, nil, func(ctx context.Context, tx *sql.Tx) error {
		if err := l.GuardSQL(ctx, tx); err != nil {
			return err
		}
		var value, last int64
		err := tx.QueryRowContext(ctx, inDialect(t,
			"SELECT value, last_token FROM counters WHERE name = 'c'",
			"SELECT value, last_token FROM counters WHERE name = 'c'")).Scan(&value, &last)
		if err != nil {
			return err
		}
		if l.Token() <= last {
			return fmt.Errorf("token %d is not larger than the previous writer's %d", l.Token(), last)
		}
		_, err = tx.ExecContext(ctx, inDialect(t,
			"UPDATE counters SET value = @value, last_token = @token WHERE name = 'c'",
			"UPDATE counters SET value = $1, last_token = $2 WHERE name = 'c'"), value+1, l.Token())
		return err
	})
}

// counterDatabase is a new database with the lock table and a counters
// table holding counter "c" at 0, and a Spanner client on it.
func counterDatabase(t *testing.T) (ctx context.Context, db string, sc *spanner.Client) {
	t.Helper()
	ctx = emulator.Context(t)
	db = newDatabase(t, counterDDL(t))
	sc = emulator.Client(t, db)
	seedCounter(t, ctx, sc)
	return ctx, db, sc
}

func seedCounter(t *testing.T, ctx context.Context, sc *spanner.Client) {
	t.Helper()
	_, err := sc.Apply(ctx, []*spanner.Mutation{spanner.Insert("counters", []string{"name", "value", "last_token"}, []any{"c", 0, 0})})
	fatalIf(t, err, "seed counter")
}

func readCounter(t *testing.T, ctx context.Context, sc *spanner.Client) (value, last int64) {
	t.Helper()
	r, err := sc.Single().ReadRow(ctx, "counters", spanner.Key{"c"}, []string{"value", "last_token"})
	fatalIf(t, err, "read counter")
	fatalIf(t, r.Columns(&value, &last), "decode counter")
	return value, last
}

func TestGuardSQLAcceptsTheHoldersWrite(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx, db, sc := counterDatabase(t)
		c := newClientWith(t, sc)
		l := mustAcquire(t, ctx, c, "counter")

		// A plain database/sql transaction, as an ORM opens one.
		tx, err := sqlDB(t, db).BeginTx(l.Context(), nil)
		fatalIf(t, err, "BeginTx")
		fatalIf(t, l.GuardSQL(l.Context(), tx), "GuardSQL while held")
		_, err = tx.ExecContext(l.Context(), inDialect(t,
			"UPDATE counters SET value = value + 1, last_token = @token WHERE name = 'c'",
			"UPDATE counters SET value = value + 1, last_token = $1 WHERE name = 'c'"), l.Token())
		fatalIf(t, err, "update")
		fatalIf(t, tx.Commit(), "commit")
		if value, last := readCounter(t, ctx, sc); value != 1 || last != l.Token() {
			t.Fatalf("counter %d, last token %d; want 1 and %d", value, last, l.Token())
		}
	})
}

func TestGuardSQLRejectsALostLease(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx, db, sc := counterDatabase(t)
		// A renewal interval far away, so only GuardSQL can notice the theft.
		a := newClientWith(t, sc, lease.WithTTL(time.Minute))
		l := mustAcquire(t, ctx, a, "counter")
		stealLease(t, ctx, db, "counter")

		if err := sqlGuardedIncrement(ctx, t, sqlDB(t, db), l); !errors.Is(err, lease.ErrLeaseLost) {
			t.Fatalf("guarded write after the lease was taken: err = %v, want ErrLeaseLost", err)
		}
		if !errors.Is(context.Cause(l.Context()), lease.ErrLeaseLost) {
			t.Fatalf("after GuardSQL saw the loss, context cause = %v, want ErrLeaseLost", context.Cause(l.Context()))
		}
		if value, _ := readCounter(t, ctx, sc); value != 0 {
			t.Fatalf("counter = %d after a rejected write, want 0", value)
		}
	})
}

func TestGuardSQLRejectsAnExpiredSession(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx, db, sc := counterDatabase(t)
		a := newClientWith(t, sc, lease.WithTTL(time.Minute))
		l := mustAcquire(t, ctx, a, "counter")
		// The row still names the lease, but Spanner says its session has
		// expired: what a rival sees after the holder stopped renewing.
		_, err := sc.ReadWriteTransaction(ctx, func(ctx context.Context, txn *spanner.ReadWriteTransaction) error {
			_, err := txn.Update(ctx, spanner.Statement{SQL: inDialect(t,
				"UPDATE locks_sessions SET ttl_ms = 1, renewed_at = TIMESTAMP '2000-01-01T00:00:00Z' WHERE TRUE",
				"UPDATE locks_sessions SET ttl_ms = 1, renewed_at = '2000-01-01T00:00:00Z'::timestamptz WHERE TRUE")})
			return err
		})
		fatalIf(t, err, "expire the session")

		if err := sqlGuardedIncrement(ctx, t, sqlDB(t, db), l); !errors.Is(err, lease.ErrLeaseLost) {
			t.Fatalf("guarded write after the session expired: err = %v, want ErrLeaseLost", err)
		}
		if value, _ := readCounter(t, ctx, sc); value != 0 {
			t.Fatalf("counter = %d after a rejected write, want 0", value)
		}
	})
}

func TestGuardSQLGuardsPermits(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx, db, sc := counterDatabase(t)
		a := newClientWith(t, sc, lease.WithTTL(time.Minute))
		fatalIf(t, a.SetPermits(ctx, "pool", 2), "SetPermits")
		p, err := a.TryAcquirePermit(ctx, "pool")
		fatalIf(t, err, "TryAcquirePermit")
		sdb := sqlDB(t, db)
		fatalIf(t, sqlGuardedIncrement(ctx, t, sdb, p), "guarded write under a held permit")

		// An operator takes the permit away: its token moves on.
		if _, err := a.ForceReleasePermit(ctx, "pool", permitSlot(t, ctx, a, p)); err != nil {
			t.Fatalf("ForceReleasePermit: %v", err)
		}
		if err := sqlGuardedIncrement(ctx, t, sdb, p); !errors.Is(err, lease.ErrLeaseLost) {
			t.Fatalf("guarded write after the permit was force-released: err = %v, want ErrLeaseLost", err)
		}
		if value, _ := readCounter(t, ctx, sc); value != 1 {
			t.Fatalf("counter = %d, want 1: only the write under the held permit", value)
		}
	})
}

// permitSlot finds the slot p holds in its semaphore.
func permitSlot(t *testing.T, ctx context.Context, c *lease.Client, p *lease.Lease) int64 {
	t.Helper()
	s, err := c.Semaphore(ctx, p.Name())
	fatalIf(t, err, "Semaphore")
	for _, h := range s.Holders {
		if h.Token == p.Token() {
			return h.Slot
		}
	}
	t.Fatalf("permit with token %d not among %+v", p.Token(), s.Holders)
	return 0
}

func TestMutualExclusionWithSQLGuardedWrites(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx, db, setup := counterDatabase(t)
		checkGuardedIncrements(t, ctx, setup, 4, 5, func(i int) (*lease.Client, guardedWrite) {
			c := newClient(t, db, lease.WithHolderID(fmt.Sprintf("worker-%d", i)))
			sdb := sqlDB(t, db)
			return c, func(ctx context.Context, l *lease.Lease) error { return sqlGuardedIncrement(ctx, t, sdb, l) }
		})
	})
}

// A rival that takes the lease after GuardSQL read its row, while the
// transaction is still open, keeps the guarded write from committing: the
// read is inside the transaction, and the driver's replay of an aborted
// transaction reads the row again and refuses to go on when it changed.
// (The emulator aborts the open transaction when the rival arrives; real
// Spanner makes the rival wait instead, and the guarded write commits
// first. Either order is serializable; what must never happen is the write
// committing after the rival did.)
func TestGuardSQLFencesARivalThatCommitsAfterItsRead(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx, db, sc := counterDatabase(t)
		a := newClientWith(t, sc, lease.WithTTL(time.Minute))
		l := mustAcquire(t, ctx, a, "counter")

		tx, err := sqlDB(t, db).BeginTx(ctx, nil)
		fatalIf(t, err, "BeginTx")
		defer func() { _ = tx.Rollback() }()
		fatalIf(t, l.GuardSQL(ctx, tx), "GuardSQL while held")
		stolen := make(chan struct{})
		go func() {
			defer close(stolen)
			stealLease(t, ctx, db, "counter")
		}()
		var rivalFirst bool
		select {
		case <-stolen:
			rivalFirst = true
		case <-time.After(2 * time.Second):
			// The rival waits for the open transaction, as on Spanner.
		}
		_, err = tx.ExecContext(ctx, "UPDATE counters SET value = value + 1 WHERE name = 'c'")
		if err == nil {
			err = tx.Commit()
		}
		<-stolen
		value, _ := readCounter(t, ctx, sc)
		t.Logf("rival committed first: %v; guarded write: %v; counter %d", rivalFirst, err, value)
		if rivalFirst && value != 0 {
			t.Fatalf("the guarded write committed after a rival took the lease (the rival committed while the transaction was open)")
		}
		if rivalFirst && !errors.Is(err, spannerdriver.ErrAbortedDueToConcurrentModification) {
			t.Fatalf("guarded write after the rival committed: err = %v, want ErrAbortedDueToConcurrentModification", err)
		}
		if !rivalFirst && (err != nil || value != 1) {
			t.Fatalf("the rival waited, but the guarded write failed (%v) or is missing (counter %d)", err, value)
		}
	})
}

// Once the lease has ended, GuardSQL in a transaction run under its
// Context says so: its error matches the Context's cause, not only the
// context.Canceled of its own statements.
func TestGuardSQLAfterTheLeaseEndedMatchesItsCause(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx, db, sc := counterDatabase(t)
		sdb := sqlDB(t, db)
		for _, c := range []struct {
			end  func(l *lease.Lease)
			want error
		}{
			{func(l *lease.Lease) { fatalIf(t, l.Release(ctx), "Release") }, lease.ErrReleased},
			{func(l *lease.Lease) {
				stealLease(t, ctx, db, "counter")
				// A renewal (every second at a 3s TTL) finds it taken.
				select {
				case <-l.Context().Done():
				case <-ctx.Done():
					t.Fatal("the keeper did not see the theft")
				}
			}, lease.ErrLeaseLost},
		} {
			a := newClientWith(t, sc, lease.WithTTL(3*time.Second))
			l := mustAcquire(t, ctx, a, "counter")
			tx, err := sdb.BeginTx(l.Context(), nil)
			fatalIf(t, err, "BeginTx")
			c.end(l)
			if err := l.GuardSQL(l.Context(), tx); !errors.Is(err, c.want) {
				t.Errorf("GuardSQL under the Context of a lease that ended with %v: %v, want it to match", c.want, err)
			}
			_ = tx.Rollback()
		}
	})
}
