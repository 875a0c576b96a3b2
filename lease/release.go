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

// release is the let-go transaction (reads the lines of the names it
// touches: their rows, permit rows and waiters; writes the rows it clears
// and the waiters it takes out). It clears the rows of gos that still name
// s with their keys; takes out of the lines the entries of leaves, and
// every dead waiter of the lines it reads (line.go); and writes the
// sessions in expire as expired. It never writes a row naming another
// session: a freed name is taken by the first live waiters of its line,
// each in a transaction of its own. It returns the let-goes it found held,
// which it cleared.
func (k *keeper) release(ctx context.Context, ln lane, tag string, s *session, gos []letGo, leaves []leave, expire []string) (map[leaseKey]bool, error) {
	var names []string
	for _, g := range gos {
		names = append(names, g.name)
	}
	for _, lv := range leaves {
		names = append(names, lv.name)
	}
	names = sortedNames(names)
	var owned map[leaseKey]bool
	_, err := k.st.transact(ctx, ln, tag, func(ctx context.Context, tx *spanner.ReadWriteTransaction) ([]*spanner.Mutation, error) {
		owned = map[leaseKey]bool{}
		var writes []*spanner.Mutation
		lines := map[string]*line{}
		if len(names) > 0 {
			var err error
			if lines, err = readLines(ctx, tx, k.st.sql, names, false); err != nil {
				return nil, err
			}
		}
		for _, g := range gos {
			if r := lines[g.name].holding(g.slot); r != nil && r.names(s.id, g.leaseKey) {
				owned[g.leaseKey] = true
				writes = append(writes, g.clear(k.st.sql))
			}
		}
		out, err := k.leavers(ctx, s, lines, leaves)
		if err != nil {
			return nil, err
		}
		writes = append(writes, out...)
		for _, id := range expire {
			writes = append(writes, k.st.sql.sessionTombstone(id, k.cfg.holderID))
		}
		return writes, nil
	})
	return owned, err
}

// holding returns the row of slot in l: the lock row for lockSlot, else
// the permit row; nil when l is nil or there is none.
func (l *line) holding(slot int64) *row {
	if l == nil {
		return nil
	}
	if slot == lockSlot {
		return &l.row
	}
	for i := range l.permits {
		if l.permits[i].slot == slot {
			return &l.permits[i]
		}
	}
	return nil
}

// names reports whether r still names the lease with key k of session.
func (r *row) names(session string, k leaseKey) bool {
	return r.sessionID.StringVal == session && r.token.Int64 == k.token && r.grant.StringVal == k.grant
}

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
