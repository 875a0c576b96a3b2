// Package leasetest gives an application's tests a lock table on the Cloud
// Spanner emulator, so code that takes leases is tested against the real
// thing, with no emulator plumbing and no fake:
//
//	func TestNightlyReport(t *testing.T) {
//		db, locks := leasetest.New(t)
//		// db and locks are what the application gets from spanner.NewClient
//		// and lease.NewClient; both are closed, and the database dropped,
//		// when the test ends.
//	}
//
// New starts the official emulator (emulator_main, from the Debian package
// google-cloud-cli-spanner-emulator or gcloud's cloud-spanner-emulator
// component; SPANNER_EMULATOR_BIN names another) once per test binary and
// shares it between tests, each of which gets its own database; or it uses
// the emulator SPANNER_EMULATOR_HOST names. Without one, tests calling New
// are skipped with the reason, except under CI=true, where they fail: a CI
// run that cannot reach Spanner must not pass by skipping.
//
// The emulator runs one read-write transaction at a time, aborting and
// retrying others, and this process's Spanner clients must not use
// multiplexed sessions, which emulators before 1.5.38 do not serve: New sets
// GOOGLE_CLOUD_SPANNER_MULTIPLEXED_SESSIONS=false for the process. From
// cloud.google.com/go/spanner v1.88.0 multiplexed sessions are mandatory, so
// with such an emulator the tests need v1.87.0 or earlier.
package leasetest

import (
	"fmt"
	"sync"
	"testing"

	"cloud.google.com/go/spanner"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// DefaultTable is the lock table New creates unless WithTable names another.
const DefaultTable = "locks"

// Option configures New.
type Option func(*config)

type config struct {
	dialect   lease.Dialect
	table     string
	ddl       []string
	leaseOpts []lease.Option
}

// WithDialect picks the database's dialect: lease.GoogleSQL (the default) or
// lease.PostgreSQL.
func WithDialect(d lease.Dialect) Option { return func(c *config) { c.dialect = d } }

// WithTable names the lock table (default DefaultTable), for code under test
// that expects its own name.
func WithTable(name string) Option { return func(c *config) { c.table = name } }

// WithDDL adds the application's own schema, in the database's dialect,
// applied after the lock table's: the tables its guarded writes go to.
func WithDDL(statements ...string) Option {
	return func(c *config) { c.ddl = append(c.ddl, statements...) }
}

// WithLeaseOptions passes options to lease.NewClient (a short WithTTL makes
// expiry tests quick).
func WithLeaseOptions(opts ...lease.Option) Option {
	return func(c *config) { c.leaseOpts = append(c.leaseOpts, opts...) }
}

// database is what Connect needs to reach a database New made.
type database struct {
	emu   *emulator.Emulator
	path  string
	table string
}

// databases maps the spanner.Clients New and Connect return to their
// database, for Connect.
var databases sync.Map // *spanner.Client -> database

// New creates a database of its own for t on the emulator, holding the lock
// table, and returns a spanner.Client for it and a lease.Client on the
// table. At the end of the test both are closed (ending every lease still
// held) and the database is dropped. It skips t when no emulator can be
// found or started (it fails t under CI=true).
func New(t testing.TB, opts ...Option) (*spanner.Client, *lease.Client) {
	t.Helper()
	cfg := config{dialect: lease.GoogleSQL, table: DefaultTable}
	for _, o := range opts {
		o(&cfg)
	}
	dialect, ok := map[lease.Dialect]string{lease.GoogleSQL: "GOOGLE_STANDARD_SQL", lease.PostgreSQL: "POSTGRESQL"}[cfg.dialect]
	if !ok {
		t.Fatalf("leasetest.New: WithDialect(%q): want lease.GoogleSQL or lease.PostgreSQL", cfg.dialect)
	}
	e := emulator.OnDemand(t)
	path := e.TestDatabase(t, dialect, append(cfg.dialect.DDL(cfg.table), cfg.ddl...)...)
	return connect(t, database{emu: e, path: path, table: cfg.table}, cfg.leaseOpts)
}

// Connect returns new clients for the database of db, a spanner.Client that
// New or Connect returned: what another process of the application would
// have, with a session of its own, for tests of contention, expiry and
// failover. They are closed at the end of t.
func Connect(t testing.TB, db *spanner.Client, opts ...lease.Option) (*spanner.Client, *lease.Client) {
	t.Helper()
	v, _ := databases.Load(db)
	d, ok := v.(database)
	if !ok {
		t.Fatalf("leasetest.Connect: %s was not made by leasetest.New or Connect", db.DatabaseName())
	}
	return connect(t, d, opts)
}

func connect(t testing.TB, d database, opts []lease.Option) (*spanner.Client, *lease.Client) {
	t.Helper()
	sc := d.emu.TestClient(t, d.path)
	databases.Store(sc, d)
	t.Cleanup(func() { databases.Delete(sc) })
	lc, err := lease.NewClient(sc, d.table, opts...)
	if err != nil {
		t.Fatalf("leasetest: %v", fmt.Errorf("lease.NewClient: %w", err))
	}
	// Registered after the spanner.Client's Close, so it runs before it:
	// closing the lease.Client releases its leases through that client.
	t.Cleanup(func() {
		if err := lc.Close(); err != nil {
			// Its leases expire within their TTL, and the database goes anyway.
			t.Logf("leasetest: closing the lease.Client: %v", err)
		}
	})
	return sc, lc
}
