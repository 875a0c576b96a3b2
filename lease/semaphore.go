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
		s, err := readSemaphore(ctx, tx, c.sql, name)
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
		s, err := readSemaphore(ctx, tx, c.sql, name)
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
	s, err := readSemaphore(ctx, c.db.Single(), c.sql, name)
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
	next  int64
	slots []row
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

// soonest is how long until the first live permit expires, 0 if none is live.
func (s semaphoreState) soonest() row {
	var first row
	for _, r := range s.live() {
		if !first.live || r.remaining() < first.remaining() {
			first = r
		}
	}
	return first
}

func readSemaphore(ctx context.Context, q querier, sql statements, name string) (semaphoreState, error) {
	s := semaphoreState{name: name}
	err := q.Query(ctx, spanner.Statement{SQL: sql.selectSemaphore, Params: map[string]any{"name": name}}).Do(func(sr *spanner.Row) error {
		s.found = true
		var (
			r        row
			slot     spanner.NullInt64
			name     spanner.NullString
			token    spanner.NullInt64
			liveness spanner.NullBool
		)
		fields := []any{&s.kind, &s.permits, &s.next, &name, &token, &r.holderID, &r.sessionID, &r.acquired, &r.renewed, &r.expires, &liveness, &r.payload, &r.now, &slot, &r.highWater}
		if err := sr.Columns(fields...); err != nil {
			return err
		}
		if slot.Valid {
			r.found, r.name, r.slot, r.token, r.live = true, name.StringVal, slot.Int64, token.Int64, liveness.Bool
			s.slots = append(s.slots, r)
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

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
