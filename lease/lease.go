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
	name string
	// slot is the permit's slot (a worker ID) for semaphores and worker
	// pools, lockSlot for a lock.
	slot       int64
	token      int64
	payload    []byte
	acquiredAt time.Time
	// notBefore is, for a worker ID, the previous holder's high-water mark.
	notBefore time.Time

	ctx    context.Context
	cancel context.CancelCauseFunc

	// releasing serializes Release calls, so a concurrent second call sees
	// the outcome of the first instead of racing it to the row.
	releasing sync.Mutex

	mu       sync.Mutex
	state    leaseState
	deadline time.Time // monotonic; the lease is presumed lost from here on
	timer    *time.Timer
	// lossReported makes only the first Release of a lost lease return ErrLeaseLost.
	lossReported bool
}

type leaseState int

const (
	held      leaseState = iota
	inRelease            // Release is running; renewals continue until it commits
	ended                // released, lost or closed; the Context is done
)

// newLease starts the lease's local deadline from the moment its acquiring
// transaction began: Spanner's commit timestamp is no earlier than that, so
// the lease cannot expire on Spanner's clock before the local deadline.
func newLease(c *Client, name string, slot, token int64, payload []byte, acquiredAt, sent time.Time) *Lease {
	ctx, cancel := context.WithCancelCause(context.Background())
	l := &Lease{c: c, name: name, slot: slot, token: token, payload: payload, acquiredAt: acquiredAt, ctx: ctx, cancel: cancel}
	l.deadline = c.deadlineFrom(sent)
	l.timer = time.AfterFunc(time.Until(l.deadline), l.checkDeadline)
	return l
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
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

func (l *Lease) checkDeadline() {
	l.mu.Lock()
	if l.state == ended {
		l.mu.Unlock()
		return
	}
	if wait := time.Until(l.deadline); wait > 0 {
		// A renewal moved the deadline after this timer fired.
		l.timer.Reset(wait)
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	l.lose("no renewal was confirmed before the local deadline")
}

// confirm extends the lease after a renewal that began at sent committed.
func (l *Lease) confirm(sent time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state == ended {
		return
	}
	if d := l.c.deadlineFrom(sent); d.After(l.deadline) {
		l.deadline = d
		l.timer.Reset(time.Until(d))
	}
}

// lose ends a lease whose ownership is gone.
func (l *Lease) lose(why string) {
	if l.end(lostError(l.name, l.token, why)) {
		l.c.log.Warn("lease lost", "name", l.name, "token", l.token, "reason", why)
		l.c.forget(l)
	}
}

// end moves the lease to ended with the given cause, once; it reports
// whether this call did it.
func (l *Lease) end(cause error) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state == ended {
		return false
	}
	l.state = ended
	l.timer.Stop()
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
	switch l.state {
	case ended:
		cause := context.Cause(l.ctx)
		report := !l.lossReported && errors.Is(cause, ErrLeaseLost)
		l.lossReported = true
		l.mu.Unlock()
		if report {
			return fmt.Errorf("lease: Release: %w", cause)
		}
		return nil
	case held:
		l.state = inRelease
	}
	l.mu.Unlock()

	n, err := l.c.releaseLeases(ctx, []*Lease{l})
	if err != nil {
		// The commit may have happened: ask Spanner rather than guess.
		r, rerr := l.read(context.WithoutCancel(ctx), l.c.db.Single())
		if rerr != nil || r.heldBy(l.c.session, l.token) {
			return fmt.Errorf("lease: Release %q: %w", l.name, l.c.explain(err))
		}
		n = 1
	}
	return l.settle(n == 1, ErrReleased, "Release")
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
		return readRow(ctx, q, l.c.sql, l.name)
	}
	return readPermitRow(ctx, q, l.c.sql, l.name, l.slot)
}

// Guard checks, inside the caller's read-write transaction, that this lease
// is still held with its token: it reads the lease row in txn, so Spanner
// judges holder, token and expiry on its own clock, and the transaction
// cannot commit if another holder acquires the lease after the read. Run the
// transaction under l.Context() and return Guard's error from it. Guard
// returns an error matching ErrLeaseLost when the lease is no longer held.
func (l *Lease) Guard(ctx context.Context, txn *spanner.ReadWriteTransaction) error {
	if err := context.Cause(l.ctx); err != nil {
		return fmt.Errorf("lease: Guard: %w", err)
	}
	r, err := l.read(ctx, txn)
	if err != nil {
		return l.c.explain(err)
	}
	if !r.heldBy(l.c.session, l.token) {
		// Tokens only grow and expiry is final, so what this snapshot shows
		// holds from now on: the lease is gone for good.
		l.lose("Guard found it expired or held by another")
		return fmt.Errorf("lease: Guard: %w", context.Cause(l.ctx))
	}
	return nil
}
