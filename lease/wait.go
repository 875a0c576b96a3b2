package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

// untilTurn waits, in line at place, until it may be t's turn (it returns
// nil: the caller attempts, and takes t if it is) or its place is gone
// (errPlaceGone: the caller attempts, which queues it again if it must). It
// looks at the line after a backoff step, at once when a release in this
// process signals one of t's names, and sooner when the blocker's lease is
// due to expire.
func (w *waiter) untilTurn(ctx context.Context, t target, place queueKey) error {
	var expiresIn time.Duration
	for {
		signal, unsubscribe := w.c.subscribeAll(t.names())
		err := w.sleep(ctx, signal, expiresIn)
		unsubscribe()
		if err != nil {
			return err
		}
		pctx, cancel := context.WithTimeout(ctx, w.c.cfg.pollTimeout())
		lines, err := readLines(pctx, w.c.st.db.Single(), w.c.st.sql, t.names(), true)
		cancel()
		switch {
		case err != nil && ctx.Err() != nil:
			return w.gaveUp(ctx)
		case err != nil && transient(err):
			w.saw(err)
			w.c.log.Warn("reading the line failed; retrying", "name", w.name, "err", err)
			continue
		case err != nil:
			return w.c.st.explain(err)
		}
		free, in, blocked := t.look(w.c, lines, &place)
		switch {
		case !inLine(lines, place):
			return errPlaceGone
		case free:
			return nil
		}
		w.saw(blocked)
		expiresIn = in
	}
}

// errPlaceGone says a waiter's place is no longer in line (a transaction
// took it for a dead session's, or it was never written): it queues again.
var errPlaceGone = errors.New("the place in line is gone")

// inLine reports whether place is still in the line of every name.
func inLine(lines map[string]*line, place queueKey) bool {
	for _, l := range lines {
		if !slices.ContainsFunc(l.waiters, func(w waiterRow) bool { return w.key.is(place) }) {
			return false
		}
	}
	return true
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
