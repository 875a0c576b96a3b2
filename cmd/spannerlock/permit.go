package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

func permitCommand() *command {
	return &command{
		name:    "permit",
		runsCMD: true,
		summary: "run a command while holding a permit of a semaphore",
		synopsis: `spannerlock permit [flags] SEMAPHORE -- CMD [ARGS...]
spannerlock permit [flags] SEMAPHORE`,
		help: `
Like lock, with one of the permits of SEMAPHORE instead of a lock: at most
as many holders as the semaphore has permits run at once. The semaphore
must be declared with its number of permits, by 'spannerlock semaphore
set', the spannerlock_semaphore Terraform resource or
lease.Client.SetPermits. Each permit has its own fencing token in
SPANNERLOCK_TOKEN; SPANNERLOCK_NAME is SEMAPHORE.

Exit status, environment, signals and the handling of a lost permit are as
for lock.

Examples:
  # At most as many concurrent migrations as "migrations" has permits:
  spannerlock permit migrations -- ./migrate.sh

  # Skip this run if every permit is in use:
  spannerlock permit --try crawlers -- ./crawl.sh`,
		run: runPermit,
	}
}

func runPermit(a *app, args []string) error {
	return a.runHeld(args, "permit", "SEMAPHORE", "every permit is in use", nil, func(c *conn, name string) acquisition {
		return acquisition{
			try:  func(ctx context.Context) (*lease.Lease, error) { return c.lease.TryAcquirePermit(ctx, name) },
			wait: func(ctx context.Context) (*lease.Lease, error) { return c.lease.AcquirePermit(ctx, name) },
			// The error says only that every permit is in use; one read
			// says how many there are, while there is time for it.
			busy: func(ctx context.Context, _ error) string {
				if ctx.Err() != nil {
					return ""
				}
				if s, err := c.lease.Semaphore(ctx, name); err == nil {
					return fmt.Sprintf("every permit of semaphore %s is in use (%d of %d)", quote(name), s.InUse(), s.Permits)
				}
				return fmt.Sprintf("every permit of semaphore %s is in use", quote(name))
			},
			explain: func(err error) error {
				if errors.Is(err, lease.ErrUnknownSemaphore) {
					return undeclared(c, name)
				}
				return err
			},
		}
	})
}
