// Package idgen gives Snowflake-style ID generators their machine or node
// number from a spannerlock worker ID, instead of a hand-assigned number or
// a hash of the host's IP address that two pods can share.
//
//	w, err := locks.AcquireWorkerID(ctx, "orders", 1024)
//	node, err := idgen.Snowflake(w)
//	id, err := node.Generate() // fails once w is lost
//
// A generator stops issuing IDs when the worker ID's Context ends, which is
// before any other process can take the ID; see lease.WorkerID for why a
// reacquired ID never goes back in time.
package idgen

import (
	"context"
	"fmt"
	"math"

	"github.com/bwmarrin/snowflake"
	"github.com/sony/sonyflake"

	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// SonyflakeGenerator is a sony/sonyflake generator bound to a worker ID.
type SonyflakeGenerator struct {
	w  *lease.WorkerID
	sf *sonyflake.Sonyflake
}

// Sonyflake returns a sonyflake generator whose machine ID is w's ID.
// Settings.MachineID and CheckMachineID are set from w; StartTime is kept.
func Sonyflake(w *lease.WorkerID, st sonyflake.Settings) (*SonyflakeGenerator, error) {
	if w.ID() > math.MaxUint16 {
		return nil, fmt.Errorf("idgen: worker ID %d does not fit sonyflake's 16-bit machine ID", w.ID())
	}
	id := uint16(w.ID())
	st.MachineID = func() (uint16, error) { return id, nil }
	st.CheckMachineID = func(m uint16) bool { return m == id && w.Context().Err() == nil }
	sf, err := sonyflake.New(st)
	if err != nil {
		return nil, fmt.Errorf("idgen: sonyflake with machine ID %d: %w", id, err)
	}
	return &SonyflakeGenerator{w: w, sf: sf}, nil
}

// NextID returns the next ID. Once the worker ID may no longer be used it
// fails with the reason (lease.ErrLeaseLost, lease.ErrReleased, lease.ErrClosed).
func (g *SonyflakeGenerator) NextID() (uint64, error) {
	if err := live(g.w); err != nil {
		return 0, err
	}
	return g.sf.NextID()
}

// SnowflakeNode is a bwmarrin/snowflake node bound to a worker ID.
type SnowflakeNode struct {
	w    *lease.WorkerID
	node *snowflake.Node
}

// Snowflake returns a snowflake node numbered by w's ID. Acquire the ID with
// a max of at most 1<<snowflake.NodeBits (1024 by default).
func Snowflake(w *lease.WorkerID) (*SnowflakeNode, error) {
	node, err := snowflake.NewNode(int64(w.ID()))
	if err != nil {
		return nil, fmt.Errorf("idgen: snowflake node %d: %w", w.ID(), err)
	}
	return &SnowflakeNode{w: w, node: node}, nil
}

// Generate returns the next ID. Once the worker ID may no longer be used it
// fails with the reason (lease.ErrLeaseLost, lease.ErrReleased, lease.ErrClosed).
func (n *SnowflakeNode) Generate() (snowflake.ID, error) {
	if err := live(n.w); err != nil {
		return 0, err
	}
	return n.node.Generate(), nil
}

func live(w *lease.WorkerID) error {
	if w.Context().Err() != nil {
		return fmt.Errorf("idgen: worker ID %d: %w", w.ID(), context.Cause(w.Context()))
	}
	return nil
}
