package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"cloud.google.com/go/spanner"
	"go.opentelemetry.io/otel/attribute"
)

// leaseKey identifies one acquisition: a lock (slot lockSlot) or a slot of a
// semaphore or worker pool, with its token.
type leaseKey struct {
	name  string
	slot  int64
	token int64
	// grant is the acquisition's grant ID, written in its row: unique to
	// it, where a token may be given again after an acquisition that never
	// landed.
	grant string
}

// letGo is a lease whose owner let go: its row is cleared if it still names
// the lease's session and token. A RunOnce completion also records the slot
// as done.
type letGo struct {
	leaseKey
	complete bool
	// mark is, for a worker ID, when its holder stopped using it (by this
	// process's wall clock), recorded for the next holder to wait past;
	// zero keeps the row's mark.
	mark time.Time
	// until is when a transaction whose outcome is unknown (an acquisition
	// that may still land and name the session) can no longer commit; the
	// keeper looks at the row until then. Zero for a release.
	until time.Time
}

// clear is the write that lets g go; the let-go transaction made sure the
// row still names g's session and token.
func (g letGo) clear(sql statements) *spanner.Mutation {
	if g.slot == lockSlot {
		// The row keeps its token, so the next acquisition continues the sequence.
		cols, vals := []string{"name", "session_id"}, []any{g.name, nil}
		if g.complete {
			cols, vals = append(cols, "completed_at"), append(vals, spanner.CommitTimestamp)
		}
		return spanner.Update(sql.table, cols, vals)
	}
	cols, vals := []string{"name", "slot", "session_id"}, []any{g.name, g.slot, nil}
	if !g.mark.IsZero() {
		cols, vals = append(cols, "high_water"), append(vals, g.mark)
	}
	return spanner.Update(sql.permits, cols, vals)
}

// Release gives the lease up so that others can acquire it at once. Its
// Context is cancelled before the release commits. Release of a lease that
// was already lost returns an error matching ErrLeaseLost; after a
// successful or lost Release, further calls return nil.
//
// The lease is no longer renewed once Release is called. If the release
// does not reach Spanner (Release returns its error), the Client's next
// renewal releases it; failing that, it expires within the TTL.
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
		return outcomeEnded, nil
	}
	defer l.c.forget(l)
	g := letGo{leaseKey: l.key(), complete: complete}
	if l.slot != lockSlot {
		// After end: the ID is no longer in use (see WorkerID.Use).
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
	sctx, cancel := context.WithTimeout(ctx, c.cfg.callTimeout())
	defer cancel()
	owned, err := c.st.letGo(sctx, callerLane, "spannerlock-release", s, c.cfg.holderID, []letGo{g}, nil)
	_, held := owned[g.leaseKey]
	switch {
	case err == nil && held:
		announceRelease(c.st.signalKey(g.name))
		return outcomeReleased, nil
	case err == nil:
		return outcomeLost, fmt.Errorf("lease: %s: %w", op, lostError(g.name, g.token, "it expired or was taken before "+op))
	}
	// The commit may have happened: ask Spanner rather than guess.
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.callTimeout())
	defer rcancel()
	var r row
	var rerr error
	if g.slot == lockSlot {
		r, rerr = readRow(rctx, c.st.db.Single(), c.st.sql, g.name)
	} else {
		r, rerr = readPermitRow(rctx, c.st.db.Single(), c.st.sql, g.name, g.slot)
	}
	switch {
	case rerr == nil && r.heldBy(s.id, g.token, g.grant):
	case rerr == nil && g.complete && !r.completedWith(g.token):
		// Not completed under this lease: not at all, or by a holder that
		// took the slot after this lease was lost.
		return outcomeLost, fmt.Errorf("lease: %s: %w", op, lostError(g.name, g.token, "it expired or was taken before "+op))
	case rerr == nil:
		announceRelease(c.st.signalKey(g.name))
		return outcomeReleased, nil
	}
	c.keeper.letGoLater(s, g)
	return outcomeDeferred, fmt.Errorf("lease: %s %q: %w; it is no longer renewed: the Client clears it in the background, or it expires within %s",
		op, g.name, c.st.explain(err), c.cfg.ttl)
}

// giveBack releases a lease acquired after its Client closed.
func (c *Client) giveBack(l *Lease) {
	l.end(ErrClosed, nil)
	ctx, cancel := context.WithTimeout(context.Background(), min(c.cfg.ttl, 5*time.Second))
	defer cancel()
	_, _ = c.letGoNow(ctx, l.sess, letGo{leaseKey: l.key()}, "Close")
}
