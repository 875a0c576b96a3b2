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
// it. Replicas that find the slot running wait for it to finish or fail (then
// one of them runs it) and return (false, nil) once it has succeeded
// elsewhere. A replica that crashes mid-run lets another take over when its
// lease expires.
//
// If the lock is lost while fn runs (the holder paused past its TTL), fn may
// run again elsewhere; RunOnce then returns ran == true with an error
// matching ErrLeaseLost. Fence fn's effects with l.Guard or the token (from
// the context, see LeaseFromContext) when a second run must be harmless.
func (c *Client) RunOnce(ctx context.Context, job string, slot time.Time, fn func(ctx context.Context) error) (ran bool, err error) {
	if err := validateName("job name", job); err != nil {
		return false, fmt.Errorf("lease: RunOnce: %w", err)
	}
	name := job + "@" + slot.UTC().Format(time.RFC3339Nano)
	if err := validateName("job slot", name); err != nil {
		return false, fmt.Errorf("lease: RunOnce: %w", err)
	}
	ctx, span := c.tel.start(ctx, "RunOnce", attrName.String(name))
	ran, err = c.runOnce(ctx, name, fn)
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

func (c *Client) runOnce(ctx context.Context, name string, fn func(ctx context.Context) error) (bool, error) {
	l, err := c.acquire(ctx, "Acquire", lockTarget{lockName: name, untilCompleted: true}, acquireConfig{}, false)
	if errors.Is(err, errCompleted) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	// fn's work ends with the lease, and belongs to the RunOnce span.
	work := trace.ContextWithSpan(l.Context(), trace.SpanFromContext(ctx))
	if err := fn(withLease(work, l)); err != nil {
		if rerr := l.Release(context.WithoutCancel(ctx)); rerr != nil && !errors.Is(rerr, ErrLeaseLost) {
			c.log.Warn("releasing a failed job's slot did not reach Spanner", "name", name, "err", rerr)
		}
		return false, err
	}
	return true, l.complete(context.WithoutCancel(ctx))
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
