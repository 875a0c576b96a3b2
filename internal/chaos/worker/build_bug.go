//go:build spannerlock_plantedbug

package main

import (
	"context"
	"fmt"

	"cloud.google.com/go/spanner"

	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// build names how this worker was built: here with a planted bug, a fence
// that checks only the lease's local Context and never asks Spanner, so a
// holder paused past its TTL writes over its successor. The fault suite
// builds it to show that its checker catches that.
const build = "spannerlock_plantedbug"

func guard(_ context.Context, l *lease.Lease, _ *spanner.ReadWriteTransaction) error {
	if err := context.Cause(l.Context()); err != nil {
		return fmt.Errorf("planted guard: %w", err)
	}
	return nil
}
