package lease

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// waiter paces one blocked acquisition.
type waiter struct {
	c       *Client
	name    string
	attempt int
}

// untilFree waits until what blocked an acquisition may be free: a change
// of this Client's own hold on the name, a release in this process, the
// blocker's expiry by Spanner's clock, or a poll that finds room.
func (w *waiter) untilFree(ctx context.Context, t target, b *busy) error {
	if b.local != nil {
		return w.sleep(ctx, b.local, 0)
	}
	signal, unsubscribe := subscribe(w.c.signalPrefix + t.name())
	defer unsubscribe()
	expiresIn := b.expiresIn
	for {
		if err := w.sleep(ctx, signal, expiresIn); err != nil || isClosed(signal) {
			return err
		}
		pctx, cancel := context.WithTimeout(ctx, w.c.cfg.callTimeout())
		free, in, err := t.poll(pctx, w.c.db.Single(), w.c, w.c.currentSession().id)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil && transient(err):
			w.c.log.Warn("polling a held lease failed; retrying", "name", w.name, "err", err)
			continue
		case err != nil && ctx.Err() != nil:
			// Spanner's own deadline error does not wrap ctx's; callers
			// match errors.Is(err, context.DeadlineExceeded).
			return fmt.Errorf("lease: waiting for %q: %w", w.name, ctx.Err())
		case err != nil:
			return w.c.explain(err)
		case free:
			return nil
		}
		expiresIn = in
	}
}

// sleep waits for the next backoff step, cut short by wake, by expiry of
// whatever blocks us (when positive), by ctx, or by Close.
func (w *waiter) sleep(ctx context.Context, wake <-chan struct{}, expiry time.Duration) error {
	d := backoff(w.attempt, w.c.cfg.pollInterval)
	w.attempt++
	if expiry > 0 && expiry+expiryGrace < d {
		d = expiry + expiryGrace
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("lease: waiting for %q: %w", w.name, ctx.Err())
	case <-w.c.background.Done():
		return ErrClosed
	case <-wake:
	case <-t.C:
	}
	return nil
}

// expiryGrace lets Spanner's clock pass a holder's expiry before we look,
// so a waiter polls once per expiry rather than just before it.
const expiryGrace = 5 * time.Millisecond

// backoff grows from 25ms to limit, jittered upwards so that waiters spread
// out without ever polling more often than once per limit.
func backoff(attempt int, limit time.Duration) time.Duration {
	d := limit
	if attempt < 16 {
		d = min(limit, 25*time.Millisecond<<attempt)
	}
	return d + time.Duration(rand.Int64N(int64(d/4)+1))
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
