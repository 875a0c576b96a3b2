package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

func holderCommand() *command {
	return &command{
		name:     "holder",
		summary:  "print who holds a lock, as JSON",
		synopsis: "spannerlock holder [flags] NAME",
		help: `
Prints the live holder of the lock (or leadership) NAME as one JSON object
on stdout, and nothing else there; it exits 3 when nobody holds NAME. It
reads the lease as the spannerlock_leader Terraform data source does
(lease.Client.Holder), so the two never disagree. For a semaphore (or a
pool of worker IDs) NAME it prints one object per permit (worker ID) in
use, as status -o json lists them: with "kind" and "slot". For a run-once
JOB it prints the runner of each slot running now, with "kind":"run_once",
"job" and "slot" (the slot's time).

  {"name":"deploy","holder_id":"web-1-4242-a1b2c3","token":7,
   "acquired_at":"2026-11-23T04:40:01.123456Z",
   "renewed_at":"2026-11-23T04:41:31.654321Z",
   "expires_at":"2026-11-23T04:41:41.654321Z"}

token is the fencing token (a JSON number); times are RFC 3339 in UTC, on
Spanner's clock. expires_at is when the lease expires unless renewed. A
leader that published a value (elect --value) has it in "value".

Examples:
  spannerlock holder deploy
  spannerlock holder deploy | jq -r .holder_id
  if spannerlock holder deploy > /dev/null; then echo "a deploy is running"; fi`,
		run: runHolder,
	}
}

func runHolder(a *app, args []string) error {
	fs := a.newFlagSet("holder")
	timeout := readTimeoutFlag(fs)
	name, argv, err := a.parseOne(fs, args, "NAME")
	if err != nil {
		return err
	}
	if err := firstError(noCommand(fs, argv), checkName("NAME", name)); err != nil {
		return err
	}
	c, err := a.connect()
	if err != nil {
		return err
	}
	defer c.close()
	var out []any
	err = a.read(c, timeout.get(), func(ctx context.Context) error {
		h, err := c.lease.Holder(ctx, name)
		switch {
		case err == nil:
			out = []any{toJSON(h)}
			return nil
		case !errors.Is(err, lease.ErrNoHolder) && !errors.Is(err, lease.ErrWrongKind):
			return err
		}
		// Not a lock, or not held: a semaphore's permits, a pool's IDs or
		// a job's running slots by that name?
		out, err = otherHolders(ctx, c, name)
		return err
	})
	if err != nil {
		return err
	}
	for _, h := range out {
		if err := writeJSON(a.stdout, h); err != nil {
			return fmt.Errorf("writing the holder: %w", err)
		}
	}
	return nil
}

// otherHolders finds the holders of name when no lock by that name is
// held: the permits in use of a semaphore, or the worker IDs of a pool, by
// that name, as status -o json lists them. When there are none, the error
// says what name is and that nobody holds it (exit status 3).
func otherHolders(ctx context.Context, c *conn, name string) ([]any, error) {
	all, err := c.lease.Holders(ctx)
	if err != nil {
		return nil, err
	}
	var out []any
	for _, h := range all {
		if h.Name == name && h.Kind != lockKind {
			out = append(out, statusLeaseOf(h))
		}
	}
	if len(out) > 0 {
		return out, nil
	}
	jobs, err := c.lease.Jobs(ctx)
	if err != nil {
		return nil, err
	}
	isJob := false
	for _, j := range jobs {
		isJob = isJob || j.Job == name
		if j.Job == name && j.Runner != nil {
			out = append(out, runnerJSON{holderJSON: toJSON(*j.Runner), Kind: runOnceKind, Job: j.Job, Slot: formatTime(j.Slot)})
		}
	}
	switch {
	case len(out) > 0:
		return out, nil
	case isJob:
		return nil, exitWith(exitNoHolder, "nobody runs a slot of job %s in table %s ('spannerlock status' lists its slots)", quote(name), c.table)
	}
	s, err := c.lease.Semaphore(ctx, name)
	switch {
	case err == nil:
		return nil, exitWith(exitNoHolder, "nobody holds a permit of semaphore %s in table %s (0 of %d in use)", quote(name), c.table, s.Permits)
	case !errors.Is(err, lease.ErrUnknownSemaphore) && !errors.Is(err, lease.ErrWrongKind):
		// ErrWrongKind: a lock's (or a pool's) row by that name, not held.
		return nil, err
	}
	return nil, exitWith(exitNoHolder, "nobody holds %s in table %s (no lock, semaphore permit, worker ID or run-once slot by that name is held)",
		quote(name), c.table)
}

// runnerJSON is the runner of a run-once slot as holder prints it: the
// fields of holder (name is the slot's lock), its kind, the job and the slot.
type runnerJSON struct {
	holderJSON
	Kind string `json:"kind"`
	Job  string `json:"job"`
	Slot string `json:"slot"`
}
