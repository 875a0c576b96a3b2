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
	"time"

	"cloud.google.com/go/spanner"
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

// readTimeoutFlag registers --timeout for commands that only read.
func readTimeoutFlag(fs *flag.FlagSet) *time.Duration {
	d := new(time.Duration)
	durationVar(fs, d, "timeout", defaultReadTimeout, "give up with exit status 1 if Spanner has not answered within this long")
	return d
}

// read runs one read against Spanner under the timeout, ending early at a
// stopping signal, and explains its failure.
func (a *app) read(c *conn, timeout time.Duration, fn func(ctx context.Context) error) error {
	ctx, end := a.sigs.interruptible(a.ctx)
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
	case ctx.Err() != nil:
		return err
	case errors.Is(rctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("no answer from Spanner within --timeout %s: check --database, the network, or SPANNER_EMULATOR_HOST: %w", timeout, err)
	}
	return c.explain(err)
}

// conn is a lease Client on the configured table.
type conn struct {
	db, table string
	spanner   *spanner.Client
	lease     *lease.Client
	log       *slog.Logger
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
	case g.poll < minPollInterval:
		return usageError("--poll-interval %s is below the minimum, %s: every waiter reads Spanner once per interval", g.poll, minPollInterval)
	}
	if err := locktable.ValidateTableName(g.table); err != nil {
		return usageError("--table: %v", err)
	}
	return nil
}

func (a *app) logger() *slog.Logger {
	level := slog.LevelWarn
	if a.global.verbose {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{
		Level: level,
		// A line per event, for people; the time is the terminal's business.
		ReplaceAttr: func(groups []string, attr slog.Attr) slog.Attr {
			if len(groups) == 0 && attr.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return attr
		},
	}))
}

// connect opens a Spanner client and a lease Client on the table. Nothing
// is read or written until a command uses them.
func (a *app) connect() (*conn, error) {
	if err := a.checkSettings(); err != nil {
		return nil, err
	}
	if err := a.startTelemetry(); err != nil {
		return nil, err
	}
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
	// The Spanner client logs its whole configuration when it starts; that
	// is noise on a command's stderr unless asked for.
	clientLog := log.New(io.Discard, "", 0)
	if a.global.verbose {
		clientLog = log.New(a.stderr, "spanner: ", 0)
	}
	sc, err := spanner.NewClientWithConfig(a.ctx, a.global.database, spanner.ClientConfig{
		// One process, a few leases: one session to start with, not 100.
		SessionPoolConfig: spanner.SessionPoolConfig{MinOpened: 1},
		Logger:            clientLog,
		// Built-in metrics look for a GCP environment and export to Cloud
		// Monitoring from a background goroutine: not for a short-lived command.
		DisableNativeMetrics: true,
	})
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", a.global.database, err)
	}
	lc, err := lease.NewClient(sc, a.global.table, opts...)
	if err != nil {
		sc.Close()
		return nil, usageError("%v", err)
	}
	return &conn{db: a.global.database, table: a.global.table, spanner: sc, lease: lc, log: logger}, nil
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

// close releases what the lease Client still holds, then the Spanner client.
func (c *conn) close() {
	if err := c.lease.Close(); err != nil {
		c.log.Warn("releasing leases on exit failed; they expire after the TTL", "err", err)
	}
	c.spanner.Close()
}

// explain turns an error from Spanner into one that says what to do: a
// missing or outdated table is diagnosed by reading the schema, a refused
// permission names the table.
func (c *conn) explain(err error) error {
	if err == nil {
		return nil
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
	case !ins.Exists:
		return fmt.Errorf("table %s does not exist in %s: run 'spannerlock init' to create it (or apply the spannerlock_table Terraform resource)", c.table, c.db)
	case ins.Version < locktable.Latest:
		return fmt.Errorf("table %s in %s is not at schema version %d (it satisfies version %d): run 'spannerlock init' to migrate it",
			c.table, c.db, locktable.Latest, ins.Version)
	}
	return nil
}
