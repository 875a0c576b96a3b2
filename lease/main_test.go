package lease_test

import (
	"context"
	"flag"
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
	// The fault enumeration's cases spend their time waiting on Spanner and
	// on expiries, each on its own database: they run wide. The other tests
	// time renewals closely, so at most timedTests of them run at once.
	flag.Parse()
	parallelSet := false
	flag.Visit(func(f *flag.Flag) { parallelSet = parallelSet || f.Name == "test.parallel" })
	if !parallelSet {
		_ = flag.Set("test.parallel", "12")
	}
	emulator.Main(m)
}

// timedTests bounds the tests other than the enumeration's cases that run
// at once.
var timedTests = make(chan struct{}, 8)

// testDialects are the dialects every test that reaches Spanner runs in:
// the same test, the same guarantees, on a database of each.
var testDialects = []lease.Dialect{lease.GoogleSQL, lease.PostgreSQL}

// eachDialect runs test once per dialect, as subtests named after it,
// side by side: each has its own database, and they spend their time
// waiting on Spanner and on expiries.
func eachDialect(t *testing.T, test func(t *testing.T)) {
	t.Helper()
	for _, d := range testDialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			timedTests <- struct{}{}
			defer func() { <-timedTests }()
			test(t)
		})
	}
}

// eachDialectInTurn is eachDialect for tests that change process-wide
// state (batch limits, the global tracer provider): one dialect at a time.
func eachDialectInTurn(t *testing.T, test func(t *testing.T)) {
	t.Helper()
	for _, d := range testDialects {
		t.Run(string(d), test)
	}
}

// dialectOf is the dialect of the eachDialect subtest t runs in.
func dialectOf(t testing.TB) lease.Dialect {
	for _, d := range testDialects {
		if strings.Contains(t.Name()+"/", "/"+string(d)+"/") {
			return d
		}
	}
	return lease.GoogleSQL
}

// inDialect picks a test's own SQL or DDL in the dialect t runs in.
func inDialect(t testing.TB, googleSQL, postgreSQL string) string {
	if dialectOf(t) == lease.PostgreSQL {
		return postgreSQL
	}
	return googleSQL
}

// testStatement is a test's own statement in the dialect t runs in, its
// parameters named in GoogleSQL (@name) and numbered in PostgreSQL ($1 is
// the first of names).
func testStatement(t testing.TB, googleSQL, postgreSQL string, names []string, params map[string]any) spanner.Statement {
	if dialectOf(t) != lease.PostgreSQL {
		return spanner.Statement{SQL: googleSQL, Params: params}
	}
	numbered := map[string]any{}
	for i, n := range names {
		numbered[fmt.Sprintf("p%d", i+1)] = params[n]
	}
	return spanner.Statement{SQL: postgreSQL, Params: numbered}
}

// newDatabase returns a fresh database, in the dialect t runs in, holding a
// lock table made from lease's DDL and then extra.
func newDatabase(t *testing.T, extra ...string) string {
	t.Helper()
	d := dialectOf(t)
	return emulator.DatabaseIn(t, string(d), append(d.DDL(table), extra...)...)
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
