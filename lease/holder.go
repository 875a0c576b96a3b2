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
	// RenewedAt is the commit timestamp of the last renewal.
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
	r, err := readRow(ctx, c.db.Single(), c.sql, name)
	if err != nil {
		return Holder{}, c.explain(err)
	}
	if !r.live {
		return Holder{}, fmt.Errorf("%w: %q", ErrNoHolder, name)
	}
	return r.holder(), nil
}

// Holders returns every live lock in the table, by name. Semaphore permits
// and worker IDs are reported by Semaphore.
func (c *Client) Holders(ctx context.Context) ([]Holder, error) {
	var holders []Holder
	err := c.db.Single().Query(ctx, spanner.Statement{SQL: c.sql.selectLive}).Do(func(sr *spanner.Row) error {
		r, err := scanLockRow(sr)
		holders = append(holders, r.holder())
		return err
	})
	if err != nil {
		return nil, c.explain(err)
	}
	return holders, nil
}

// row is a lock or permit row with Spanner's verdict on it.
type row struct {
	name      string
	slot      int64 // lockSlot for a lock
	found     bool
	token     int64
	holderID  spanner.NullString
	sessionID spanner.NullString
	acquired  spanner.NullTime
	renewed   spanner.NullTime
	expires   spanner.NullTime
	live      bool
	payload   []byte
	// now is CURRENT_TIMESTAMP() when the row was read: Spanner's clock, for
	// measuring how long until expires without consulting a local clock.
	now time.Time

	kind      spanner.NullString // locks only
	completed bool               // locks only: a RunOnce slot that succeeded
	highWater spanner.NullTime   // permits only
}

// lockSlot is the slot of a lock: locks have none.
const lockSlot = -1

func (r row) holder() Holder {
	return Holder{
		Name:       r.name,
		HolderID:   r.holderID.StringVal,
		Token:      r.token,
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
	return r.live && r.sessionID.Valid && r.sessionID.StringVal == session && r.token == token
}

// querier is what both transactions and single reads offer.
type querier interface {
	Query(ctx context.Context, statement spanner.Statement) *spanner.RowIterator
}

// readRow is the one read of a lock row. A missing row is a free lease with
// found == false.
func readRow(ctx context.Context, q querier, sql statements, name string) (row, error) {
	r := row{name: name, slot: lockSlot}
	it := q.Query(ctx, spanner.Statement{SQL: sql.selectRow, Params: map[string]any{"name": name}})
	err := it.Do(func(sr *spanner.Row) error {
		var err error
		r, err = scanLockRow(sr)
		return err
	})
	return r, err
}

// readPermitRow is the one read of a permit row.
func readPermitRow(ctx context.Context, q querier, sql statements, name string, slot int64) (row, error) {
	r := row{name: name, slot: slot}
	it := q.Query(ctx, spanner.Statement{SQL: sql.selectPermit, Params: map[string]any{"name": name, "slot": slot}})
	err := it.Do(func(sr *spanner.Row) error {
		var err error
		r, err = scanPermitRow(sr)
		return err
	})
	return r, err
}

// rowFields are the destinations of rowColumns, in order.
func (r *row) rowFields() []any {
	return []any{&r.name, &r.token, &r.holderID, &r.sessionID, &r.acquired, &r.renewed, &r.expires, &r.live, &r.payload, &r.now}
}

func scanLockRow(sr *spanner.Row) (row, error) {
	r := row{found: true, slot: lockSlot}
	err := sr.Columns(append(r.rowFields(), &r.kind, &r.completed)...)
	return r, err
}

func scanPermitRow(sr *spanner.Row) (row, error) {
	r := row{found: true}
	err := sr.Columns(append(r.rowFields(), &r.slot, &r.highWater)...)
	return r, err
}
