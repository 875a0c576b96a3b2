// Package idgen gives Snowflake-style ID generators their machine or node
// number from a spannerlock worker ID, instead of a hand-assigned number or
// a hash of the host's IP address that two pods can share.
//
//	w, err := locks.AcquireWorkerID(ctx, "orders", 1024)
//	node, err := idgen.Snowflake(w)
//	id, err := node.Generate() // fails once w is lost
//
// A generator issues IDs only inside lease.WorkerID.Use, so it stops when the
// worker ID may no longer be used, which is before any other process can
// take it, and no ID is in the middle of being issued when the ID is
// released. A new generator starts once the wall clock has left the
// generator's tick (1ms for snowflake, 10ms for sonyflake) that holds the
// previous holder's high-water mark, so its IDs are later than every ID the
// previous holder issued; see lease.WorkerID for the clock assumptions.
package idgen

import (
	"fmt"
	"math"
	"time"

	"github.com/bwmarrin/snowflake"
	"github.com/sony/sonyflake"

	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// SonyflakeGenerator is a sony/sonyflake generator bound to a worker ID.
type SonyflakeGenerator struct {
	w  *lease.WorkerID
	sf *sonyflake.Sonyflake
}

// sonyflakeTick and snowflakeTick are the generators' time units; both are
// aligned with the Unix epoch, so time.Truncate finds their boundaries.
const (
	sonyflakeTick = 10 * time.Millisecond
	snowflakeTick = time.Millisecond
)

// Sonyflake returns a sonyflake generator whose machine ID is w's ID.
// Settings.MachineID and CheckMachineID are set from w; StartTime is kept.
// It waits (at most 10ms) until the tick holding w.NotBefore() has passed.
func Sonyflake(w *lease.WorkerID, st sonyflake.Settings) (*SonyflakeGenerator, error) {
	if w.ID() > math.MaxUint16 {
		return nil, fmt.Errorf("idgen: worker ID %d does not fit sonyflake's 16-bit machine ID", w.ID())
	}
	id := uint16(w.ID())
	st.MachineID = func() (uint16, error) { return id, nil }
	st.CheckMachineID = func(m uint16) bool { return m == id && w.Context().Err() == nil }
	waitPastTick(w.NotBefore(), sonyflakeTick)
	sf, err := sonyflake.New(st)
	if err != nil {
		return nil, fmt.Errorf("idgen: sonyflake with machine ID %d: %w", id, err)
	}
	return &SonyflakeGenerator{w: w, sf: sf}, nil
}

// NextID returns the next ID. Once the worker ID may no longer be used it
// fails with the reason (lease.ErrLeaseLost, lease.ErrReleased, lease.ErrClosed).
func (g *SonyflakeGenerator) NextID() (uint64, error) {
	var id uint64
	err := g.w.Use(func(int) error {
		var err error
		id, err = g.sf.NextID()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("idgen: %w", err)
	}
	return id, nil
}

// SnowflakeNode is a bwmarrin/snowflake node bound to a worker ID.
type SnowflakeNode struct {
	w    *lease.WorkerID
	node *snowflake.Node
}

// Snowflake returns a snowflake node numbered by w's ID. Acquire the ID with
// a max of at most 1<<snowflake.NodeBits (1024 by default). It waits (at
// most 1ms) until the millisecond holding w.NotBefore() has passed.
func Snowflake(w *lease.WorkerID) (*SnowflakeNode, error) {
	waitPastTick(w.NotBefore(), snowflakeTick)
	node, err := snowflake.NewNode(int64(w.ID()))
	if err != nil {
		return nil, fmt.Errorf("idgen: snowflake node %d: %w", w.ID(), err)
	}
	return &SnowflakeNode{w: w, node: node}, nil
}

// Generate returns the next ID. Once the worker ID may no longer be used it
// fails with the reason (lease.ErrLeaseLost, lease.ErrReleased, lease.ErrClosed).
func (n *SnowflakeNode) Generate() (snowflake.ID, error) {
	var id snowflake.ID
	err := n.w.Use(func(int) error {
		id = n.node.Generate()
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("idgen: %w", err)
	}
	return id, nil
}

// SnowflakeTime returns when a snowflake ID was issued, to the millisecond.
// Use it rather than snowflake.ID.Time, which is deprecated upstream and
// reads package variables that snowflake.NewNode rewrites, so calling it
// while another goroutine runs Snowflake is a data race.
func SnowflakeTime(id snowflake.ID) time.Time {
	return time.UnixMilli(int64(id)>>(snowflake.NodeBits+snowflake.StepBits) + snowflake.Epoch)
}

// waitPastTick sleeps until the wall clock has left the tick that holds
// notBefore, so that a generator's first ID carries a later tick than any
// ID issued up to notBefore.
func waitPastTick(notBefore time.Time, tick time.Duration) {
	if notBefore.IsZero() {
		return
	}
	if d := time.Until(notBefore.Truncate(tick).Add(tick)); d > 0 {
		time.Sleep(d)
	}
}
