package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/spanner"
	"google.golang.org/grpc/codes"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
)

// Client acquires and renews leases in one lock table. It is safe for
// concurrent use. All leases a Client holds are renewed together, by one
// transaction per renewal interval.
type Client struct {
	db  *spanner.Client
	sql statements
	cfg config
	log *slog.Logger
	// signals is keyed by database and table so that Clients of one process
	// sharing a table wake each other's waiters on release.
	signalPrefix string

	// background is cancelled by Close; renewals run under it.
	background context.Context
	stop       context.CancelFunc

	mu     sync.Mutex
	closed bool
	// sess is the session new acquisitions join; see session.
	sess  *session
	names map[string]*nameState
	// permits are the semaphore permits and worker IDs this Client holds.
	permits map[slotKey]*Lease
	// known are lock names whose rows exist, so acquisitions of them skip
	// the attempt to insert a first row.
	known   map[string]struct{}
	keeping bool
	keeper  sync.WaitGroup
}

type slotKey struct {
	name string
	slot int64
}

// nameState is what this Client is doing with one lease name. A Client runs
// at most one acquisition per name at a time and holds a name at most once.
type nameState struct {
	acquiring bool
	held      *Lease
	// changed is closed when the name stops being acquired or held here.
	changed chan struct{}
}

// NewClient returns a Client for the lock table named table in db. It does no
// I/O; create the table first with Terraform (spannerlock_table) or DDL.
// It rejects a TTL below 1s and a renew interval above TTL/3.
func NewClient(db *spanner.Client, table string, opts ...Option) (*Client, error) {
	if db == nil {
		return nil, errors.New("lease: NewClient: nil *spanner.Client")
	}
	if err := locktable.ValidateTableName(table); err != nil {
		return nil, fmt.Errorf("lease: NewClient: %w", err)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, fmt.Errorf("lease: NewClient: %w", err)
	}
	background, stop := context.WithCancel(context.Background())
	c := &Client{
		db:           db,
		sql:          newStatements(table),
		cfg:          cfg,
		signalPrefix: db.DatabaseName() + "\x00" + table + "\x00",
		background:   background,
		stop:         stop,
		names:        map[string]*nameState{},
		permits:      map[slotKey]*Lease{},
		known:        map[string]struct{}{},
	}
	c.sess = newSession(c)
	c.log = cfg.logger.With("table", table, "holder_id", cfg.holderID)
	return c, nil
}

// HolderID returns the identity this Client records with its leases.
func (c *Client) HolderID() string { return c.cfg.holderID }

// TTL returns the TTL this Client acquires leases with.
func (c *Client) TTL() time.Duration { return c.cfg.ttl }

// DDL returns the statements that create a lock table named table at the
// latest schema version, for teams that manage DDL with their own tools
// (wrench, Liquibase, google_spanner_database). It panics if table is not a
// valid name: letters, digits and underscores, starting with a letter.
func DDL(table string) []string {
	return locktable.DDL(table)
}

