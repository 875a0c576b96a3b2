package lease

import (
	"context"
	"fmt"
	"time"

	"cloud.google.com/go/spanner"
)

// Holder describes who holds a lease, as Spanner records it.
type Holder struct {
	Name     string
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
// ErrNoHolder when it is free. The Terraform data source reads the same row
// the same way, so the two never disagree.
func (c *Client) Holder(ctx context.Context, name string) (Holder, error) {
	if err := validateName("lease name", name); err != nil {
		return Holder{}, err
	}
	r, err := readRow(ctx, c.db.Single(), c.sql, name, "")
	if err != nil {
		return Holder{}, c.explain(err)
	}
	if !r.live {
		return Holder{}, fmt.Errorf("%w: %q", ErrNoHolder, name)
	}
	return r.holder(), nil
}

// Holders returns every live lease in the table: locks, then the permits of
// semaphores and worker pools (whose Name is the semaphore's or pool's).
func (c *Client) Holders(ctx context.Context) ([]Holder, error) {
	var holders []Holder
	txn := c.db.ReadOnlyTransaction()
	defer txn.Close()
	err := txn.Query(ctx, spanner.Statement{SQL: c.sql.selectLive}).Do(func(sr *spanner.Row) error {
		var r row
		if err := r.scan(sr, r.lockFields()...); err != nil {
			return err
		}
		holders = append(holders, r.holder())
		return nil
	})
	if err == nil {
		err = txn.Query(ctx, spanner.Statement{SQL: c.sql.selectLivePermits}).Do(func(sr *spanner.Row) error {
			var r row
			if err := r.scan(sr, r.permitFields()...); err != nil {
				return err
			}
			holders = append(holders, r.holder())
			return nil
		})
	}
	if err != nil {
		return nil, c.explain(err)
	}
	return holders, nil
}

// row is a lock or permit row, with its holder's session and Spanner's
// verdict on it.
type row struct {
	name      string
	slot      int64 // lockSlot for a lock
	found     bool
	rowName   spanner.NullString // NULL when the row does not exist
	token     spanner.NullInt64
	holderID  spanner.NullString
	sessionID spanner.NullString
	acquired  spanner.NullTime
	renewed   spanner.NullTime // of the holder's session
	expires   spanner.NullTime // of the holder's session
	live      bool
	payload   []byte
	// now is CURRENT_TIMESTAMP() when the row was read: Spanner's clock, for
	// measuring how long until expires without consulting a local clock.
	now time.Time
	// self is whether the reader's own session is live: NULL when it has
	// no row.
	self spanner.NullBool

	kind      spanner.NullString // locks only
	completed bool               // locks only: a RunOnce slot that succeeded
	// highWater and sessionHighWater are the worker-ID marks of the permit
	// row (set at acquisition and release) and of its holder's session (set
	// at every renewal).
	highWater, sessionHighWater spanner.NullTime // permits only
}

// lockSlot is the slot of a lock: locks have none.
const lockSlot = -1

func (r row) holder() Holder {
	return Holder{
		Name:       r.name,
		HolderID:   r.holderID.StringVal,
		Token:      r.token.Int64,
		AcquiredAt: r.acquired.Time,
		RenewedAt:  r.renewed.Time,
		ExpiresAt:  r.expires.Time,
		Payload:    r.payload,
	}
}

// remaining is how long the row stays live by Spanner's clock.
func (r row) remaining() time.Duration {
	if !r.live || r.now.IsZero() {
		return 0
	}
	return r.expires.Time.Sub(r.now)
}

// heldBy reports whether the row is live and held by the session with token.
func (r row) heldBy(session string, token int64) bool {
	return r.live && r.sessionID.StringVal == session && r.token.Int64 == token
}

// notBefore is when a worker ID's previous holder stopped using it: its
// release, or, if it never released, its session's last mark.
func (r row) notBefore() time.Time {
	t := r.highWater.Time
	if r.sessionID.Valid && r.sessionHighWater.Valid && r.sessionHighWater.Time.After(t) {
		t = r.sessionHighWater.Time
	}
	return t
}

func (r *row) commonFields() []any {
	return []any{&r.rowName, &r.token, &r.holderID, &r.sessionID, &r.acquired, &r.renewed, &r.expires, &r.live, &r.payload, &r.now}
}

func (r *row) lockFields() []any {
	r.slot = lockSlot
	return append(r.commonFields(), &r.kind, &r.completed, &r.self)
}

// scan reads a row's columns and derives whether it exists.
func (r *row) scan(sr *spanner.Row, fields ...any) error {
	if err := sr.Columns(fields...); err != nil {
		return err
	}
	r.found = r.rowName.Valid
	if r.found {
		r.name = r.rowName.StringVal
	}
	return nil
}

func (r *row) permitFields() []any {
	return append(r.commonFields(), &r.slot, &r.highWater, &r.sessionHighWater)
}

// querier is what both transactions and single reads offer.
type querier interface {
	Query(ctx context.Context, statement spanner.Statement) *spanner.RowIterator
}

// readRow is the one read of a lock row. A missing row is a free lease with
// found == false. self names the reader's session ("" for none).
func readRow(ctx context.Context, q querier, sql statements, name, self string) (row, error) {
	r := row{name: name}
	err := q.Query(ctx, spanner.Statement{SQL: sql.selectRow, Params: map[string]any{"name": name, "self": self}}).Do(func(sr *spanner.Row) error {
		return r.scan(sr, r.lockFields()...)
	})
	return r, err
}

// readPermitRow is the one read of a permit row.
func readPermitRow(ctx context.Context, q querier, sql statements, name string, slot int64) (row, error) {
	r := row{name: name}
	var readSlot spanner.NullInt64
	err := q.Query(ctx, spanner.Statement{SQL: sql.selectPermit, Params: map[string]any{"name": name, "slot": slot}}).Do(func(sr *spanner.Row) error {
		return r.scan(sr, append(r.commonFields(), &readSlot, &r.highWater, &r.sessionHighWater)...)
	})
	r.slot = slot
	return r, err
}
