package provider

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/spanner"
	database "cloud.google.com/go/spanner/admin/database/apiv1"
	"github.com/hashicorp/terraform-plugin-log/tflog"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// connectionSettings are what every connection shares besides credentials.
type connectionSettings struct {
	// endpoint is the host:port the clients dial.
	endpoint string
	// timeout bounds each request (request_timeout).
	timeout   time.Duration
	userAgent string
}

func (s connectionSettings) key() string {
	return fmt.Sprintf("%s\x00%s\x00%s", s.endpoint, s.timeout, s.userAgent)
}

// connections are the Spanner clients for one set of connection settings
// (endpoint and credentials). Clients are created on first use, so a plan
// that touches no table dials nothing, and are then reused by every resource
// and data source: a Terraform run may read many tables of one database.
type connections struct {
	// target names where the clients connect, for error messages.
	target   string
	settings connectionSettings
	opts     []option.ClientOption
	// lastFailure is the most recent failed RPC attempt, which says why a
	// request that ran out of time failed: the Spanner client retries
	// some errors until the deadline and then reports only the deadline.
	lastFailure atomic.Pointer[string]

	mu sync.Mutex
	// reached is set once a connection to the endpoint succeeded.
	reached  bool
	admin    *database.DatabaseAdminClient
	clients  map[string]*spanner.Client
	dialects map[string]locktable.Dialect
	// schemaChanges serializes this process's schema changes per
	// database: Spanner rejects one while another is running, and
	// Terraform changes several tables of a database at once.
	schemaChanges map[string]*sync.Mutex
}

func newConnections(target string, settings connectionSettings, opts []option.ClientOption) *connections {
	c := &connections{
		target:        target,
		settings:      settings,
		clients:       map[string]*spanner.Client{},
		dialects:      map[string]locktable.Dialect{},
		schemaChanges: map[string]*sync.Mutex{},
	}
	c.opts = append(opts,
		option.WithUserAgent(settings.userAgent),
		option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(c.observeUnary)),
		option.WithGRPCDialOption(grpc.WithChainStreamInterceptor(c.observeStream)))
	return c
}

// request bounds one request to Spanner by request_timeout and gives it the
// provider's log subsystems for db and table ("" when not about one table).
func (c *connections) request(ctx context.Context, db, table string) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(withLogging(ctx, db, table), c.settings.timeout, errRequestTimeout)
}

// errRequestTimeout is the cause of a request's end at request_timeout.
var errRequestTimeout = errors.New("request_timeout ran out")

// operationTimeout is the cause of the end of an operation at its timeout
// (a table's timeouts.create, say), which may come before request_timeout.
type operationTimeout struct {
	op      string
	timeout time.Duration
}

func (t *operationTimeout) Error() string {
	return fmt.Sprintf("timeouts.%s (%s) ran out", t.op, t.timeout)
}

// Spanner returns the data client for db, the full database path, and db's
// dialect, after making sure the endpoint answers. The dialect is read
// once per database, in the same query either dialect answers.
func (c *connections) Spanner(ctx context.Context, db string) (*spanner.Client, locktable.Dialect, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.reach(ctx); err != nil {
		return nil, "", fmt.Errorf("database %s: %w", db, err)
	}
	sc := c.clients[db]
	if sc == nil {
		pool := spanner.DefaultSessionPoolConfig
		// Terraform runs a handful of reads per table; the default of 100
		// sessions opened up front would cost more than all of them.
		pool.MinOpened = 1
		cfg := spanner.ClientConfig{
			SessionPoolConfig: pool,
			// Built-in metrics probe for a GCP environment and export to Cloud
			// Monitoring from a process that lives for one Terraform command.
			DisableNativeMetrics: true,
		}
		// The client outlives this request (it is cached), so it must not be
		// torn down when the request's context ends.
		var err error
		if sc, err = spanner.NewClientWithConfig(context.WithoutCancel(ctx), db, cfg, c.opts...); err != nil {
			return nil, "", fmt.Errorf("connecting to %s on %s: %w", db, c.target, err)
		}
		c.clients[db] = sc
	}
	d, known := c.dialects[db]
	if !known {
		var err error
		if d, err = locktable.DatabaseDialect(ctx, sc); err != nil {
			return nil, "", c.failure(ctx, db, err)
		}
		tflog.SubsystemDebug(ctx, logSpanner, "Read the database dialect", map[string]any{"dialect": string(d)})
		c.dialects[db] = d
	}
	return sc, d, nil
}