// Close releases every lease the Client holds, cancels their contexts with
// cause ErrClosed, and makes blocked calls return ErrClosed. It does not
// close the spanner.Client. It returns within the TTL (at most 5s) even when
// Spanner is unreachable; a lease whose release did not reach Spanner expires
// after its TTL.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	held := c.leasesLocked()
	for _, st := range c.names {
		close(st.changed)
		st.changed = make(chan struct{})
	}
	c.mu.Unlock()
	c.stop()
	c.keeper.Wait()

	var ended []*Lease
	for _, l := range held {
		if l.end(ErrClosed) {
			ended = append(ended, l)
		}
	}
	s := c.sess
	created, _, _ := s.state()
	s.end()
	if !created {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(c.cfg.ttl, 5*time.Second))
	defer cancel()
	// Deleting the session releases every lock naming it at once. Permit
	// rows are released one by one so worker IDs record when they were last
	// used; a Client holds few of those.
	releasedAt := time.Now()
	var stmts []spanner.Statement
	for _, l := range ended {
		if l.slot != lockSlot && l.sess == s {
			stmts = append(stmts, l.releaseStatement(releasedAt))
		}
	}
	_, err := c.db.ReadWriteTransactionWithOptions(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		if len(stmts) > 0 {
			if _, err := tx.BatchUpdate(ctx, stmts); err != nil {
				return err
			}
		}
		return tx.BufferWrite([]*spanner.Mutation{spanner.Delete(c.sql.sessions, spanner.Key{s.id})})
	}, spanner.TransactionOptions{TransactionTag: "spannerlock-close"})
	for _, l := range ended {
		announceRelease(c.signalPrefix + l.name)
	}
	if err != nil {
		return fmt.Errorf("lease: Close: releasing %d leases (they expire within %s): %w", len(ended), c.cfg.ttl, c.explain(err))
	}
	return nil
}

// leasesLocked returns every lease the Client holds; c.mu is held.
func (c *Client) leasesLocked() []*Lease {
	var leases []*Lease
	for _, st := range c.names {
		if st.held != nil {
			leases = append(leases, st.held)
		}
	}
	for _, l := range c.permits {
		leases = append(leases, l)
	}
	return leases
}

// update runs one DML statement in its own transaction and returns how many
// rows it changed.
func (c *Client) update(ctx context.Context, tag string, stmt spanner.Statement) (int64, error) {
	var n int64
	_, err := c.db.ReadWriteTransactionWithOptions(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		var err error
		n, err = tx.Update(ctx, stmt)
		return err
	}, spanner.TransactionOptions{TransactionTag: tag})
	return n, err
}

// forget drops an ended lease from the Client and wakes local waiters.
func (c *Client) forget(l *Lease) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l.slot != lockSlot {
		if c.permits[slotKey{l.name, l.slot}] == l {
			delete(c.permits, slotKey{l.name, l.slot})
		}
		return
	}
	if st := c.names[l.name]; st != nil && st.held == l {
		st.held = nil
		c.settle(l.name, st)
	}
}

// state returns the state of name, creating it.
func (c *Client) state(name string) *nameState {
	st := c.names[name]
	if st == nil {
		st = &nameState{changed: make(chan struct{})}
		c.names[name] = st
	}
	return st
}

// settle records that name is neither acquiring nor held here any more if
// that is so, and wakes this Client's waiters for it.
func (c *Client) settle(name string, st *nameState) {
	if !st.acquiring && st.held == nil {
		delete(c.names, name)
	}
	close(st.changed)
	st.changed = make(chan struct{})
}

// explain adds what to do to errors whose cause is a missing or outdated table.
func (c *Client) explain(err error) error {
	if err == nil {
		return nil
	}
	code := spanner.ErrCode(err)
	msg := err.Error()
	missing := strings.Contains(msg, "Table not found") || strings.Contains(msg, "Column not found") || strings.Contains(msg, "Unrecognized name")
	// A table from before schema version 2 has no default for the token.
	outdated := strings.Contains(msg, "token") && (strings.Contains(msg, "null value") || strings.Contains(msg, "NULL value") || strings.Contains(msg, "NOT NULL"))
	if (code == codes.InvalidArgument || code == codes.NotFound || code == codes.FailedPrecondition) && (missing || outdated) {
		return fmt.Errorf("%w (is table %s created at schema version %d? apply it with Terraform's spannerlock_table or lease.DDL)", err, c.sql.table, locktable.Latest)
	}
	return err
}

// transient reports whether an error is worth retrying: the Spanner client
// has already retried what it can, so these are outages, not mistakes. Errors
// that did not come from Spanner (ErrCode says Unknown for them) never are.
func transient(err error) bool {
	switch spanner.ErrCode(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted, codes.ResourceExhausted, codes.Internal:
		return true
	}
	return false
}
