package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

func electCommand() *command {
	return &command{
		name:    "elect",
		runsCMD: true,
		summary: "run a command while this process is the elected leader, or watch the leader",
		synopsis: `spannerlock elect [flags] NAME -- CMD [ARGS...]
spannerlock elect [flags] NAME
spannerlock elect --observe [-o json] NAME`,
		help: `
Joins the election NAME and runs CMD while this process leads, with the
environment of lock. Run it on every replica; one leads at a time. When CMD
exits, spannerlock steps down (releasing leadership at once to the next
replica) and exits with CMD's status.

If leadership is lost while CMD runs (this process could not renew it within
the TTL), CMD's process group gets SIGTERM, then SIGKILL after --kill-after,
and spannerlock campaigns again: it runs CMD anew if it wins again. Signals
are forwarded as for lock. Unlike lock, elect never exits 76.

Without CMD, it prints its token each time it becomes leader and leads until
SIGINT or SIGTERM.

With --observe it does not campaign: it prints the leader each time it
changes (a line "NAME: no leader" when there is none) until SIGINT or
SIGTERM, then exits 0. With -o json each line is a JSON object with the
fields of 'spannerlock holder', null when there is no leader.

Examples:
  # On every replica of a scheduler; one runs it at a time:
  spannerlock elect scheduler -- ./scheduler --config prod.yaml

  # Who leads, and every change from now on:
  spannerlock elect --observe scheduler`,
		run: runElect,
	}
}

func runElect(a *app, args []string) error {
	fs := a.newFlagSet("elect")
	var cf childFlags
	cf.register(fs)
	observe := fs.Bool("observe", false, "do not campaign: print the leader each time it changes, until interrupted")
	output := outputFlag(fs, "text", "json")
	name, argv, err := a.parseOne(fs, args, "NAME")
	if err != nil {
		return err
	}
	if err := firstError(cf.check(), checkName("NAME", name), checkOutput(*output, "text", "json")); err != nil {
		return err
	}
	if *observe {
		if err := noCommand(fs, argv); err != nil {
			return usageError("--observe runs no command; remove what follows --")
		}
		return a.observe(name, *output)
	}
	if *output != "text" {
		return usageError("-o applies to --observe")
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
	return a.campaign(c, name, spec, cf.killAfter)
}

// errLostLeadership ends a term that lost the lease; the campaign goes on.
var errLostLeadership = errors.New("lost leadership")

// campaign runs lease.Client.Campaign until a term ends for good: CMD
// exited, or a stopping signal arrived.
func (a *app) campaign(c *conn, name string, spec *childSpec, killAfter time.Duration) error {
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	// While no term runs, a stopping signal ends the campaign; during a
	// term, the term takes the signals.
	endWatch := a.sigs.watch(cancel)
	var (
		result    error
		stoppedBy os.Signal
	)
	// A campaign that does not return when ctx ends is abandoned (see
	// within), but never during a term.
	var gate startGate
	_, err := withinGated(ctx, &gate, func() (struct{}, error) {
		return struct{}{}, c.lease.Campaign(ctx, name, lease.LeaderCallbacks{
			OnNewLeader: func(h lease.Holder) {
				if h.HolderID != c.lease.HolderID() {
					c.log.Info("waiting: "+quote(h.HolderID)+" leads", "name", name, "token", h.Token)
				}
			},
			OnStartedLeading: func(ctx context.Context, l *lease.Lease) {
				if !gate.start() {
					return
				}
				defer gate.finish()
				if sig := endWatch(); sig != nil {
					stoppedBy = sig
					return
				}
				// While leading, an outage is the lease's business: its loss
				// ends the term.
				c.outages.pause()
				result = a.term(ctx, c, l, spec, killAfter)
				c.outages.resume()
				if errors.Is(result, errLostLeadership) {
					c.log.Warn("lost leadership; campaigning again", "name", name, "token", l.Token(), "cause", context.Cause(l.Context()))
					result = nil
					endWatch = a.sigs.watch(cancel)
					return
				}
				cancel() // Campaign releases the lease before it returns.
			},
		})
	})
	if sig := endWatch(); sig != nil && stoppedBy == nil {
		stoppedBy = sig
	}
	switch {
	case result != nil:
		return result
	case stoppedBy != nil:
		return interrupted(stoppedBy)
	case outage(c.ctx) != nil:
		return outage(c.ctx)
	case err != nil:
		return c.explain(err)
	}
	return nil
}

// term is one term of leadership: CMD's run, or holding until a stopping
// signal without CMD.
func (a *app) term(ctx context.Context, c *conn, l *lease.Lease, spec *childSpec, killAfter time.Duration) error {
	if spec == nil {
		say(a.stdout, "%d\n", l.Token())
		ctx, end := a.sigs.interruptible(ctx)
		select {
		case <-ctx.Done():
		case <-l.Context().Done():
		}
		if end() == nil {
			return errLostLeadership
		}
		return nil
	}
	out, err := a.runCommand(ctx, l, spec.with(leaseEnv(l.Name(), l.Token(), c.lease.HolderID())...), killAfter, c.log)
	switch {
	case err != nil:
		return err
	case out.lost:
		return errLostLeadership
	}
	return exitCode(out.status)
}

// observe prints the leader of name at every change until a stopping signal.
func (a *app) observe(name, format string) error {
	c, err := a.connect()
	if err != nil {
		return err
	}
	defer c.close()
	// One read first: Observe retries failed reads forever, which would
	// hide a missing table behind warnings.
	err = a.read(c, defaultReadTimeout, func(ctx context.Context) error {
		_, err := c.lease.Holder(ctx, name)
		if errors.Is(err, lease.ErrNoHolder) {
			return nil
		}
		return err
	})
	if err != nil {
		return err
	}
	ctx, end := a.sigs.interruptible(c.ctx)
	defer end()
	changes, err := c.lease.Observe(ctx, name)
	if err != nil {
		return c.explain(err)
	}
	for {
		h, open, err := next(ctx, changes)
		switch {
		case err != nil:
			return outage(c.ctx) // nil after a stopping signal
		case !open:
			return outage(c.ctx)
		}
		if err := a.printLeader(h, format); err != nil {
			return err
		}
	}
}

// next receives from ch; once ctx has ended it waits abandonGrace for ch
// to close (see within), then gives up with an error.
func next[T any](ctx context.Context, ch <-chan T) (v T, open bool, err error) {
	select {
	case v, open = <-ch:
		return v, open, nil
	case <-ctx.Done():
	}
	select {
	case v, open = <-ch:
		return v, open, nil
	case <-time.After(abandonGrace):
		return v, false, errAbandoned
	}
}

func (a *app) printLeader(h lease.Holder, format string) error {
	vacant := h.Token == 0
	switch {
	case format == "json" && vacant:
		return writeJSON(a.stdout, map[string]any{
			"name": h.Name, "holder_id": nil, "token": nil, "acquired_at": nil, "renewed_at": nil, "expires_at": nil,
		})
	case format == "json":
		return writeJSON(a.stdout, toJSON(h))
	case vacant:
		_, err := fmt.Fprintf(a.stdout, "%s: no leader\n", printable(h.Name))
		return err
	}
	_, err := fmt.Fprintf(a.stdout, "%s: %s leads (token %d, since %s)\n", printable(h.Name), printable(h.HolderID), h.Token, formatTime(h.AcquiredAt))
	return err
}
