package leasetest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"google.golang.org/grpc/codes"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
	"github.com/spannerlock/terraform-provider-spannerlock/lease/leasetest"
)

// No TestMain: applications' test packages have none either, and New must
// work without one.

// timeout bounds each test's calls, so a dead emulator fails a test instead
// of hanging it.
func timeout(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func reportsDDL(d lease.Dialect) string {
	if d == lease.PostgreSQL {
		return `CREATE TABLE reports (day varchar NOT NULL, token bigint NOT NULL, PRIMARY KEY (day))`
	}
	return `CREATE TABLE reports (day STRING(MAX) NOT NULL, token INT64 NOT NULL) PRIMARY KEY (day)`
}

func eachDialect(t *testing.T, test func(t *testing.T, d lease.Dialect)) {
	for _, d := range []lease.Dialect{lease.GoogleSQL, lease.PostgreSQL} {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			test(t, d)
		})
	}
}

func TestNewGivesALockTableAndTheApplicationsSchema(t *testing.T) {
	eachDialect(t, func(t *testing.T, d lease.Dialect) {
		ctx := timeout(t)
		// The application's table is in the dialect's own DDL: it could only
		// be created in a database of that dialect.
		db, locks := leasetest.New(t, leasetest.WithDialect(d), leasetest.WithDDL(reportsDDL(d)))
		l, err := locks.TryAcquire(ctx, "nightly-report")
		if err != nil {
			t.Fatalf("TryAcquire: %v", err)
		}
		_, err = db.ReadWriteTransaction(l.Context(), func(ctx context.Context, txn *spanner.ReadWriteTransaction) error {
			if err := l.Guard(ctx, txn); err != nil {
				return err
			}
			return txn.BufferWrite([]*spanner.Mutation{spanner.Insert("reports", []string{"day", "token"}, []any{"2026-11-26", l.Token()})})
		})
		if err != nil {
			t.Fatalf("guarded write: %v", err)
		}
		var token int64
		r, err := db.Single().ReadRow(ctx, "reports", spanner.Key{"2026-11-26"}, []string{"token"})
		if err == nil {
			err = r.Column(0, &token)
		}
		if err != nil || token != l.Token() {
			t.Fatalf("report row: token %d, err %v; want token %d", token, err, l.Token())
		}
	})
}

func TestEachTestHasItsOwnDatabase(t *testing.T) {
	ctx := timeout(t)
	dbA, a := leasetest.New(t)
	dbB, b := leasetest.New(t)
	if dbA.DatabaseName() == dbB.DatabaseName() {
		t.Fatalf("two calls of New share database %s", dbA.DatabaseName())
	}
	if _, err := a.TryAcquire(ctx, "job"); err != nil {
		t.Fatalf("TryAcquire in A: %v", err)
	}
	// Held in A, free in B.
	if _, err := b.TryAcquire(ctx, "job"); err != nil {
		t.Fatalf("TryAcquire in B of a name held in A: %v", err)
	}
}

func TestWithTableAndLeaseOptions(t *testing.T) {
	ctx := timeout(t)
	db, locks := leasetest.New(t, leasetest.WithTable("app_locks"), leasetest.WithLeaseOptions(lease.WithTTL(3*time.Second), lease.WithHolderID("worker-a")))
	if locks.TTL() != 3*time.Second || locks.HolderID() != "worker-a" {
		t.Fatalf("lease.Client has TTL %v, holder %q; want the options passed", locks.TTL(), locks.HolderID())
	}
	if _, err := locks.TryAcquire(ctx, "job"); err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	r, err := db.Single().ReadRow(ctx, "app_locks", spanner.Key{"job"}, []string{"holder_id"})
	if err != nil {
		t.Fatalf("reading the lease's row in app_locks: %v", err)
	}
	var holder string
	if err := r.Column(0, &holder); err != nil || holder != "worker-a" {
		t.Fatalf("row holder %q (%v), want worker-a", holder, err)
	}
}

