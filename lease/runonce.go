package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// RunOnce runs fn for one slot of a schedule (job "report", slot 03:00 UTC
// today) on exactly one of the replicas that call it, and records success so
// that no replica runs that slot again, however late it arrives, for as long
// as the slot's row is kept: a table with cleanup_after deletes it that long
// after the slot was last touched, and a call after that runs the slot again.
//
// The replica that takes the slot's lock runs fn under the lock's Context and
// returns (true, nil) once success is recorded. When fn fails, its error is
// returned with ran == false and the slot stays open: another call may run
// it. When fn panics, the slot is released and the panic goes on. Replicas
// that find the slot running wait for it to finish or fail (then one of them
// runs it) and return (false, nil) once it has succeeded elsewhere. A replica
// that crashes mid-run lets another take over when its lease expires. Every
// run counts in the slot's row (Jobs reports them); WithMaxFailures bounds
// how often a failing slot is tried. WithoutWaiting makes a call that finds
// the slot running return at once instead of waiting.
//
// If the lock is lost while fn runs (the holder paused past its TTL), fn may
// run again elsewhere; RunOnce then returns ran == true with an error
// matching ErrLeaseLost. Fence fn's effects with l.Guard or the token (from
// the context, see LeaseFromContext) when a second run must be harmless.
// If the Client is closed while fn runs, nothing is recorded and RunOnce
// returns ran == true with an error matching ErrClosed: the slot stays open.
//
// Recording success, and releasing the slot after a failure, are bounded
// by the call timeout (the TTL minus a tenth, at most 10s) rather than by
// ctx, so that a caller whose context ends as fn returns still records what
// fn did.
func (c *Client) RunOnce(ctx context.Context, job string, slot time.Time, fn func(ctx context.Context) error, opts ...RunOnceOption) (ran bool, err error) {
	if err := validateName("job name", job); err != nil {
		return false, fmt.Errorf("lease: RunOnce: %w", err)
	}
	name := JobSlotName(job, slot)
	if err := validateName("job slot", name); err != nil {
		return false, fmt.Errorf("lease: RunOnce: %w", err)
	}
	var cfg runOnceConfig
	for _, o := range opts {
		o(&cfg)
	}
	ctx, span := c.tel.start(ctx, "RunOnce", attrName.String(name))
	ran, err = c.runOnce(ctx, name, fn, cfg)
	outcome := "ran"
	switch {
	case err != nil:
		outcome = resultError
	case !ran:
		outcome = "done_elsewhere"
	}
	end(span, outcome, err)
	return ran, err
}

// RunOnceOption configures one RunOnce call.
type RunOnceOption func(*runOnceConfig)

type runOnceConfig struct {
	maxFailures int64
	noWait      bool
}

// WithoutWaiting makes RunOnce try the slot once, as TryAcquire does: a slot
// running elsewhere (or with others in line for it) returns an error
// matching ErrNotAcquired at once, without fn running, and the call never
// takes a place in the slot's line, so nothing of it is left to take the
// slot later. A slot done already still returns (false, nil).
func WithoutWaiting() RunOnceOption {
	return func(c *runOnceConfig) { c.noWait = true }
}

// WithMaxFailures makes RunOnce give up on a slot whose runs have failed,
// or crashed, n times in all, on any replica: it returns an error matching
// ErrTooManyFailures without running fn. n below 1 means no bound (the
// default).
func WithMaxFailures(n int) RunOnceOption {
	return func(c *runOnceConfig) { c.maxFailures = int64(max(n, 0)) }
}

// JobSlotName is the name of the lock RunOnce takes for a job's slot: the
// job, "@", and the slot in UTC as RFC 3339 with nanoseconds. Holder and
// ForceRelease take it.
func JobSlotName(job string, slot time.Time) string {
	return job + "@" + slot.UTC().Format(time.RFC3339Nano)
}

func (c *Client) runOnce(ctx context.Context, name string, fn func(ctx context.Context) error, cfg runOnceConfig) (bool, error) {
	op := "Acquire"
	if cfg.noWait {
		op = "TryAcquire"
	}
	leases, err := c.acquire(ctx, op, lockTarget{lockNames: []string{name}, untilCompleted: true, maxFailures: cfg.maxFailures}, acquireConfig{}, cfg.noWait)
	if errors.Is(err, errCompleted) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	l := leases[0]
	if err := c.runJob(ctx, l, fn); err != nil {
		if rerr := l.Release(context.WithoutCancel(ctx)); rerr != nil && !errors.Is(rerr, ErrLeaseLost) {
			c.log.Warn("releasing a failed job's slot did not reach Spanner", "name", name, "err", rerr)
		}
		return false, err
	}
	return true, l.complete(context.WithoutCancel(ctx))
}

// runJob runs fn under the slot's lease; if fn panics, it releases the slot
// before the panic goes on, so that another replica can run it at once
// rather than never (the Client would renew the slot for its whole life).
func (c *Client) runJob(ctx context.Context, l *Lease, fn func(ctx context.Context) error) error {
	defer func() {
		if p := recover(); p != nil {
			if rerr := l.Release(context.WithoutCancel(ctx)); rerr != nil && !errors.Is(rerr, ErrLeaseLost) {
				c.log.Warn("releasing a panicked job's slot did not reach Spanner", "name", l.name, "err", rerr)
			}
			panic(p)
		}
	}()
	// fn's work ends with the lease, and belongs to the RunOnce span.
	work := trace.ContextWithSpan(l.Context(), trace.SpanFromContext(ctx))
	return fn(withLease(work, l))
}

type leaseContextKey struct{}

func withLease(ctx context.Context, l *Lease) context.Context {
	return context.WithValue(ctx, leaseContextKey{}, l)
}

// LeaseFromContext returns the lease a RunOnce job runs under, for Guard and
// its token.
func LeaseFromContext(ctx context.Context) (*Lease, bool) {
	l, ok := ctx.Value(leaseContextKey{}).(*Lease)
	return l, ok
}