// Admin returns the database admin client, which runs DDL.
func (c *connections) Admin(ctx context.Context) (*database.DatabaseAdminClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.admin != nil {
		return c.admin, nil
	}
	if err := c.reach(ctx); err != nil {
		return nil, err
	}
	admin, err := database.NewDatabaseAdminClient(context.WithoutCancel(ctx), c.opts...)
	if err != nil {
		return nil, fmt.Errorf("creating the Spanner database admin client for %s: %w", c.target, err)
	}
	c.admin = admin
	return admin, nil
}

// schemaChange returns the lock that serializes schema changes of db.
func (c *connections) schemaChange(db string) *sync.Mutex {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.schemaChanges[db]
	if m == nil {
		m = &sync.Mutex{}
		c.schemaChanges[db] = m
	}
	return m
}

// reach opens and closes one TCP connection to the endpoint before the
// first client is made. The Spanner client retries a refused connection
// until its deadline and then reports only the deadline; this says at once
// that nothing listens there, and why. Through a proxy it would test the
// wrong connection, so it is skipped there. Callers hold c.mu.
func (c *connections) reach(ctx context.Context) error {
	if c.reached {
		return nil
	}
	proxy, err := proxyFor(&http.Request{URL: &url.URL{Scheme: "https", Host: c.settings.endpoint}})
	if err == nil && proxy == nil {
		d := net.Dialer{Timeout: c.settings.timeout}
		conn, err := d.DialContext(ctx, "tcp", c.settings.endpoint)
		if err != nil {
			tflog.SubsystemDebug(ctx, logSpanner, "Cannot connect to Spanner", map[string]any{"endpoint": c.settings.endpoint, "error": err.Error()})
			return fmt.Errorf("cannot connect to %s: %w", c.target, err)
		}
		_ = conn.Close()
	}
	c.reached = true
	return nil
}

// proxyFor is how the Spanner clients find their proxy (gRPC reads the same
// environment variables); tests replace it.
var proxyFor = http.ProxyFromEnvironment

// failure explains a failed request on db: where it went, and when it ran
// out of time, what the endpoint last answered.
func (c *connections) failure(ctx context.Context, db string, err error) error {
	var op *operationTimeout
	if errors.As(context.Cause(ctx), &op) {
		return fmt.Errorf("%s on %s: no answer before %v: %w", db, c.target, op, err)
	}
	if errors.Is(context.Cause(ctx), errRequestTimeout) || ctx.Err() == nil && spanner.ErrCode(err) == codes.DeadlineExceeded {
		msg := fmt.Sprintf("%s on %s: no answer within request_timeout (%s)", db, c.target, c.settings.timeout)
		if last := c.lastFailure.Load(); last != nil {
			msg += "; the last failed call said: " + *last
		}
		return fmt.Errorf("%s: %w", msg, err)
	}
	return fmt.Errorf("%s on %s: %w", db, c.target, err)
}

// observe logs a failed RPC attempt (the Spanner client retries some of
// them, so one request may log several) and remembers it for failure.
func (c *connections) observe(ctx context.Context, method string, err error) {
	if err == nil || errors.Is(err, io.EOF) {
		return
	}
	s := status.Convert(err)
	if s.Code() == codes.Canceled {
		return
	}
	msg := fmt.Sprintf("%s: %s: %s", method, s.Code(), s.Message())
	c.lastFailure.Store(&msg)
	tflog.SubsystemDebug(ctx, logSpanner, "Spanner call failed", map[string]any{
		"method": method, "code": s.Code().String(), "error": s.Message(),
	})
}

