package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"cloud.google.com/go/spanner"
)

// ErrUnknownSemaphore means a semaphore was used without being declared.
var ErrUnknownSemaphore = errors.New("lease: unknown semaphore")

// Kinds of parent rows (the kind column); NULL is a lock.
const (
	kindSemaphore = "semaphore"
	kindWorkers   = "workers"
)

// Semaphore is a semaphore's capacity and the holders of its live permits.
type Semaphore struct {
	Name    string
	Permits int64
	// Holders are the live permits, each with its own token.
	Holders []Holder
}

// InUse returns the number of live permits, which may exceed Permits for a
// while after the limit is lowered.
func (s Semaphore) InUse() int { return len(s.Holders) }

// SetPermits declares the named semaphore with n permits, or changes its
// limit. Lowering the limit takes no permit away: holders above it keep theirs
// until they release, and no new permit is granted until fewer than n are held.
func (c *Client) SetPermits(ctx context.Context, name string, n int64) error {
	if err := validateName("semaphore name", name); err != nil {
		return fmt.Errorf("lease: SetPermits: %w", err)
	}
	if n < 1 {
		return fmt.Errorf("lease: SetPermits %q: permits must be at least 1, got %d", name, n)
	}
	_, err := c.db.ReadWriteTransactionWithOptions(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		s, err := readSemaphore(ctx, tx, c.sql, name, "")
		switch {
		case err != nil:
			return err
		case !s.found:
			// The schema's default seeds the token, as for a lock's first row.
			return tx.Query(ctx, spanner.Statement{SQL: c.sql.insertParent, Params: map[string]any{
				"name": name, "kind": kindSemaphore, "permits": n,
			}}).Do(func(*spanner.Row) error { return nil })
		case s.kind.StringVal != kindSemaphore:
			return fmt.Errorf("%q is %s, not a semaphore: choose another name", name, describeKind(s.kind))
		}
		return tx.BufferWrite([]*spanner.Mutation{spanner.Update(c.sql.table, []string{"name", "permits"}, []any{name, n})})
	}, spanner.TransactionOptions{TransactionTag: "spannerlock-set-permits"})
	if err != nil {
		return fmt.Errorf("lease: SetPermits %q: %w", name, c.explain(err))
	}
	return nil
}

// Undeclare removes the semaphore's limit, so that AcquirePermit fails with
// ErrUnknownSemaphore. Permits still held stay valid until released. The
// semaphore's token counter is kept, so declaring it again continues it.
func (c *Client) Undeclare(ctx context.Context, name string) error {
	_, err := c.db.ReadWriteTransactionWithOptions(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		s, err := readSemaphore(ctx, tx, c.sql, name, "")
		if err != nil || !s.found || s.kind.StringVal != kindSemaphore {
			return err
		}
		return tx.BufferWrite([]*spanner.Mutation{spanner.Update(c.sql.table, []string{"name", "permits"}, []any{name, nil})})
	}, spanner.TransactionOptions{TransactionTag: "spannerlock-undeclare"})
	if err != nil {
		return fmt.Errorf("lease: Undeclare %q: %w", name, c.explain(err))
	}
	return nil
}

// Semaphore returns the named semaphore's limit and live permits; the error
// matches ErrUnknownSemaphore when it is not declared.
func (c *Client) Semaphore(ctx context.Context, name string) (Semaphore, error) {
	if err := validateName("semaphore name", name); err != nil {
		return Semaphore{}, fmt.Errorf("lease: Semaphore: %w", err)
	}
	s, err := readSemaphore(ctx, c.db.Single(), c.sql, name, "")
	if err != nil {
		return Semaphore{}, c.explain(err)
	}
	if err := s.declared(); err != nil {
		return Semaphore{}, err
	}
	out := Semaphore{Name: name, Permits: s.permits.Int64}
	for _, r := range s.slots {
		if r.live {
			out.Holders = append(out.Holders, r.holder())
		}
	}
	return out, nil
}

// semaphoreState is a semaphore's or worker pool's parent row and permits.
type semaphoreState struct {
	name    string
	found   bool
	kind    spanner.NullString
	permits spanner.NullInt64
	// next is the token the next permit gets.
	next  spanner.NullInt64
	slots []row
	// self is whether the reader's session is live (NULL: no row).
	self spanner.NullBool
}

func (s semaphoreState) declared() error {
	if s.found && s.kind.StringVal == kindSemaphore && s.permits.Valid {
		return nil
	}
	return fmt.Errorf("%w: %q is not declared; declare it with the spannerlock_semaphore Terraform resource or Client.SetPermits", ErrUnknownSemaphore, s.name)
}

// live returns the live permits.
func (s semaphoreState) live() []row {
	var live []row
	for _, r := range s.slots {
		if r.live {
			live = append(live, r)
		}
	}
	return live
}

// slot returns the row of slot n, or a zero row.
func (s semaphoreState) slot(n int64) row {
	for _, r := range s.slots {
		if r.slot == n {
			return r
		}
	}
	return row{}
}

// soonest returns the live permit that expires first.
func (s semaphoreState) soonest() row {
	var first row
	for _, r := range s.live() {
		if !first.live || r.remaining() < first.remaining() {
			first = r
		}
	}
	return first
}

// slotRow is one element of selectSemaphore's slots array.
type slotRow struct {
	Slot             int64              `spanner:"slot"`
	Token            int64              `spanner:"token"`
	HolderID         spanner.NullString `spanner:"holder_id"`
	SessionID        spanner.NullString `spanner:"session_id"`
	AcquiredAt       spanner.NullTime   `spanner:"acquired_at"`
	RenewedAt        spanner.NullTime   `spanner:"renewed_at"`
	ExpiresAt        spanner.NullTime   `spanner:"expires_at"`
	Live             bool               `spanner:"live"`
	Payload          []byte             `spanner:"payload"`
	HighWater        spanner.NullTime   `spanner:"high_water"`
	SessionHighWater spanner.NullTime   `spanner:"session_high_water"`
}

// readSemaphore reads a semaphore or worker pool; self names the reader's
// session ("" for none).
func readSemaphore(ctx context.Context, q querier, sql statements, name, self string) (semaphoreState, error) {
	s := semaphoreState{name: name}
	err := q.Query(ctx, spanner.Statement{SQL: sql.selectSemaphore, Params: map[string]any{"name": name, "self": self}}).Do(func(sr *spanner.Row) error {
		var (
			slots []*slotRow
			now   time.Time
		)
		if err := sr.Columns(&s.found, &s.kind, &s.permits, &s.next, &slots, &now, &s.self); err != nil {
			return err
		}
		for _, p := range slots {
			s.slots = append(s.slots, row{
				name: name, slot: p.Slot, found: true, token: spanner.NullInt64{Int64: p.Token, Valid: true},
				holderID: p.HolderID, sessionID: p.SessionID, acquired: p.AcquiredAt, renewed: p.RenewedAt,
				expires: p.ExpiresAt, live: p.Live, payload: p.Payload, now: now,
				highWater: p.HighWater, sessionHighWater: p.SessionHighWater,
			})
		}
		return nil
	})
	return s, err
}

func describeKind(kind spanner.NullString) string {
	switch kind.StringVal {
	case kindSemaphore:
		return "a semaphore"
	case kindWorkers:
		return "a worker-ID pool"
	}
	return "a lock"
}
