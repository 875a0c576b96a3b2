package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
)

// Release gives the lease up so that others can acquire it at once. Its
// Context is cancelled before the release commits. Release of a lease that
// was already lost returns an error matching ErrLeaseLost; after a
// successful or lost Release, further calls return nil.
//
// The lease counts as released once Release is called. If the release
// does not reach Spanner (Release returns its error), the Client clears
// the row in the background, retrying at least once per renewal interval,
// so that others can take the name within a TTL and one renewal interval
// (see the package documentation for when Spanner answers no clear in time,
// and for the one exception on Spanner).
func (l *Lease) Release(ctx context.Context) error {
	return l.traced(ctx, "Release", false, "Release")
}

// complete records a RunOnce slot as done and releases it, as one let-go.
func (l *Lease) complete(ctx context.Context) error {
	return l.traced(ctx, "Complete", true, "recording the job as done")
}

// traced runs letGo in a span named span.
func (l *Lease) traced(ctx context.Context, span string, complete bool, op string) error {
	attrs := []attribute.KeyValue{attrName.String(l.name), attrKind.String(l.kind), attrToken.Int64(l.token)}
	if l.slot != lockSlot {
		attrs = append(attrs, attrSlot.Int64(l.slot))
	}
	ctx, s := l.c.tel.start(ctx, span, attrs...)
	outcome, err := l.letGo(ctx, complete, op)
	end(s, outcome, err)
	return err
}

// Outcomes of letting a lease go (spannerlock.outcome of its span).
const (
	outcomeReleased = "released"
	outcomeLost     = "lost"
	// outcomeDeferred: the release did not reach Spanner; renewals do it.
	outcomeDeferred = "deferred"
	// outcomeEnded: the lease had ended before, so there was nothing to do.
	outcomeEnded = "already_ended"
)

// letGo ends the lease, then clears its row in one bounded sync. When the
// outcome is unknown and a read cannot settle it, the let-go is left to the
// Client's renewals.
func (l *Lease) letGo(ctx context.Context, complete bool, op string) (string, error) {
	if ctx.Err() == nil {
		// Ending the lease may cancel ctx (one derived from l.Context(), as
		// Campaign's leader work is): the release, bounded by the call
		// timeout and ctx's deadline, goes through all the same.
		var cancel context.CancelFunc
		ctx, cancel = unlessReleased(ctx)
		defer cancel()
	}
	l.releasing.Lock()
	defer l.releasing.Unlock()
	if !l.end(ErrReleased, nil) {
		l.mu.Lock()
		cause := context.Cause(l.ctx)
		report := !l.lossReported && errors.Is(cause, ErrLeaseLost)
		l.lossReported = true
		l.mu.Unlock()
		if report {
			return outcomeLost, fmt.Errorf("lease: %s: %w", op, cause)
		}
		if complete {
			// Nothing was recorded: a job whose lease Close (or a Release)
			// ended under it is not done, and RunOnce must not say so.
			return outcomeEnded, fmt.Errorf("lease: %s: %w", op, cause)
		}
		return outcomeEnded, nil
	}
	defer l.c.forget(l)
	g := letGo{leaseKey: l.key(), complete: complete}
	if l.kind != kindLock {
		// After end: the ID is no longer in use (see WorkerID.Use). A
		// reader's permit row of a lock needs no mark.
		g.mark = l.stoppedAt(time.Now())
	}
	outcome, err := l.c.letGoNow(ctx, l.sess, g, op)
	if outcome == outcomeLost {
		l.mu.Lock()
		l.lossReported = true
		l.mu.Unlock()
		l.c.tel.lost(l.kind, lossTaken)
	}
	return outcome, err
}

// letGoNow clears g's row in one transaction, bounded by the call timeout.
func (c *Client) letGoNow(ctx context.Context, s *session, g letGo, op string) (string, error) {
	return c.letGoAll(ctx, s, []letGo{g}, op)
}