func (c *connections) observeUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	c.observe(ctx, method, err)
	return err
}

func (c *connections) observeStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		c.observe(ctx, method, err)
		return nil, err
	}
	return &observedStream{ClientStream: s, ctx: ctx, method: method, c: c}, nil
}

// observedStream reports the errors of a streaming call, which arrive with
// its messages.
type observedStream struct {
	grpc.ClientStream
	ctx    context.Context
	method string
	c      *connections
}

func (s *observedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	s.c.observe(s.ctx, s.method, err)
	return err
}

// forget closes and drops the data client for db, for callers that know the
// database is going away (tests drop theirs).
func (c *connections) forget(db string) {
	c.mu.Lock()
	sc := c.clients[db]
	delete(c.clients, db)
	delete(c.dialects, db)
	c.mu.Unlock()
	if sc != nil {
		sc.Close()
	}
}

// connectionCache keeps one connections per distinct provider configuration.
// The framework configures the provider for every Terraform command (and
// tests run many commands against one provider value), so clients are keyed
// by their settings rather than created per Configure.
type connectionCache struct {
	mu    sync.Mutex
	byKey map[string]*connections
}

// lookup returns the connections for key, or nil.
func (cc *connectionCache) lookup(key string) *connections {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.byKey[key]
}

// get returns the connections for key, creating them with create.
func (cc *connectionCache) get(key string, create func() *connections) *connections {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if c := cc.byKey[key]; c != nil {
		return c
	}
	if cc.byKey == nil {
		cc.byKey = map[string]*connections{}
	}
	c := create()
	cc.byKey[key] = c
	return c
}

// forget closes every data client for db.
func (cc *connectionCache) forget(db string) {
	cc.mu.Lock()
	all := make([]*connections, 0, len(cc.byKey))
	for _, c := range cc.byKey {
		all = append(all, c)
	}
	cc.mu.Unlock()
	for _, c := range all {
		c.forget(db)
	}
}

// call runs fn against db's data client under request_timeout, with db's
// dialect, and explains its failure with the endpoint and the database, or
// with what is wrong with table (see explainTable).
func (d *providerData) call(ctx context.Context, db, table string, fn func(context.Context, *spanner.Client, locktable.Dialect) error) error {
	conns, err := d.connections()
	if err != nil {
		return err
	}
	ctx, cancel := conns.request(ctx, db, table)
	defer cancel()
	sc, dialect, err := conns.Spanner(ctx, db)
	if err != nil {
		return err
	}
	if err := fn(ctx, sc, dialect); err != nil {
		if explained := explainTable(ctx, sc, dialect, db, table, err); explained != err {
			return explained
		}
		return conns.failure(ctx, db, err)
	}
	return nil
}

// tableError says what is wrong with a lock table that a request on it
// could not find: it does not exist, (PostgreSQL) exists in another letter
// case, or is at an older schema version than the lease package needs. It
// replaces the SQL error, which says less.
type tableError struct {
	db, table string
	// live is the table's spelling when it exists in another letter case.
	live string
	// outdated is set when the table is not at the latest schema version.
	outdated *locktable.VersionError
	err      error
}

func (e *tableError) Error() string {
	switch {
	case e.live != "":
		return misspelledTable(e.db, e.table, e.live)
	case e.outdated != nil:
		return outdatedTable(e.outdated, e.err)
	}
	return missingTable(e.db, e.table)
}

// outdatedTable says that a table is at an older schema version than the
// lease package of this provider reads, and how to migrate it, instead of
// err, Spanner's complaint about a column or table that version lacks. A
// table that drifted from every version keeps err, which may say more than
// the drift does.
func outdatedTable(old *locktable.VersionError, err error) string {
	cmd := "spannerlock init"
	if old.Table != cliDefaultTable {
		cmd = "spannerlock --table " + old.Table + " init"
	}
	if old.Version == 0 {
		return fmt.Sprintf("%v (table %s satisfies no schema version: it has drifted; the drift attribute of a "+
			"spannerlock_table resource for it says what differs, and `%s` repairs what it can)", err, old.Table, cmd)
	}
	return fmt.Sprintf("table %s is at schema version %d; this provider needs %d: run `%s` or apply spannerlock_table, "+
		"which migrates it in place", old.Table, old.Version, locktable.Latest, cmd)
}

