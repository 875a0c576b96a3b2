package lease

import (
	"context"
	"errors"
	"fmt"

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
	if err := c.st.prepare(ctx); err != nil {
		return fmt.Errorf("lease: SetPermits %q: %w", name, err)
	}
	if err := c.st.setPermits(ctx, name, spanner.NullInt64{Int64: n, Valid: true}, true); err != nil {
		return fmt.Errorf("lease: SetPermits %q: %w", name, c.st.explain(err))
	}
	return nil
}

// Undeclare removes the semaphore's limit, so that AcquirePermit fails with
// ErrUnknownSemaphore. Permits still held stay valid until released. The
// semaphore's token counter is kept, so declaring it again continues it.
func (c *Client) Undeclare(ctx context.Context, name string) error {
	if err := c.st.prepare(ctx); err != nil {
		return fmt.Errorf("lease: Undeclare %q: %w", name, err)
	}
	if err := c.st.setPermits(ctx, name, spanner.NullInt64{}, false); err != nil {
		return fmt.Errorf("lease: Undeclare %q: %w", name, c.st.explain(err))
	}
	return nil
}

// Semaphores returns every declared semaphore with its limit and live
// permits, in name order, in one read-only transaction. Like Holders, it
// reads the whole table.
func (c *Client) Semaphores(ctx context.Context) ([]Semaphore, error) {
	if err := c.st.prepare(ctx); err != nil {
		return nil, err
	}
	var sems []Semaphore
	// A retry reads both queries again, in a new transaction: the two are
	// one snapshot.
	err := c.st.readAgain(ctx, func(ctx context.Context) error {
		sems = nil
		txn := c.st.db.ReadOnlyTransaction()
		defer txn.Close()
		byName := map[string]int{}
		err := txn.Query(ctx, c.st.sql.selectSemaphores.bind(nil)).Do(func(sr *spanner.Row) error {
			var s Semaphore
			if err := sr.Columns(&s.Name, &s.Permits); err != nil {
				return err
			}
			byName[s.Name] = len(sems)
			sems = append(sems, s)
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
			if i, ok := byName[r.name]; ok && r.parentKind.StringVal == kindSemaphore {
				sems[i].Holders = append(sems[i].Holders, r.holder())
			}
			return nil
		})
	})
	if err != nil {
		return nil, c.st.explain(err)
	}
	return sems, nil
}

// Semaphore returns the named semaphore's limit and live permits; the error
// matches ErrUnknownSemaphore when it is not declared.
func (c *Client) Semaphore(ctx context.Context, name string) (Semaphore, error) {
	if err := validateName("semaphore name", name); err != nil {
		return Semaphore{}, fmt.Errorf("lease: Semaphore: %w", err)
	}
	if err := c.st.prepare(ctx); err != nil {
		return Semaphore{}, err
	}
	s, err := readSemaphore(ctx, c.st.db.Single(), c.st.sql, name)
	if err != nil {
		return Semaphore{}, c.st.explain(err)
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
