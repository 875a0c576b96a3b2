package main

import (
	"context"
	"flag"
	"strings"
	"time"

	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

func lockCommand() *command {
	return &command{
		name:    "lock",
		runsCMD: true,
		summary: "run a command while holding a lock",
		synopsis: `spannerlock lock [flags] NAME -- CMD [ARGS...]
spannerlock lock [flags] NAME`,
		help: `
Waits until this process holds the lock NAME, runs CMD, releases the lock
when CMD exits, and exits with CMD's status (128+N if CMD died of signal N).
CMD gets spannerlock's environment plus:

  SPANNERLOCK_NAME        NAME
  SPANNERLOCK_TOKEN       the fencing token: larger than every earlier
                          holder's, so storage can reject a stale holder
  SPANNERLOCK_HOLDER_ID   this process's holder ID
  SPANNERLOCK_SET_FOR_CMD the names of these, which a spannerlock that CMD
                          runs does not take as its flags
  TRACEPARENT             when spannerlock exports traces
                          (OTEL_EXPORTER_OTLP_ENDPOINT), the W3C trace
                          context of CMD's span, with TRACESTATE if any,
                          so that CMD's own tracing joins the trace

CMD runs without a shell (use --shell for shell syntax), in a process group
of its own, with spannerlock's stdin, stdout and stderr. SIGINT, SIGTERM,
SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to spannerlock go to CMD's whole
group (SIGHUP or SIGINT it was started with ignored, as under nohup, stays
ignored for both); spannerlock releases the lock once CMD has exited. If
the lock may be lost while CMD runs (spannerlock could not renew it in
time), CMD's group gets SIGTERM --kill-after before the lease's local
deadline and SIGKILL at it, so that it is dead before any rival can
acquire, and spannerlock exits 76 ('spannerlock help signals' has the
timeline). Processes CMD leaves running when it exits, setsid daemons
included, are stopped the same way before the lock is released.

Without CMD, spannerlock prints the token and holds the lock until SIGINT or
SIGTERM (exit 0), or until it is lost (exit 76).

NAME may not have the form JOB@SLOT (a job, "@", an RFC 3339 time in UTC):
that is the lock of a run-once slot, and lock refuses it (exit 2).

Examples:
  # One deploy at a time, across every pipeline:
  spannerlock lock deploy -- ./deploy.sh production

  # A job that must never run twice at once: skip this run if one is running
  # (to run each scheduled slot exactly once across VMs, see run-once).
  spannerlock lock --try sync-inventory -- ./sync.sh

  # Wait at most 5 minutes; shell syntax needs --shell:
  spannerlock lock --timeout 5m --shell db-backup -- 'pg_dump app | gzip > /backups/app.gz'

  # Readers share, a writer waits for them (and readers that come after it
  # wait for the writer), as flock -s and flock -x:
  spannerlock lock --shared catalog -- ./read-catalog.sh
  spannerlock lock catalog -- ./rebuild-catalog.sh

  # Hold a lock by hand while you work; Ctrl-C releases it:
  spannerlock lock maintenance`,
		run: runLock,
	}
}

func runLock(a *app, args []string) error {
	var shared bool
	flags := func(fs *flag.FlagSet) {
		fs.BoolVar(&shared, "shared", false, "hold the lock shared, with other --shared holders and no exclusive one (as flock -s); "+
			"shared and exclusive holders wait in one line, in the order they came")
	}
	return a.runHeld(args, "lock", "NAME", "it is held", flags, func(c *conn, name string) acquisition {
		try, wait := c.lease.TryAcquire, c.lease.Acquire
		if shared {
			try, wait = c.lease.TryAcquireShared, c.lease.AcquireShared
		}
		return acquisition{
			try:  func(ctx context.Context) (*lease.Lease, error) { return try(ctx, name) },
			wait: func(ctx context.Context) (*lease.Lease, error) { return wait(ctx, name) },
			busy: lockBusy(name),
		}
	})
}

// runHeld is lock and permit: it parses NAME and CMD with the waiting and
// child flags (and the command's own, registered by flags), acquires what
// of gives for NAME, and runs CMD under it.
func (a *app) runHeld(args []string, command, argName, busy string, flags func(*flag.FlagSet), of func(c *conn, name string) acquisition) error {
	fs := a.newFlagSet(command)
	var (
		wait waitFlags
		cf   childFlags
	)
	wait.register(a, fs, busy)
	cf.register(fs)
	if flags != nil {
		flags(fs)
	}
	name, argv, err := a.parseOne(fs, args, argName)
	if err != nil {
		return err
	}
	if err := firstError(wait.check(a), cf.check(a.global.ttl), checkOwnName(argName, name)); err != nil {
		return err
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
	acq := of(c, name)
	l, err := a.acquire(c.ctx, c, wait, acq)
	if err != nil && acq.explain != nil {
		err = acq.explain(err)
	}
	if err != nil {
		return err
	}
	return a.hold(c, l, spec, cf.killAfter, leaseEnv(name, l.Token(), c.lease.HolderID()))
}

// checkName rejects what no lease can be named.
func checkName(what, name string) error {
	if err := lease.ValidateName(name); err != nil {
		return usageError("%s: %v", what, err)
	}
	return nil
}

// checkOwnName is checkName for a name that spannerlock takes for its own
// lock, semaphore or election: it also refuses the form JOB@SLOT, which
// is run-once's name for the lock of a job's slot (lease.JobSlotName):
// holding or declaring it would take that slot's row, as if the slot ran,
// and reset its counts of runs.
func checkOwnName(what, name string) error {
	if err := checkName(what, name); err != nil {
		return err
	}
	if job, slot, ok := jobSlotOf(name); ok {
		return usageError("%s %s is reserved: JOB@SLOT (a job, \"@\" and an RFC 3339 time in UTC) names the lock run-once takes for "+
			"a slot, here job %s slot %s; choose another name, or use 'spannerlock run-once %s --slot %s'",
			what, quote(name), quote(job), formatTime(slot), printable(job), formatTime(slot))
	}
	return nil
}

// jobSlotOf reports whether name is one that lease.JobSlotName makes, and
// of which job and slot.
func jobSlotOf(name string) (job string, slot time.Time, ok bool) {
	i := strings.LastIndex(name, "@")
	if i < 0 {
		return "", time.Time{}, false
	}
	slot, err := time.Parse(time.RFC3339Nano, name[i+1:])
	if err != nil || lease.JobSlotName(name[:i], slot) != name {
		return "", time.Time{}, false
	}
	return name[:i], slot, true
}

func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
