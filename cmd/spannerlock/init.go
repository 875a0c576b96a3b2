package main

import (
	"context"
	"fmt"
	"time"

	"cloud.google.com/go/spanner"
	database "cloud.google.com/go/spanner/admin/database/apiv1"
	"google.golang.org/grpc/codes"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
)

func initCommand() *command {
	return &command{
		name:     "init",
		summary:  "create the lock table, or migrate it to the latest schema version",
		synopsis: "spannerlock init [--cleanup-after DAYS] [--dry-run] [flags]",
		help: `
Creates the lock table and its companion tables (TABLE_permits,
TABLE_sessions) through the database admin API, or brings an existing table
to the latest schema version, in the database's dialect: GoogleSQL or
PostgreSQL, as it reads from the database. It reads the live schema first
and runs only the statements that are missing, so running it again does
nothing. It never
drops a column or a table; a table that cannot be migrated by adding to it
is reported with what to do. The statements it ran go to stdout, what it did
to stderr.

This is the schema the spannerlock_table Terraform resource manages; use one
or the other for a table. It needs roles/spanner.databaseAdmin (permission
spanner.databases.updateDdl) on the database.

Examples:
  spannerlock init
  spannerlock --table job_locks init --cleanup-after 30d
  spannerlock init --dry-run > locks.sql   # print the DDL, change nothing`,
		run: runInit,
	}
}

func runInit(a *app, args []string) error {
	fs := a.newFlagSet("init")
	cleanup := fs.String("cleanup-after", "",
		"delete rows not renewed for this many `days` (\"30d\" or \"720h\"); default: keep the table's current setting")
	dryRun := fs.Bool("dry-run", false, "print the statements that would run, and change nothing")
	pos, argv, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError("init takes no arguments, got %q (the table is --table)", pos[0])
	}
	if err := noCommand(fs, argv); err != nil {
		return err
	}
	var cleanupAfter time.Duration
	if *cleanup != "" {
		if cleanupAfter, err = locktable.ParseCleanupAfter(*cleanup); err != nil {
			return usageError("--cleanup-after: %v", err)
		}
	}
	c, err := a.connect()
	if err != nil {
		return err
	}
	defer c.close()
	ctx, end := a.sigs.interruptible(c.ctx)
	err = a.initTable(ctx, c, *cleanup != "", cleanupAfter, *dryRun)
	if sig := end(); sig != nil {
		return exitWith(signalStatus(sig), "interrupted by %s; a schema change already sent to Spanner goes on: run 'spannerlock init' again to see where it stands", signalName(sig))
	}
	return err
}

func (a *app) initTable(ctx context.Context, c *conn, setCleanup bool, cleanupAfter time.Duration, dryRun bool) error {
	ins, err := locktable.Inspect(ctx, c.spanner, c.table)
	if err != nil {
		return c.explain(err)
	}
	// The database's dialect may not hold the name (PostgreSQL truncates
	// long names and reserves pg_).
	if err := ins.Dialect.ValidateTableName(c.table); err != nil {
		return usageError("--table: %v", err)
	}
	if err := c.collision(ctx); err != nil {
		return c.explain(err)
	}
	opts := locktable.Options{CleanupAfter: ins.CleanupAfter}
	if setCleanup {
		opts.CleanupAfter = cleanupAfter
	}
	stmts, err := ins.Plan(opts)
	if err != nil {
		return fmt.Errorf("%w\n\nspannerlock changes lock tables only by adding to them, because every row keeps its name's fencing token. "+
			"Fix the table by hand as described, or use another --table", err)
	}
	if len(stmts) == 0 {
		a.note("Table %s in %s is at schema version %d: nothing to do.\n", c.table, c.db, ins.Version)
		return nil
	}
	if dryRun {
		printStatements(a, stmts)
		a.note("Dry run: %s would run on %s; nothing was changed.\n", counted(len(stmts), "statement"), c.db)
		return nil
	}
	admin, err := database.NewDatabaseAdminClient(ctx)
	if err != nil {
		return fmt.Errorf("connecting to the database admin API: %w", err)
	}
	defer func() { _ = admin.Close() }()
	if err := locktable.Apply(ctx, admin, c.db, stmts); err != nil {
		if spanner.ErrCode(err) == codes.PermissionDenied {
			return fmt.Errorf("permission denied changing the schema of %s for table %s: creating or migrating it needs "+
				"roles/spanner.databaseAdmin (spanner.databases.updateDdl) on the database: %w", c.db, c.table, err)
		}
		return c.explain(err)
	}
	printStatements(a, stmts)
	switch {
	case !ins.Exists:
		a.note("Created table %s in %s at schema version %d.\n", c.table, c.db, locktable.Latest)
	case ins.Version < locktable.Latest:
		a.note("Migrated table %s in %s from schema version %d to %d.\n", c.table, c.db, ins.Version, locktable.Latest)
	default:
		a.note("Updated table %s in %s.\n", c.table, c.db)
	}
	return nil
}

func printStatements(a *app, stmts []string) {
	for _, s := range stmts {
		say(a.stdout, "%s;\n", s)
	}
}
