package lease

import (
	"context"
	"fmt"
)

// AcquirePermit blocks until it holds one permit of the named semaphore or
// ctx ends (then its error wraps ctx.Err()). When all permits are held,
// waiters are served first come, first served, as for Acquire: a permit a
// Release frees goes to the first live waiter. The returned Lease works like a
// lock's: its own fencing token, which grows with every permit of the
// semaphore, a Context, Release and Guard. Permits of holders that die are
// freed when their lease expires. The semaphore must be declared (SetPermits,
// or the spannerlock_semaphore Terraform resource); otherwise the error
// matches ErrUnknownSemaphore.
func (c *Client) AcquirePermit(ctx context.Context, name string, opts ...AcquireOption) (*Lease, error) {
	if err := validateName("semaphore name", name); err != nil {
		return nil, fmt.Errorf("lease: AcquirePermit: %w", err)
	}
	return c.acquireOne(ctx, "AcquirePermit", slotTarget{pool: name}, opts, false)
}

// TryAcquirePermit takes one permit of the named semaphore if fewer than its
// limit are held and no one waits in line for one; otherwise the error
// matches ErrNotAcquired.
func (c *Client) TryAcquirePermit(ctx context.Context, name string, opts ...AcquireOption) (*Lease, error) {
	if err := validateName("semaphore name", name); err != nil {
		return nil, fmt.Errorf("lease: TryAcquirePermit: %w", err)
	}
	return c.acquireOne(ctx, "TryAcquirePermit", slotTarget{pool: name}, opts, true)
}
