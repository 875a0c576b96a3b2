package lease

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

const (
	// DefaultTTL is how long a lease lives after its last renewal.
	DefaultTTL = 10 * time.Second
	// MinTTL keeps the renewal interval and safety margin above the latency
	// of a Spanner commit.
	MinTTL = time.Second
	// MaxTTL keeps every live lease younger than the shortest cleanup period
	// (one day), so a table's row deletion policy never removes a live lease.
	MaxTTL = 24 * time.Hour
	// DefaultPollInterval bounds how often a blocked Acquire or an Observe
	// reads the lease row: at most one read per interval.
	DefaultPollInterval = time.Second
	// maxNameLength matches the STRING(1024) name and holder_id columns.
	maxNameLength = 1024
	// DefaultMaxTransactions bounds the read-write transactions a Client
	// runs at once for its callers (WithMaxTransactions).
	DefaultMaxTransactions = 64
)

// Option configures a Client.
type Option func(*config)

type config struct {
	ttl           time.Duration
	renewInterval time.Duration
	pollInterval  time.Duration
	holderID      string
	// maxTransactions bounds the caller-driven read-write transactions in
	// flight (see store.transact).
	maxTransactions int
	logger          *slog.Logger
	meterProvider   metric.MeterProvider
	tracerProvider  trace.TracerProvider
}

// WithTTL sets how long a lease lives without renewal (default 10s, from 1s
// to 24h). The TTL is stored with the Client's session in the table, so every
// reader judges a lease's expiry by the TTL its holder chose.
func WithTTL(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// WithRenewInterval sets how often held leases are renewed (default TTL/3,
// at most TTL/3 so that two renewals can fail, even by hanging until their
// timeout of half the interval, before the lease is lost).
func WithRenewInterval(d time.Duration) Option { return func(c *config) { c.renewInterval = d } }

// WithPollInterval sets the longest a blocked Acquire, Campaign or Observe
// waits between reads of a lease held in another process (default 1s).
// Waiters in the same process are woken at once by Release.
func WithPollInterval(d time.Duration) Option { return func(c *config) { c.pollInterval = d } }

// WithHolderID sets the identity recorded with every lease this Client holds
// (default hostname-pid-random). It is for people and Observe; ownership is
// checked against a per-Client session, so two Clients sharing an ID still
// exclude each other.
func WithHolderID(id string) Option { return func(c *config) { c.holderID = id } }

// WithMaxTransactions bounds how many read-write transactions the Client
// runs at once for its callers (default 64); further calls wait for a turn
// within their context. Renewals never wait for one. Spanner client
// versions from v1.88.0 no longer limit concurrent transactions through a
// session pool, so without a bound a burst of acquisitions on one hot name
// would only abort each other.
func WithMaxTransactions(n int) Option { return func(c *config) { c.maxTransactions = n } }

// WithLogger sets the logger for renewal failures, losses and transitions
// (default slog.Default()). Routine operations log at Debug.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithMeterProvider sets where the Client's metrics go (default: the
// OpenTelemetry global MeterProvider, so an application that set one up
// gets them with no code). See the package documentation for the
// instruments.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.meterProvider = mp }
}

// WithTracerProvider sets where the Client's spans go (default: the
// OpenTelemetry global TracerProvider). The Spanner client's own spans,
// which use the global provider, are children of them.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tracerProvider = tp }
}

