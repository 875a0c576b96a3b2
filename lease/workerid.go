package lease

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// MaxWorkerIDs bounds a pool: sonyflake's machine ID has 16 bits.
const MaxWorkerIDs = 1 << 16

// WorkerID is a small integer, unique among the live members of a pool, held
// as a lease: the machine or node number of a Snowflake-style ID generator
// (package idgen adapts sony/sonyflake and bwmarrin/snowflake).
//
// Generate IDs only inside Use: it refuses once the ID may no longer be
// used, which is before anyone else can take it, and the ID cannot be
// released or lost while a call is inside it. Every renewal records, by this
// process's wall clock, a moment after which the holder will not use the ID
// (the renewal's start plus the TTL); a release records when the holder
// stopped. Whoever takes the ID next waits until its own wall clock has
// passed that mark (NotBefore), so the timestamps in its IDs are later than
// any of the previous holder's, whatever the offset between the two
// machines' clocks. This assumes a holder's wall clock does not step forward
// by more than the safety margin (TTL/10), nor back at all, while it holds
// the ID; generators round the wait up to their tick (package idgen does).
type WorkerID struct {
	l *Lease
}

// AcquireWorkerID blocks until it holds the lowest free ID in [0, size) of the
// named pool, or ctx ends (then its error wraps ctx.Err()). A pool needs no
// declaration: its first member creates it. IDs of members that die are
// reclaimed when their lease expires; Close releases them at once. It
// returns once this process's wall clock has passed NotBefore.
func (c *Client) AcquireWorkerID(ctx context.Context, pool string, size int) (*WorkerID, error) {
	if err := validateName("pool name", pool); err != nil {
		return nil, fmt.Errorf("lease: AcquireWorkerID: %w", err)
	}
	if size < 1 || size > MaxWorkerIDs {
		return nil, fmt.Errorf("lease: AcquireWorkerID %q: the pool size must be in [1, %d], got %d", pool, MaxWorkerIDs, size)
	}
	l, err := c.acquire(ctx, "AcquireWorkerID", slotTarget{pool: pool, workers: true, max: int64(size)}, acquireConfig{}, false)
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
			// The release keeps the previous holder's later mark: a mark
			// never moves back (letGo.clear). It is bounded by the call
			// timeout, so it returns soon after ctx ended.
			_ = l.Release(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("lease: AcquireWorkerID %q: %w", pool, ctx.Err())
		case <-l.Context().Done():
			// Close, or a loss, ended the ID before it could be used.
			if errors.Is(context.Cause(l.Context()), ErrClosed) {
				return nil, ErrClosed
			}
			return nil, fmt.Errorf("lease: AcquireWorkerID %q: %w", pool, context.Cause(l.Context()))
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

// NotBefore is the previous holder's high-water mark: the wall-clock time
// after which it no longer used the ID. IDs generated with timestamps
// after it (rounded up to the generator's tick) cannot repeat the previous
// holder's.
func (w *WorkerID) NotBefore() time.Time { return w.l.notBefore }

// Use calls fn with the ID if the ID may still be used, and returns fn's
// error; otherwise it returns an error saying why (matching ErrLeaseLost,
// ErrReleased or ErrClosed) without calling fn. While fn runs the ID cannot
// be released or lost: Release, Close and the loss deadline wait for it, and
// the mark the next holder waits past is taken after that. Keep fn short
// (generate an ID), and do not release the ID from inside it.
func (w *WorkerID) Use(fn func(id int) error) error {
	l := w.l
	l.using.RLock()
	defer l.using.RUnlock()
	if err := context.Cause(l.ctx); err != nil {
		return fmt.Errorf("lease: worker ID %d of %q: %w", w.ID(), l.name, err)
	}
	// The deadline's timer may run late on a loaded machine.
	if !l.sess.live() {
		return fmt.Errorf("lease: worker ID %d of %q: %w", w.ID(), l.name, lostError(l.name, l.token, "its local deadline passed"))
	}
	return fn(w.ID())
}

// Lease returns the lease behind the ID, for Guard.
func (w *WorkerID) Lease() *Lease { return w.l }

// Release gives the ID back. Release of an ID already lost returns an error
// matching ErrLeaseLost.
func (w *WorkerID) Release(ctx context.Context) error { return w.l.Release(ctx) }
