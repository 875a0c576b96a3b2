package lease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// exampleDatabase stands for the spanner.Client of your application
// (spanner.NewClient), on a database with the lock table "locks" and, for
// the Guard example, a table of reports.
func exampleDatabase() *spanner.Client {
	ddl := append(lease.DDL("locks"), "CREATE TABLE reports (day STRING(10) NOT NULL, total INT64, token INT64) PRIMARY KEY (day)")
	return emulator.ExampleClient(ddl...)
}

func ExampleDDL() {
	// Apply these with your own migration tool, or let Terraform's
	// spannerlock_table resource do it.
	for _, stmt := range lease.DDL("locks") {
		fmt.Println(strings.TrimSpace(stmt[:strings.Index(stmt, "(")]))
	}
	// Output:
	// CREATE TABLE `locks`
	// CREATE TABLE `locks_sessions`
	// CREATE TABLE `locks_permits`
	// CREATE TABLE `locks_waiters`
}

func ExampleClient_Acquire() {
	ctx := context.Background()
	db := exampleDatabase()
	locks, err := lease.NewClient(db, "locks", lease.WithTTL(10*time.Second))
	if err != nil {
		panic(err)
	}
	defer locks.Close() // releases whatever is still held

	l, err := locks.Acquire(ctx, "nightly-report") // waits while another holds it
	if err != nil {
		panic(err)
	}
	fmt.Println("holding", l.Name(), "with token", l.Token())
	// Do the work under l.Context(): it ends if the lease is lost.
	if err := l.Release(ctx); err != nil {
		panic(err)
	}
	l, err = locks.Acquire(ctx, "nightly-report")
	if err != nil {
		panic(err)
	}
	fmt.Println("again, with token", l.Token())
	// Output:
	// holding nightly-report with token 1
	// again, with token 2
}

func ExampleClient_TryAcquire() {
	ctx := context.Background()
	db := exampleDatabase()
	a, _ := lease.NewClient(db, "locks", lease.WithHolderID("replica-a"))
	defer a.Close()
	b, _ := lease.NewClient(db, "locks", lease.WithHolderID("replica-b"))
	defer b.Close()

	if _, err := a.TryAcquire(ctx, "cron"); err != nil {
		panic(err)
	}
	_, err := b.TryAcquire(ctx, "cron")
	var held *lease.HeldError
	if errors.As(err, &held) {
		fmt.Println("not acquired: held by", held.Holder.HolderID, "with token", held.Holder.Token)
	}
	fmt.Println(errors.Is(err, lease.ErrNotAcquired))
	// Output:
	// not acquired: held by replica-a with token 1
	// true
}

func ExampleLease_Guard() {
	ctx := context.Background()
	db := exampleDatabase()
	locks, _ := lease.NewClient(db, "locks")
	defer locks.Close()
	l, err := locks.Acquire(ctx, "reports")
	if err != nil {
		panic(err)
	}
	// Guard fences the write: if another holder has taken the lease, the
	// transaction cannot commit.
	_, err = db.ReadWriteTransaction(l.Context(), func(ctx context.Context, txn *spanner.ReadWriteTransaction) error {
		if err := l.Guard(ctx, txn); err != nil {
			return err
		}
		return txn.BufferWrite([]*spanner.Mutation{spanner.InsertOrUpdate("reports",
			[]string{"day", "total", "token"}, []any{"2026-11-23", 42, l.Token()})})
	})
	fmt.Println("written:", err == nil)
	// Output:
	// written: true
}

func ExampleClient_Holder() {
	ctx := context.Background()
	db := exampleDatabase()
	locks, _ := lease.NewClient(db, "locks", lease.WithHolderID("scheduler-1"))
	defer locks.Close()
	if _, err := locks.Holder(ctx, "scheduler"); errors.Is(err, lease.ErrNoHolder) {
		fmt.Println("nobody holds it")
	}
	if _, err := locks.Acquire(ctx, "scheduler", lease.WithPayload([]byte("10.0.0.7:8080"))); err != nil {
		panic(err)
	}
	h, err := locks.Holder(ctx, "scheduler")
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s holds it (token %d), reachable at %s\n", h.HolderID, h.Token, h.Payload)
	// Output:
	// nobody holds it
	// scheduler-1 holds it (token 1), reachable at 10.0.0.7:8080
}

func ExampleClient_Campaign() {
	db := exampleDatabase()
	locks, _ := lease.NewClient(db, "locks", lease.WithHolderID("replica-a"))
	defer locks.Close()

	ctx, stop := context.WithCancel(context.Background())
	err := locks.Campaign(ctx, "scheduler", lease.LeaderCallbacks{
		OnStartedLeading: func(ctx context.Context, l *lease.Lease) {
			fmt.Println("leading with token", l.Token())
			stop() // here: step down at once; a real leader works until ctx ends
		},
		OnStoppedLeading: func() { fmt.Println("stopped leading") },
	})
	fmt.Println("Campaign returned", err)
	// Output:
	// leading with token 1
	// stopped leading
	// Campaign returned <nil>
}

