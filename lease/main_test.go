package lease_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"google.golang.org/api/option"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

const table = "locks"

func TestMain(m *testing.M) {
	if os.Getenv(holderProcessEnv) != "" {
		runHolderProcess()
		return
	}
	emulator.Main(m)
}

// newDatabase returns a fresh database holding a lock table made from lease.DDL.
func newDatabase(t *testing.T) string {
	t.Helper()
	return emulator.Database(t, lease.DDL(table)...)
}

// newClient returns a lease.Client with its own spanner.Client, as a separate
// process would have; both are closed when the test ends.
func newClient(t *testing.T, db string, opts ...lease.Option) *lease.Client {
	t.Helper()
	return newClientWith(t, emulator.Client(t, db), opts...)
}

func newClientWith(t *testing.T, sc *spanner.Client, opts ...lease.Option) *lease.Client {
	t.Helper()
	opts = append([]lease.Option{lease.WithLogger(testLogger(t))}, opts...)
	c, err := lease.NewClient(sc, table, opts...)
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// spannerClient returns a spanner.Client with extra client options (for
// interceptors), closed at the end of the test.
func spannerClient(t *testing.T, db string, opts ...option.ClientOption) *spanner.Client {
	t.Helper()
	e := emulator.Shared(t)
	sc, err := e.NewClient(emulator.Context(t), db, opts...)
	if err != nil {
		t.Fatalf("spanner client: %v", err)
	}
	t.Cleanup(sc.Close)
	return sc
}

// testLogger sends a Client's logs to the test log, shown when a test fails.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func mustAcquire(t *testing.T, ctx context.Context, c *lease.Client, name string, opts ...lease.AcquireOption) *lease.Lease {
	t.Helper()
	l, err := c.TryAcquire(ctx, name, opts...)
	if err != nil {
		t.Fatalf("TryAcquire(%q): %v", name, err)
	}
	return l
}

// waitDone waits for a lease context to end, failing the test after
// 3s: more than the TTLs these tests use, so only a missing signal fails.
func waitDone(t *testing.T, ctx context.Context, what string) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(3 * time.Second):
		t.Fatalf("%s: not done after 3s", what)
	}
}

func fatalIf(t *testing.T, err error, format string, args ...any) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", fmt.Sprintf(format, args...), err)
	}
}
