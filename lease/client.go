package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
)

// Client acquires and renews leases in one lock table. It is safe for
// concurrent use from its first call. All leases a Client holds are renewed
// together, by one transaction per renewal interval.
//
// A Client is the public face of three parts: the store (store.go,
// transactions.go, sql.go, row.go) runs every statement and transaction;
// the keeper (keeper.go, session.go) owns the Client's session and renews
// it; the Client takes, waits for and lets go of leases over them.
type Client struct {
	st     *store
	keeper *keeper
	table  string
	cfg    config
	log    *slog.Logger
	tel    telemetry

	mu     sync.Mutex
	closed bool
	// names is what this Client is doing with each lock name.
	names map[string]*nameState
	// known are lock names whose rows exist, so acquisitions of them skip
	// the attempt to insert a first row.
	known map[string]struct{}
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
	c := &Client{
		table: table,
		cfg:   cfg,
		names: map[string]*nameState{},
		known: map[string]struct{}{},
	}
	c.st = newStore(db, table, cfg)
	c.log = cfg.logger.With("table", table, "holder_id", cfg.holderID)
	c.tel = newTelemetry(table, cfg.meterProvider, cfg.tracerProvider)
	c.keeper = newKeeper(c.st, cfg, c.log, c.tel)
	return c, nil
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
	for _, st := range c.names {
		close(st.changed)
		st.changed = make(chan struct{})
	}
	c.mu.Unlock()
	s, held, expiring := c.keeper.close()

	for _, l := range held {
		l.end(ErrClosed, nil)
	}
	defer func() {
		for _, l := range held {
			announceRelease(c.st.signalKey(l.name))
		}
	}()
	// Every lease has ended, so worker IDs were last used before now.
	now := time.Now()
	gos := s.takeLetGos()
	for _, l := range held {
		if l.sess == s && l.slot != lockSlot {
			gos = append(gos, letGo{leaseKey: l.key(), mark: l.stoppedAt(now)})
		}
	}
	if ended, mayBeLive := s.end(lossClosed); ended && mayBeLive {
		expiring = append(expiring, s.id)
	}
	if len(expiring) == 0 {
		return nil
	}
	// Expiring the session releases every lock naming it at once; permit
	// rows are cleared one by one so that worker IDs record when they were
	// last used. The session row keeps its own mark, which worker IDs lost
	// earlier still name.
	ctx, cancel := context.WithTimeout(context.Background(), min(c.cfg.ttl, 5*time.Second))
	defer cancel()
	var err error
	if len(gos) == 0 {
		err = c.st.expireSessions(ctx, expiring, c.cfg.holderID)
	}
	for len(gos) > 0 {
		batch := gos[:min(len(gos), maxSyncBatch)]
		gos = gos[len(batch):]
		var expire []string
		if len(gos) == 0 {
			expire = expiring
		}
		if _, err = c.keeper.release(ctx, keeperLane, "spannerlock-close", s, batch, nil, expire); err != nil {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("lease: Close: releasing %s (they expire within %s): %w", counted(len(held), "lease"), c.cfg.ttl, c.st.explain(err))
	}
	return nil
}

// isClosed reports whether Close was called.
func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}
