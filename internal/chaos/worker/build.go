//go:build !spannerlock_plantedbug

package main

import (
	"context"

	"cloud.google.com/go/spanner"

	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// build names how this worker was built, for the log.
const build = "normal"

// guard fences a write with the lease, as applications do.
func guard(ctx context.Context, l *lease.Lease, tx *spanner.ReadWriteTransaction) error {
	return l.Guard(ctx, tx)
}
