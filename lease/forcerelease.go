package lease

import (
	"context"
	"fmt"
)

// ForceRelease ends the live holder's lease on the named lock or RunOnce
// slot (JobSlotName), for an operator facing a stuck holder: a process
// paused for hours, a job killed with a day's TTL. The lease's token moves
// on, so the holder's Guard-fenced writes fail from now on, its Context
// ends at its next renewal, and the next acquisition gets a larger token.
// It returns the holder it ended; when nobody holds the lease, the error
// matches ErrNoHolder. A lock held shared (AcquireShared) loses every live
// reader at once, and ForceRelease returns the first, of Kind "shared", as
// Holder does; Holders listed them all before.
//
// The holder is not asked: whatever it does outside Spanner between now
// and its next renewal goes on, unfenced. Prefer waiting for the TTL when
// that is short. A RunOnce slot force-released counts as a failed run.
func (c *Client) ForceRelease(ctx context.Context, name string, opts ...ForceReleaseOption) (Holder, error) {
	if err := validateName("lease name", name); err != nil {
		return Holder{}, fmt.Errorf("lease: ForceRelease: %w", err)
	}
	return c.forceRelease(ctx, "ForceRelease", name, lockSlot, opts)
}

// ForceReleaseOption configures a ForceRelease or ForceReleasePermit.
type ForceReleaseOption func(*forceReleaseConfig)

type forceReleaseConfig struct {
	// token, when not 0, is the token the holder must have.
	token int64
}

// IfToken makes a ForceRelease end the lease only if its holder has this
// token (a reader's, for a lock held shared: the first live reader's, as
// Holder reports it): an operator who read the holder, and was asked
// whether to break it, breaks that holder and not one that took the lease
// since. Otherwise nothing is released and the error matches
// ErrHolderChanged, returned with the current holder.
func IfToken(token int64) ForceReleaseOption {
	return func(c *forceReleaseConfig) { c.token = token }
}

// ForceReleasePermit is ForceRelease for one permit of a semaphore, or one
// worker ID of a pool (slot is the ID). A worker ID keeps its holder's
// high-water mark, so its next holder still waits past every moment the
// old one may use it: the mark is read in the releasing transaction, so a
// renewal of the holder cannot slip in between, and that renewal waits
// for the transaction to end.
func (c *Client) ForceReleasePermit(ctx context.Context, name string, slot int64, opts ...ForceReleaseOption) (Holder, error) {
	if err := validateName("semaphore name", name); err != nil {
		return Holder{}, fmt.Errorf("lease: ForceReleasePermit: %w", err)
	}
	return c.forceRelease(ctx, "ForceReleasePermit", name, slot, opts)
}

func (c *Client) forceRelease(ctx context.Context, op, name string, slot int64, opts []ForceReleaseOption) (Holder, error) {
	var cfg forceReleaseConfig
	for _, o := range opts {
		o(&cfg)
	}
	ctx, span := c.tel.start(ctx, op, attrName.String(name))
	if err := c.st.prepare(ctx); err != nil {
		end(span, resultError, err)
		return Holder{}, err
	}
	fctx, cancel := context.WithTimeout(ctx, c.cfg.callTimeout())
	defer cancel()
	var (
		r   row
		err error
	)
	if slot == lockSlot {
		r, err = c.st.forceRelease(fctx, name, cfg.token)
	} else {
		r, err = c.st.forceReleasePermit(fctx, name, slot, cfg.token)
	}
	switch {
	case err != nil && ctx.Err() != nil:
		// The Spanner client may say DEADLINE_EXCEEDED without the
		// context's error, or blame its session pool.
		err = fmt.Errorf("lease: %s %q: %w before Spanner answered, so the holder may or may not have been ended (%v)", op, name, ctx.Err(), c.st.explain(err))
		end(span, resultError, err)
		return Holder{}, err
	case err != nil:
		err = fmt.Errorf("lease: %s %q: %w", op, name, c.st.explain(err))
		end(span, resultError, err)
		return Holder{}, err
	case !r.live:
		end(span, "no_holder", nil)
		return Holder{}, fmt.Errorf("%w: %q", ErrNoHolder, name)
	case cfg.token != 0 && r.token.Int64 != cfg.token:
		end(span, "holder_changed", nil)
		return r.holder(), fmt.Errorf("%w: %q is held with token %d, not %d: nothing was released", ErrHolderChanged, name, r.token.Int64, cfg.token)
	}
	h := r.holder()
	span.SetAttributes(attrToken.Int64(h.Token))
	end(span, "ended", nil)
	c.log.Warn("force-released a lease", "name", name, "slot", h.Slot, "holder", h.HolderID, "token", h.Token)
	announceRelease(c.st.signalKey(name))
	return h, nil
}
