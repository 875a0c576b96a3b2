package emulator_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"google.golang.org/grpc/codes"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
)

func TestMain(m *testing.M) { emulator.Main(m) }

const kvDDL = `CREATE TABLE KV (
	K  STRING(64) NOT NULL,
	V  STRING(MAX),
	Ts TIMESTAMP OPTIONS (allow_commit_timestamp = true),
) PRIMARY KEY (K)`

func TestDatabasesAreIndependent(t *testing.T) {
	start := time.Now()
	dbA := emulator.Database(t, kvDDL)
	t.Logf("CreateDatabase with one table took %v", time.Since(start))
	dbB := emulator.Database(t, kvDDL)
	if dbA == dbB {
		t.Fatalf("two databases got the same path %s", dbA)
	}
	a, b := emulator.Client(t, dbA), emulator.Client(t, dbB)
	ctx := emulator.Context(t)

	if _, err := a.Apply(ctx, []*spanner.Mutation{
		spanner.Insert("KV", []string{"K", "V"}, []any{"only-in-a", "x"}),
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Single().ReadRow(ctx, "KV", spanner.Key{"only-in-a"}, []string{"V"}); err != nil {
		t.Fatalf("row written to %s not readable there: %v", dbA, err)
	}
	_, err := b.Single().ReadRow(ctx, "KV", spanner.Key{"only-in-a"}, []string{"V"})
	if spanner.ErrCode(err) != codes.NotFound {
		t.Fatalf("row written to %s: reading it from %s gave %v, want NotFound", dbA, dbB, err)
	}
}

func TestReadWriteTransactionWithCommitTimestamp(t *testing.T) {
	db := emulator.Database(t, kvDDL)
	c := emulator.Client(t, db)
	ctx := emulator.Context(t)

	var now time.Time
	commitTS, err := c.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		row, err := tx.Query(ctx, spanner.Statement{SQL: "SELECT CURRENT_TIMESTAMP()"}).Next()
		if err != nil {
			return err
		}
		if err := row.Columns(&now); err != nil {
			return err
		}
		return tx.BufferWrite([]*spanner.Mutation{
			spanner.InsertOrUpdate("KV", []string{"K", "V", "Ts"}, []any{"k", "v", spanner.CommitTimestamp}),
		})
	})
	if err != nil {
		t.Fatal(err)
	}

	row, err := c.Single().ReadRow(ctx, "KV", spanner.Key{"k"}, []string{"Ts"})
	if err != nil {
		t.Fatal(err)
	}
	var ts time.Time
	if err := row.Columns(&ts); err != nil {
		t.Fatal(err)
	}
	if !ts.Equal(commitTS) {
		t.Errorf("stored commit timestamp %v, ReadWriteTransaction returned %v", ts, commitTS)
	}
	if now.IsZero() || now.After(commitTS) {
		t.Errorf("CURRENT_TIMESTAMP() = %v inside a transaction committed at %v", now, commitTS)
	}
	if d := time.Since(now); d < -time.Minute || d > time.Minute {
		t.Errorf("CURRENT_TIMESTAMP() = %v is %v away from the local clock", now, d)
	}
}

// TestDatabaseIsDroppedAtCleanup creates more databases, one per subtest,
// than an instance holds (100); it passes only if Database frees them.
func TestDatabaseIsDroppedAtCleanup(t *testing.T) {
	emulator.Shared(t) // skip or fail once, not 110 times
	for i := range 110 {
		t.Run(strconv.Itoa(i), func(t *testing.T) { emulator.Database(t, kvDDL) })
	}
}

func TestUpdateDDL(t *testing.T) {
	e := emulator.Shared(t)
	db := emulator.Database(t, kvDDL)
	ctx := emulator.Context(t)
	if err := e.UpdateDDL(ctx, db, "CREATE INDEX KVByV ON KV(V)"); err != nil {
		t.Fatal(err)
	}
	if err := e.UpdateDDL(ctx, e.Instance()+"/databases/", "CREATE INDEX X ON KV(V)"); err == nil {
		t.Error("UpdateDDL accepted a database path without a database ID")
	}
}

func TestBinaryHonoursEnv(t *testing.T) {
	t.Run("missing", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "no-such-emulator_main")
		t.Setenv("SPANNER_EMULATOR_BIN", missing)
		if _, err := emulator.Binary(); err == nil || !strings.Contains(err.Error(), missing) {
			t.Fatalf("Binary() error = %v, want one naming %s", err, missing)
		}
	})
	t.Run("not executable", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "emulator_main")
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Setenv("SPANNER_EMULATOR_BIN", p)
		if _, err := emulator.Binary(); err == nil || !strings.Contains(err.Error(), p) {
			t.Fatalf("Binary() error = %v, want one naming %s", err, p)
		}
	})
	t.Run("used", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "emulator_main")
		if err := os.WriteFile(p, nil, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Setenv("SPANNER_EMULATOR_BIN", p)
		if got, err := emulator.Binary(); err != nil || got != p {
			t.Fatalf("Binary() = %q, %v; want %q", got, err, p)
		}
	})
}

func TestStartReportsEmulatorOutputOnFailure(t *testing.T) {
	p := filepath.Join(t.TempDir(), "emulator_main")
	script := "#!/bin/sh\necho 'bind: no luck today' >&2\nexit 3\n"
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := emulator.Start(emulator.Context(t), emulator.Options{Binary: p})
	if err == nil || !strings.Contains(err.Error(), "no luck today") || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("Start error = %v, want the exit status and the emulator's output", err)
	}
}

