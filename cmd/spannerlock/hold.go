package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// releaseTimeout bounds a release on the way out; a lease whose release
// does not reach Spanner expires after its TTL.
const releaseTimeout = 5 * time.Second

// waitFlags are the flags of commands that wait to acquire.
type waitFlags struct {
	try     bool
	timeout optionalDuration
}

// register registers --try, saying what it finds (busy: "it is held"),
// and --timeout.
func (f *waitFlags) register(fs *flag.FlagSet, busy string) {
	fs.BoolVar(&f.try, "try", false, "do not wait: exit 75 at once if "+busy)
	f.timeout.register(fs, "timeout", "give up after this long (connecting included), with exit status 75 if "+busy+
		"; 0 tries once, as --try (default: wait until acquired)")
}

// check checks the flags and makes --timeout 0 a --try, as flock -w 0 is.
func (f *waitFlags) check(a *app) error {
	switch {
	case f.try && f.timeout.set && a.yields("timeout", "try"):
		f.timeout = optionalDuration{}
	case f.try && f.timeout.set && a.yields("try", "timeout"):
		f.try = false
	case f.try && f.timeout.set:
		return usageError("--try and --timeout exclude each other: --try does not wait")
	case f.timeout.d < 0:
		return usageError("--timeout %s must not be negative", f.timeout.d)
	}
	if f.timeout.set && f.timeout.d == 0 {
		f.try, f.timeout = true, optionalDuration{}
	}
	return nil
}

// acquisition is one way to acquire: a lock or a permit.
type acquisition struct {
	// what names it for messages: `lock "deploy"`.
	what string
	// try acquires if it can at once; wait waits until it can.
	try, wait func(ctx context.Context) (*lease.Lease, error)
	// held says who holds it, when get found it held or the wait timed
	// out: `lock "deploy" is held by ...`; "" if that cannot be read.
	held func(ctx context.Context) string
	// explain, if set, rewords what acquire returns, to say what to do.
	explain func(error) error
}

// acquire acquires at once, or with --try fails; otherwise it says (with
// --verbose) what it waits for and waits until it acquires, --timeout
// passes, or a stopping signal arrives.
func (a *app) acquire(c *conn, f waitFlags, acq acquisition) (*lease.Lease, error) {
	ctx, end := a.sigs.interruptible(a.ctx)
	if f.timeout.d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.timeout.d)
		defer cancel()
	}
	l, err := acq.try(ctx)
	if !f.try && errors.Is(err, lease.ErrNotAcquired) {
		if c.log.Enabled(ctx, slog.LevelInfo) {
			c.log.Info("waiting: " + heldBy(a.ctx, acq))
		}
		l, err = acq.wait(ctx)
	}
	timedOut := errors.Is(ctx.Err(), context.DeadlineExceeded)
	if sig := end(); sig != nil {
		if err == nil {
			a.release(c, l)
		}
		return nil, interrupted(sig)
	}
	switch {
	case err == nil:
		return l, nil
	case timedOut:
		return nil, exitWith(exitNotAcquired, "gave up after --timeout %s: %s", f.timeout.d, heldBy(a.ctx, acq))
	case errors.Is(err, lease.ErrNotAcquired):
		return nil, exitWith(exitNotAcquired, "%s; --try does not wait", heldBy(a.ctx, acq))
	}
	return nil, c.explain(err)
}

// heldBy says who holds what could not be acquired, as far as one read
// tells.
func heldBy(ctx context.Context, acq acquisition) string {
	ctx, cancel := context.WithTimeout(ctx, diagnoseTimeout)
	defer cancel()
	if s := acq.held(ctx); s != "" {
		return s
	}
	return acq.what + " is held"
}

func lockHeldBy(c *conn, name string) func(context.Context) string {
	return func(ctx context.Context) string {
		h, err := c.lease.Holder(ctx, name)
		if err != nil {
			return ""
		}
		return fmt.Sprintf("lock %q is held by %q (token %d) until %s", name, h.HolderID, h.Token, formatTime(h.ExpiresAt))
	}
}

// hold runs CMD under l and releases l afterwards; without CMD it prints
// the token and holds l until a stopping signal.
func (a *app) hold(c *conn, l *lease.Lease, spec *childSpec, killAfter time.Duration, env []string) error {
	defer a.release(c, l)
	if spec == nil {
		return a.holdUntilSignalled(l)
	}
	out, err := a.runCommand(a.ctx, l, spec.with(env...), killAfter, c.log)
	if err != nil {
		return err
	}
	if out.lost {
		return lostWhileRunning(l)
	}
	return exitCode(out.status)
}

func lostWhileRunning(l *lease.Lease) error {
	return exitWith(exitLost, "the lease on %q (token %d) ended while CMD ran, so CMD was stopped: %v",
		l.Name(), l.Token(), context.Cause(l.Context()))
}

// holdUntilSignalled prints the token and waits for a stopping signal
// (exit 0) or the loss of the lease (exit 76).
func (a *app) holdUntilSignalled(l *lease.Lease) error {
	say(a.stdout, "%d\n", l.Token())
	ctx, end := a.sigs.interruptible(a.ctx)
	select {
	case <-ctx.Done():
	case <-l.Context().Done():
	}
	if end() == nil {
		return exitWith(exitLost, "lost the lease on %q (token %d): %v", l.Name(), l.Token(), context.Cause(l.Context()))
	}
	return nil
}

// release gives l up so that a waiter gets it at once.
func (a *app) release(c *conn, l *lease.Lease) {
	ctx, cancel := context.WithTimeout(a.ctx, min(a.global.ttl, releaseTimeout))
	defer cancel()
	if err := l.Release(ctx); err != nil && !errors.Is(err, lease.ErrLeaseLost) {
		c.log.Warn("releasing the lease failed; it expires after the TTL", "name", l.Name(), "ttl", a.global.ttl, "err", c.explain(err))
	}
}
