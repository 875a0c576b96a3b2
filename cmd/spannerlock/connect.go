package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"cloud.google.com/go/spanner"
	"google.golang.org/api/option"
	"google.golang.org/grpc/codes"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

var databasePattern = regexp.MustCompile(`^projects/[^/]+/instances/[^/]+/databases/[^/]+$`)

// diagnoseTimeout bounds the schema read that explains a failure.
const diagnoseTimeout = 10 * time.Second

// defaultReadTimeout bounds the reads of holder, status and the first read of
// elect --observe: the Spanner client retries an unreachable server for a
// minute and more without one.
const defaultReadTimeout = 30 * time.Second

// readTimeoutFlag registers --timeout for commands that only read. A read
// is tried once whatever the timeout, so 0, which for the commands that
// wait means "try once, as --try" (SPANNERLOCK_TIMEOUT=0 is set for them
// too), means the default here.
func readTimeoutFlag(fs *flag.FlagSet) *readTimeout {
	d := &readTimeout{defaultReadTimeout}
	durationVar(fs, &d.d, "timeout", defaultReadTimeout,
		"give up with exit status 1 if Spanner has not answered within this long (0: the default)")
	return d
}

// readTimeout is --timeout of a command that only reads.
type readTimeout struct{ d time.Duration }

// get is the timeout, the default for 0.
func (t *readTimeout) get() time.Duration {
	if t.d == 0 {
		return defaultReadTimeout
	}
	return t.d
}

// read runs one read against Spanner under the timeout, ending early at a
// stopping signal, and explains its failure.
func (a *app) read(c *conn, timeout time.Duration, fn func(ctx context.Context) error) error {
	ctx, end := a.sigs.interruptible(c.ctx)
	err := c.readWithin(ctx, timeout, fn)
	if sig := end(); sig != nil {
		return interrupted(sig)
	}
	return err
}

// readWithin runs one read against Spanner under the timeout and explains
// its failure; one that ctx ended is returned as it is.
func (c *conn) readWithin(ctx context.Context, timeout time.Duration, fn func(ctx context.Context) error) error {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := fn(rctx)
	switch {
	case err == nil:
		return nil
	case outage(ctx) != nil:
		return outage(ctx)
	case ctx.Err() != nil:
		return err
	case deadlinePassed(rctx):
		return c.health.noAnswer(" within --timeout "+formatDuration(timeout), err)
	}
	return c.explain(err)
}

// conn is a lease Client on the configured table.
type conn struct {
	db, table string
	spanner   *spanner.Client
	lease     *lease.Client
	log       *slog.Logger
	// health is how the endpoint has been answering.
	health *health
	// ctx is where the command's work runs: it ends, with an *outageError
	// as its cause, when Spanner stops answering (see outageWatch).
	ctx     context.Context
	cancel  context.CancelFunc
	outages *outageWatch
	// interrupted is the app's: a stopping signal ended the run.
	interrupted *bool
}

// checkSettings says what to do about a missing or malformed global flag.
func (a *app) checkSettings() error {
	g := a.global
	switch {
	case g.database == "":
		return usageError("no database configured: pass --database projects/P/instances/I/databases/D or set %s", envDatabase)
	case !databasePattern.MatchString(g.database):
		return usageError("--database %q is not a database path like projects/P/instances/I/databases/D", g.database)
	case g.ttl < lease.MinTTL || g.ttl > lease.MaxTTL:
		return usageError("--ttl %s is outside [%s, %s]", g.ttl, lease.MinTTL, lease.MaxTTL)
	case g.maxOutage <= 0:
		return usageError("--max-outage %s must be positive", g.maxOutage)
	case g.poll < minPollInterval:
		return usageError("--poll-interval %s is below the minimum, %s: every waiter reads Spanner once per interval", g.poll, minPollInterval)
	}
	if err := locktable.ValidateTableName(g.table); err != nil {
		return usageError("--table: %v", err)
	}
	return nil
}

// logger logs to stderr, warnings only unless --verbose, each line with its
// time (cron and CI logs have none of their own), as text or, with
// --log-format json, one JSON object per line for a log collector.
func (a *app) logger() *slog.Logger {
	level := slog.LevelWarn
	if a.global.verbose {
		level = slog.LevelDebug
	}
	opts := &slog.HandlerOptions{Level: level}
	if a.global.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(a.stderr, opts))
	}
	return slog.New(slog.NewTextHandler(a.stderr, opts))
}

