// Package lease provides distributed locks, leases and leader election on
// Google Cloud Spanner, with monotonic fencing tokens.
//
// A Client works on one lock table (create it with the Terraform resource
// spannerlock_table, or apply DDL(table) with your own migration tool):
//
//	c, err := lease.NewClient(db, "locks", lease.WithTTL(10*time.Second))
//	l, err := c.Acquire(ctx, "nightly-report")
//	defer l.Release(ctx)
//	// Work under l.Context(): it is cancelled if the lease is lost.
//	_, err = db.ReadWriteTransaction(l.Context(), func(ctx context.Context, txn *spanner.ReadWriteTransaction) error {
//		if err := l.Guard(ctx, txn); err != nil {
//			return err // lost: nothing this transaction wrote will commit
//		}
//		return txn.BufferWrite(...)
//	})
//
// # Guarantees
//
// Fencing tokens. Every acquisition of a name gets a token one larger than
// the previous acquisition's, across releases, expiries and holders; the
// first acquisition of a name gets 1. Tokens are never hashes and never
// reused. In a table with cleanup (spannerlock_table's cleanup_after),
// Spanner deletes rows not renewed for days, and with them a name's counter;
// there a name's first token is the commit time in microseconds, so a name
// whose row was deleted resumes above every token it had. Guard checks the token inside your own Spanner transaction; systems
// outside Spanner should store the largest token they have seen and reject
// smaller ones.
//
// Spanner's clock. A lease expires when Spanner's CURRENT_TIMESTAMP() passes
// the commit timestamp of its last renewal plus the TTL stored with it when
// it was acquired. No client clock is compared with another, and every reader
// judges expiry by the holder's TTL, not its own.
//
// One transaction per acquisition. Acquiring a free or expired lease is one
// read-write transaction of two RPCs, whether the name is new (the schema
// picks its first token) or known; the first acquisition by a Client of a
// name that already exists costs one more statement, once. Releasing is one
// more transaction.
//
// One session per Client. Every lease a Client holds names its session, one
// row that is renewed once per renewal interval for all of them: two RPCs
// and one row written per interval, whatever the number of leases. The
// renewal first reads, for every lease, whether its row still names the
// session with the lease's token: a compare-and-set on holder and token; a
// lease that fails it is lost. If the session itself expired in Spanner,
// every lease of the Client is lost and the next acquisition starts a new
// session, so a lease presumed lost never comes back to life.
//
// Loss before takeover. A lease's Context is cancelled when a renewal
// confirms the lease is gone, and at its session's local deadline: the start
// of the last confirmed renewal (or of the transaction that created the
// session) plus TTL minus a safety margin of TTL/10, on the monotonic clock. A Spanner commit timestamp is
// never earlier than the moment its transaction began, so the holder's
// Context ends before any rival can acquire. The margin is the time the
// holder has to stop work.
//
// No false alarms. A failed renewal (one lost RPC, an abort, a brief outage)
// is retried with backoff until the local deadline; the Context is cancelled
// only when ownership is confirmed lost or the deadline passes.
//
// Ambiguous commits. When a commit fails in a way that leaves its outcome
// unknown (DEADLINE_EXCEEDED or UNAVAILABLE on Commit), Acquire and Release
// read the row to learn what happened instead of guessing; a renewal with an
// unknown outcome extends nothing and is retried.
//
// # Details
//
//   - TTL defaults to 10s and must be within [1s, 24h]; the renewal interval
//     (WithRenewInterval) defaults to TTL/3 and may not exceed it.
//   - Acquire blocks until the lease is held or ctx ends, and then returns an
//     error wrapping ctx.Err(). While another process holds the lease it
//     reads the lease row after 25ms, then at doubling intervals up to the
//     poll interval (WithPollInterval, default 1s), where it stays, so a
//     short hold hands off quickly and a long wait costs one read per
//     interval; it also wakes at the holder's expiry, and a Release in the
//     same process wakes it at once.
//   - TryAcquire returns an error matching ErrNotAcquired (a *HeldError that
//     names the holder) when the lease is held, including by the same Client:
//     leases are not re-entrant.
//   - Holder returns an error matching ErrNoHolder when no one holds the lease.
//     Holder.HolderID is exactly the WithHolderID value.
//   - Guard reads the lease row inside the caller's transaction and checks
//     holder, token and expiry on Spanner's clock; it never trusts the local
//     Context alone. Run the transaction under l.Context().
//   - Release makes the lease acquirable at once. Release of a lease that was
//     already lost returns an error matching ErrLeaseLost; a second Release
//     returns nil.
//   - Close releases every lease the Client holds, by deleting its session,
//     and returns within the TTL (at most 5s) even when Spanner is
//     unreachable; it does not close the spanner.Client.
//   - Campaign runs a leader election that rejoins after a loss and calls its
//     callbacks only on transitions; Observe reports changes of holder.
//
// # Semaphores, run-once jobs and worker IDs
//
//   - A semaphore's capacity is stored in the table (SetPermits, or the
//     spannerlock_semaphore Terraform resource). AcquirePermit blocks and
//     TryAcquirePermit fails with ErrNotAcquired when all permits are held;
//     a permit is a *Lease with its own token, and tokens grow across all
//     permits of a semaphore. Never more permits are live than the limit:
//     lowering it takes nothing away, but grants nothing until fewer are
//     held. A permit of a holder that dies is freed when its lease expires.
//     An undeclared semaphore fails with ErrUnknownSemaphore.
//   - RunOnce runs a job for one schedule slot on exactly one of the
//     replicas that call it and records its success, so a late replica does
//     not run it again; if the runner crashes, another takes over after its
//     lease expires.
//   - AcquireWorkerID leases a unique ID in [0, max) from a pool for
//     Snowflake-style generators (package idgen adapts sony/sonyflake and
//     bwmarrin/snowflake); a reacquired ID never goes back in time.
//   - AcquirePermit and AcquireWorkerID return an error wrapping ctx.Err()
//     when ctx ends, and Release of a permit or worker ID already lost returns
//     an error matching ErrLeaseLost, as for locks.
//
// # Assumptions
//
// Safety (one holder at a time, as seen by Guard) relies only on Spanner's
// transactions. The early loss signal additionally assumes the holder's
// monotonic clock does not run more than 10% slow over one TTL, and that a
// process resumed after a pause longer than the safety margin checks its
// Context or uses Guard before acting; that is what fencing tokens are for.
package lease
