package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

func breakCommand() *command {
	return &command{
		name:    "break",
		summary: "force-release a stuck lock, permit or run-once slot",
		synopsis: `spannerlock break [flags] NAME
spannerlock break --permit SLOT [flags] SEMAPHORE
spannerlock break --slot TIME [flags] JOB`,
		help: `
Ends the live holder's lease on the lock (or leadership) NAME, on one
permit of SEMAPHORE (or one worker ID of a pool; SLOT as status lists it),
or on the running slot of the run-once JOB, for a holder that is stuck: a
process paused for hours, a job run with a long TTL and killed. It is the
library's lease.Client.ForceRelease (ForceReleasePermit), and what the
provider's action does.

The lease's fencing token moves on, so the old holder's Guard-fenced writes
fail from now on and its lease ends at its next renewal (a spannerlock
holding it stops CMD then and exits 76); the next holder gets a larger
token. The old holder is not asked: what it does outside Spanner before its
next renewal goes on, unfenced. Where the TTL is short, waiting for it is
safer. A run-once slot that is broken counts as a failed run.

On a terminal it says who holds the lease and asks before breaking it
(--yes does not ask); elsewhere it breaks it at once. It prints who held it
on stderr, and with -o json that holder as JSON on stdout. It exits 3 when
nobody holds the lease, 1 when the answer is not yes. It breaks only the
holder it read (and asked about): when the lease changed hands meanwhile, it
breaks nothing, says who holds it now, and exits 1.

Examples:
  spannerlock break deploy
  spannerlock break --permit 2 migrations
  spannerlock break --slot 2026-11-23T03:00:00Z nightly-report
  spannerlock break --yes -o json deploy >> broken-leases.log`,
		run: runBreak,
	}
}

// breakTarget is what break ends: a lock (slot < 0) or a permit.
type breakTarget struct {
	// what names it for messages: `lock "deploy"`.
	what string
	name string
	slot int64
	// lockName is the lease's name for ForceRelease; "" for a permit.
	lockName string
}

func runBreak(a *app, args []string) error {
	fs := a.newFlagSet("break")
	timeout := readTimeoutFlag(fs)
	output := outputFlag(fs, "text", "json")
	yes := fs.Bool("yes", false, "do not ask on a terminal before breaking the lease")
	permit := fs.Int64("permit", -1, "break this `slot`'s permit of SEMAPHORE (or this worker ID of a pool), as status lists it")
	slotS := fs.String("slot", "", "break the runner of this slot of the run-once JOB, an RFC 3339 `time`")
	name, argv, err := a.parseOne(fs, args, "NAME")
	if err != nil {
		return err
	}
	if err := firstError(noCommand(fs, argv), checkName("NAME", name)); err != nil {
		return err
	}
	t := breakTarget{what: "lock " + quote(name), name: name, slot: -1, lockName: name}
	switch {
	case *permit >= 0 && *slotS != "":
		return usageError("--permit and --slot exclude each other: a permit belongs to a semaphore, a slot to a run-once job")
	case *permit >= 0:
		t = breakTarget{what: fmt.Sprintf("permit %d of %s", *permit, quote(name)), name: name, slot: *permit}
	case *slotS != "":
		slot, err := parseSlot(*slotS, 0, time.Now())
		if err != nil {
			return err
		}
		t.what = fmt.Sprintf("job %s slot %s", quote(name), formatTime(slot))
		t.lockName = lease.JobSlotName(name, slot)
	}
	c, err := a.connect()
	if err != nil {
		return err
	}
	defer c.close()
	var held lease.Holder
	err = a.read(c, timeout.get(), func(ctx context.Context) error {
		var err error
		held, err = t.holder(ctx, c)
		return err
	})
	if err != nil {
		return err
	}
	if !*yes && term.IsTerminal(int(os.Stdin.Fd())) {
		ok, err := a.confirm(t, held)
		if err != nil || !ok {
			return exitWith(exitFailure, "%s was not broken", t.what)
		}
	}
	var ended lease.Holder
	err = a.read(c, timeout.get(), func(ctx context.Context) error {
		var err error
		// Only the holder read above (and shown, on a terminal) is broken:
		// one that took the lease since keeps it.
		if t.lockName != "" {
			ended, err = c.lease.ForceRelease(ctx, t.lockName, lease.IfToken(held.Token))
		} else {
			ended, err = c.lease.ForceReleasePermit(ctx, t.name, t.slot, lease.IfToken(held.Token))
		}
		switch {
		case errors.Is(err, lease.ErrHolderChanged):
			return exitWith(exitFailure, "%s was not broken: it changed hands since it was read (held by %s with token %d, now by %s with token %d); run break again to break the new holder",
				t.what, printable(held.HolderID), held.Token, printable(ended.HolderID), ended.Token)
		case errors.Is(err, lease.ErrNoHolder):
			return exitWith(exitNoHolder, "nobody holds %s any more in table %s", t.what, c.table)
		case errors.Is(err, lease.ErrWrongKind) && t.lockName == "":
			return fmt.Errorf("%s is not a semaphore or a worker pool: break it without --permit", quote(t.name))
		}
		return err
	})
	if err != nil {
		return err
	}
	a.note("Broke %s: it was held by %s with token %d since %s; its next renewal finds it lost.\n",
		t.what, printable(ended.HolderID), ended.Token, formatTime(ended.AcquiredAt))
	if *output == "json" {
		return writeJSON(a.stdout, statusLeaseOf(ended))
	}
	return nil
}

// holder reads who holds t, or says that nobody does (exit status 3).
func (t breakTarget) holder(ctx context.Context, c *conn) (lease.Holder, error) {
	if t.lockName != "" {
		h, err := c.lease.Holder(ctx, t.lockName)
		switch {
		case errors.Is(err, lease.ErrNoHolder):
			return h, exitWith(exitNoHolder, "nobody holds %s in table %s", t.what, c.table)
		case errors.Is(err, lease.ErrWrongKind):
			return h, fmt.Errorf("%s is not a lock: break one of its permits (or worker IDs) with --permit SLOT; 'spannerlock holder %s' lists them",
				quote(t.name), printable(t.name))
		}
		return h, err
	}
	all, err := c.lease.Holders(ctx)
	if err != nil {
		return lease.Holder{}, err
	}
	i := slices.IndexFunc(all, func(h lease.Holder) bool { return h.Name == t.name && h.Kind != lockKind && h.Slot == t.slot })
	if i < 0 {
		return lease.Holder{}, exitWith(exitNoHolder, "nobody holds %s in table %s", t.what, c.table)
	}
	return all[i], nil
}

// confirm asks on the terminal whether to break t, held by h.
func (a *app) confirm(t breakTarget, h lease.Holder) (bool, error) {
	say(a.stderr, "%s is held by %s with token %d since %s, renewed at %s.\n"+
		"Breaking it makes its holder's fenced writes fail and ends its lease at its next renewal;\n"+
		"what the holder does outside Spanner until then goes on. Break it? [y/N] ",
		t.what, printable(h.HolderID), h.Token, formatTime(h.AcquiredAt), formatTime(h.RenewedAt))
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil && line == "" {
		return false, err
	}
	answer := strings.ToLower(strings.TrimSpace(line))
	return answer == "y" || answer == "yes", nil
}