// letGoAll clears the rows of gos, leases of one session, in one
// transaction bounded by the call timeout. When the outcome is unknown it
// reads the rows, and leaves those it cannot settle to the keeper.
func (c *Client) letGoAll(ctx context.Context, s *session, gos []letGo, op string) (string, error) {
	sctx, cancel := context.WithTimeout(ctx, c.cfg.callTimeout())
	defer cancel()
	owned, err := c.keeper.release(sctx, callerLane, "spannerlock-release", s, gos, nil, nil)
	if err == nil {
		var lost error
		for _, g := range gos {
			if owned[g.leaseKey] {
				announceRelease(c.st.signalKey(g.name))
			} else if lost == nil {
				lost = fmt.Errorf("lease: %s: %w", op, lostError(g.name, g.token, "it expired or was taken before "+op))
			}
		}
		if lost != nil {
			return outcomeLost, lost
		}
		return outcomeReleased, nil
	}
	if ctx.Err() != nil {
		// The caller gave up: it is not kept waiting for a read that could
		// settle the outcome. The Client clears the rows that still name
		// the leases, in the background.
		for _, g := range gos {
			c.keeper.letGoLater(s, g)
		}
		return outcomeDeferred, c.gaveUpLettingGo(ctx, gos[0].name, op, err)
	}
	// The commit may have happened: ask Spanner rather than guess, within
	// the caller's deadline too.
	rctx, rcancel := context.WithTimeout(ctx, c.cfg.callTimeout())
	defer rcancel()
	outcome, result := outcomeReleased, error(nil)
	for _, g := range gos {
		r, rerr := readKeyRow(rctx, c.st.db.Single(), c.st.sql, g.name, g.slot)
		switch {
		case rerr == nil && r.heldBy(s.id, g.token, g.grant):
		case rerr == nil && g.complete && !r.completedWith(g.token):
			// Not completed under this lease: not at all, or by a holder that
			// took the slot after this lease was lost.
			if outcome == outcomeReleased {
				outcome, result = outcomeLost, fmt.Errorf("lease: %s: %w", op, lostError(g.name, g.token, "it expired or was taken before "+op))
			}
			continue
		case rerr == nil:
			announceRelease(c.st.signalKey(g.name))
			continue
		}
		c.keeper.letGoLater(s, g)
		switch {
		case outcome == outcomeDeferred:
		case ctx.Err() != nil:
			outcome, result = outcomeDeferred, c.gaveUpLettingGo(ctx, g.name, op, err)
		default:
			outcome, result = outcomeDeferred, fmt.Errorf("lease: %s %q: %w; the Client clears it in the background",
				op, g.name, c.st.explain(err))
		}
	}
	return outcome, result
}

// gaveUpLettingGo is the error of a let-go of name whose caller's context
// ended before Spanner said whether it was done (err is what the
// transaction said): it wraps the context's error.
func (c *Client) gaveUpLettingGo(ctx context.Context, name, op string, err error) error {
	return fmt.Errorf("lease: %s %q: %w before Spanner answered, so it may still be held there until the Client clears it in the background (%v)",
		op, name, ctx.Err(), c.st.explain(err))
}

// leaveLine takes a caller's place out of t's lines, by its key, so a
// waiter that gives up never holds up the line. It is bounded by the call
// timeout and ctx. If it fails, or ctx has already ended (a caller whose
// context ended returns at once, without waiting on Spanner), the keeper
// takes out the entries of s that no caller waits in, and the place goes
// with the session at the latest.
func (c *Client) leaveLine(ctx context.Context, t target, s *session, place queueKey) {
	if ctx.Err() != nil {
		c.keeper.leaveLater(s, t.names())
		return
	}
	lctx, cancel := context.WithTimeout(ctx, c.cfg.callTimeout())
	defer cancel()
	leaves := make([]leave, 0, len(t.names()))
	for _, name := range t.names() {
		leaves = append(leaves, leave{name: name, place: &place})
	}
	if _, err := c.keeper.release(lctx, callerLane, "spannerlock-leave", s, nil, leaves, nil); err != nil {
		c.log.Debug("leaving the line failed; the Client tries again", "names", t.names(), "err", err)
		c.keeper.leaveLater(s, t.names())
	}
}

// giveBack releases a lease acquired after its Client closed.
func (c *Client) giveBack(l *Lease) {
	l.end(ErrClosed, nil)
	ctx, cancel := context.WithTimeout(context.Background(), min(c.cfg.ttl, 5*time.Second))
	defer cancel()
	_, _ = c.letGoNow(ctx, l.sess, letGo{leaseKey: l.key()}, "Close")
}

// unlessReleased is ctx for letting leases go: it has ctx's deadline and
// values, and ends when ctx is cancelled, except when ctx is cancelled
// because a lease it derives from was released (cause ErrReleased): the
// let-go that released it goes on, bounded by the deadline and the call
// timeout. Every other end of ctx ends the let-go at once.
func unlessReleased(ctx context.Context) (context.Context, context.CancelFunc) {
	out, cancel := context.WithCancel(context.WithoutCancel(ctx))
	cancelDeadline := context.CancelFunc(func() {})
	if d, ok := ctx.Deadline(); ok {
		out, cancelDeadline = context.WithDeadline(out, d)
	}
	stop := context.AfterFunc(ctx, func() {
		// A deadline ends out by itself, with the same error.
		if errors.Is(ctx.Err(), context.Canceled) && !errors.Is(context.Cause(ctx), ErrReleased) {
			cancel()
		}
	})
	return out, func() { stop(); cancelDeadline(); cancel() }
}
