package lease

import (
	"context"
	"time"
)

// Renew renews the lease's session now, rather than at the Client's next
// renewal interval, and returns once Spanner has confirmed a renewal that
// began after the call: Deadline is then at least TTL minus the safety
// margin (TTL/10) after the moment Renew was called, and that renewal found
// the lease's row still naming it with its token (when the Client holds at
// most 1,000 leases; beyond that a renewal checks them in turn). It returns
// context.Cause(l.Context()) (an error matching ErrLeaseLost, ErrReleased
// or ErrClosed) when the lease ends first, and ctx.Err() when ctx does.
// Renew renews every lease of the Client's session, as every renewal does.
//
// It is for a holder that must know now that it still holds the lease and
// for how long (a leader elector's renewal, a step that needs a full TTL):
// the Client keeps its leases renewed without it.
func (l *Lease) Renew(ctx context.Context) error {
	want := l.sess.cfg.deadlineFrom(time.Now())
	for {
		// The channel is taken before the checks, so an extension between
		// them closes it rather than being missed.
		extended := l.sess.untilExtended()
		if l.ctx.Err() != nil {
			return context.Cause(l.ctx)
		}
		// A renewal that found the lease taken ends it before the deadline
		// moves (keeper.renew), so the check above sees that first.
		if !l.sess.localDeadline().Before(want) {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if l.sess.isEnded() {
			// Its leases are being lost; nothing will extend it again.
			select {
			case <-l.ctx.Done():
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		l.c.keeper.wake()
		select {
		case <-extended:
		case <-l.ctx.Done():
		case <-ctx.Done():
		}
	}
}
