package lease

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"cloud.google.com/go/spanner"
)

// TryAcquire acquires the named lease if no one holds it, in one read-write
// transaction. When a live holder has it, including this Client (leases are
// not re-entrant), the error matches ErrNotAcquired and, for another holder,
// is a *HeldError naming it.
func (c *Client) TryAcquire(ctx context.Context, name string, opts ...AcquireOption) (*Lease, error) {
	if err := validateName("lease name", name); err != nil {
		return nil, fmt.Errorf("lease: TryAcquire: %w", err)
	}
	busy, err := c.reserve(name)
	if err != nil {
		return nil, err
	}
	if busy != nil {
		return nil, fmt.Errorf("%w: %q is held or being acquired by this Client", ErrNotAcquired, name)
	}
	l, _, err := c.acquireOnce(ctx, name, newAcquireConfig(opts))
	return c.finish(name, l, err)
}

// Acquire blocks until it holds the named lease or ctx ends; then it returns
// an error wrapping ctx.Err(). While another process holds the lease it reads
// the lease row after 25ms, then at doubling intervals up to the poll
// interval, and sooner when the holder's lease is due to expire; a Release in
// this process wakes it at once.
func (c *Client) Acquire(ctx context.Context, name string, opts ...AcquireOption) (*Lease, error) {
	if err := validateName("lease name", name); err != nil {
		return nil, fmt.Errorf("lease: Acquire: %w", err)
	}
	return c.acquire(ctx, name, newAcquireConfig(opts))
}

func (c *Client) acquire(ctx context.Context, name string, cfg acquireConfig) (*Lease, error) {
	w := waiter{c: c, name: name}
	for {
		busy, err := c.reserve(name)
		if err != nil {
			return nil, err
		}
		if busy != nil {
			if err := w.sleep(ctx, busy, 0); err != nil {
				return nil, err
			}
			continue
		}
		l, holder, err := c.acquireOnce(ctx, name, cfg)
		if l, err = c.finish(name, l, err); err == nil {
			if l.ctx.Err() == nil {
				return l, nil
			}
			// Its session ended while it was acquired (renewals failing):
			// try again rather than return a lease that is already lost.
			continue
		}
		switch {
		case ctx.Err() != nil:
			return nil, fmt.Errorf("lease: Acquire %q: %w", name, ctx.Err())
		case errors.Is(err, ErrNotAcquired):
			err = w.untilFree(ctx, holder)
		case errors.Is(err, ErrClosed), errors.Is(err, errCompleted):
		case transient(err):
			c.log.Warn("acquire failed; retrying", "name", name, "err", err)
			err = w.sleep(ctx, nil, 0)
		}
		if err != nil {
			return nil, err
		}
	}
}

// errHeld rolls back an acquiring transaction that found a live holder, and
// errCompleted one that found its RunOnce slot already done.
var (
	errHeld      = errors.New("held")
	errCompleted = errors.New("completed")
)

// acquireOnce runs the acquiring transaction once (the Spanner client retries
// aborts), and once more if it found this Client's session gone. When the
// lease is held it returns the holder's row.
func (c *Client) acquireOnce(ctx context.Context, name string, cfg acquireConfig) (*Lease, row, error) {
	l, r, err := c.acquireLock(ctx, c.currentSession(), name, cfg)
	var gone errSessionGone
	if errors.As(err, &gone) {
		c.endSession(gone.s, "its session expired in Spanner")
		l, r, err = c.acquireLock(ctx, c.currentSession(), name, cfg)
	}
	return l, r, err
}

func (c *Client) acquireLock(ctx context.Context, s *session, name string, cfg acquireConfig) (*Lease, row, error) {
	var (
		sent     time.Time
		token    int64
		wrote    bool
		creating bool
		blocker  row
	)
	known := c.knows(name)
	resp, err := c.db.ReadWriteTransactionWithOptions(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		sent, wrote, creating = time.Now(), false, false
		if !known {
			// A name this Client has not seen is usually new: inserting it
			// first is then the whole acquisition (one statement, the
			// schema's default picking the token). An existing row is left
			// alone and read below. This Client's session has not been read,
			// so its local state stands in: live unless it ended.
			created, _, _ := s.state()
			inserted, err := c.insertFirstRow(ctx, tx, s, name, cfg, &token)
			if err != nil {
				return err
			}
			if inserted {
				creating, err = c.joinSession(tx, s, spanner.NullBool{Bool: created, Valid: created}, sent)
				wrote = err == nil
				return err
			}
		}
		r, err := readRow(ctx, tx, c.sql, name, s.id)
		switch {
		case err != nil:
			return err
		case r.kind.Valid:
			return fmt.Errorf("lease: %q is %s, not a lock: choose another name", name, describeKind(r.kind))
		case cfg.untilCompleted && r.completed:
			return errCompleted
		// A live row of this Client's session that reserve let us acquire is
		// an orphan: an acquisition whose commit was never confirmed, or a
		// lease lost by Guard. Nothing uses it, so this acquisition
		// supersedes it with a larger token.
		case r.live && r.sessionID.StringVal != s.id:
			blocker = r
			return errHeld
		}
		if creating, err = c.joinSession(tx, s, r.self, sent); err != nil {
			return err
		}
		if !r.found {
			// Deleted by cleanup since this Client saw it: a first row again.
			inserted, err := c.insertFirstRow(ctx, tx, s, name, cfg, &token)
			wrote = inserted
			return err
		}
		token = r.token.Int64 + 1
		wrote = true
		return tx.BufferWrite([]*spanner.Mutation{spanner.Update(c.sql.table,
			[]string{"name", "token", "holder_id", "session_id", "ttl_ms", "acquired_at", "renewed_at", "payload"},
			[]any{name, token, c.cfg.holderID, s.id, c.cfg.ttl.Milliseconds(), spanner.CommitTimestamp, spanner.CommitTimestamp, cfg.payload},
		)})
	}, spanner.TransactionOptions{TransactionTag: "spannerlock-acquire"})

	acquiredAt := resp.CommitTs
	switch {
	case errors.Is(err, errHeld):
		c.remember(name)
		return nil, blocker, &HeldError{Holder: blocker.holder()}
	case err != nil && wrote:
		// The commit may have happened (DEADLINE_EXCEEDED or UNAVAILABLE on
		// Commit): read the row rather than guess.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.ttl/2)
		defer cancel()
		r, rerr := readRow(rctx, c.db.Single(), c.sql, name, "")
		if rerr != nil || !r.heldBy(s.id, token) {
			return nil, row{}, c.explain(err)
		}
		c.log.Info("acquisition committed despite an error", "name", name, "token", token, "err", err)
		acquiredAt = r.acquired.Time
	case err != nil:
		return nil, row{}, c.explain(err)
	}
	if creating {
		s.extend(sent, true)
	}
	c.remember(name)
	c.log.Debug("acquired", "name", name, "token", token)
	return newLease(s, name, lockSlot, token, cfg.payload, acquiredAt), row{}, nil
}

