package leasetest_test

import (
	"context"
	"testing"

	"cloud.google.com/go/spanner"

	"github.com/spannerlock/terraform-provider-spannerlock/lease"
	"github.com/spannerlock/terraform-provider-spannerlock/lease/leasetest"
)

// An application's test of code that takes a lease and fences its write
// with it. It runs as a test, not as this example.
func ExampleNew() {
	testNightlyReport := func(t *testing.T) {
		db, locks := leasetest.New(t,
			leasetest.WithDialect(lease.PostgreSQL),
			leasetest.WithDDL(`CREATE TABLE reports (day varchar PRIMARY KEY, token bigint NOT NULL)`))

		// The code under test, given the clients it would get in production.
		l, err := locks.TryAcquire(t.Context(), "nightly-report")
		if err != nil {
			t.Fatal(err)
		}
		_, err = db.ReadWriteTransaction(l.Context(), func(ctx context.Context, txn *spanner.ReadWriteTransaction) error {
			if err := l.Guard(ctx, txn); err != nil {
				return err
			}
			return txn.BufferWrite([]*spanner.Mutation{spanner.Insert("reports", []string{"day", "token"}, []any{"2026-11-26", l.Token()})})
		})
		if err != nil {
			t.Fatal(err)
		}

		// Another replica of the application, with its own clients.
		_, rival := leasetest.Connect(t, db)
		if _, err := rival.TryAcquire(t.Context(), "nightly-report"); err == nil {
			t.Fatal("two replicas hold the report lease")
		}
	}
	_ = testNightlyReport
}
