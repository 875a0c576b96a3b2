package emulator

import (
	"context"
	"fmt"
	"os"

	"cloud.google.com/go/spanner"
	"google.golang.org/api/option"
)

// NewClient connects to db on this emulator regardless of
// SPANNER_EMULATOR_HOST: the endpoint and insecure transport are passed as
// options, which spanner v1.87 honours (they override its env-derived ones).
// The pool opens one session up front rather than 100, since tests create many
// clients. Multiplexed sessions are off via the process environment, which
// Start and External set because the client reads nothing else. opts are
// applied last. The caller must Close the client before the emulator stops.
func (e *Emulator) NewClient(ctx context.Context, db string, opts ...option.ClientOption) (*spanner.Client, error) {
	return e.NewClientWithConfig(ctx, db, spanner.ClientConfig{}, opts...)
}

// NewClientWithConfig is NewClient with the application's own ClientConfig
// (its default transaction options, say): the session pool and native
// metrics are set as NewClient sets them.
func (e *Emulator) NewClientWithConfig(ctx context.Context, db string, cfg spanner.ClientConfig, opts ...option.ClientOption) (*spanner.Client, error) {
	if err := e.checkDatabase(db); err != nil {
		return nil, err
	}
	QuietClientBanner()
	pool := spanner.DefaultSessionPoolConfig
	pool.MinOpened = 1
	cfg.SessionPoolConfig = pool
	// Built-in metrics would otherwise probe for a GCP environment and try
	// to export to Cloud Monitoring, neither of which applies here.
	cfg.DisableNativeMetrics = true
	all := append(e.adminOptions(), opts...)
	c, err := spanner.NewClientWithConfig(ctx, db, cfg, all...)
	if err != nil {
		return nil, fmt.Errorf("creating spanner client for %s on emulator %s: %w", db, e.host, err)
	}
	return c, nil
}

// QuietClientBanner stops the spanner client from printing its 15-line
// options banner for every client it creates, in this process and in the
// processes it starts; an explicit GOOGLE_CLOUD_SPANNER_DISABLE_LOG_CLIENT_OPTIONS
// is respected.
func QuietClientBanner() {
	const env = "GOOGLE_CLOUD_SPANNER_DISABLE_LOG_CLIENT_OPTIONS"
	if _, set := os.LookupEnv(env); !set {
		_ = os.Setenv(env, "true")
	}
}
