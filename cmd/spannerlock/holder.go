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
(lease.Client.Holder), so the two never disagree.

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
	var h lease.Holder
	err = a.read(c, *timeout, func(ctx context.Context) error {
		var err error
		h, err = c.lease.Holder(ctx, name)
		if errors.Is(err, lease.ErrNoHolder) {
			return exitWith(exitNoHolder, "nobody holds %q in table %s", name, c.table)
		}
		return err
	})
	if err != nil {
		return err
	}
	if err := writeJSON(a.stdout, toJSON(h)); err != nil {
		return fmt.Errorf("writing the holder: %w", err)
	}
	return nil
}