func ExampleClient_AcquirePermit() {
	ctx := context.Background()
	db := exampleDatabase()
	locks, _ := lease.NewClient(db, "locks")
	defer locks.Close()
	// Declare the capacity, or let Terraform's spannerlock_semaphore do it.
	if err := locks.SetPermits(ctx, "migrations", 2); err != nil {
		panic(err)
	}
	for range 2 {
		p, err := locks.AcquirePermit(ctx, "migrations") // waits while 2 are held
		if err != nil {
			panic(err)
		}
		fmt.Println("permit with token", p.Token())
	}
	_, err := locks.TryAcquirePermit(ctx, "migrations")
	fmt.Println(err)
	// Output:
	// permit with token 1
	// permit with token 2
	// lease: not acquired: all 2 permits of "migrations" are held
}

func ExampleClient_RunOnce() {
	ctx := context.Background()
	db := exampleDatabase()
	locks, _ := lease.NewClient(db, "locks")
	defer locks.Close()
	slot := time.Date(2026, 11, 23, 3, 0, 0, 0, time.UTC) // the 03:00 run
	for _, replica := range []string{"replica-a", "replica-b"} {
		ran, err := locks.RunOnce(ctx, "settle-fees", slot, func(ctx context.Context) error {
			fmt.Println(replica, "settles the fees")
			return nil
		})
		fmt.Println(replica, "ran:", ran, err)
	}
	// Output:
	// replica-a settles the fees
	// replica-a ran: true <nil>
	// replica-b ran: false <nil>
}

func ExampleClient_AcquireWorkerID() {
	ctx := context.Background()
	db := exampleDatabase()
	a, _ := lease.NewClient(db, "locks")
	defer a.Close()
	b, _ := lease.NewClient(db, "locks")
	defer b.Close()
	for _, c := range []*lease.Client{a, b} {
		w, err := c.AcquireWorkerID(ctx, "order-ids", 1024)
		if err != nil {
			panic(err)
		}
		fmt.Println("worker ID", w.ID())
	}
	// Output:
	// worker ID 0
	// worker ID 1
}

func ExampleDialect_DDL() {
	// For a PostgreSQL-dialect database; lease.DDL is GoogleSQL's.
	for _, stmt := range lease.PostgreSQL.DDL("locks") {
		fmt.Println(strings.TrimSpace(stmt[:strings.Index(stmt, "(")]))
	}
	// Output:
	// CREATE TABLE "locks"
	// CREATE TABLE "locks_sessions"
	// CREATE TABLE "locks_permits"
	// CREATE TABLE "locks_waiters"
}

func ExampleClient_AcquireShared() {
	ctx := context.Background()
	db := exampleDatabase()
	reader1, _ := lease.NewClient(db, "locks", lease.WithHolderID("reader-1"))
	defer reader1.Close()
	reader2, _ := lease.NewClient(db, "locks", lease.WithHolderID("reader-2"))
	defer reader2.Close()
	writer, _ := lease.NewClient(db, "locks", lease.WithHolderID("writer"))
	defer writer.Close()

	// Many readers hold the name together (a Client holds a name once,
	// shared or not: leases are not re-entrant).
	r1, err := reader1.AcquireShared(ctx, "catalog")
	if err != nil {
		panic(err)
	}
	r2, err := reader2.AcquireShared(ctx, "catalog")
	if err != nil {
		panic(err)
	}
	fmt.Println("readers hold tokens", r1.Token(), "and", r2.Token())
	// A writer waits for them; readers that come after it wait for it.
	_, err = writer.TryAcquire(ctx, "catalog")
	fmt.Println("writer while readers hold it:", errors.Is(err, lease.ErrNotAcquired))
	_ = r1.Release(ctx)
	_ = r2.Release(ctx)
	w, err := writer.Acquire(ctx, "catalog")
	if err != nil {
		panic(err)
	}
	fmt.Println("writer holds token", w.Token())
	// Output:
	// readers hold tokens 1 and 2
	// writer while readers hold it: true
	// writer holds token 3
}

func ExampleClient_AcquireAll() {
	ctx := context.Background()
	db := exampleDatabase()
	locks, _ := lease.NewClient(db, "locks")
	defer locks.Close()

	// Both accounts or neither, in one transaction: callers that name them
	// in the other order cannot deadlock with this one.
	set, err := locks.AcquireAll(ctx, "account-42", "account-7")
	if err != nil {
		panic(err)
	}
	for _, l := range set.Leases() {
		fmt.Println("holding", l.Name(), "with token", l.Token())
	}
	// Do the transfer under set.Context(), guarding each write with its
	// lease's Guard; then let both go together.
	if err := set.Release(ctx); err != nil {
		panic(err)
	}
	// Output:
	// holding account-42 with token 1
	// holding account-7 with token 1
}