// cliDefaultTable is the table the spannerlock CLI uses without --table.
const cliDefaultTable = "locks"

// missingTable says that table does not exist, and how to create it.
func missingTable(db, table string) string {
	return fmt.Sprintf("Lock table %s does not exist in %s. Create it with a spannerlock_table resource and set "+
		"table = spannerlock_table.<name>.name, so that Terraform creates the table first; or check the spelling of "+
		"table and database.", table, db)
}

func (e *tableError) Unwrap() error { return e.err }

// explainTable turns err, a failed request on table, into a *tableError when
// table does not exist, exists in another letter case than a
// PostgreSQL-dialect database's SQL finds (Spanner says no more than that
// "LOCKS" does not exist while locks does), or is not at the latest schema
// version (Spanner names a column it lacks). Otherwise it returns err.
func explainTable(ctx context.Context, sc *spanner.Client, d locktable.Dialect, db, table string, err error) error {
	if code := spanner.ErrCode(err); table == "" || code != codes.NotFound && code != codes.InvalidArgument {
		return err
	}
	ins, inspectErr := d.Inspect(ctx, sc, table)
	switch {
	case inspectErr != nil:
		return err
	case !ins.Exists:
		return &tableError{db: db, table: table, err: err}
	}
	if live, misspelled := ins.Misspelled(); misspelled {
		return &tableError{db: db, table: table, live: live, err: err}
	}
	var old *locktable.VersionError
	if errors.As(ins.Outdated(), &old) {
		return &tableError{db: db, table: table, outdated: old, err: err}
	}
	return err
}

// explainTable is explainTable for a failure outside call.
func (d *providerData) explainTable(ctx context.Context, db, table string, err error) error {
	conns, connErr := d.connections()
	if connErr != nil {
		return err
	}
	ctx, cancel := conns.request(ctx, db, table)
	defer cancel()
	sc, dialect, connErr := conns.Spanner(ctx, db)
	if connErr != nil {
		return err
	}
	return explainTable(ctx, sc, dialect, db, table, err)
}

// misspelledTable says why table, which exists as live, cannot be used.
func misspelledTable(db, table, live string) string {
	return fmt.Sprintf("Lock table %s exists in %s as %s. This is a PostgreSQL-dialect database, which resolves the "+
		"quoted names spannerlock's SQL uses exactly, so neither this provider nor an application given table %s "+
		"finds it. Set table = %q, or table = spannerlock_table.<name>.name.", live, db, live, table, live)
}

// withLease runs fn with a lease.Client on table for reads and declarations.
// It never acquires, so it holds no session and its Close does no I/O.
func (d *providerData) withLease(ctx context.Context, db, table string, fn func(context.Context, *lease.Client) error) error {
	return d.call(ctx, db, table, func(ctx context.Context, sc *spanner.Client, _ locktable.Dialect) error {
		lc, err := lease.NewClient(sc, table)
		if err != nil {
			return err
		}
		defer func() { _ = lc.Close() }()
		return fn(ctx, lc)
	})
}

// inspect reads the live schema of table in db.
func (d *providerData) inspect(ctx context.Context, db, table string) (locktable.Inspection, error) {
	var ins locktable.Inspection
	err := d.call(ctx, db, table, func(ctx context.Context, sc *spanner.Client, dialect locktable.Dialect) error {
		var err error
		ins, err = dialect.Inspect(ctx, sc, table)
		if err == nil {
			logInspection(ctx, ins)
		}
		return err
	})
	return ins, err
}

// databaseGone reports an error saying the database (or its instance) does
// not exist, which means no table in it does either.
func databaseGone(err error) bool {
	return spanner.ErrCode(err) == codes.NotFound
}
