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
// concurrent use from its first call. All leases a Client holds are renewed
// together, by one transaction per renewal interval.
type Client struct {
	db    *spanner.Client
	table string
	// sql is set by prepare, once the database's dialect is known; every
	// statement comes from it.
	sql      statements
	prepMu   sync.Mutex
	prepared bool
	cfg      config
	log      *slog.Logger
	tel      telemetry
	// signals is keyed by database and table so that Clients of one process
	// sharing a table wake each other's waiters on release.
	signalPrefix string

	// background is cancelled by Close; renewals run under it.
	background context.Context
	stop       context.CancelFunc
	// kick wakes the renewal loop when a let-go is waiting.
	kick chan struct{}

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
		table:        table,
		cfg:          cfg,
		signalPrefix: db.DatabaseName() + "\x00" + table + "\x00",
		background:   background,
		stop:         stop,
		kick:         make(chan struct{}, 1),
		names:        map[string]*nameState{},
		permits:      map[slotKey]*Lease{},
		known:        map[string]struct{}{},
	}
	c.sess = newSession(c)
	c.log = cfg.logger.With("table", table, "holder_id", cfg.holderID)
	c.tel = newTelemetry(table, cfg.meterProvider, cfg.tracerProvider)
	return c, nil
}

// dialects caches each database's dialect for the process: it is chosen
// when the database is created and never changes, so Clients of one
// database read it once between them.
var dialects sync.Map // database name -> locktable.Dialect

// prepare readies the Client's statements in its database's dialect, which
// it reads (one query) the first time this process uses the database.
// Every operation that reaches Spanner calls it first; NewClient does no I/O.
func (c *Client) prepare(ctx context.Context) error {
	c.prepMu.Lock()
	defer c.prepMu.Unlock()
	if c.prepared {
		return nil
	}
	cached, known := dialects.Load(c.db.DatabaseName())
	d, _ := cached.(locktable.Dialect)
	if !known {
		ctx, cancel := context.WithTimeout(ctx, c.cfg.callTimeout())
		defer cancel()
		read, err := locktable.DatabaseDialect(ctx, c.db)
		if err != nil {
			return fmt.Errorf("lease: %w", err)
		}
		stored, _ := dialects.LoadOrStore(c.db.DatabaseName(), read)
		d, _ = stored.(locktable.Dialect)
	}
	c.sql = newStatements(d, c.table)
	c.prepared = true
	return nil
}

// HolderID returns the identity this Client records with its leases.
func (c *Client) HolderID() string { return c.cfg.holderID }

// TTL returns the TTL this Client acquires leases with.
func (c *Client) TTL() time.Duration { return c.cfg.ttl }

// DDL returns the GoogleSQL statements that create a lock table named table
// at the latest schema version, for teams that manage DDL with their own
// tools (wrench, Liquibase, google_spanner_database); PostgreSQL.DDL gives
// them for a PostgreSQL-dialect database. It panics if table is not a valid
// name: letters, digits and underscores, starting with a letter.
func DDL(table string) []string { return GoogleSQL.DDL(table) }

// Dialect is one of Spanner's two SQL dialects, chosen when a database is
// created. A Client reads its database's dialect and speaks it; nothing
// else about it differs.
type Dialect string

// The dialects, spelled as Spanner's API spells them.
const (
	GoogleSQL  Dialect = "GOOGLE_STANDARD_SQL"
	PostgreSQL Dialect = "POSTGRESQL"
)

// DDL returns the statements, in dialect d, that create a lock table named
// table at the latest schema version. It panics if table is not a valid name.
func (d Dialect) DDL(table string) []string { return locktable.Dialect(d).DDL(table) }

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
	s := c.sess
	c.mu.Unlock()
	c.stop()
	c.keeper.Wait()

	for _, l := range held {
		l.end(ErrClosed, nil)
	}
	defer func() {
		for _, l := range held {
			announceRelease(c.signalPrefix + l.name)
		}
	}()
	// Every lease has ended, so worker IDs were last used before now.
	now := time.Now().Round(0)
	gos := s.takeLetGos()
	for _, l := range held {
		if l.sess == s && l.slot != lockSlot {
			gos = append(gos, letGo{leaseKey: l.key(), mark: now})
		}
	}
	s.mu.Lock()
	hasRow := s.state == sessionActive || s.state == sessionCreating
	s.mu.Unlock()
	s.end()
	if !hasRow {
		return nil
	}
	// Expiring the session releases every lock naming it at once; permit
	// rows are cleared one by one so that worker IDs record when they were
	// last used. The session row keeps its own mark, which worker IDs lost
	// earlier still name.
	ctx, cancel := context.WithTimeout(context.Background(), min(c.cfg.ttl, 5*time.Second))
	defer cancel()
	var err error
	for {
		batch := gos[:min(len(gos), maxSyncBatch)]
		gos = gos[len(batch):]
		w := keepSession
		if len(gos) == 0 {
			w = expireSession
		}
		if _, err = c.sync(ctx, s, nil, batch, w, "spannerlock-close"); err != nil || w == expireSession {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("lease: Close: releasing %d leases (they expire within %s): %w", len(held), c.cfg.ttl, c.explain(err))
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

// forget drops an ended lease from the Client and wakes local waiters.
func (c *Client) forget(l *Lease) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l.slot != lockSlot {
		if k := l.key().slotKey(); c.permits[k] == l {
			delete(c.permits, k)
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
	missing := strings.Contains(msg, "Table not found") || strings.Contains(msg, "Column not found") ||
		strings.Contains(msg, "Unrecognized name") || strings.Contains(msg, "does not exist")
	// A table from before schema version 2 has no default for the token.
	outdated := strings.Contains(msg, "token") && (strings.Contains(msg, "null value") || strings.Contains(msg, "NULL value") || strings.Contains(msg, "NOT NULL"))
	if (code == codes.InvalidArgument || code == codes.NotFound || code == codes.FailedPrecondition) && (missing || outdated) {
		ddl := "lease.DDL"
		if c.prepared && c.sql.pg() {
			// Quoted names keep their case in PostgreSQL, so "Locks" and
			// "locks" are two tables there.
			ddl = "lease.PostgreSQL.DDL, with the table's name in the same letter case"
		}
		return fmt.Errorf("%w (is table %s created at schema version %d? apply it with Terraform's spannerlock_table or %s)", err, c.table, locktable.Latest, ddl)
	}
	return err
}

// runInBackground runs fn, each try bounded by the call timeout, retrying
// transient failures with backoff for at most a TTL: by then whatever it
// settles has expired on its own.
func (c *Client) runInBackground(fn func(ctx context.Context) error) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.ttl)
		defer cancel()
		for attempt := 0; ; attempt++ {
			tctx, tcancel := context.WithTimeout(ctx, c.cfg.callTimeout())
			err := fn(tctx)
			tcancel()
			if err == nil || !transient(err) || ctx.Err() != nil {
				if err != nil {
					c.log.Warn("background write failed; what it settles expires within the TTL", "err", c.explain(err))
				}
				return
			}
			t := time.NewTimer(backoff(attempt, c.cfg.renewInterval))
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
	}()
}

// transient reports whether an error is worth retrying: the Spanner client
// has already retried what it can, so these are outages, not mistakes. A
// call that ran out of the Client's own bound (callTimeout) is one too;
// callers check their own context first. Other errors that did not come
// from Spanner (ErrCode says Unknown for them) never are.
func transient(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	switch spanner.ErrCode(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted, codes.ResourceExhausted, codes.Internal:
		return true
	}
	return false
}