// insertFirstRow inserts the first row of name unless one exists, and
// reports whether it did; token is then the schema's default.
func (c *Client) insertFirstRow(ctx context.Context, tx *spanner.ReadWriteTransaction, s *session, name string, cfg acquireConfig, token *int64) (bool, error) {
	inserted := false
	err := tx.Query(ctx, spanner.Statement{SQL: c.sql.insert, Params: map[string]any{
		"name": name, "holder": c.cfg.holderID, "session": s.id, "ttl": c.cfg.ttl.Milliseconds(), "payload": cfg.payload,
	}}).Do(func(sr *spanner.Row) error {
		inserted = true
		return sr.Column(0, token)
	})
	return inserted, err
}

// maxKnownNames bounds the memory of names a Client has seen exist; past
// it the Client forgets them all, at the cost of one statement each later.
const maxKnownNames = 10000

// knows reports whether name's row existed when this Client last looked.
func (c *Client) knows(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.known[name]
	return ok
}

func (c *Client) remember(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.known) >= maxKnownNames {
		clear(c.known)
	}
	c.known[name] = struct{}{}
}

// reserve claims name for one acquisition by this Client. It returns a
// channel to wait on when the name is already held or being acquired here.
func (c *Client) reserve(name string) (<-chan struct{}, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	st := c.state(name)
	if st.acquiring || st.held != nil {
		return st.changed, nil
	}
	st.acquiring = true
	return nil, nil
}

// finish ends the reservation of name, registering l as held.
func (c *Client) finish(name string, l *Lease, err error) (*Lease, error) {
	c.mu.Lock()
	st := c.state(name)
	st.acquiring = false
	closed := c.closed
	if l != nil && !closed {
		st.held = l
		c.startKeeper()
	}
	c.settle(name, st)
	c.mu.Unlock()
	if l != nil && closed {
		// Close ran while the transaction was in flight: give the lease back.
		c.giveBack(l)
		return nil, ErrClosed
	}
	if l != nil {
		l.checkSession()
	}
	return l, err
}

// waiter paces one blocked acquisition.
type waiter struct {
	c       *Client
	name    string
	attempt int
}

// untilFree waits until the lease described by holder may be free: a release
// in this process, its expiry by Spanner's clock, or a poll that finds it free.
func (w *waiter) untilFree(ctx context.Context, holder row) error {
	signal, unsubscribe := subscribe(w.c.signalPrefix + w.name)
	defer unsubscribe()
	for {
		if err := w.sleep(ctx, signal, holder.remaining()); err != nil || isClosed(signal) {
			return err
		}
		r, err := readRow(ctx, w.c.db.Single(), w.c.sql, w.name, "")
		switch {
		case err != nil && ctx.Err() == nil && transient(err):
			w.c.log.Warn("polling a held lease failed; retrying", "name", w.name, "err", err)
			continue
		case err != nil && ctx.Err() != nil:
			// Spanner's own deadline error does not wrap ctx's; callers
			// match errors.Is(err, context.DeadlineExceeded).
			return fmt.Errorf("lease: waiting for %q: %w", w.name, ctx.Err())
		case err != nil:
			return w.c.explain(err)
		case !r.live || r.sessionID.StringVal == w.c.currentSession().id:
			return nil
		}
		holder = r
	}
}

// sleep waits for the next backoff step, cut short by wake, by expiry of
// whatever blocks us (when positive), by ctx, or by Close.
func (w *waiter) sleep(ctx context.Context, wake <-chan struct{}, expiry time.Duration) error {
	d := backoff(w.attempt, w.c.cfg.pollInterval)
	w.attempt++
	if expiry > 0 && expiry+expiryGrace < d {
		d = expiry + expiryGrace
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("lease: Acquire %q: %w", w.name, ctx.Err())
	case <-w.c.background.Done():
		return ErrClosed
	case <-wake:
	case <-t.C:
	}
	return nil
}

// expiryGrace lets Spanner's clock pass a holder's expiry before we look,
// so a waiter polls once per expiry rather than just before it.
const expiryGrace = 5 * time.Millisecond

// backoff grows from 25ms to limit, jittered upwards so that waiters spread
// out without ever polling more often than once per limit.
func backoff(attempt int, limit time.Duration) time.Duration {
	d := limit
	if attempt < 16 {
		d = min(limit, 25*time.Millisecond<<attempt)
	}
	return d + time.Duration(rand.Int64N(int64(d/4)+1))
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
