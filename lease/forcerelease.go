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
func (c *Client) ForceRelease(ctx context.Context, name string) (Holder, error) {
	if err := validateName("lease name", name); err != nil {
		return Holder{}, fmt.Errorf("lease: ForceRelease: %w", err)
	}
	return c.forceRelease(ctx, "ForceRelease", name, lockSlot)
}

// ForceReleasePermit is ForceRelease for one permit of a semaphore, or one
// worker ID of a pool (slot is the ID). A worker ID keeps its holder's
// high-water mark, so its next holder still waits past every moment the
// old one may use it: the mark is read in the releasing transaction, so a
// renewal of the holder cannot slip in between, and that renewal waits
// for the transaction to end.
func (c *Client) ForceReleasePermit(ctx context.Context, name string, slot int64) (Holder, error) {
	if err := validateName("semaphore name", name); err != nil {
		return Holder{}, fmt.Errorf("lease: ForceReleasePermit: %w", err)
	}
	return c.forceRelease(ctx, "ForceReleasePermit", name, slot)
}

func (c *Client) forceRelease(ctx context.Context, op, name string, slot int64) (Holder, error) {
	ctx, span := c.tel.start(ctx, op, attrName.String(name))
	if err := c.st.prepare(ctx); err != nil {
		end(span, resultError, err)
		return Holder{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.callTimeout())
	defer cancel()
	var (
		r   row
		err error
	)
	if slot == lockSlot {
		r, err = c.st.forceRelease(ctx, name)
	} else {
		r, err = c.st.forceReleasePermit(ctx, name, slot)
	}
	switch {
	case err != nil:
		err = fmt.Errorf("lease: %s %q: %w", op, name, c.st.explain(err))
		end(span, resultError, err)
		return Holder{}, err
	case !r.live:
		end(span, "no_holder", nil)
		return Holder{}, fmt.Errorf("%w: %q", ErrNoHolder, name)
	}
	h := r.holder()
	span.SetAttributes(attrToken.Int64(h.Token))
	end(span, "ended", nil)
	c.log.Warn("force-released a lease", "name", name, "slot", h.Slot, "holder", h.HolderID, "token", h.Token)
	announceRelease(c.st.signalKey(name))
	return h, nil
}
