package lease

import (
	"context"
	"fmt"
	"time"

	"cloud.google.com/go/spanner"
)

// Holder describes who holds a lease, as Spanner records it.
type Holder struct {
	// Name is the lock's name, or the semaphore's or worker pool's.
	Name string
	// Kind is "lock", "shared" (a reader of a lock: AcquireShared), "permit"
	// (of a semaphore) or "worker_id".
	Kind string
	// Slot numbers a permit within its semaphore; for a worker ID it is the
	// ID. It is 0 for a lock.
	Slot     int64
	HolderID string
	// Token is the fencing token of the holder's acquisition.
	Token      int64
	AcquiredAt time.Time
	// RenewedAt is the commit timestamp of the holder's last renewal, which
	// renews all its leases at once; it may precede AcquiredAt.
	RenewedAt time.Time
	// ExpiresAt is RenewedAt plus the holder's TTL, on Spanner's clock.
	ExpiresAt time.Time
	Payload   []byte
}

// Holder returns the live holder of the named lease, or an error matching
// ErrNoHolder when it is free, or ErrWrongKind when the name is a
// semaphore's or worker pool's (read those with Semaphore or Holders). A
// lock held shared returns its first reader, of Kind "shared" (Holders
// lists them all). The Terraform data source reads the same rows the same
// way, so the two never disagree.
func (c *Client) Holder(ctx context.Context, name string) (Holder, error) {
	if err := validateName("lease name", name); err != nil {
		return Holder{}, err
	}
	if err := c.st.prepare(ctx); err != nil {
		return Holder{}, err
	}
	lines, err := readLines(ctx, c.st.db.Single(), c.st.sql, []string{name}, true)
	if err != nil {
		return Holder{}, c.st.explain(err)
	}
	l := lines[name]
	switch r := l.row; {
	case r.kind.Valid:
		return Holder{}, fmt.Errorf("%w: %q is %s, not a lock: read its permits with Semaphore or Holders", ErrWrongKind, name, describeKind(r.kind))
	case r.live:
		return r.holder(), nil
	}
	for _, p := range l.permits {
		if p.live {
			return p.holder(), nil
		}
	}
	return Holder{}, fmt.Errorf("%w: %q", ErrNoHolder, name)
}

// Waiter is one blocking acquisition waiting in a name's line.
type Waiter struct {
	// Name is the lock's, semaphore's or worker pool's name.
	Name     string
	HolderID string
	// Shared is set for a reader (AcquireShared).
	Shared bool
	// Since is when it joined the line (a commit timestamp).
	Since time.Time
}

// Waiters returns the live waiters of every line in the table, by name and
// in the order they will be served, in one read. An AcquireAll waits in
// the line of each of its names. Like Holders it reads the whole table.
func (c *Client) Waiters(ctx context.Context) ([]Waiter, error) {
	if err := c.st.prepare(ctx); err != nil {
		return nil, err
	}
	var waiters []Waiter
	err := c.st.readAgain(ctx, func(ctx context.Context) error {
		waiters = nil
		return c.st.db.Single().Query(ctx, c.st.sql.selectWaiters.bind(nil)).Do(func(sr *spanner.Row) error {
			var (
				w    Waiter
				mode spanner.NullString
				id   spanner.NullString
			)
			if err := sr.Columns(&w.Name, &id, &mode, &w.Since); err != nil {
				return err
			}
			w.HolderID, w.Shared = id.StringVal, mode.StringVal == modeShared
			waiters = append(waiters, w)
			return nil
		})
	})
	if err != nil {
		return nil, c.st.explain(err)
	}
	return waiters, nil
}

// Holders returns every live lease in the table: locks, then the permits of
// semaphores and worker pools (whose Name is the semaphore's or pool's), in
// one read-only transaction. It reads the whole table: it is for people and
// tools (spannerlock status), not for a hot path. Like Waiters, Jobs and
// Semaphores it reads again after an outage or an aborted or dropped
// transaction, all tries within the Client's call timeout (at most 10s).
//
// It reads a table at an older schema version too (from version 1), as the
// applications of that version judge their leases, so that a table can be
// checked for live leases before it is migrated or dropped: the other
// methods of a Client need the latest version.
func (c *Client) Holders(ctx context.Context) ([]Holder, error) {
	if err := c.st.prepare(ctx); err != nil {
		return nil, err
	}
	var holders []Holder
	// A retry reads both queries again, in a new transaction: the two are
	// one snapshot.
	err := c.st.readAgain(ctx, func(ctx context.Context) error {
		holders = nil
		txn := c.st.db.ReadOnlyTransaction()
		defer txn.Close()
		err := txn.Query(ctx, c.st.sql.selectLive.bind(nil)).Do(func(sr *spanner.Row) error {
			var r row
			if err := r.scan(sr, r.lockFields()...); err != nil {
				return err
			}
			holders = append(holders, r.holder())
			return nil
		})
		if err != nil {
			return err
		}
		return txn.Query(ctx, c.st.sql.selectLivePermits.bind(nil)).Do(func(sr *spanner.Row) error {
			var r row
			if err := r.scan(sr, r.permitFields()...); err != nil {
				return err
			}
			holders = append(holders, r.holder())
			return nil
		})
	})
	if err != nil {
		// Read-only, so it may look: a table at an older version is read
		// as its applications judge their leases (holders_old.go).
		if version, old := c.st.olderVersion(ctx, err); old {
			return c.st.holdersAt(ctx, version)
		}
		return nil, c.st.explain(err)
	}
	return holders, nil
}
