package lease

import (
	"context"
	"fmt"
)

// AcquirePermit blocks until it holds one permit of the named semaphore or
// ctx ends (then its error wraps ctx.Err()). The returned Lease works like a
// lock's: its own fencing token, which grows with every permit of the
// semaphore, a Context, Release and Guard. Permits of holders that die are
// freed when their lease expires. The semaphore must be declared (SetPermits,
// or the spannerlock_semaphore Terraform resource); otherwise the error
// matches ErrUnknownSemaphore.
func (c *Client) AcquirePermit(ctx context.Context, name string, opts ...AcquireOption) (*Lease, error) {
	if err := validateName("semaphore name", name); err != nil {
		return nil, fmt.Errorf("lease: AcquirePermit: %w", err)
	}
	return c.acquire(ctx, "AcquirePermit", slotTarget{pool: name}, newAcquireConfig(opts), false)
}

// TryAcquirePermit takes one permit of the named semaphore if fewer than its
// limit are held; otherwise the error matches ErrNotAcquired.
func (c *Client) TryAcquirePermit(ctx context.Context, name string, opts ...AcquireOption) (*Lease, error) {
	if err := validateName("semaphore name", name); err != nil {
		return nil, fmt.Errorf("lease: TryAcquirePermit: %w", err)
	}
	return c.acquire(ctx, "TryAcquirePermit", slotTarget{pool: name}, newAcquireConfig(opts), true)
}
