// Command leader joins a leader election on a spannerlock table and prints
// every transition. Run several copies; stop the leader and watch another
// take over.
//
//	go run ./examples/leader -database projects/P/instances/I/databases/D -name jobs
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
		name     = flag.String("name", "jobs", "election name")
		id       = flag.String("id", "", "this replica's holder ID (default hostname-pid-random)")
		ttl      = flag.Duration("ttl", 3*time.Second, "lease TTL")
	)
	flag.Parse()
	if *database == "" {
		log.Fatal("leader: -database or $SPANNERLOCK_DATABASE is required")
	}
	if os.Getenv("SPANNER_EMULATOR_HOST") != "" && os.Getenv("GOOGLE_CLOUD_SPANNER_MULTIPLEXED_SESSIONS") == "" {
		// The emulator before 1.5.38 does not support multiplexed sessions.
		_ = os.Setenv("GOOGLE_CLOUD_SPANNER_MULTIPLEXED_SESSIONS", "false")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *database, *table, *name, *id, *ttl); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, database, table, name, id string, ttl time.Duration) error {
	db, err := spanner.NewClientWithConfig(ctx, database, spanner.ClientConfig{
		SessionPoolConfig: spanner.SessionPoolConfig{MinOpened: 1},
		// The client logs its whole configuration on start; spannerlock logs what matters.
		Logger: log.New(io.Discard, "", 0),
	})
	if err != nil {
		return err
	}
	defer db.Close()
	opts := []lease.Option{lease.WithTTL(ttl), lease.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))}
	if id != "" {
		opts = append(opts, lease.WithHolderID(id))
	}
	c, err := lease.NewClient(db, table, opts...)
	if err != nil {
		return err
	}
	defer func() {
		if err := c.Close(); err != nil {
			log.Print(err)
		}
	}()
	me := c.HolderID()
	say := func(format string, args ...any) {
		fmt.Printf("%s [%s] %s\n", time.Now().Format("15:04:05.000"), me, fmt.Sprintf(format, args...))
	}
	say("campaigning for %q", name)
	err = c.Campaign(ctx, name, lease.LeaderCallbacks{
		OnStartedLeading: func(ctx context.Context, l *lease.Lease) {
			say("I am the leader (token %d)", l.Token())
			<-ctx.Done()
		},
		OnStoppedLeading: func() { say("I stopped leading") },
		OnNewLeader: func(h lease.Holder) {
			if h.HolderID != me {
				say("leader is %s (token %d)", h.HolderID, h.Token)
			}
		},
	})
	say("left the election")
	return err
}