// connect opens a Spanner client and a lease Client on the table, once a
// TCP connection to Spanner's endpoint succeeded. Nothing is read or
// written until a command uses them.
func (a *app) connect() (*conn, error) {
	return a.connectWithin(0)
}

// connectWithin is connect for a command with a time limit (when timeout
// is positive): it bounds the connection, and c.ctx ends at it.
func (a *app) connectWithin(timeout time.Duration) (c *conn, err error) {
	if err := a.checkSettings(); err != nil {
		return nil, err
	}
	if err := a.startTelemetry(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(a.ctx)
	if timeout > 0 {
		ctx, cancel = context.WithTimeout(a.ctx, timeout)
	}
	defer func() {
		if err != nil {
			cancel()
		}
	}()
	ep := a.endpoint()
	if err := reach(ctx, ep); err != nil {
		return nil, err
	}
	h := &health{ep: ep, connected: time.Now()}
	useEmulatorSettings()
	logger := a.logger()
	opts := []lease.Option{
		lease.WithTTL(a.global.ttl),
		lease.WithPollInterval(a.global.poll),
		lease.WithLogger(logger),
	}
	if a.global.holderID != "" {
		opts = append(opts, lease.WithHolderID(a.global.holderID))
	}
	// The Spanner client logs its whole configuration when it starts, and
	// little else: noise on a command's stderr, also with --verbose.
	clientLog := log.New(io.Discard, "", 0)
	var clientOpts []option.ClientOption
	for _, o := range h.dialOptions() {
		clientOpts = append(clientOpts, option.WithGRPCDialOption(o))
	}
	sc, err := spanner.NewClientWithConfig(a.ctx, a.global.database, spanner.ClientConfig{
		// One process, a few leases: one session to start with, not 100.
		SessionPoolConfig: spanner.SessionPoolConfig{MinOpened: 1},
		Logger:            clientLog,
		// Built-in metrics look for a GCP environment and export to Cloud
		// Monitoring from a background goroutine: not for a short-lived command.
		DisableNativeMetrics: true,
	}, clientOpts...)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", a.global.database, err)
	}
	lc, err := lease.NewClient(sc, a.global.table, opts...)
	if err != nil {
		sc.Close()
		return nil, usageError("%v", err)
	}
	c = &conn{db: a.global.database, table: a.global.table, spanner: sc, lease: lc, log: logger, health: h, cancel: cancel,
		interrupted: &a.interrupted}
	c.ctx, c.outages = watchOutages(ctx, h, a.global.maxOutage)
	return c, nil
}

// useEmulatorSettings turns multiplexed sessions off when talking to an
// emulator, as the examples do: emulators before 1.5.38 do not support them,
// and the Spanner client reads the setting only from the environment. A
// value the user set is kept.
func useEmulatorSettings() {
	const multiplexed = "GOOGLE_CLOUD_SPANNER_MULTIPLEXED_SESSIONS"
	if os.Getenv("SPANNER_EMULATOR_HOST") == "" {
		return
	}
	if _, set := os.LookupEnv(multiplexed); !set {
		_ = os.Setenv(multiplexed, "false")
	}
}

// spannerCloseWait bounds the wait for the Spanner client to close: with
// the endpoint down it waits for its own retries, and spannerlock is about
// to exit anyway. The leases were released (or not) by then.
const spannerCloseWait = 250 * time.Millisecond

// close releases what the lease Client still holds, then the Spanner client.
// After an outage it does not wait for releases that cannot reach Spanner
// (the leases expire within the TTL), nor, ever, for long for the Spanner
// client.
func (c *conn) close() {
	c.outages.stop()
	c.cancel()
	closeWait := time.Duration(0) // no bound
	_, _, _, failing := c.health.failing()
	switch {
	case failing || outage(c.ctx) != nil:
		// Spanner did not answer the last call: Close would wait out its
		// own call timeouts, past --timeout and a Ctrl-C, for releases and
		// a session that the TTL ends anyway.
		closeWait = spannerCloseWait
	case c.interrupted != nil && *c.interrupted:
		// Ctrl-C: a Close that Spanner does not answer at once (it takes
		// milliseconds) is left to the TTL.
		closeWait = spannerCloseWait
	}
	runWithin(closeWait, func() {
		if err := c.lease.Close(); err != nil {
			c.log.Warn("releasing leases on exit failed; they expire after the TTL", "err", err)
		}
	})
	runWithin(spannerCloseWait, c.spanner.Close)
}

