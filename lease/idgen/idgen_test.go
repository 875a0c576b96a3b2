package idgen_test

import (
	"errors"
	"testing"

	"github.com/sony/sonyflake"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
	"github.com/spannerlock/terraform-provider-spannerlock/lease/idgen"
)

func TestMain(m *testing.M) { emulator.Main(m) }

// Two generators of one pool never share a machine ID, so their IDs never
// collide; after its ID is released a generator refuses to issue.
func TestGeneratorsTakeTheirNumbersFromWorkerIDs(t *testing.T) {
	ctx := emulator.Context(t)
	db := emulator.Database(t, lease.DDL("locks")...)
	var gens []*idgen.SonyflakeGenerator
	var nodes []*idgen.SnowflakeNode
	var workers []*lease.WorkerID
	for range 2 {
		c, err := lease.NewClient(emulator.Client(t, db), "locks")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		w, err := c.AcquireWorkerID(ctx, "ids", 1024)
		if err != nil {
			t.Fatal(err)
		}
		workers = append(workers, w)
		g, err := idgen.Sonyflake(w, sonyflake.Settings{})
		if err != nil {
			t.Fatal(err)
		}
		n, err := idgen.Snowflake(w)
		if err != nil {
			t.Fatal(err)
		}
		gens, nodes = append(gens, g), append(nodes, n)
	}
	seen := map[uint64]bool{}
	for range 1000 {
		for i, g := range gens {
			id, err := g.NextID()
			if err != nil {
				t.Fatal(err)
			}
			if seen[id] {
				t.Fatalf("sonyflake ID %d issued twice", id)
			}
			seen[id] = true
			if m := sonyflake.MachineID(id); int(m) != workers[i].ID() {
				t.Fatalf("sonyflake machine ID %d, want worker ID %d", m, workers[i].ID())
			}
		}
	}
	for i, n := range nodes {
		id, err := n.Generate()
		if err != nil {
			t.Fatal(err)
		}
		if int(id.Node()) != workers[i].ID() {
			t.Fatalf("snowflake node %d, want worker ID %d", id.Node(), workers[i].ID())
		}
	}

	if err := workers[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := gens[0].NextID(); !errors.Is(err, lease.ErrReleased) {
		t.Fatalf("sonyflake NextID after the worker ID was released: err = %v, want one matching ErrReleased", err)
	}
	if _, err := nodes[0].Generate(); err == nil {
		t.Fatal("snowflake Generate after the worker ID was released succeeded")
	}
}
