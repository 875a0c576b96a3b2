// Command workerid takes a unique worker ID from a pool and generates
// Snowflake IDs with it, so replicas never share a node number. Run several
// copies: each gets a different ID; stop one and a new copy reuses its ID.
//
//	go run ./examples/workerid -database projects/P/instances/I/databases/D
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/spannerlock/terraform-provider-spannerlock/lease"
	"github.com/spannerlock/terraform-provider-spannerlock/lease/idgen"
)

func main() {
	var (
		database = flag.String("database", os.Getenv("SPANNERLOCK_DATABASE"), "database path projects/P/instances/I/databases/D (default $SPANNERLOCK_DATABASE)")
		table    = flag.String("table", "locks", "lock table")
		pool     = flag.String("pool", "order-ids", "worker ID pool")
		count    = flag.Int("n", 3, "IDs to generate, one per second")
	)
	flag.Parse()
	if *database == "" {
		log.Fatal("workerid: -database or $SPANNERLOCK_DATABASE is required")
	}
	if os.Getenv("SPANNER_EMULATOR_HOST") != "" && os.Getenv("GOOGLE_CLOUD_SPANNER_MULTIPLEXED_SESSIONS") == "" {
		// The emulator before 1.5.38 does not support multiplexed sessions.
		_ = os.Setenv("GOOGLE_CLOUD_SPANNER_MULTIPLEXED_SESSIONS", "false")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *database, *table, *pool, *count); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, database, table, pool string, count int) error {
	db, err := spanner.NewClientWithConfig(ctx, database, spanner.ClientConfig{
		SessionPoolConfig: spanner.SessionPoolConfig{MinOpened: 1},
		Logger:            log.New(io.Discard, "", 0),
	})
	if err != nil {
		return err
	}
	defer db.Close()
	c, err := lease.NewClient(db, table)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }() // gives the worker ID back

	// 1024 nodes: bwmarrin/snowflake's 10-bit node number.
	w, err := c.AcquireWorkerID(ctx, pool, 1024)
	if err != nil {
		return err
	}
	node, err := idgen.Snowflake(w)
	if err != nil {
		return err
	}
	fmt.Printf("[%s] worker ID %d\n", c.HolderID(), w.ID())
	for range count {
		id, err := node.Generate()
		if err != nil {
			return err // the worker ID was lost: stop issuing
		}
		fmt.Printf("[%s] id %d (node %d)\n", c.HolderID(), id, id.Node())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
	return nil
}
