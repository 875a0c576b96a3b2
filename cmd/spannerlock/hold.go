package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strconv"
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
// --timeout, and --conflict-exit-code, which sets a.conflictCode.
func (f *waitFlags) register(a *app, fs *flag.FlagSet, busy string) {
	fs.BoolVar(&f.try, "try", false, "do not wait: exit 75 at once if "+busy)
	f.timeout.register(fs, "timeout", "give up after this long (connecting included), with exit status 75 if "+busy+
		"; 0 tries once, as --try (default: wait until acquired)")
	fs.Var(exitCodeValue{&a.conflictCode}, "conflict-exit-code",
		"exit with this `status` instead of 75 when --try or --timeout finds that "+busy+" (as flock -E); with 0, say nothing (--verbose logs it)")
}

// exitCodeValue is a flag that sets an exit status, 0 to 255.
type exitCodeValue struct{ p *int }

func (v exitCodeValue) String() string {
	if v.p == nil {
		return ""
	}
	return strconv.Itoa(*v.p)
}

func (v exitCodeValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > 255 {
		return fmt.Errorf("%q is not an exit status from 0 to 255", s)
	}
	*v.p = n
	return nil
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
	// try acquires if it can at once; wait waits until it can.
	try, wait func(ctx context.Context) (*lease.Lease, error)
	// busy says what keeps it from being acquired, from the error that
	// says so, reading more if it must and ctx lets it: `lock "deploy" is
	// held by ...`; "" if it cannot say more than it did before.
	busy func(ctx context.Context, err error) string
	// explain, if set, rewords what acquire returns, to say what to do.
	explain func(error) error
}

// acquire acquires at once, or with --try fails; otherwise it says (with
// --verbose) what it waits for and waits until it acquires, ctx ends
// (--timeout, an outage) or a stopping signal arrives. It exits 75 only when
// Spanner said that the lease is held; a timeout before Spanner answered,
// or while it failed, is an error that says so.
func (a *app) acquire(ctx context.Context, c *conn, f waitFlags, acq acquisition) (*lease.Lease, error) {
	ctx, end := a.sigs.interruptible(ctx)
	l, err := within(ctx, func() (*lease.Lease, error) { return acq.try(ctx) })
	var busy string
	if errors.Is(err, lease.ErrNotAcquired) {
		busy = acq.busy(ctx, err)
		if !f.try {
			c.log.Info("waiting: " + busy)
			l, err = within(ctx, func() (*lease.Lease, error) { return acq.wait(ctx) })
			if errors.Is(err, lease.ErrNotAcquired) {
				if now := acq.busy(ctx, err); now != "" {
					busy = now
				}
			}
		}
	}
	timedOut := deadlinePassed(ctx)
	if sig := end(); sig != nil {
		a.interrupted = true
		if err == nil {
			a.release(c, l)
		}
		return nil, interrupted(sig)
	}
	switch {
	case err == nil:
		return l, nil
	case outage(ctx) != nil:
		return nil, outage(ctx)
	case errors.Is(err, lease.ErrNotAcquired) && f.try:
		return nil, a.conflict(c.log, "%s; --try does not wait", busy)
	case errors.Is(err, lease.ErrNotAcquired) && timedOut && unansweredBeforeDeadline(ctx, c.health):
		return nil, c.health.noAnswer(" within --timeout "+formatDuration(f.timeout.d)+" (before that: "+busy+")", err)
	case errors.Is(err, lease.ErrNotAcquired):
		return nil, a.conflict(c.log, "gave up after --timeout %s: %s", formatDuration(f.timeout.d), busy)
	case timedOut:
		return nil, c.health.noAnswer(" within --timeout "+formatDuration(f.timeout.d), err)
	}
	return nil, c.explain(err)
}

// conflict ends spannerlock with exit status 75 (or --conflict-exit-code):
// Spanner said that what it wanted is held. With --conflict-exit-code 0 a
// held lock is success, and says nothing, as flock -n -E 0: cron mails
// whatever a job writes. Only --verbose logs it then, at level INFO.
func (a *app) conflict(log *slog.Logger, format string, args ...any) error {
	if a.conflictCode == exitOK {
		log.Info("not acquired, which --conflict-exit-code 0 makes success: " + fmt.Sprintf(format, args...))
		return &exitError{code: exitOK}
	}
	return exitWith(a.conflictCode, format, args...)
}

// lockBusy says who holds the lock name, from the *lease.HeldError that
// kept it from being acquired.
func lockBusy(name string) func(context.Context, error) string {
	return func(_ context.Context, err error) string {
		var held *lease.HeldError
		if !errors.As(err, &held) {
			return fmt.Sprintf("lock %s is held", quote(name))
		}
		h := held.Holder
		return fmt.Sprintf("lock %s is held by %s (token %d) until %s", quote(name), quote(h.HolderID), h.Token, formatTime(h.ExpiresAt))
	}
}

// hold runs CMD under l and releases l afterwards; without CMD it prints
// the token and holds l until a stopping signal.
func (a *app) hold(c *conn, l *lease.Lease, spec *childSpec, killAfter time.Duration, env []string) error {
	defer a.release(c, l)
	// An outage now is the lease's business: its loss stops CMD.
	c.outages.pause()
	if spec == nil {
		return a.holdUntilSignalled(l)
	}
	out, err := a.runCommand(a.ctx, l, spec.with(env...), killAfter, c.log)
	if err != nil {
		return err
	}
	if out.stoppedBy != nil {
		a.interrupted = true
	}
	if out.lost {
		return lostWhileRunning(l)
	}
	return exitCode(out.status)
}

func lostWhileRunning(l *lease.Lease) error {
	if l.Context().Err() == nil {
		// Stopped --kill-after before the local deadline, which a renewal
		// confirmed since moved.
		return exitWith(exitLost, "the lease on %q (token %d) was not renewed in time, so CMD was stopped --kill-after "+
			"before the lease's local deadline, as it would be lost by then", l.Name(), l.Token())
	}
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
	a.interrupted = true
	return nil
}

// release gives l up so that a waiter gets it at once. It waits at most
// releaseTimeout (abandonGrace after a stopping signal) for Spanner's
// answer, and abandonGrace more for a call that overruns its context: a
// lease whose release does not reach Spanner expires after its TTL.
func (a *app) release(c *conn, l *lease.Lease) {
	limit := min(a.global.ttl, releaseTimeout)
	if a.interrupted {
		limit = abandonGrace
	}
	ctx, cancel := context.WithTimeout(a.ctx, limit)
	defer cancel()
	_, err := within(ctx, func() (struct{}, error) { return struct{}{}, l.Release(ctx) })
	switch {
	case err == nil:
		c.log.Info("released", "name", l.Name(), "token", l.Token())
	case !errors.Is(err, lease.ErrLeaseLost):
		c.log.Warn("releasing the lease failed; it expires after the TTL", "name", l.Name(), "ttl", a.global.ttl, "err", c.explain(err))
	}
}
