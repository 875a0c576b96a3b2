package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"cloud.google.com/go/spanner"
)

// Lease is one held acquisition of a named lease. Its Context ends when the
// lease is lost, released, or its Client closes.
type Lease struct {
	c    *Client
	sess *session
	name string
	// slot is the permit's slot (a worker ID) for semaphores and worker
	// pools, lockSlot for a lock.
	slot       int64
	token      int64
	payload    []byte
	acquiredAt time.Time
	// notBefore is, for a worker ID, when its previous holder stopped using it.
	notBefore time.Time

	ctx    context.Context
	cancel context.CancelCauseFunc

	// releasing serializes Release calls, so a concurrent second call sees
	// the outcome of the first instead of racing it to the row.
	releasing sync.Mutex

	mu    sync.Mutex
	ended bool
	// lossReported makes only the first Release of a lost lease return ErrLeaseLost.
	lossReported bool
}

func newLease(s *session, name string, slot, token int64, payload []byte, acquiredAt time.Time) *Lease {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &Lease{c: s.c, sess: s, name: name, slot: slot, token: token, payload: payload, acquiredAt: acquiredAt, ctx: ctx, cancel: cancel}
}

// Name returns the lease's name.
func (l *Lease) Name() string { return l.name }

// Token returns the fencing token: it is larger than the token of every
// earlier acquisition of this name, by any holder. Pass it to systems outside
// Spanner so they can reject writes from a holder that lost the lease.
func (l *Lease) Token() int64 { return l.token }

// AcquiredAt returns the commit timestamp of the acquisition.
func (l *Lease) AcquiredAt() time.Time { return l.acquiredAt }

// Payload returns the data stored with the lease when it was acquired.
func (l *Lease) Payload() []byte { return l.payload }

// Context is cancelled when the lease ends. context.Cause tells why:
// ErrLeaseLost (a renewal found it taken or expired, or renewals failed until
// the local deadline), ErrReleased, or ErrClosed. The local deadline is the
// start of the last confirmed renewal plus TTL minus a safety margin of
// TTL/10, so the holder learns of a loss before a rival can acquire.
func (l *Lease) Context() context.Context { return l.ctx }

// Deadline returns when the lease will be presumed lost unless renewed.
func (l *Lease) Deadline() time.Time {
	_, _, d := l.sess.state()
	return d
}

// lose ends a lease whose ownership is gone.
func (l *Lease) lose(why string) {
	if l.end(lostError(l.name, l.token, why)) {
		l.c.log.Warn("lease lost", "name", l.name, "token", l.token, "reason", why)
		l.c.forget(l)
	}
}

// end cancels the lease's Context with cause, once; it reports whether this
// call did it.
func (l *Lease) end(cause error) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return false
	}
	l.ended = true
	l.cancel(cause)
	return true
}

// Release gives the lease up so that others can acquire it at once. Its
// Context is cancelled before the release commits. Release of a lease that
// was already lost returns an error matching ErrLeaseLost; after a
// successful or lost Release, further calls return nil. If Release fails for
// another reason, it may be called again; meanwhile the lease is renewed.
func (l *Lease) Release(ctx context.Context) error {
	l.releasing.Lock()
	defer l.releasing.Unlock()
	l.mu.Lock()
	if l.ended {
		cause := context.Cause(l.ctx)
		report := !l.lossReported && errors.Is(cause, ErrLeaseLost)
		l.lossReported = true
		l.mu.Unlock()
		if report {
			return fmt.Errorf("lease: Release: %w", cause)
		}
		return nil
	}
	l.mu.Unlock()

	stmt := l.releaseStatement(time.Now())
	n, err := l.c.update(ctx, "spannerlock-release", stmt)
	if err != nil {
		// The commit may have happened: ask Spanner rather than guess.
		r, rerr := l.read(context.WithoutCancel(ctx), l.c.db.Single())
		if rerr != nil || r.heldBy(l.sess.id, l.token) {
			return fmt.Errorf("lease: Release %q: %w", l.name, l.c.explain(err))
		}
		n = 1
	}
	return l.settle(n == 1, ErrReleased, "Release")
}

// releaseStatement clears the lease's row if it is still the lease's; for a
// worker ID, releasedAt (this process's wall clock) becomes the high-water
// mark the next holder waits past.
func (l *Lease) releaseStatement(releasedAt time.Time) spanner.Statement {
	params := map[string]any{"name": l.name, "token": l.token, "session": l.sess.id}
	if l.slot == lockSlot {
		return spanner.Statement{SQL: l.c.sql.release, Params: params}
	}
	params["slot"], params["high_water"] = l.slot, releasedAt.Round(0)
	return spanner.Statement{SQL: l.c.sql.releasePermit, Params: params}
}

// settle ends the lease after a release-like transaction: with cause when it
// cleared the row, as lost when the row was no longer the lease's.
func (l *Lease) settle(cleared bool, cause error, op string) error {
	if !cleared {
		l.end(lostError(l.name, l.token, "it expired or was taken before "+op))
		l.c.forget(l)
		l.mu.Lock()
		l.lossReported = true
		l.mu.Unlock()
		return fmt.Errorf("lease: %s: %w", op, context.Cause(l.ctx))
	}
	l.end(cause)
	l.c.forget(l)
	announceRelease(l.c.signalPrefix + l.name)
	return nil
}

// read reads the lease's row: its lock row, or its permit row.
func (l *Lease) read(ctx context.Context, q querier) (row, error) {
	if l.slot == lockSlot {
		return readRow(ctx, q, l.c.sql, l.name, "")
	}
	return readPermitRow(ctx, q, l.c.sql, l.name, l.slot)
}

// Guard checks, inside the caller's read-write transaction, that this lease
// is still held with its token: it reads the lease row and its holder's
// session in txn, so Spanner judges holder, token and expiry on its own
// clock, and the transaction cannot commit if another holder acquires the
// lease after the read. Run the transaction under l.Context() and return
// Guard's error from it. Guard returns an error matching ErrLeaseLost when
// the lease is no longer held.
func (l *Lease) Guard(ctx context.Context, txn *spanner.ReadWriteTransaction) error {
	if err := context.Cause(l.ctx); err != nil {
		return fmt.Errorf("lease: Guard: %w", err)
	}
	if !fenceChecked {
		return nil // the planted bug: see fence_bug.go
	}
	r, err := l.read(ctx, txn)
	if err != nil {
		return l.c.explain(err)
	}
	if !r.heldBy(l.sess.id, l.token) {
		// Tokens only grow and expiry is final, so what this snapshot shows
		// holds from now on: the lease is gone for good.
		l.lose("Guard found it expired or held by another")
		return fmt.Errorf("lease: Guard: %w", context.Cause(l.ctx))
	}
	return nil
}

// checkSession loses a lease whose session ended while it was acquired, so
// that no lease outlives its session.
func (l *Lease) checkSession() {
	if _, ended, _ := l.sess.state(); ended {
		l.lose("its session ended while it was acquired")
	}
}

// giveBack releases a lease acquired after its Client closed.
func (c *Client) giveBack(l *Lease) {
	l.end(ErrClosed)
	ctx, cancel := context.WithTimeout(context.Background(), min(c.cfg.ttl, 5*time.Second))
	defer cancel()
	_, _ = c.update(ctx, "spannerlock-release", l.releaseStatement(time.Now()))
}
