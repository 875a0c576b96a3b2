package lease

import (
	"errors"
	"fmt"
	"time"
)

var (
	// ErrNotAcquired means a live holder has the lease, as Spanner answered:
	// another Client (the error is then a *HeldError that says who), this
	// Client itself (leases are not re-entrant), or, for a semaphore, as
	// many holders as it has permits. An outage never matches it.
	ErrNotAcquired = errors.New("lease: not acquired")
	// ErrNoHolder means no one holds the lease: it was never acquired, was
	// released, or expired.
	ErrNoHolder = errors.New("lease: no live holder")
	// ErrHolderChanged means a ForceRelease with IfToken found the lease
	// held with another token than the one asked for: it was released and
	// taken again since the caller read its holder. Nothing was released;
	// the Holder returned with it is the current one.
	ErrHolderChanged = errors.New("lease: held with another token")
	// ErrLeaseLost means the lease is no longer held with its token: it
	// expired, its renewal failed to confirm ownership, or another holder has
	// it. It is the cause of a lost lease's Context.
	ErrLeaseLost = errors.New("lease: lost")
	// ErrReleased is the cause of a lease's Context after Release.
	ErrReleased = errors.New("lease: released")
	// ErrClosed is returned by a Client after Close, and is the cause of the
	// Context of every lease the Client held when it closed.
	ErrClosed = errors.New("lease: client closed")
	// ErrWrongKind means a name is used as a kind of lease it is not: a
	// semaphore's or worker pool's name as a lock, a lock's as a semaphore.
	ErrWrongKind = errors.New("lease: wrong kind of lease")
	// ErrNotSerializable means Guard or GuardSQL was given a transaction
	// that does not run at serializable isolation: at repeatable read, the
	// read of the lease's row is not checked at commit, so it would fence
	// nothing.
	ErrNotSerializable = errors.New("lease: Guard needs a serializable transaction")
	// ErrTooManyFailures means RunOnce refused to run a slot whose runs
	// failed (or crashed) as many times as WithMaxFailures allows.
	ErrTooManyFailures = errors.New("lease: too many failed runs")
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
