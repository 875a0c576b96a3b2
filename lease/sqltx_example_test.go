package lease_test

import (
	"context"
	"database/sql"
	"fmt"

	spannerdriver "github.com/googleapis/go-sql-spanner"

	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

func ExampleLease_GuardSQL() {
	ctx := context.Background()
	db := exampleDatabase()
	locks, _ := lease.NewClient(db, "locks")
	defer locks.Close()
	l, err := locks.Acquire(ctx, "reports")
	if err != nil {
		panic(err)
	}

	// The application's database/sql handle on the same database, through
	// Spanner's driver (import _ "github.com/googleapis/go-sql-spanner").
	sqlDB, err := sql.Open("spanner", db.DatabaseName())
	if err != nil {
		panic(err)
	}
	defer func() { _ = sqlDB.Close() }()

	// GuardSQL fences the write: if another holder has taken the lease, the
	// transaction cannot commit. RunTransaction retries it if Spanner
	// aborts it, GuardSQL included.
	err = spannerdriver.RunTransaction(l.Context(), sqlDB, nil, func(ctx context.Context, tx *sql.Tx) error {
		if err := l.GuardSQL(ctx, tx); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "INSERT OR UPDATE INTO reports (day, total, token) VALUES (@day, @total, @token)",
			sql.Named("day", "2026-11-23"), sql.Named("total", 42), sql.Named("token", l.Token()))
		return err
	})
	fmt.Println("written:", err == nil)
	// Output:
	// written: true
}
