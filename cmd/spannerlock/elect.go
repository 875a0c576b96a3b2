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

If leadership may be lost while CMD runs (this process could not renew it in
time), CMD's process group gets SIGTERM --kill-after before the lease's
local deadline and SIGKILL at it, before any rival can lead, and
spannerlock campaigns again: it runs CMD anew if it wins again. Signals
are forwarded as for lock. Unlike lock, elect never exits 76.

With --restart, CMD that exits while this process leads runs again, still
under the same leadership (the same SPANNERLOCK_TOKEN), after 1s, then
twice as long each time up to 1m (a run of a minute or more starts the
backoff over), until a stopping signal (SIGINT, SIGTERM, SIGHUP, SIGQUIT)
ends it. --value publishes a value with the leadership, such as the
leader's address, which holder and --observe show.

Without CMD, it prints its token each time it becomes leader and leads until
SIGINT or SIGTERM.

With --observe it does not campaign: it prints the leader each time it
changes (a line "NAME: no leader" when there is none) until SIGINT or
SIGTERM, then exits 0. With -o json each line is a JSON object with the
fields of 'spannerlock holder', null when there is no leader.

Examples:
  # On every replica of a scheduler; one runs it at a time:
  spannerlock elect scheduler -- ./scheduler --config prod.yaml

  # Keep the leader's worker running, and say where it listens:
  spannerlock elect --restart --value "$(hostname):8080" ingest -- ./ingest

  # Who leads, and every change from now on:
  spannerlock elect --observe scheduler`,
		run: runElect,
	}
}

// candidacy is how elect campaigns and leads.
type candidacy struct {
	spec      *childSpec
	killAfter time.Duration
	// value is published with the leadership (--value).
	value string
	// restart runs CMD again, after a backoff, when it exits while this
	// process leads (--restart).
	restart bool
}

// Restart backoff: the first restart waits restartFirst, each next one
// twice as long, up to restartMax; a run that lasted restartMax starts
// over.
const (
	restartFirst = time.Second
	restartMax   = time.Minute
)

func runElect(a *app, args []string) error {
	fs := a.newFlagSet("elect")
	var (
		cf   childFlags
		cand candidacy
	)
	cf.register(fs)
	observe := fs.Bool("observe", false, "do not campaign: print the leader each time it changes, until interrupted")
	output := outputFlag(fs, "text", "json")
	fs.StringVar(&cand.value, "value", "", "publish this `value` with the leadership while this process leads (an address, a URL), "+
		"for holder and --observe to show")
	fs.BoolVar(&cand.restart, "restart", false, "when CMD exits while this process leads, run it again, after 1s, then twice as long "+
		"each time up to 1m, instead of stepping down")
	name, argv, err := a.parseOne(fs, args, "NAME")
	if err != nil {
		return err
	}
	if err := firstError(cf.check(a.global.ttl), checkOwnName("NAME", name)); err != nil {
		return err
	}
	if *observe {
		switch {
		case noCommand(fs, argv) != nil:
			return usageError("--observe runs no command; remove what follows --")
		case cand.value != "" || cand.restart:
			return usageError("--observe does not campaign: --value and --restart are for a candidate")
		}
		return a.observe(name, *output)
	}
	if *output != "text" {
		return usageError("-o applies to --observe")
	}
	if cand.spec, err = a.prepareCommand(argv, cf.shell); err != nil {
		return err
	}
	if cand.restart && cand.spec == nil {
		return usageError("--restart needs a command after --")
	}
	cand.killAfter = cf.killAfter
	c, err := a.connect()
	if err != nil {
		return err
	}
	defer c.close()
	return a.campaign(c, name, cand)
}

// errLostLeadership ends a term that lost the lease; the campaign goes on.
var errLostLeadership = errors.New("lost leadership")

// campaign runs lease.Client.Campaign until a term ends for good: CMD
// exited, or a stopping signal arrived.
func (a *app) campaign(c *conn, name string, cand candidacy) error {
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
				result = a.term(ctx, c, l, cand)
				c.outages.resume()
				if errors.Is(result, errLostLeadership) {
					c.log.Warn("lost leadership; campaigning again", "name", name, "token", l.Token(), "cause", context.Cause(l.Context()))
					result = nil
					endWatch = a.sigs.watch(cancel)
					return
				}
				cancel() // Campaign releases the lease before it returns.
			},
		}, lease.WithPayload([]byte(cand.value)))
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

// term is one term of leadership: CMD's run (its runs, with --restart), or
// holding until a stopping signal without CMD.
func (a *app) term(ctx context.Context, c *conn, l *lease.Lease, cand candidacy) error {
	if cand.spec == nil {
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
	backoff := restartFirst
	for {
		started := time.Now()
		out, err := a.runCommand(ctx, l, cand.spec.with(leaseEnv(l.Name(), l.Token(), c.lease.HolderID())...), cand.killAfter, c.log)
		switch {
		case err != nil:
			return err
		case out.lost:
			return errLostLeadership
		case !cand.restart || out.stoppedBy != nil:
			// A stopping signal for CMD was spannerlock's too.
			return exitCode(out.status)
		}
		if time.Since(started) >= restartMax {
			backoff = restartFirst
		}
		c.log.Warn("CMD exited while this process leads; running it again after the backoff (--restart)",
			"name", l.Name(), "status", out.status, "backoff", backoff)
		if err := a.restartAfter(ctx, l, backoff); err != nil {
			return err
		}
		backoff = min(2*backoff, restartMax)
	}
}

// restartAfter waits d before CMD runs again: it returns nil then,
// errLostLeadership if leadership ends first, and what a stopping signal
// calls for if one comes.
func (a *app) restartAfter(ctx context.Context, l *lease.Lease, d time.Duration) error {
	waitCtx, end := a.sigs.interruptible(ctx)
	t := time.NewTimer(d)
	defer t.Stop()
	elapsed := false
	select {
	case <-t.C:
		elapsed = true
	case <-waitCtx.Done():
	case <-l.Context().Done():
	}
	switch sig := end(); {
	case sig != nil:
		return interrupted(sig)
	case elapsed:
		return nil
	case l.Context().Err() != nil:
		return errLostLeadership
	}
	return ctx.Err()
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
	var value string
	if len(h.Payload) > 0 {
		value = ", value " + printable(string(h.Payload))
	}
	_, err := fmt.Fprintf(a.stdout, "%s: %s leads (token %d, since %s%s)\n", printable(h.Name), printable(h.HolderID), h.Token, formatTime(h.AcquiredAt), value)
	return err
}
