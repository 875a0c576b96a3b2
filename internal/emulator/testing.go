package emulator

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
)

const (
	// mainStartTimeout bounds Main's start-up; a healthy emulator needs well
	// under a second.
	mainStartTimeout = time.Minute
	// contextTimeout is Context's default budget per test.
	contextTimeout = 2 * time.Minute
	// deadlineMargin leaves time, before the -timeout panic, for a failing
	// call to be reported.
	deadlineMargin = 5 * time.Second
	// dropTimeout bounds the clean-up drop; it takes milliseconds unless the
	// emulator is gone, when the admin client would retry for much longer.
	dropTimeout = 5 * time.Second
)

// shared is the package's emulator, set once by Main before any test runs.
var shared struct {
	ran bool
	emu *Emulator
	err error // why emu is nil
}

// Main is for TestMain, so a whole test package shares one emulator:
//
//	func TestMain(m *testing.M) { emulator.Main(m) }
//
// It adopts SPANNER_EMULATOR_HOST if set, else starts an emulator and sets
// SPANNER_EMULATOR_HOST to it, so code under test that builds its own spanner
// clients reaches it too. If neither works, tests calling Shared skip with
// the reason, or fail when CI=true. It stops what it started after the tests,
// also on SIGINT/SIGTERM, and exits with the tests' status.
func Main(m *testing.M) {
	os.Exit(Run(m))
}

// Run is Main for a TestMain with work of its own after the tests (removing
// a binary it built): it returns the tests' status instead of exiting.
func Run(m *testing.M) int {
	// Code under test (the provider) builds its own clients too.
	QuietClientBanner()
	ctx, cancel := context.WithTimeout(context.Background(), mainStartTimeout)
	shared.emu, shared.err = startShared(ctx)
	cancel()
	shared.ran = true

	if shared.emu == nil {
		// Examples cannot skip themselves; outside CI, say why they do not
		// run. Under CI=true they run and fail, as tests do.
		if !CI() {
			flag.Parse()
			_ = flag.Set("test.skip", "^Example")
			fmt.Fprintf(os.Stderr, "emulator: skipping examples: %v\n", shared.err)
		}
		return m.Run()
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go stopOnSignal(sigs, shared.emu)
	code := m.Run()
	signal.Stop(sigs)
	closeExampleClients()
	if err := shared.emu.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "emulator: %v\n", err)
	}
	return code
}

func startShared(ctx context.Context) (*Emulator, error) {
	if host := os.Getenv("SPANNER_EMULATOR_HOST"); host != "" {
		e, err := External(ctx, host)
		if err != nil {
			return nil, fmt.Errorf("using SPANNER_EMULATOR_HOST=%s: %w", host, err)
		}
		return e, nil
	}
	e, err := Start(ctx, Options{})
	if err != nil {
		return nil, err
	}
	if err := os.Setenv("SPANNER_EMULATOR_HOST", e.Host()); err != nil {
		_ = e.Stop()
		return nil, fmt.Errorf("exporting SPANNER_EMULATOR_HOST: %w", err)
	}
	return e, nil
}

// stopOnSignal kills the emulator before an interrupted test binary exits;
// the emulator has its own process group, so a terminal's Ctrl-C never
// reaches it directly.
func stopOnSignal(sigs chan os.Signal, e *Emulator) {
	sig := <-sigs
	_ = e.Stop()
	code := 1
	if s, ok := sig.(syscall.Signal); ok {
		code = 128 + int(s) // the shell's convention for death by signal
	}
	os.Exit(code)
}

// Shared returns the package's emulator so tests need no set-up of their own.
// Without one the test is skipped with the reason, except under CI=true,
// where a missing emulator is a failure, never a silent skip.
func Shared(t testing.TB) *Emulator {
	t.Helper()
	if !shared.ran {
		t.Fatal("emulator.Main did not run: add func TestMain(m *testing.M) { emulator.Main(m) } to this package")
	}
	return usable(t, shared.emu, shared.err)
}

// onDemand is the emulator of a process whose tests did not run Main: the
// first OnDemand starts it, or adopts SPANNER_EMULATOR_HOST, once.
var onDemand struct {
	once sync.Once
	emu  *Emulator
	err  error
}

// OnDemand is Shared for test packages without Main (those of applications
// using leasetest): the package's emulator if Main ran, else one this
// process starts at its first call, or adopts from SPANNER_EMULATOR_HOST,
// and shares with every later call. Nothing stops a started one before the
// process exits; the kernel kills it then (see Start). Without an emulator
// the test is skipped with the reason, or fails when CI=true.
func OnDemand(t testing.TB) *Emulator {
	t.Helper()
	if shared.ran {
		return usable(t, shared.emu, shared.err)
	}
	onDemand.once.Do(func() {
		QuietClientBanner()
		ctx, cancel := context.WithTimeout(context.Background(), mainStartTimeout)
		defer cancel()
		onDemand.emu, onDemand.err = startShared(ctx)
	})
	return usable(t, onDemand.emu, onDemand.err)
}

