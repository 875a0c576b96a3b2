package provider

import (
	"context"
	"fmt"
	"sync"

	"cloud.google.com/go/spanner"
	database "cloud.google.com/go/spanner/admin/database/apiv1"
	"google.golang.org/api/option"
)

// connections are the Spanner clients for one set of connection settings
// (endpoint and credentials). Clients are created on first use, so a plan
// that touches no table dials nothing, and are then reused by every resource
// and data source: a Terraform run may read many tables of one database.
type connections struct {
	// target names where the clients connect, for error messages.
	target string
	opts   []option.ClientOption

	mu      sync.Mutex
	admin   *database.DatabaseAdminClient
	clients map[string]*spanner.Client
}

func newConnections(target string, opts []option.ClientOption) *connections {
	return &connections{target: target, opts: opts, clients: map[string]*spanner.Client{}}
}

// Spanner returns the data client for db, the full database path.
func (c *connections) Spanner(ctx context.Context, db string) (*spanner.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if sc := c.clients[db]; sc != nil {
		return sc, nil
	}
	pool := spanner.DefaultSessionPoolConfig
	// Terraform runs a handful of reads per table; the default of 100
	// sessions opened up front would cost more than all of them.
	pool.MinOpened = 1
	cfg := spanner.ClientConfig{
		SessionPoolConfig: pool,
		// Built-in metrics probe for a GCP environment and export to Cloud
		// Monitoring from a process that lives for one Terraform command.
		DisableNativeMetrics: true,
	}
	// The client outlives this request (it is cached), so it must not be
	// torn down when the request's context ends.
	sc, err := spanner.NewClientWithConfig(context.WithoutCancel(ctx), db, cfg, c.opts...)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s on %s: %w", db, c.target, err)
	}
	c.clients[db] = sc
	return sc, nil
}

// Admin returns the database admin client, which runs DDL.
func (c *connections) Admin(ctx context.Context) (*database.DatabaseAdminClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.admin != nil {
		return c.admin, nil
	}
	admin, err := database.NewDatabaseAdminClient(context.WithoutCancel(ctx), c.opts...)
	if err != nil {
		return nil, fmt.Errorf("creating the Spanner database admin client for %s: %w", c.target, err)
	}
	c.admin = admin
	return admin, nil
}

// forget closes and drops the data client for db, for callers that know the
// database is going away (tests drop theirs).
func (c *connections) forget(db string) {
	c.mu.Lock()
	sc := c.clients[db]
	delete(c.clients, db)
	c.mu.Unlock()
	if sc != nil {
		sc.Close()
	}
}

// connectionCache keeps one connections per distinct provider configuration.
// The framework configures the provider for every Terraform command (and
// tests run many commands against one provider value), so clients are keyed
// by their settings rather than created per Configure.
type connectionCache struct {
	mu    sync.Mutex
	byKey map[string]*connections
}

// lookup returns the connections for key, or nil.
func (cc *connectionCache) lookup(key string) *connections {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.byKey[key]
}

// get returns the connections for key, creating them with create.
func (cc *connectionCache) get(key string, create func() *connections) *connections {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if c := cc.byKey[key]; c != nil {
		return c
	}
	if cc.byKey == nil {
		cc.byKey = map[string]*connections{}
	}
	c := create()
	cc.byKey[key] = c
	return c
}

// forget closes every data client for db.
func (cc *connectionCache) forget(db string) {
	cc.mu.Lock()
	all := make([]*connections, 0, len(cc.byKey))
	for _, c := range cc.byKey {
		all = append(all, c)
	}
	cc.mu.Unlock()
	for _, c := range all {
		c.forget(db)
	}
}
