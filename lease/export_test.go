package lease

import "time"

// SetBatchLimits lowers the bounds on one commit (sync checks, restamps,
// reaped permits) so tests can exceed them with few leases; it returns a
// function restoring them. Tests using it must not run in parallel.
func SetBatchLimits(sync, restamps, reap int) (restore func()) {
	s, r, p := maxSyncBatch, maxRestamps, maxReap
	maxSyncBatch, maxRestamps, maxReap = sync, restamps, reap
	return func() { maxSyncBatch, maxRestamps, maxReap = s, r, p }
}

// EndedAt returns when the lease's Context began to end, or zero.
func EndedAt(l *Lease) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.endedAt
}

// MaxCallTimeout is the furthest deadline of any database call a Client
// makes on its own.
const MaxCallTimeout = maxCallTimeout
