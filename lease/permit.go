package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"cloud.google.com/go/spanner"
)

// AcquirePermit blocks until it holds one permit of the named semaphore or
// ctx ends (then its error wraps ctx.Err()). The returned Lease works like a
// lock's: its own fencing token, which grows with every permit of the
// semaphore, a Context, Release and Guard. Permits of holders that die are
// freed when their lease expires. The semaphore must be declared (SetPermits,
// or the spannerlock_semaphore Terraform resource); otherwise the error
// matches ErrUnknownSemaphore.
func (c *Client) AcquirePermit(ctx context.Context, name string, opts ...AcquireOption) (*Lease, error) {
	if err := validateName("semaphore name", name); err != nil {
		return nil, fmt.Errorf("lease: AcquirePermit: %w", err)
	}
	return c.acquireSlot(ctx, name, slotPolicy{}, newAcquireConfig(opts))
}

// TryAcquirePermit takes one permit of the named semaphore if fewer than its
// limit are held; otherwise the error matches ErrNotAcquired.
func (c *Client) TryAcquirePermit(ctx context.Context, name string, opts ...AcquireOption) (*Lease, error) {
	if err := validateName("semaphore name", name); err != nil {
		return nil, fmt.Errorf("lease: TryAcquirePermit: %w", err)
	}
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	l, s, err := c.acquireSlotOnce(ctx, name, slotPolicy{}, newAcquireConfig(opts))
	if errors.Is(err, errHeld) {
		return nil, fmt.Errorf("%w: all %d permits of %q are held", ErrNotAcquired, len(s.live()), name)
	}
	return c.finishSlot(l, err)
}

// slotPolicy says how a semaphore or a worker pool grants slots.
type slotPolicy struct {
	workers bool
	// max bounds a worker pool's IDs to [0, max).
	max int64
}

// acquireSlot blocks until it holds a slot of name.
func (c *Client) acquireSlot(ctx context.Context, name string, p slotPolicy, cfg acquireConfig) (*Lease, error) {
	w := waiter{c: c, name: name}
	for {
		if err := c.checkOpen(); err != nil {
			return nil, err
		}
		l, s, err := c.acquireSlotOnce(ctx, name, p, cfg)
		if l, err = c.finishSlot(l, err); err == nil {
			if l.ctx.Err() == nil {
				return l, nil
			}
			continue // born lost, as in acquire
		}
		switch {
		case ctx.Err() != nil:
			return nil, fmt.Errorf("lease: acquiring a slot of %q: %w", name, ctx.Err())
		case errors.Is(err, errHeld):
			err = w.untilSlotFree(ctx, s, p)
		case errors.Is(err, ErrClosed), errors.Is(err, ErrUnknownSemaphore):
		case transient(err):
			c.log.Warn("acquiring a slot failed; retrying", "name", name, "err", err)
			err = w.sleep(ctx, nil, 0)
		}
		if err != nil {
			return nil, err
		}
	}
}

// acquireSlotOnce runs one transaction that takes the lowest free slot of a
// semaphore or worker pool, and once more if it found this Client's session
// gone. When no slot is free it returns errHeld and the state it read.
func (c *Client) acquireSlotOnce(ctx context.Context, name string, p slotPolicy, cfg acquireConfig) (*Lease, semaphoreState, error) {
	l, st, err := c.acquireSlotIn(ctx, c.currentSession(), name, p, cfg)
	var gone errSessionGone
	if errors.As(err, &gone) {
		c.endSession(gone.s, "its session expired in Spanner")
		l, st, err = c.acquireSlotIn(ctx, c.currentSession(), name, p, cfg)
	}
	return l, st, err
}

