package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
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
  - A process that finds the slot done exits 77 without running CMD
    (--done-exit-code sets another status, 0 for instance).
  - A process that finds the slot running elsewhere waits: it exits 77 once
    the slot is done there, or runs CMD itself if that run fails or its
    process dies (after its lease expires). With --try it exits 75 at once
    instead, and with --timeout once that has passed.
  - If CMD fails, run-once exits with CMD's status and leaves the slot for a
    later call. With --max-failures N, a slot whose runs failed N times, on
    any host (a run that crashed or was broken counts), is not run again:
    run-once exits 1 saying so. 'spannerlock status' lists each job's slots,
    done, running or failed, with their runs.

A slot's lock is named JOB@SLOT, the slot as an RFC 3339 time in UTC
(status and holder call it kind run_once); lock, permit, elect and
semaphore set refuse a name of that form (exit 2), which would take the
slot's row and reset its runs.

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
		wait        waitFlags
		cf          childFlags
		slotS       string
		every       time.Duration
		maxFailures int
	)
	wait.register(a, fs, "the slot is running elsewhere")
	cf.register(fs)
	fs.Var(exitCodeValue{&a.doneCode}, "done-exit-code",
		"exit with this `status` instead of 77 when the slot is done already, here or elsewhere, so CMD did not run")
	fs.IntVar(&maxFailures, "max-failures", 0, "do not run a slot whose runs, on any host, failed (or crashed, or were broken) this many `times`: "+
		"exit 1 instead (default: no limit)")
	fs.StringVar(&slotS, "slot", "", "the slot, an RFC 3339 `time` such as 2026-11-23T03:00:00Z")
	durationVar(fs, &every, "every", 0, "take the current slot of a schedule with this `interval` (30m, 1h, 1d), aligned to the clock (UTC)")
	job, argv, err := a.parseOne(fs, args, "JOB")
	if err != nil {
		return err
	}
	if err := firstError(wait.check(a), cf.check(a.global.ttl), checkName("JOB", job)); err != nil {
		return err
	}
	if maxFailures < 0 {
		return usageError("--max-failures %d must not be negative", maxFailures)
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
	// --timeout bounds the connection too.
	c, err := a.connectWithin(wait.timeout.d)
	if err != nil {
		return err
	}
	defer c.close()

	ctx, end := a.sigs.interruptible(c.ctx)
	defer end()
	slotName := formatTime(slot)
	var gate startGate
	lockName := lease.JobSlotName(job, slot)
	if !wait.try && c.log.Enabled(ctx, slog.LevelInfo) {
		if h, err := c.lease.Holder(ctx, lockName); err == nil {
			c.log.Info("waiting: job "+quote(job)+" slot "+slotName+" is running elsewhere", "holder_id", h.HolderID, "token", h.Token)
		}
	}
	type outcome struct{ ran bool }
	opts := []lease.RunOnceOption{lease.WithMaxFailures(maxFailures)}
	if wait.try {
		// A --try that found the slot running elsewhere leaves nothing in
		// its line to take the slot later.
		opts = append(opts, lease.WithoutWaiting())
	}
	o, err := withinGated(ctx, &gate, func() (outcome, error) {
		ran, err := c.lease.RunOnce(ctx, job, slot, func(ctx context.Context) error {
			if !gate.start() {
				return errAbandoned
			}
			return a.runSlot(ctx, c, job, slotName, spec, cf.killAfter, end)
		}, opts...)
		return outcome{ran}, err
	})
	ran := o.ran
	timedOut := deadlinePassed(ctx)
	if sig := end(); sig != nil && !gate.started() {
		a.interrupted = true
		return interrupted(sig)
	}
	var exit *exitError
	switch {
	case err == nil && ran:
		return nil
	case err == nil:
		c.log.Info("the slot is done already; CMD did not run", "job", job, "slot", slotName)
		return exitCode(a.doneCode)
	case ran && errors.Is(err, lease.ErrLeaseLost):
		return exitWith(exitLost, "CMD succeeded, but the lease on job %s slot %s was lost before the slot was recorded as done, "+
			"so another call may run it again: %v", quote(job), slotName, err)
	case ran:
		return exitWith(exitFailure, "CMD succeeded, but recording job %s slot %s as done failed, so another call may run it again: %w",
			quote(job), slotName, c.explain(err))
	case errors.As(err, &exit):
		return err // CMD's own outcome
	case gate.started():
		return c.explain(err)
	case outage(ctx) != nil:
		return outage(ctx)
	case errors.Is(err, lease.ErrTooManyFailures):
		return exitWith(exitFailure, "job %s slot %s failed %s or more, so it does not run again (--max-failures %d); "+
			"'spannerlock status' lists its runs: %v", quote(job), slotName, counted(maxFailures, "time"), maxFailures, err)
	case errors.Is(err, lease.ErrNotAcquired) && wait.try:
		return a.conflict(c.log, "job %s slot %s is running elsewhere (%s); --try does not wait", quote(job), slotName, runnerOf(err))
	case errors.Is(err, lease.ErrNotAcquired) && timedOut && unansweredBeforeDeadline(ctx, c.health):
		return c.health.noAnswer(" within --timeout "+formatDuration(wait.timeout.d)+" (before that, it ran elsewhere: "+runnerOf(err)+")", err)
	case errors.Is(err, lease.ErrNotAcquired):
		return a.conflict(c.log, "gave up after --timeout %s: job %s slot %s is running elsewhere (%s)",
			formatDuration(wait.timeout.d), quote(job), slotName, runnerOf(err))
	case timedOut:
		return c.health.noAnswer(" within --timeout "+formatDuration(wait.timeout.d), err)
	}
	return c.explain(err)
}

// runSlot runs CMD for the slot, under the slot's lease; end ends the
// watch for stopping signals, which CMD takes from now on.
func (a *app) runSlot(ctx context.Context, c *conn, job, slot string, spec *childSpec, killAfter time.Duration, end func() os.Signal) error {
	if sig := end(); sig != nil {
		return interrupted(sig)
	}
	// An outage now is the lease's business: its loss stops CMD.
	c.outages.pause()
	defer c.outages.resume()
	l, _ := lease.LeaseFromContext(ctx)
	env := append(leaseEnv(job, l.Token(), c.lease.HolderID()), "SPANNERLOCK_SLOT="+slot)
	out, err := a.runCommand(ctx, l, spec.with(env...), killAfter, c.log)
	switch {
	case err != nil:
		return err
	case out.lost:
		return lostWhileRunning(l)
	}
	return exitCode(out.status)
}

// runnerOf says who runs the slot, from the error of a RunOnce that gave up
// waiting.
func runnerOf(err error) string {
	var held *lease.HeldError
	if errors.As(err, &held) {
		return fmt.Sprintf("run by %s with token %d", quote(held.Holder.HolderID), held.Holder.Token)
	}
	return "its runner is live"
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