// startPrivate starts an emulator besides the shared one, stopped at cleanup.
func startPrivate(t *testing.T) *emulator.Emulator {
	t.Helper()
	emulator.Shared(t) // same skip-or-fail policy as every other test
	start := time.Now()
	e, err := emulator.Start(emulator.Context(t), emulator.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Start took %v", time.Since(start))
	t.Cleanup(func() { _ = e.Stop() })
	return e
}

func TestStopIsIdempotentAndFreesThePort(t *testing.T) {
	e := startPrivate(t)
	if err := e.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := e.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	conn, err := net.DialTimeout("tcp", e.Host(), time.Second)
	if err == nil {
		_ = conn.Close()
		t.Fatalf("%s still accepts connections after Stop", e.Host())
	}
}

func TestExternalStopLeavesEmulatorRunning(t *testing.T) {
	own := startPrivate(t)
	ext, err := emulator.External(emulator.Context(t), "http://"+own.Host())
	if err != nil {
		t.Fatal(err) // also covers reusing the instance Start created
	}
	if ext.Host() != own.Host() || ext.Instance() != own.Instance() {
		t.Fatalf("External sees %s %s, want %s %s", ext.Host(), ext.Instance(), own.Host(), own.Instance())
	}
	if err := ext.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := own.CreateDatabase(emulator.Context(t)); err != nil {
		t.Fatalf("emulator unusable after Stop of an External view of it: %v", err)
	}
}

// TestNewClientIgnoresEnvHost checks that NewClient reaches its own emulator
// whatever SPANNER_EMULATOR_HOST says (Main points it at the shared one).
func TestNewClientIgnoresEnvHost(t *testing.T) {
	e := startPrivate(t)
	for _, env := range []string{os.Getenv("SPANNER_EMULATOR_HOST"), ""} {
		t.Run("SPANNER_EMULATOR_HOST="+env, func(t *testing.T) {
			t.Setenv("SPANNER_EMULATOR_HOST", env)
			ctx := emulator.Context(t)
			db, err := e.CreateDatabase(ctx, kvDDL)
			if err != nil {
				t.Fatal(err)
			}
			c, err := e.NewClient(ctx, db)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Apply(ctx, []*spanner.Mutation{spanner.Insert("KV", []string{"K"}, []any{"k"})}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestConcurrentReadWriteTransactions pins down what t.Parallel relies on:
// the emulator runs one read-write transaction at a time per database
// (aborting others), but transactions on different databases run side by
// side. Each transaction reads and buffers a write, then waits (bounded) for
// the other to get that far before committing.
func TestConcurrentReadWriteTransactions(t *testing.T) {
	t.Run("different databases", func(t *testing.T) {
		dbA, dbB := emulator.Database(t, kvDDL), emulator.Database(t, kvDDL)
		p := runPair(t, emulator.Client(t, dbA), emulator.Client(t, dbB))
		if p.attempts != [2]int32{1, 1} || p.overlapped != [2]bool{true, true} {
			t.Errorf("transactions on different databases did not run concurrently: %+v", p)
		}
	})
	t.Run("same database, different rows", func(t *testing.T) {
		db := emulator.Database(t, kvDDL)
		runPair(t, emulator.Client(t, db), emulator.Client(t, db)) // aborts and retries; only logged
	})
}

type pairResult struct {
	attempts   [2]int32 // bodies run per transaction; >1 means aborted
	overlapped [2]bool  // saw the other transaction in flight
	elapsed    time.Duration
}

func runPair(t *testing.T, a, b *spanner.Client) pairResult {
	ctx := emulator.Context(t)
	const wait = 2 * time.Second
	arrived := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
	var once [2]sync.Once
	var attempts [2]atomic.Int32
	var overlapped [2]atomic.Bool
	errs := make([]error, 2)

	start := time.Now()
	var wg sync.WaitGroup
	for i, c := range []*spanner.Client{a, b} {
		wg.Go(func() {
			key := "k" + strconv.Itoa(i)
			_, errs[i] = c.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
				attempts[i].Add(1)
				if _, err := tx.ReadRow(ctx, "KV", spanner.Key{key}, []string{"V"}); err != nil && spanner.ErrCode(err) != codes.NotFound {
					return err
				}
				if err := tx.BufferWrite([]*spanner.Mutation{spanner.InsertOrUpdate("KV", []string{"K"}, []any{key})}); err != nil {
					return err
				}
				once[i].Do(func() { close(arrived[i]) })
				select {
				case <-arrived[1-i]:
					overlapped[i].Store(true)
				case <-time.After(wait):
				case <-ctx.Done():
					return ctx.Err()
				}
				return nil
			})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("transaction %d: %v", i, err)
		}
	}
	p := pairResult{elapsed: time.Since(start).Round(time.Millisecond)}
	for i := range 2 {
		p.attempts[i], p.overlapped[i] = attempts[i].Load(), overlapped[i].Load()
	}
	t.Logf("both committed after %v; attempts %v; saw the other in flight %v", p.elapsed, p.attempts, p.overlapped)
	return p
}

func BenchmarkStart(b *testing.B) {
	emulator.Shared(b)
	for b.Loop() {
		e, err := emulator.Start(emulator.Context(b), emulator.Options{})
		if err != nil {
			b.Fatal(err)
		}
		if err := e.Stop(); err != nil {
			b.Fatal(err)
		}
	}
}