func TestConnectIsAnotherProcess(t *testing.T) {
	eachDialect(t, func(t *testing.T, d lease.Dialect) {
		ctx := timeout(t)
		db, a := leasetest.New(t, leasetest.WithDialect(d))
		other, b := leasetest.Connect(t, db, lease.WithHolderID("replica-b"))
		if other == db || other.DatabaseName() != db.DatabaseName() {
			t.Fatalf("Connect gave %p for %s, want a new client of %s", other, other.DatabaseName(), db.DatabaseName())
		}
		l, err := a.TryAcquire(ctx, "scheduler")
		if err != nil {
			t.Fatalf("A: %v", err)
		}
		if _, err := b.TryAcquire(ctx, "scheduler"); !errors.Is(err, lease.ErrNotAcquired) {
			t.Fatalf("B while A holds: err = %v, want ErrNotAcquired", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("A release: %v", err)
		}
		lb, err := b.TryAcquire(ctx, "scheduler")
		if err != nil {
			t.Fatalf("B after A released: %v", err)
		}
		if lb.Token() <= l.Token() {
			t.Fatalf("B's token %d is not above A's %d", lb.Token(), l.Token())
		}
	})
}

func TestCleanupClosesClientsAndDropsTheDatabase(t *testing.T) {
	ctx := timeout(t)
	var (
		held *lease.Lease
		path string
	)
	t.Run("user", func(t *testing.T) {
		db, locks := leasetest.New(t)
		path = db.DatabaseName()
		var err error
		if held, err = locks.TryAcquire(ctx, "job"); err != nil {
			t.Fatalf("TryAcquire: %v", err)
		}
	})
	if held == nil {
		t.Fatal("the inner test did not acquire")
	}
	if cause := context.Cause(held.Context()); !errors.Is(cause, lease.ErrClosed) {
		t.Fatalf("after the test, its lease's context cause = %v, want ErrClosed", cause)
	}
	// The same emulator New used, reached directly.
	sc, err := emulator.OnDemand(t).NewClient(ctx, path)
	if err == nil {
		defer sc.Close()
		err = sc.Single().Query(ctx, spanner.Statement{SQL: "SELECT 1"}).Do(func(*spanner.Row) error { return nil })
	}
	if spanner.ErrCode(err) != codes.NotFound {
		t.Fatalf("querying %s after its test ended: %v, want NotFound (dropped)", path, err)
	}
}

// helperEnv makes the test binary run TestHelperNew as a stand-in for an
// application's test.
const helperEnv = "LEASETEST_HELPER"

func TestHelperNew(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		t.Skip("run by TestWithoutAnEmulator and TestUsesSpannerEmulatorHost")
	}
	ctx := timeout(t)
	_, locks := leasetest.New(t)
	if _, err := locks.TryAcquire(ctx, "job"); err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
}

// runHelper runs TestHelperNew in a child with env (and without the
// emulator variables of this process), returning its output and exit error.
func runHelper(t *testing.T, env ...string) (string, error) {
	ctx := timeout(t)
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperNew$", "-test.v", "-test.count=1")
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "SPANNER_EMULATOR_HOST" && k != "SPANNER_EMULATOR_BIN" && k != "CI" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, append(env, helperEnv+"=1")...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestWithoutAnEmulator(t *testing.T) {
	missing := "SPANNER_EMULATOR_BIN=" + t.TempDir() + "/emulator_main"
	t.Run("skips naming the package", func(t *testing.T) {
		out, err := runHelper(t, missing)
		if err != nil || !strings.Contains(out, "--- SKIP: TestHelperNew") || !strings.Contains(out, "google-cloud-cli-spanner-emulator") {
			t.Fatalf("without an emulator: exit %v, want a skip naming google-cloud-cli-spanner-emulator; output:\n%s", err, out)
		}
	})
	t.Run("fails under CI", func(t *testing.T) {
		out, err := runHelper(t, missing, "CI=true")
		if err == nil || !strings.Contains(out, "--- FAIL: TestHelperNew") {
			t.Fatalf("without an emulator under CI=true: exit %v, want a failure; output:\n%s", err, out)
		}
	})
	t.Run("an emulator host that does not answer", func(t *testing.T) {
		out, err := runHelper(t, missing, "SPANNER_EMULATOR_HOST="+emulator.ClosedPort(t), "CI=true")
		if err == nil || !strings.Contains(out, "--- FAIL: TestHelperNew") {
			t.Fatalf("with SPANNER_EMULATOR_HOST on a closed port under CI=true: exit %v, want a failure; output:\n%s", err, out)
		}
	})
}

func TestUsesSpannerEmulatorHost(t *testing.T) {
	// The child cannot start an emulator of its own (SPANNER_EMULATOR_BIN
	// names nothing), so it passes only by using the one named by
	// SPANNER_EMULATOR_HOST.
	e := emulator.OnDemand(t)
	out, err := runHelper(t, "SPANNER_EMULATOR_BIN="+t.TempDir()+"/emulator_main", "SPANNER_EMULATOR_HOST="+e.Host(), "CI=true")
	if err != nil || !strings.Contains(out, "--- PASS: TestHelperNew") {
		t.Fatalf("with SPANNER_EMULATOR_HOST=%s: exit %v, want a pass; output:\n%s", e.Host(), err, out)
	}
}
