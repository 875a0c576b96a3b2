package lease

import (
	"context"
	"fmt"
	"time"
)

// MaxWorkerIDs bounds a pool: sonyflake's machine ID has 16 bits.
const MaxWorkerIDs = 1 << 16

// WorkerID is a small integer, unique among the live members of a pool, held
// as a lease: the machine or node number of a Snowflake-style ID generator
// (package idgen adapts sony/sonyflake and bwmarrin/snowflake).
//
// Stop issuing IDs when Context ends: that is the lease's local deadline,
// before anyone else can take the ID. Every renewal records, by this
// process's wall clock, the latest moment it may still use the ID; whoever
// takes the ID next waits until its own wall clock has passed that moment,
// so IDs never go back in time even if the two clocks disagree. This assumes
// wall clocks do not step forward by more than the safety margin mid-lease.
type WorkerID struct {
	l *Lease
}

// AcquireWorkerID blocks until it holds the lowest free ID in [0, size) of the
// named pool, or ctx ends (then its error wraps ctx.Err()). A pool needs no
// declaration: its first member creates it. IDs of members that die are
// reclaimed when their lease expires; Close releases them at once.
func (c *Client) AcquireWorkerID(ctx context.Context, pool string, size int) (*WorkerID, error) {
	if err := validateName("pool name", pool); err != nil {
		return nil, fmt.Errorf("lease: AcquireWorkerID: %w", err)
	}
	if size < 1 || size > MaxWorkerIDs {
		return nil, fmt.Errorf("lease: AcquireWorkerID %q: the pool size must be in [1, %d], got %d", pool, MaxWorkerIDs, size)
	}
	l, err := c.acquireSlot(ctx, pool, slotPolicy{workers: true, max: int64(size)}, acquireConfig{})
	if err != nil {
		return nil, err
	}
	// time.Until compares wall clocks here: notBefore came from Spanner and
	// carries no monotonic reading.
	if wait := time.Until(l.notBefore); wait > 0 {
		c.log.Debug("waiting past the previous holder's high-water mark", "pool", pool, "id", l.slot, "wait", wait)
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			_ = l.Release(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("lease: AcquireWorkerID %q: %w", pool, ctx.Err())
		}
	}
	return &WorkerID{l: l}, nil
}

// ID returns the worker ID.
func (w *WorkerID) ID() int { return int(w.l.slot) }

// Token returns the fencing token of this holding of the ID.
func (w *WorkerID) Token() int64 { return w.l.token }

// Context is cancelled when the ID may no longer be used.
func (w *WorkerID) Context() context.Context { return w.l.ctx }

// Lease returns the lease behind the ID, for Guard.
func (w *WorkerID) Lease() *Lease { return w.l }

// Release gives the ID back. Release of an ID already lost returns an error
// matching ErrLeaseLost.
func (w *WorkerID) Release(ctx context.Context) error { return w.l.Release(ctx) }