// usable skips or fails t when there is no emulator, and returns it.
func usable(t testing.TB, e *Emulator, err error) *Emulator {
	t.Helper()
	if err != nil {
		if CI() {
			t.Fatalf("Spanner emulator unavailable (failing, not skipping, because CI=true): %v", err)
		}
		t.Skipf("Spanner emulator unavailable, skipping: %v", err)
	}
	return e
}

// Database gives the test a fresh database on the shared emulator, with ddl
// applied, so tests cannot see each other's data. It returns the full path.
// The database is dropped at cleanup (after clients made later by Client are
// closed), because an instance holds at most 100 databases.
func Database(t testing.TB, ddl ...string) string {
	t.Helper()
	return Shared(t).TestDatabase(t, "GOOGLE_STANDARD_SQL", ddl...)
}

// PostgreSQLDatabase is Database for a PostgreSQL-dialect database; ddl is
// in that dialect.
func PostgreSQLDatabase(t testing.TB, ddl ...string) string {
	t.Helper()
	return Shared(t).TestDatabase(t, "POSTGRESQL", ddl...)
}

// DatabaseIn is Database or PostgreSQLDatabase by dialect, spelled as
// Spanner's API spells it ("GOOGLE_STANDARD_SQL" or "POSTGRESQL"), for tests
// that run once per dialect; ddl is in that dialect.
func DatabaseIn(t testing.TB, dialect string, ddl ...string) string {
	t.Helper()
	return Shared(t).TestDatabase(t, dialect, ddl...)
}

// TestDatabase is CreateDatabaseIn for a test: it fails the test on error
// and drops the database at cleanup (after clients made later by
// TestClient are closed), because an instance holds at most 100 databases.
func (e *Emulator) TestDatabase(t testing.TB, dialect string, ddl ...string) string {
	t.Helper()
	db, err := e.CreateDatabaseIn(Context(t), dialect, ddl...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// t.Context is already canceled here.
		ctx, cancel := context.WithTimeout(context.Background(), dropTimeout)
		defer cancel()
		if err := e.dropDatabase(ctx, db); err != nil {
			t.Error(err)
		}
	})
	return db
}

// Client returns a spanner.Client for db on the shared emulator. It is closed
// in t.Cleanup, so it never outlives the emulator (which would leave it
// retrying for a minute).
func Client(t testing.TB, db string) *spanner.Client {
	t.Helper()
	return Shared(t).TestClient(t, db)
}

// TestClient is NewClient for a test: it fails the test on error and closes
// the client at cleanup.
func (e *Emulator) TestClient(t testing.TB, db string) *spanner.Client {
	t.Helper()
	c, err := e.NewClient(Context(t), db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// Context bounds calls against the emulator, because the spanner client
// retries Unavailable for 60 s even without a deadline: if the emulator dies
// the test fails with an error instead of hanging. The deadline is 2 minutes
// from now, or 5 s before the test binary's -timeout, whichever is earlier.
// Like t.Context, it is canceled before Cleanup functions run.
func Context(t testing.TB) context.Context {
	t.Helper()
	deadline := time.Now().Add(contextTimeout)
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if td, ok := d.Deadline(); ok && td.Add(-deadlineMargin).Before(deadline) {
			deadline = td.Add(-deadlineMargin)
		}
	}
	ctx, cancel := context.WithDeadline(t.Context(), deadline)
	t.Cleanup(cancel)
	return ctx
}

// exampleClients are the clients ExampleClient made, closed before the
// emulator stops.
var exampleClients struct {
	sync.Mutex
	list []*spanner.Client
}

// ExampleClient is for testable examples, which have no testing.T: it
// returns a spanner.Client for a fresh database on the package's emulator
// with ddl applied, as an application gets one from spanner.NewClient. It
// panics if there is no emulator (Main skips examples then, outside CI).
func ExampleClient(ddl ...string) *spanner.Client {
	if !shared.ran || shared.emu == nil {
		panic(fmt.Sprintf("emulator: no emulator for examples: %v", shared.err))
	}
	ctx, cancel := context.WithTimeout(context.Background(), contextTimeout)
	defer cancel()
	db, err := shared.emu.CreateDatabase(ctx, ddl...)
	if err != nil {
		panic(err)
	}
	c, err := shared.emu.NewClient(ctx, db)
	if err != nil {
		panic(err)
	}
	exampleClients.Lock()
	defer exampleClients.Unlock()
	exampleClients.list = append(exampleClients.list, c)
	return c
}

func closeExampleClients() {
	exampleClients.Lock()
	defer exampleClients.Unlock()
	for _, c := range exampleClients.list {
		c.Close()
	}
}

// CI reports whether CI=true, under which a test that cannot run must fail
// rather than skip.
func CI() bool {
	ci, _ := strconv.ParseBool(os.Getenv("CI"))
	return ci
}

// ClosedPort returns a loopback host:port where nothing listens (free a
// moment ago and closed again): the "unreachable endpoint" of tests, which
// never dial anything but loopback.
func ClosedPort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}
