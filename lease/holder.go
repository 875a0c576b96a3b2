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
	// Kind is "lock", "permit" (of a semaphore) or "worker_id".
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
// semaphore's or worker pool's (read those with Semaphore or Holders). The
// Terraform data source reads the same row the same way, so the two never
// disagree.
func (c *Client) Holder(ctx context.Context, name string) (Holder, error) {
	if err := validateName("lease name", name); err != nil {
		return Holder{}, err
	}
	if err := c.st.prepare(ctx); err != nil {
		return Holder{}, err
	}
	r, err := readRow(ctx, c.st.db.Single(), c.st.sql, name)
	switch {
	case err != nil:
		return Holder{}, c.st.explain(err)
	case r.kind.Valid:
		return Holder{}, fmt.Errorf("%w: %q is %s, not a lock: read its permits with Semaphore or Holders", ErrWrongKind, name, describeKind(r.kind))
	case !r.live:
		return Holder{}, fmt.Errorf("%w: %q", ErrNoHolder, name)
	}
	return r.holder(), nil
}

// Holders returns every live lease in the table: locks, then the permits of
// semaphores and worker pools (whose Name is the semaphore's or pool's), in
// one read-only transaction. It reads the whole table: it is for people and
// tools (spannerlock status), not for a hot path.
func (c *Client) Holders(ctx context.Context) ([]Holder, error) {
	if err := c.st.prepare(ctx); err != nil {
		return nil, err
	}
	var holders []Holder
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
	if err == nil {
		err = txn.Query(ctx, c.st.sql.selectLivePermits.bind(nil)).Do(func(sr *spanner.Row) error {
			var r row
			if err := r.scan(sr, r.permitFields()...); err != nil {
				return err
			}
			holders = append(holders, r.holder())
			return nil
		})
	}
	if err != nil {
		return nil, c.st.explain(err)
	}
	return holders, nil
}
