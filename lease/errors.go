package lease

import (
	"errors"
	"fmt"
	"time"
)

var (
	// ErrNotAcquired means a live holder has the lease. Errors matching it are
	// *HeldError values that say who holds it.
	ErrNotAcquired = errors.New("lease: not acquired")
	// ErrNoHolder means no one holds the lease: it was never acquired, was
	// released, or expired.
	ErrNoHolder = errors.New("lease: no live holder")
	// ErrLeaseLost means the lease is no longer held with its token: it
	// expired, its renewal failed to confirm ownership, or another holder has
	// it. It is the cause of a lost lease's Context.
	ErrLeaseLost = errors.New("lease: lost")
	// ErrReleased is the cause of a lease's Context after Release.
	ErrReleased = errors.New("lease: released")
	// ErrClosed is returned by a Client after Close, and is the cause of the
	// Context of every lease the Client held when it closed.
	ErrClosed = errors.New("lease: client closed")
)

// HeldError reports the live holder that kept a lease from being acquired.
type HeldError struct {
	Holder Holder
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("lease: %q is held by %q with token %d until %s",
		e.Holder.Name, e.Holder.HolderID, e.Holder.Token, e.Holder.ExpiresAt.Format(time.RFC3339Nano))
}

// Is makes errors.Is(err, ErrNotAcquired) true for a *HeldError.
func (e *HeldError) Is(target error) bool { return target == ErrNotAcquired }

// lostError explains why a lease was lost, and matches ErrLeaseLost.
func lostError(name string, token int64, why string) error {
	return fmt.Errorf("%w: %q token %d: %s", ErrLeaseLost, name, token, why)
}
