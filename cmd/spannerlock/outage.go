package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// defaultMaxOutage is how long spannerlock waits through an outage by
// default: long enough for a blip or a Spanner failover, short enough that
// a crontab does not stack up stuck processes.
const defaultMaxOutage = time.Minute

// outageCheck is how often the watch looks at the endpoint's health.
const outageCheck = 100 * time.Millisecond

// outageError ends a command whose calls to Spanner all failed for want of
// an answer for too long.
type outageError struct {
	ep endpoint
	// within says for how long, and what set that.
	within string
	last   string
}

func (e *outageError) Error() string {
	return fmt.Sprintf("no answer from Spanner at %s %s; the last failed call said: %s", e.ep, e.within, e.last)
}

// outageWatch ends a command's context when Spanner stops answering: when
// every call has failed for want of an answer (unreachable, or no answer in
// time) for maxOutage, or, before Spanner ever answered, for
// connectTimeout: an endpoint that accepts connections but never answers
// is as good as down. It is paused while CMD runs under a lease, whose loss
// (at its local deadline) deals with an outage then.
type outageWatch struct {
	h         *health
	maxOutage time.Duration
	cancel    context.CancelCauseFunc
	done      chan struct{}
	wg        sync.WaitGroup

	mu     sync.Mutex
	paused bool
}

// watchOutages returns a context that ends, with an *outageError as its
// cause, when Spanner stops answering, and the watch, which must be stopped.
func watchOutages(parent context.Context, h *health, maxOutage time.Duration) (context.Context, *outageWatch) {
	ctx, cancel := context.WithCancelCause(parent)
	w := &outageWatch{h: h, maxOutage: maxOutage, cancel: cancel, done: make(chan struct{})}
	w.wg.Add(1)
	go w.run()
	return ctx, w
}

func (w *outageWatch) run() {
	defer w.wg.Done()
	tick := time.NewTicker(outageCheck)
	defer tick.Stop()
	for {
		select {
		case <-w.done:
			return
		case <-tick.C:
		}
		if err := w.check(time.Now()); err != nil {
			w.cancel(err)
			return
		}
	}
}

// check returns the outage that should end the command at now, or nil.
func (w *outageWatch) check(now time.Time) error {
	w.mu.Lock()
	paused := w.paused
	w.mu.Unlock()
	since, last, answered, failing := w.h.failing()
	if paused || !failing {
		return nil
	}
	limit, within := w.maxOutage, fmt.Sprintf("for %s (--max-outage)", formatDuration(w.maxOutage))
	if !answered {
		// Before Spanner ever answered, the time counts from connecting:
		// an endpoint that never answers fails its first calls only when
		// their connection's handshake times out, connectTimeout later.
		limit, within = connectTimeout, fmt.Sprintf("within %s of connecting", formatDuration(connectTimeout))
		if !w.h.connected.IsZero() {
			since = w.h.connected
		}
	}
	if now.Sub(since) < limit {
		return nil
	}
	return &outageError{ep: w.h.ep, within: within, last: last}
}

// pause stops the watch from ending the context until resume.
func (w *outageWatch) pause() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.paused = true
}

func (w *outageWatch) resume() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.paused = false
}

func (w *outageWatch) stop() {
	close(w.done)
	w.wg.Wait()
	w.cancel(nil)
}

// outage returns the outage that ended ctx, or nil.
func outage(ctx context.Context) error {
	var o *outageError
	if errors.As(context.Cause(ctx), &o) {
		return o
	}
	return nil
}

// deadlinePassed reports whether ctx's deadline has passed (--timeout).
// It does not wait for ctx to end: on a loaded machine the timer that ends
// it may run after a call to Spanner already failed with DeadlineExceeded at
// that deadline (gRPC refuses to start a call whose deadline is past), and
// that failure is the timeout, not an outage.
func deadlinePassed(ctx context.Context) bool {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return true
	}
	deadline, ok := ctx.Deadline()
	return ok && !time.Now().Before(deadline)
}

// unansweredBeforeDeadline reports whether every call to Spanner has failed
// for want of an answer since before ctx's deadline (--timeout). A timeout
// then is the outage's, whatever Spanner said before it stopped answering:
// what it said may no longer hold. A call that failed at the deadline
// failed for the deadline, and says nothing about Spanner.
func unansweredBeforeDeadline(ctx context.Context, h *health) bool {
	since, _, _, failing := h.failing()
	deadline, ok := ctx.Deadline()
	return failing && ok && since.Before(deadline)
}

// abandonGrace is how long spannerlock waits, once a command's context has
// ended (--timeout, --max-outage, a signal), for a call to Spanner to return.
// A call returns at once then, except one caught in the Spanner client's
// rollback of a failed transaction, which it retries for up to 30 seconds
// on a context of its own. Such a call is abandoned: spannerlock is about
// to exit, and Close releases whatever it may still acquire.
const abandonGrace = time.Second

// errAbandoned is returned in place of a call that was abandoned.
var errAbandoned = errors.New("the call to Spanner did not return")

// within runs f and returns its result, or, abandonGrace after ctx ended,
// an error wrapping ctx's cause without waiting for f any longer.
func within[T any](ctx context.Context, f func() (T, error)) (T, error) {
	return withinGated(ctx, nil, f)
}

// withinGated is within for a call that may start work (CMD) through gate:
// once the work started, the call is waited for, however long it takes.
func withinGated[T any](ctx context.Context, gate *startGate, f func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
	}
	select {
	case r := <-done:
		return r.v, r.err
	case <-time.After(abandonGrace):
	}
	if gate != nil && !gate.abandon() {
		r := <-done
		return r.v, r.err
	}
	var zero T
	return zero, fmt.Errorf("%w: %w", errAbandoned, context.Cause(ctx))
}

// startGate lets work start (CMD under a lease won by a call) only if the
// call was not abandoned, so that nothing starts after spannerlock gave
// up on the call.
type startGate struct {
	state atomic.Int32
}

const (
	gateWaiting int32 = iota
	gateStarted
	gateAbandoned
)

// start reports whether the work may start; until finish, abandon fails.
func (g *startGate) start() bool { return g.state.CompareAndSwap(gateWaiting, gateStarted) }

// finish ends the work; the call may be abandoned again (elect campaigns
// again after a term).
func (g *startGate) finish() { g.state.CompareAndSwap(gateStarted, gateWaiting) }

// abandon reports whether the call may be abandoned: its work never starts.
func (g *startGate) abandon() bool { return g.state.CompareAndSwap(gateWaiting, gateAbandoned) }

// started reports whether the work started.
func (g *startGate) started() bool { return g.state.Load() == gateStarted }
