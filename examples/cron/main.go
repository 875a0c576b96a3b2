// Command cron is one replica of a service that runs a scheduled job: every
// replica runs the scheduler, and RunOnce makes each slot of the schedule run
// on exactly one of them. Run three copies; kill one mid-job and another
// finishes the slot after the lease expires.
//
//	go run ./examples/cron -database projects/P/instances/I/databases/D -every 10s
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

func main() {
	var (
		database = flag.String("database", os.Getenv("SPANNERLOCK_DATABASE"), "database path projects/P/instances/I/databases/D (default $SPANNERLOCK_DATABASE)")
		table    = flag.String("table", "locks", "lock table")
		job      = flag.String("job", "settle-fees", "job name")
		every    = flag.Duration("every", 10*time.Second, "schedule: one slot per interval, aligned to the clock")
		work     = flag.Duration("work", 2*time.Second, "how long the job takes")
		id       = flag.String("id", "", "this replica's holder ID (default hostname-pid-random)")
	)
	flag.Parse()
	if *database == "" {
		log.Fatal("cron: -database or $SPANNERLOCK_DATABASE is required")
	}
	if os.Getenv("SPANNER_EMULATOR_HOST") != "" && os.Getenv("GOOGLE_CLOUD_SPANNER_MULTIPLEXED_SESSIONS") == "" {
		// The emulator before 1.5.38 does not support multiplexed sessions.
		_ = os.Setenv("GOOGLE_CLOUD_SPANNER_MULTIPLEXED_SESSIONS", "false")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *database, *table, *job, *id, *every, *work); err != nil && ctx.Err() == nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, database, table, job, id string, every, work time.Duration) error {
	db, err := spanner.NewClientWithConfig(ctx, database, spanner.ClientConfig{
		SessionPoolConfig: spanner.SessionPoolConfig{MinOpened: 1},
		Logger:            log.New(io.Discard, "", 0),
	})
	if err != nil {
		return err
	}
	defer db.Close()
	opts := []lease.Option{lease.WithTTL(3 * time.Second), lease.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))}
	if id != "" {
		opts = append(opts, lease.WithHolderID(id))
	}
	c, err := lease.NewClient(db, table, opts...)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	say := func(format string, args ...any) {
		fmt.Printf("%s [%s] %s\n", time.Now().Format("15:04:05.000"), c.HolderID(), fmt.Sprintf(format, args...))
	}
	for {
		// Wait for the next slot of the schedule, as a cron library would.
		slot := time.Now().Truncate(every).Add(every)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Until(slot)):
		}
		ran, err := c.RunOnce(ctx, job, slot, func(ctx context.Context) error {
			l, _ := lease.LeaseFromContext(ctx)
			say("running %s for slot %s (token %d)", job, slot.Format("15:04:05"), l.Token())
			select {
			case <-time.After(work):
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		})
		switch {
		case err != nil:
			say("slot %s: %v", slot.Format("15:04:05"), err)
		case ran:
			say("slot %s done here", slot.Format("15:04:05"))
		default:
			say("slot %s was done by another replica", slot.Format("15:04:05"))
		}
	}
}
