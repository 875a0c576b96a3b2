package lease

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// waiter paces one blocked acquisition, and remembers what its last look
// at Spanner found, so that giving up says whether a holder was seen or
// Spanner could not be reached: an outage is never reported as contention.
type waiter struct {
	c       *Client
	name    string
	attempt int
	// last is what the last look found: an error matching ErrNotAcquired
	// when a holder had it, Spanner's error when it could not answer.
	last error
}

// saw records what a look at Spanner found; callers leave out looks that
// the caller's context ended, which found nothing.
func (w *waiter) saw(err error) {
	var b *busy
	if errors.As(err, &b) {
		err = b.err
	}
	w.last = err
}

// WaitError is returned by a blocking acquisition whose context ended
// before it acquired. It wraps the context's error and, when there was
// one, what the last look at Spanner found: the holder (matching
// ErrNotAcquired; a *HeldError for a lock held by another Client) or the
// error that kept Spanner from answering.
type WaitError struct {
	Name string
	// Err is the context's error.
	Err error
	// Last is what the last look at Spanner found, or nil when none ended
	// before the context did.
	Last error
}

func (e *WaitError) Error() string {
	switch {
	case e.Last == nil:
		return fmt.Sprintf("lease: gave up acquiring %q: %v, before Spanner answered", e.Name, e.Err)
	case errors.Is(e.Last, ErrNotAcquired):
		return fmt.Sprintf("lease: gave up acquiring %q: %v; it was held: %v", e.Name, e.Err, e.Last)
	}
	return fmt.Sprintf("lease: gave up acquiring %q: %v; Spanner did not answer: %v", e.Name, e.Err, e.Last)
}

// Unwrap gives both the context's error and the last finding to errors.Is
// and errors.As.
func (e *WaitError) Unwrap() []error {
	if e.Last == nil {
		return []error{e.Err}
	}
	return []error{e.Err, e.Last}
}

// gaveUp is the error of a blocking acquisition whose context ended.
func (w *waiter) gaveUp(ctx context.Context) error {
	return &WaitError{Name: w.name, Err: ctx.Err(), Last: w.last}
}

// untilFree waits until what blocked an acquisition may be free: a change
// of this Client's own hold on the name, a release in this process, the
// blocker's expiry by Spanner's clock, or a poll that finds room.
func (w *waiter) untilFree(ctx context.Context, t target, b *busy) error {
	if b.local != nil {
		return w.sleep(ctx, b.local, 0)
	}
	signal, unsubscribe := subscribe(w.c.st.signalKey(t.name()))
	defer unsubscribe()
	expiresIn := b.expiresIn
	for {
		if err := w.sleep(ctx, signal, expiresIn); err != nil || isClosed(signal) {
			return err
		}
		pctx, cancel := context.WithTimeout(ctx, w.c.cfg.pollTimeout())
		blocked, in, err := t.poll(pctx, w.c)
		cancel()
		switch {
		case err != nil && ctx.Err() != nil:
			return w.gaveUp(ctx)
		case err != nil && transient(err):
			w.saw(err)
			w.c.log.Warn("polling a held lease failed; retrying", "name", w.name, "err", err)
			continue
		case err != nil:
			return w.c.st.explain(err)
		case blocked == nil:
			return nil
		}
		w.saw(blocked)
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
		return w.gaveUp(ctx)
	case <-w.c.keeper.background.Done():
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
