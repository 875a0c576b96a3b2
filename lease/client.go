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
	db      *spanner.Client
	sql     statements
	cfg     config
	log     *slog.Logger
	session string
	// signals is keyed by database and table so that Clients of one process
	// sharing a table wake each other's waiters on release.
	signalPrefix string

	// background is cancelled by Close; renewals run under it.
	background context.Context
	stop       context.CancelFunc

	mu     sync.Mutex
	closed bool
	names  map[string]*nameState
	// permits are the semaphore permits and worker IDs this Client holds.
	permits map[slotKey]*Lease
	keeping bool
	kick    chan struct{}
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
		session:      randomHex(16),
		signalPrefix: db.DatabaseName() + "\x00" + table + "\x00",
		background:   background,
		stop:         stop,
		names:        map[string]*nameState{},
		permits:      map[slotKey]*Lease{},
		kick:         make(chan struct{}, 1),
	}
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
	if len(ended) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(c.cfg.ttl, 5*time.Second))
	defer cancel()
	_, err := c.releaseLeases(ctx, ended)
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

// releaseLeases clears, in one transaction, the session of every given lease
// still live and held by this Client, and returns how many it cleared.
func (c *Client) releaseLeases(ctx context.Context, leases []*Lease) (int64, error) {
	g := groupLeases(leases)
	var cleared int64
	_, err := c.db.ReadWriteTransactionWithOptions(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		releasedAt := map[string]any{"high_water": time.Now()}
		counts, err := tx.BatchUpdate(ctx, g.statements(c, c.sql.release, c.sql.releasePermits, releasedAt))
		cleared = sum(counts)
		return err
	}, spanner.TransactionOptions{TransactionTag: "spannerlock-release"})
	return cleared, err
}

// leaseGroups splits leases into the parameters of the lock and permit statements.
type leaseGroups struct {
	locks       []lockKey
	lockNames   []string
	permits     []permitKey
	permitNames []string
}

func groupLeases(leases []*Lease) leaseGroups {
	var g leaseGroups
	for _, l := range leases {
		if l.slot == lockSlot {
			g.locks = append(g.locks, lockKey{Name: l.name, Token: l.token})
			g.lockNames = append(g.lockNames, l.name)
		} else {
			g.permits = append(g.permits, permitKey{Name: l.name, Slot: l.slot, Token: l.token})
			g.permitNames = append(g.permitNames, l.name)
		}
	}
	return g
}

// statements binds the lock and permit forms of one statement to the
// groups that are not empty; extra parameters go to both.
func (g leaseGroups) statements(c *Client, lockSQL, permitSQL string, extra map[string]any) []spanner.Statement {
	var stmts []spanner.Statement
	if len(g.locks) > 0 {
		params := map[string]any{"names": g.lockNames, "leases": g.locks, "session": c.session}
		stmts = append(stmts, spanner.Statement{SQL: lockSQL, Params: params})
	}
	if len(g.permits) > 0 {
		params := map[string]any{"names": g.permitNames, "permits": g.permits, "session": c.session}
		for k, v := range extra {
			params[k] = v
		}
		stmts = append(stmts, spanner.Statement{SQL: permitSQL, Params: params})
	}
	return stmts
}

func sum(counts []int64) int64 {
	var n int64
	for _, c := range counts {
		n += c
	}
	return n
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