// runWithin runs f and waits for it to return, for at most limit if positive.
func runWithin(limit time.Duration, f func()) {
	if limit <= 0 {
		f()
		return
	}
	done := make(chan struct{})
	go func() {
		f()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(limit):
	}
}

// explain turns an error from Spanner into one that says what to do: a
// missing or outdated table is diagnosed by reading the schema, a refused
// permission names the table, a call Spanner did not answer names the
// endpoint and the last failure, and an outage that ended the command says
// so.
func (c *conn) explain(err error) error {
	if err == nil {
		return nil
	}
	if o := outage(c.ctx); o != nil {
		return o
	}
	switch spanner.ErrCode(err) {
	case codes.PermissionDenied:
		return fmt.Errorf("permission denied on table %s in %s: the credentials spannerlock uses (Application Default "+
			"Credentials, or GOOGLE_APPLICATION_CREDENTIALS) need roles/spanner.databaseUser on the database: %w", c.table, c.db, err)
	case codes.Unauthenticated:
		return fmt.Errorf("the credentials were not accepted: run 'gcloud auth application-default login' or set "+
			"GOOGLE_APPLICATION_CREDENTIALS to a service account key: %w", err)
	case codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition:
		if why := c.diagnose(); why != nil {
			return why
		}
	}
	var already *noAnswerError
	if unanswered(err) && !errors.As(err, &already) {
		return c.health.noAnswer("", err)
	}
	return err
}

// diagnose reads the table's schema and says what is wrong with it, or
// returns nil when nothing is.
func (c *conn) diagnose() error {
	ctx, cancel := context.WithTimeout(context.Background(), diagnoseTimeout)
	defer cancel()
	ins, err := locktable.Inspect(ctx, c.spanner, c.table)
	switch {
	case spanner.ErrCode(err) == codes.NotFound:
		return fmt.Errorf("database %s does not exist (or its instance does not): check --database or %s: %w", c.db, envDatabase, err)
	case spanner.ErrCode(err) == codes.PermissionDenied:
		return c.explain(err)
	case err != nil:
		return nil
	}
	if live, misspelled := ins.Misspelled(); misspelled {
		return fmt.Errorf("table %s is spelled %s in %s, a PostgreSQL-dialect database, whose SQL names tables case-sensitively: use --table %s",
			c.table, live, c.db, live)
	}
	var old *locktable.VersionError
	switch {
	case !ins.Exists:
		var taken *collisionError
		if err := c.collision(ctx); errors.As(err, &taken) {
			return err
		}
		return fmt.Errorf("table %s does not exist in %s: run '%s' to create it (or apply the spannerlock_table Terraform resource)",
			c.table, c.db, c.initCommand())
	case errors.As(ins.Outdated(), &old):
		return fmt.Errorf("table %s in %s is not at schema version %d (it satisfies version %d): run '%s' to migrate it",
			c.table, c.db, locktable.Latest, old.Version, c.initCommand())
	}
	return nil
}

// initCommand is the init that creates or migrates this table.
func (c *conn) initCommand() string {
	if c.table == defaultGlobalFlags().table {
		return "spannerlock init"
	}
	return "spannerlock --table " + c.table + " init"
}

// collision returns a *collisionError saying why a lock table named
// c.table cannot be created in the database, where other tables hold the
// names it needs, or it is another lock table's companion: init would
// otherwise create a table that breaks the other, or fail, and every command
// would keep pointing at init. It returns nil when there is none, and the
// error of the read that would tell.
func (c *conn) collision(ctx context.Context) error {
	existing, err := locktable.ExistingTables(ctx, c.spanner, append([]string{c.table}, locktable.ConflictingNames(c.table)...))
	if err != nil {
		return fmt.Errorf("listing the tables of %s: %w", c.db, err)
	}
	exists := slices.ContainsFunc(existing, func(e string) bool { return strings.EqualFold(e, c.table) })
	for _, e := range existing {
		why := locktable.Conflict(c.table, e)
		ours := slices.ContainsFunc(locktable.Companions(c.table), func(n string) bool { return strings.EqualFold(n, e) })
		if why != "" && (!exists || !ours) {
			return &collisionError{fmt.Sprintf("table %s cannot be a lock table in %s: %s, and table %s exists there. A lock table is %s: "+
				"choose another --table", c.table, c.db, why, e, locktable.Family("T"))}
		}
	}
	return nil
}

// collisionError says why a lock table cannot be created under its name.
type collisionError struct{ msg string }

func (e *collisionError) Error() string { return e.msg }
