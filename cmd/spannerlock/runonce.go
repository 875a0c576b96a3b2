package main

import (
	"context"
	"errors"
	"time"

	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

func runOnceCommand() *command {
	return &command{
		name:    "run-once",
		runsCMD: true,
		summary: "run a command once per schedule slot, across every machine that tries",
		synopsis: `spannerlock run-once [flags] JOB --slot TIME -- CMD [ARGS...]
spannerlock run-once [flags] JOB --every INTERVAL -- CMD [ARGS...]`,
		help: `
Runs CMD for one slot of JOB's schedule exactly once to success, however many
processes call run-once with the same JOB and slot, and however late they come
(in a table with cleanup_after, until the slot's row is deleted that long after
its last use). Schedule it on every machine (cron, systemd timers); one of them
runs it.

  - The first process to take the slot runs CMD and, if CMD succeeds, records
    the slot as done.
  - A process that finds the slot done exits 0 without running CMD.
  - A process that finds the slot running elsewhere waits: it exits 0 once
    the slot is done there, or runs CMD itself if that run fails or its
    process dies (after its lease expires).
  - If CMD fails, run-once exits with CMD's status and leaves the slot for a
    later call.

--slot takes an RFC 3339 time. --every takes the slot of a schedule aligned
to the clock that is current now: --every 1h at 03:00:05 is the slot 03:00 UTC,
so the same command in every machine's crontab names the same slot. CMD gets
the environment of lock, with SPANNERLOCK_NAME set to JOB, plus
SPANNERLOCK_SLOT, the slot as an RFC 3339 time in UTC.

If the lease is lost while CMD runs, CMD is stopped as for lock, run-once
exits 76 and the slot stays open: another call runs it. The same holds when
CMD succeeded but the lease was lost before the slot was recorded as done.

Examples:
  # crontab on every VM; the report runs once a day:
  0 3 * * *  spannerlock run-once nightly-report --every 24h -- ./report.sh

  # Once for an explicit slot:
  spannerlock run-once settle-fees --slot 2026-11-23T15:00:00Z -- ./settle.sh`,
		run: runRunOnce,
	}
}

func runRunOnce(a *app, args []string) error {
	fs := a.newFlagSet("run-once")
	var (
		wait  waitFlags
		cf    childFlags
		slotS string
		every time.Duration
	)
	wait.register(fs, "the slot is running elsewhere")
	cf.register(fs)
	fs.StringVar(&slotS, "slot", "", "the slot, an RFC 3339 `time` such as 2026-11-23T03:00:00Z")
	durationVar(fs, &every, "every", 0, "take the current slot of a schedule with this `interval` (30m, 1h, 1d), aligned to the clock (UTC)")
	job, argv, err := a.parseOne(fs, args, "JOB")
	if err != nil {
		return err
	}
	if err := firstError(wait.check(a), cf.check(), checkName("JOB", job)); err != nil {
		return err
	}
	slot, err := parseSlot(slotS, every, time.Now())
	if err != nil {
		return err
	}
	if argv == nil {
		return usageError("run-once needs a command: spannerlock run-once %s --slot TIME -- CMD", job)
	}
	spec, err := a.prepareCommand(argv, cf.shell)
	if err != nil {
		return err
	}
	c, err := a.connect()
	if err != nil {
		return err
	}
	defer c.close()

	ctx, end := a.sigs.interruptible(a.ctx)
	defer end()
	if wait.timeout.d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait.timeout.d)
		defer cancel()
	}
	started := false
	ran, err := c.lease.RunOnce(ctx, job, slot, func(ctx context.Context) error {
		started = true
		// From here on CMD takes the signals.
		if sig := end(); sig != nil {
			return interrupted(sig)
		}
		l, _ := lease.LeaseFromContext(ctx)
		env := append(leaseEnv(job, l.Token(), c.lease.HolderID()), "SPANNERLOCK_SLOT="+formatTime(slot))
		out, err := a.runCommand(ctx, l, spec.with(env...), cf.killAfter, c.log)
		switch {
		case err != nil:
			return err
		case out.lost:
			return lostWhileRunning(l)
		}
		return exitCode(out.status)
	})
	timedOut := errors.Is(ctx.Err(), context.DeadlineExceeded)
	if sig := end(); sig != nil && !started {
		return interrupted(sig)
	}
	var exit *exitError
	switch {
	case err == nil && ran:
		return nil
	case err == nil:
		c.log.Info("the slot is done already; CMD did not run", "job", job, "slot", formatTime(slot))
		return nil
	case ran && errors.Is(err, lease.ErrLeaseLost):
		return exitWith(exitLost, "CMD succeeded, but the lease on job %q slot %s was lost before the slot was recorded as done, "+
			"so another call may run it again: %v", job, formatTime(slot), err)
	case ran:
		return exitWith(exitFailure, "CMD succeeded, but recording job %q slot %s as done failed, so another call may run it again: %w",
			job, formatTime(slot), c.explain(err))
	case errors.As(err, &exit):
		return err // CMD's own outcome
	case timedOut && !started:
		return exitWith(exitNotAcquired, "gave up after --timeout %s: job %q slot %s is running elsewhere", wait.timeout.d, job, formatTime(slot))
	}
	return c.explain(err)
}

// parseSlot reads --slot, or takes the current slot of --every.
func parseSlot(slot string, every time.Duration, now time.Time) (time.Time, error) {
	switch {
	case slot != "" && every != 0:
		return time.Time{}, usageError("--slot and --every exclude each other")
	case slot != "":
		t, err := time.Parse(time.RFC3339Nano, slot)
		if err != nil {
			return time.Time{}, usageError("--slot %q is not an RFC 3339 time like 2026-11-23T03:00:00Z", slot)
		}
		return t.UTC(), nil
	case every < 0:
		return time.Time{}, usageError("--every %s must be positive", every)
	case every > 0:
		// Truncate counts from the zero time, so the slots of any interval
		// that divides a day start at midnight UTC.
		return now.UTC().Truncate(every), nil
	}
	return time.Time{}, usageError("run-once needs the slot: --slot TIME or --every INTERVAL")
}