func newConfig(opts []Option) (config, error) {
	c := config{ttl: DefaultTTL, pollInterval: DefaultPollInterval, maxTransactions: DefaultMaxTransactions}
	for _, o := range opts {
		o(&c)
	}
	if c.renewInterval == 0 {
		c.renewInterval = c.ttl / 3
	}
	if c.holderID == "" {
		c.holderID = defaultHolderID()
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	var errs []error
	if c.ttl < MinTTL || c.ttl > MaxTTL {
		errs = append(errs, fmt.Errorf("TTL %s is outside [%s, %s]", c.ttl, MinTTL, MaxTTL))
	}
	if c.renewInterval <= 0 || c.renewInterval > c.ttl/3 {
		errs = append(errs, fmt.Errorf("renew interval %s must be positive and at most TTL/3 (%s), so a lease survives two failed renewals", c.renewInterval, c.ttl/3))
	}
	if c.pollInterval <= 0 {
		errs = append(errs, fmt.Errorf("poll interval %s must be positive", c.pollInterval))
	}
	if c.maxTransactions < 1 {
		errs = append(errs, fmt.Errorf("max transactions %d must be at least 1", c.maxTransactions))
	}
	if err := validateName("holder ID", c.holderID); err != nil {
		errs = append(errs, err)
	}
	return c, errors.Join(errs...)
}

// safetyMargin is how long before a lease could expire on Spanner's clock
// its holder's Context is cancelled: time for the holder to stop work and
// room for clock-rate drift and Spanner's commit-timestamp uncertainty.
func (c config) safetyMargin() time.Duration { return c.ttl / 10 }

// renewTimeout bounds one renewal: half the interval, so that a renewal
// that hangs until it times out, a retry that does too, and a third try
// all fit before the local deadline (TTL - TTL/10, with the interval at
// most TTL/3).
func (c config) renewTimeout() time.Duration { return c.renewInterval / 2 }

// maxCallTimeout caps callTimeout for long TTLs.
const maxCallTimeout = 10 * time.Second

// callTimeout bounds every database call the Client makes that is not a
// renewal (which its interval bounds): an acquisition that commits later
// than TTL minus the margin would start already lost, and a release or a
// read settling an unknown outcome is worth nothing once the lease has
// expired. Without it the Spanner client allows a commit an hour.
func (c config) callTimeout() time.Duration {
	return min(c.ttl-c.safetyMargin(), maxCallTimeout)
}

// pollTimeout bounds one read of a waiter: a strong read of one row takes
// milliseconds, so a poll that Spanner has not answered in twice the poll
// interval (at least a second) is an outage, which the waiter records as
// what it last saw, rather than a caller's deadline ending a poll that
// could not tell.
func (c config) pollTimeout() time.Duration {
	return min(c.callTimeout(), max(2*c.pollInterval, time.Second))
}

// endTimeout bounds a Rollback sent after the caller's context ended: it
// only frees the transaction's locks sooner than Spanner would.
func (c config) endTimeout() time.Duration { return min(c.renewTimeout(), time.Second) }

// deadlineFrom is when a session renewed (or created) by a transaction that
// began at sent is presumed lost, on the monotonic clock.
func (c config) deadlineFrom(sent time.Time) time.Time {
	return sent.Add(c.ttl - c.safetyMargin())
}

// markFrom is the worker-ID high-water mark of a session renewed by a
// transaction that began at sent: by this process's wall clock, later than
// any moment its worker IDs may be used. Its IDs stop at the local deadline
// (deadlineFrom); the mark adds the safety margin on top, for a wall clock
// that steps forward by up to that much while the ID is held.
func (c config) markFrom(sent time.Time) time.Time {
	return sent.Round(0).Add(c.ttl)
}

func defaultHolderID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), randomHex(3))
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms.
	return hex.EncodeToString(b)
}

// ValidateName reports why name cannot name a lease, semaphore, job or
// worker pool (empty, not UTF-8, or over 1024 characters), or nil.
func ValidateName(name string) error { return validateName("lease name", name) }

func validateName(what, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%s is empty", what)
	case !utf8.ValidString(name):
		return fmt.Errorf("%s %q is not valid UTF-8", what, name)
	case utf8.RuneCountInString(name) > maxNameLength:
		return fmt.Errorf("%s is %d characters long; the limit is %d", what, utf8.RuneCountInString(name), maxNameLength)
	}
	return nil
}

// AcquireOption configures one acquisition.
type AcquireOption func(*acquireConfig)

type acquireConfig struct {
	payload []byte
}

// WithPayload stores data with the lease, readable by anyone through Holder
// and Observe: a leader's address, a job's parameters.
func WithPayload(b []byte) AcquireOption {
	return func(c *acquireConfig) { c.payload = b }
}

func newAcquireConfig(opts []AcquireOption) acquireConfig {
	var c acquireConfig
	for _, o := range opts {
		o(&c)
	}
	return c
}
