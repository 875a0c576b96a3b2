package lease_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"cloud.google.com/go/spanner"
	sppb "cloud.google.com/go/spanner/apiv1/spannerpb"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// Guard refuses a transaction at repeatable read, where its read of the
// lease's row would not be checked at commit, and accepts one that asks
// for serializable on the same client.
func TestGuardRefusesRepeatableRead(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		sc := repeatableReadClient(t, db)
		c := newClientWith(t, sc)
		l := mustAcquire(t, ctx, c, "job")
		guardIn := func(opts spanner.TransactionOptions) error {
			_, err := sc.ReadWriteTransactionWithOptions(l.Context(), func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
				return l.Guard(ctx, tx)
			}, opts)
			return err
		}
		if err := guardIn(spanner.TransactionOptions{}); !errors.Is(err, lease.ErrNotSerializable) {
			t.Errorf("Guard in a transaction at the client's default, repeatable read: %v, want ErrNotSerializable", err)
		}
		fatalIf(t, guardIn(spanner.TransactionOptions{IsolationLevel: sppb.TransactionOptions_SERIALIZABLE}), "Guard in a serializable transaction")
		plain := emulator.Client(t, db)
		_, err := plain.ReadWriteTransaction(l.Context(), func(ctx context.Context, tx *spanner.ReadWriteTransaction) error { return l.Guard(ctx, tx) })
		fatalIf(t, err, "Guard on a client with Spanner's default")
		_, err = plain.ReadWriteTransactionWithOptions(l.Context(), func(ctx context.Context, tx *spanner.ReadWriteTransaction) error { return l.Guard(ctx, tx) },
			spanner.TransactionOptions{IsolationLevel: sppb.TransactionOptions_REPEATABLE_READ})
		if !errors.Is(err, lease.ErrNotSerializable) {
			t.Errorf("Guard in a transaction that asks for repeatable read: %v, want ErrNotSerializable", err)
		}
		if l.Context().Err() != nil {
			t.Errorf("a refused Guard ended the lease: %v", context.Cause(l.Context()))
		}
	})
}

// GuardSQL refuses a database/sql transaction at repeatable read, asked for
// in sql.TxOptions, by SET TRANSACTION or as the DSN's default, and accepts
// the default and an explicit serializable.
func TestGuardSQLRefusesRepeatableRead(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		c := newClient(t, db)
		l := mustAcquire(t, ctx, c, "job")
		guardIn := func(sdb *sql.DB, level sql.IsolationLevel) error {
			tx, err := sdb.BeginTx(l.Context(), &sql.TxOptions{Isolation: level})
			fatalIf(t, err, "BeginTx")
			defer func() { _ = tx.Rollback() }()
			return l.GuardSQL(l.Context(), tx)
		}
		plain := sqlDB(t, db)
		if err := guardIn(plain, sql.LevelRepeatableRead); !errors.Is(err, lease.ErrNotSerializable) {
			t.Errorf("GuardSQL in a transaction begun at repeatable read: %v, want ErrNotSerializable", err)
		}
		fatalIf(t, guardIn(plain, sql.LevelDefault), "GuardSQL at the default level")
		fatalIf(t, guardIn(plain, sql.LevelSerializable), "GuardSQL at serializable")
		tx, err := plain.BeginTx(l.Context(), nil)
		fatalIf(t, err, "BeginTx")
		_, err = tx.ExecContext(l.Context(), "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
		fatalIf(t, err, "SET TRANSACTION")
		if err := l.GuardSQL(l.Context(), tx); !errors.Is(err, lease.ErrNotSerializable) {
			t.Errorf("GuardSQL after SET TRANSACTION ISOLATION LEVEL REPEATABLE READ: %v, want ErrNotSerializable", err)
		}
		_ = tx.Rollback()
		rr := sqlDB(t, db+";isolation_level=repeatable_read")
		if err := guardIn(rr, sql.LevelDefault); !errors.Is(err, lease.ErrNotSerializable) {
			t.Errorf("GuardSQL on a connection that defaults to repeatable read: %v, want ErrNotSerializable", err)
		}
		fatalIf(t, guardIn(rr, sql.LevelSerializable), "GuardSQL asking for serializable on that connection")
		if l.Context().Err() != nil {
			t.Errorf("a refused GuardSQL ended the lease: %v", context.Cause(l.Context()))
		}
	})
}