func (c *Client) acquireSlotIn(ctx context.Context, sess *session, name string, p slotPolicy, cfg acquireConfig) (*Lease, semaphoreState, error) {
	var (
		sent      time.Time
		slot      int64
		token     int64
		wrote     bool
		creating  bool
		blocked   semaphoreState
		notBefore time.Time
	)
	resp, err := c.db.ReadWriteTransactionWithOptions(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		sent, wrote, creating, notBefore, slot = time.Now(), false, false, time.Time{}, 0
		s, err := readSemaphore(ctx, tx, c.sql, name, sess.id)
		if err != nil {
			return err
		}
		capacity := s.permits.Int64
		switch {
		case p.workers && !s.found:
			// A pool is created by its first member; the schema's default
			// seeds its tokens as it does a lock's.
			err := tx.Query(ctx, spanner.Statement{SQL: c.sql.insertParent, Params: map[string]any{
				"name": name, "kind": kindWorkers, "permits": nil,
			}}).Do(func(r *spanner.Row) error { return r.Column(0, &s.next) })
			if err != nil {
				return err
			}
			capacity = p.max
		case p.workers && s.kind.StringVal != kindWorkers:
			return fmt.Errorf("lease: %q is %s, not a worker-ID pool: choose another name", name, describeKind(s.kind))
		case p.workers:
			capacity = p.max
		default:
			if err := s.declared(); err != nil {
				return err
			}
		}
		used := map[int64]bool{}
		var inUse int64
		for _, r := range s.live() {
			used[r.slot] = true
			if !p.workers || r.slot < p.max {
				inUse++
			}
		}
		if inUse >= capacity {
			blocked = s
			return errHeld
		}
		if creating, err = c.joinSession(tx, sess, s.self, sent); err != nil {
			return err
		}
		for used[slot] {
			slot++
		}
		// A worker ID's next holder waits until its wall clock passes the
		// moment the previous holder stopped using it.
		notBefore = s.slot(slot).notBefore()
		highWater := c.wallDeadlineFrom(sent)
		if notBefore.After(highWater) {
			highWater = notBefore
		}
		token = s.next.Int64
		wrote = true
		// Reap every expired permit: Guard on a permit reads only its own
		// row, so a grant in another slot would not conflict with a stale
		// holder's guarded write still in flight, and both could commit.
		// Writing the expired rows makes any such write conflict with this
		// grant, so Spanner orders it before the grant or aborts it. Their
		// high-water marks move onto the row as the session link goes.
		writes := []*spanner.Mutation{spanner.Update(c.sql.table, []string{"name", "token"}, []any{name, token + 1})}
		for _, r := range s.slots {
			if !r.live && r.sessionID.Valid {
				writes = append(writes, spanner.Update(c.sql.permits,
					[]string{"name", "slot", "session_id", "high_water"}, []any{name, r.slot, nil, nullTime(r.notBefore())}))
			}
		}
		writes = append(writes, spanner.InsertOrUpdate(c.sql.permits,
			[]string{"name", "slot", "token", "holder_id", "session_id", "ttl_ms", "acquired_at", "renewed_at", "payload", "high_water"},
			[]any{name, slot, token, c.cfg.holderID, sess.id, c.cfg.ttl.Milliseconds(), spanner.CommitTimestamp, spanner.CommitTimestamp, cfg.payload, highWater}))
		return tx.BufferWrite(writes)
	}, spanner.TransactionOptions{TransactionTag: "spannerlock-acquire-permit"})

	acquiredAt := resp.CommitTs
	switch {
	case errors.Is(err, errHeld):
		return nil, blocked, errHeld
	case err != nil && wrote:
		// As for locks: an unknown commit outcome is read, not guessed.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.ttl/2)
		defer cancel()
		r, rerr := readPermitRow(rctx, c.db.Single(), c.sql, name, slot)
		if rerr != nil || !r.heldBy(sess.id, token) {
			return nil, semaphoreState{}, c.explain(err)
		}
		acquiredAt = r.acquired.Time
	case err != nil:
		return nil, semaphoreState{}, c.explain(err)
	}
	if creating {
		sess.extend(sent, true)
	}
	l := newLease(sess, name, slot, token, cfg.payload, acquiredAt)
	l.notBefore = notBefore
	return l, semaphoreState{}, nil
}

// finishSlot registers a newly held permit, or gives it back if the Client
// closed meanwhile.
func (c *Client) finishSlot(l *Lease, err error) (*Lease, error) {
	if l == nil {
		return nil, err
	}
	c.mu.Lock()
	closed := c.closed
	if !closed {
		c.permits[slotKey{l.name, l.slot}] = l
		c.startKeeper()
	}
	c.mu.Unlock()
	if closed {
		c.giveBack(l)
		return nil, ErrClosed
	}
	l.checkSession()
	return l, nil
}

func (c *Client) checkOpen() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	return nil
}

// untilSlotFree waits until a slot may be free: a release in this process,
// the expiry of the first live permit, or a poll that finds one free.
func (w *waiter) untilSlotFree(ctx context.Context, s semaphoreState, p slotPolicy) error {
	signal, unsubscribe := subscribe(w.c.signalPrefix + w.name)
	defer unsubscribe()
	for {
		if err := w.sleep(ctx, signal, s.soonest().remaining()); err != nil || isClosed(signal) {
			return err
		}
		var err error
		s, err = readSemaphore(ctx, w.c.db.Single(), w.c.sql, w.name, "")
		switch {
		case err != nil && ctx.Err() == nil && transient(err):
			w.c.log.Warn("polling a semaphore failed; retrying", "name", w.name, "err", err)
			continue
		case err != nil && ctx.Err() != nil:
			// Spanner's own deadline error does not wrap ctx's; callers
			// match errors.Is(err, context.DeadlineExceeded).
			return fmt.Errorf("lease: waiting for %q: %w", w.name, ctx.Err())
		case err != nil:
			return w.c.explain(err)
		}
		capacity := s.permits.Int64
		if p.workers {
			capacity = p.max
		} else if err := s.declared(); err != nil {
			return err
		}
		var inUse int64
		for _, r := range s.live() {
			if !p.workers || r.slot < p.max {
				inUse++
			}
		}
		if inUse < capacity {
			return nil
		}
	}
}

// nullTime is a TIMESTAMP parameter that is NULL for the zero time.
func nullTime(t time.Time) spanner.NullTime {
	return spanner.NullTime{Time: t, Valid: !t.IsZero()}
}
