// Package lease provides distributed locks, leases and leader election on
// Google Cloud Spanner, with monotonic fencing tokens.
//
// A Client works on one lock table (create it with the Terraform resource
// spannerlock_table, or apply DDL(table), or PostgreSQL.DDL(table) in a
// PostgreSQL-dialect database, with your own migration tool). Databases of
// both Spanner dialects are supported, with the same guarantees and the same
// RPCs: a Client reads its database's dialect and speaks it.
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
// there a name's first token is Spanner's clock (CURRENT_TIMESTAMP()) in
// microseconds when its row is inserted. That is above every token the name
// had before its row was deleted: tokens grow by one per acquisition, the
// acquisitions of one name commit at least a microsecond apart, and a row is
// deleted only days after its last one. Guard checks the token inside your
// own Spanner transaction; systems outside Spanner should store the largest
// token they have seen and reject smaller ones.
//
// Spanner's clock. Every lease names the session of the Client holding it,
// and lives as long as that session does: until Spanner's
// CURRENT_TIMESTAMP() passes the commit timestamp of the session's last
// renewal plus the TTL stored with the session. No client clock is compared
// with another, and every reader judges expiry by the holder's TTL, not its
// own.
//
// One transaction per acquisition. Acquiring a free or released lease is
// one read-write transaction of two RPCs, whether the name is new (the
// schema picks its first token) or known; the first acquisition by a
// Client of a name that already exists costs one more statement, once.
// When the row names another Client's session that this Client has not
// seen expire (the lease is held, or its holder died), one strong read of
// that session outside the transaction decides, one more RPC. Releasing is
// one more transaction of two RPCs. The first call that reaches Spanner in
// a process also reads the database's dialect (one query), once for all
// the Clients of that database.
//
// One session per Client. Every lease a Client holds names its session, one
// row that is renewed once per renewal interval for all of them: three RPCs
// (two when the Client holds no lease, only waits) and one row written per
// interval, whatever the number of leases. The
// renewal then reads, with a strong read, whether each lease's row still
// names the session with the lease's token, a check on holder and token; a
// lease that fails it is lost. One renewal checks at most 1,000 leases, taking them in
// turn, and every commit the Client makes stays far below Spanner's 80,000
// mutations, however many leases or expired permits there are. If the
// session's row is gone from Spanner, every lease of the Client is lost and
// the next acquisition starts a new session, so a lease presumed lost never
// comes back to life. A Client is safe for concurrent use from its first
// call, and runs at most WithMaxTransactions read-write transactions at
// once for its callers (renewals never wait for a turn): from Spanner
// client v1.88.0, multiplexed sessions no longer throttle them.
//
// No transaction holds up a renewal. On Spanner a read-write transaction
// keeps a shared lock on every row it read until it ends, which for one
// whose Commit or Rollback is lost in the network is when Spanner aborts it
// as idle (about 10 s), and a younger writer of that row waits. So no
// read-write transaction reads a session row, but for an operator's:
// ForceReleasePermit of a worker ID reads its holder's, whose mark it must
// carry over, and that holder's renewal may wait for it: up to that
// transaction's end, which for a ForceReleasePermit stalled in the network
// is Spanner's idle abort, about 10 s, so a holder whose TTL is not well
// above that may lose its other leases too (at their local deadline, as
// any loss; it loses the worker ID anyway). Acquisitions, releases and
// Guard learn whether a session is live from strong reads outside their
// transactions, which take no lock, and every write of a session row (its
// creation, renewals, the write that expires it) is blind. A Commit holds
// exclusive locks on the rows it writes while it waits for older readers of
// them, and a read in a transaction waits for those; so a renewal's
// transaction reads no row (it begins with SELECT 1): it writes only its
// own session's row, which no other transaction locks but that one, and
// the check of its leases' rows is a strong read after it commits, which takes no lock and waits
// only for a commit Spanner is applying. A rival's grant of another permit
// of the same semaphore, held up by a third Client's stalled acquisition,
// therefore never holds up the renewal. The writes that a long
// transaction of another Client, or Guard in the application's own, could
// make wait are made by transactions of their own: clearing a lease let
// go and restamping a lock row for cleanup. Which rows each transaction
// reads and writes is listed in the source, transactions.go.
//
// Loss before takeover. A lease's Context is cancelled when a renewal or
// Guard confirms the lease is gone, and at its session's local deadline: the
// start of the last confirmed write of the session row (a renewal, or the
// acquisition that created or refreshed it) plus TTL minus a safety margin
// of TTL/10, on the monotonic clock. A Spanner commit timestamp is never
// earlier than the moment its transaction began, so the holder's Context
// ends before any rival can acquire. Since a rival judges the holder's
// session outside its transaction, a renewal could commit after a rival
// saw the session expired; commit timestamps reveal it (the renewal
// committed more than TTL minus the margin after the last confirmed one),
// and the session then ends as if its deadline had passed, which locally it
// had: no lease the rival may have taken is used on the strength of that
// renewal. The margin is the time the holder has to stop work. Every lease
// has a local deadline: the Client counts only writes of its session row
// that it saw commit, and when the outcome of the commit that would create
// the row is unknown, it abandons that session (writing it as expired) and
// starts a new one rather than guess. An acquisition into a session with
// less than half a TTL left (a Client that held nothing for a while)
// renews the session in the same transaction (or, with less than a quarter
// left, starts a new one), so the lease starts with close to a full TTL;
// an acquisition into a livelier session starts with what its
// session has left, more than half a TTL when it began (the keeper renews
// every TTL/3). No acquisition returns a lease with less than a quarter of
// its TTL ahead of it: one whose transaction took longer than that (a
// loaded machine, a slow Spanner) returns once the renewal it started is
// confirmed, and acquires again if the session ends first.
//
// No false alarms. A failed renewal (one lost RPC, an abort, a brief outage)
// is retried with backoff until the local deadline; the Context is cancelled
// only when ownership is confirmed lost or the deadline passes. Each renewal
// times out after half the renewal interval, so two renewals can fail, even
// by hanging, and a third still renew in time. Guard does not read the
// session row inside the caller's transaction, so a long guarded transaction
// never holds up the renewals of the Client's leases.
//
// Unknown outcomes. When a commit fails in a way that leaves its outcome
// unknown (DEADLINE_EXCEEDED or UNAVAILABLE on Commit), Acquire and Release
// read the row to learn what happened instead of guessing, within the
// caller's context. If that read fails too, or the caller's context has
// ended, a lease that may have been acquired, or may not have been
// released, is left to the Client, which clears the row, in a transaction
// of its own, whenever it names the lease, until the unknown transaction's
// deadline has passed. A renewal with an unknown outcome extends nothing
// and is retried.
//
// Letting go. No lease stays held for longer than a TTL, plus one renewal
// that may have been under way, after its owner let go: a Release,
// including one that failed; a Campaign that stepped down or ended; a
// RunOnce that finished or panicked; an acquisition whose outcome was never
// learnt; or Close. Its row is cleared by the release or else by the
// Client in the background, in transactions of their own that run apart
// from the renewals, each with the deadline of a release, retried at least
// once per renewal interval; or it expires with the session. This holds
// while Spanner answers those clears within their deadline: while it
// answers none in time (it is down or overloaded, or aborts them) but the
// session's renewals still commit, the row stays held until the first
// clear that commits. One exception on Spanner: when a transaction
// that read the row (the release itself, or another Client's acquisition)
// is left holding its lock because its reply was lost after Spanner began
// it, the row can be cleared only once Spanner aborts that idle
// transaction, about 10 s later, and is free a TTL and one renewal after
// that at the latest. A session that ends without Spanner having said so
// (its deadline passed) is written as expired in the background, so its
// leases are free for others at once.
//
// Bounded calls. Every database call the Client makes on its own has a
// deadline: acquisition attempts, releases (the background clears too),
// RunOnce completions and the reads that settle unknown outcomes at TTL
// minus the safety margin (at
// most 10s), a waiter's reads at twice the poll interval (at least 1s, at
// most that), renewals at half the renewal interval, Close at the TTL (at
// most 5s). Calls also end with the caller's context: a call returns as
// soon as its context ends, with an error that matches the context's (a
// Release whose context ends before Spanner answered says the lease may
// still be held in Spanner), even when Spanner never answers; what it could
// not finish is left to the Client's background work or to the TTL, as
// above. A Release from a context derived from the lease's own Context
// (Campaign's leader work) is not ended by the release ending that
// Context, only by the caller's cancellation or deadline. A transaction
// that will not commit is rolled back under the same deadline (the Spanner
// client's own rollback would use a background context and 30 seconds), or,
// when the caller's context has already ended, in the background within a
// second of its own; a waiter whose context ends leaves its line in the
// background too.
//
// # Details
//
//   - TTL defaults to 10s and must be within [1s, 24h]; the renewal interval
//     (WithRenewInterval) defaults to TTL/3 and may not exceed it.
//   - Acquire blocks until the lease is held or ctx ends, and then returns a
//     *WaitError wrapping ctx.Err() and what its last look at Spanner found:
//     the holder (matching ErrNotAcquired), or the error that kept Spanner
//     from answering, which does not match it: an outage is never reported
//     as contention. Waiters are served first come, first served across
//     processes: a blocked acquisition joins the name's line (a row of the
//     waiters table, live as long as its Client's session), and only the
//     first live waiters in line may take a free name (readers together; a
//     semaphore's first N for N free permits), so no grant overtakes an
//     earlier live waiter. A Release only clears the rows it lets go; the
//     waiter at the head takes the name in its own acquiring transaction,
//     which also takes its entry out. So every row that names a session was
//     written by that session's Client, in a transaction whose outcome it
//     tracks, and nothing in memory decides whose a row is. (Releases once
//     handed the name on, writing the waiter's session into the row: that
//     saved the taker one transaction, but made its Client guess which rows
//     naming its session were grants for it, which went wrong in ways that
//     gave one lease to two holders, and handed names to waiters that were
//     dead or had left. It was dropped.) Every transaction that writes a
//     line (an acquisition, a release, a leave) takes out the entries of
//     dead waiters, whose sessions Spanner's clock says have expired. A
//     waiter that gives up leaves the line; one whose process dies holds up
//     the line for at most a TTL. In line it reads its line after 25ms, then
//     at doubling intervals up to the poll interval (WithPollInterval,
//     default 1s), where it stays, so a short hold passes on quickly and a
//     long wait costs one read per interval; it also wakes at the holder's
//     expiry, and a Release in the same process wakes it at once.
//   - AcquireShared holds a name with other readers and no writer; readers
//     and writers wait in one line in the order they came. AcquireAll takes
//     several names in one transaction or none, waiting in each name's line
//     without holding up anyone: an AcquireAll in line blocks no later
//     waiter nor newcomer, and takes its names when all are free at once.
//     Otherwise it could deadlock with the holder of one of its names that
//     asks for another (the holder would wait behind the AcquireAll, which
//     waits for the holder); the price is that a busy name can keep an
//     AcquireAll waiting.
//   - TryAcquire returns an error matching ErrNotAcquired when Spanner says
//     the lease is held, including by the same Client (leases are not
//     re-entrant), or when live waiters are in line for it; when another Client holds it, the error is a *HeldError
//     that names the holder. Neither Acquire nor TryAcquire returns a lease
//     that is already lost.
//   - Holder returns an error matching ErrNoHolder when no one holds the lease.
//     Holder.HolderID is exactly the WithHolderID value.
//   - Guard reads the lease row inside the caller's transaction, and asks
//     Spanner whether the holder's session is live; it never trusts the local
//     Context alone. Run the transaction under l.Context(), at serializable
//     isolation: Guard and GuardSQL refuse one at repeatable read
//     (ErrNotSerializable), where their read would fence nothing.
//   - Release makes the lease acquirable at once; its Context ends first.
//     Release of a lease that was already lost returns an error matching
//     ErrLeaseLost; a second Release returns nil.
//   - Close releases every lease the Client holds, by writing its session as
//     expired, and returns within the TTL (at most 5s) even when Spanner is
//     unreachable; it does not close the spanner.Client.
//   - Campaign runs a leader election that rejoins after a loss and calls its
//     callbacks only on transitions; Observe reports changes of holder.
//   - ForceRelease (and ForceReleasePermit) end a stuck holder's lease for an
//     operator: the token moves on, so its Guard-fenced writes fail at once
//     and its Context ends at its next renewal. ForceRelease of a lock held
//     shared ends every reader's lease.
//
// # Semaphores, run-once jobs and worker IDs
//
//   - A semaphore's capacity is stored in the table (SetPermits, or the
//     spannerlock_semaphore Terraform resource). AcquirePermit blocks and
//     TryAcquirePermit fails with ErrNotAcquired when all permits are held;
//     a permit is a *Lease with its own token, and tokens grow across all
//     permits of a semaphore. A grant never makes more permits live than the
//     limit. Lowering the limit takes nothing away: until enough holders
//     release, more permits than the new limit stay live, and none is
//     granted. A permit of a holder that dies is freed when its lease
//     expires. An undeclared semaphore fails with ErrUnknownSemaphore.
//   - RunOnce runs a job for one schedule slot on exactly one of the
//     replicas that call it and records its success, so a late replica does
//     not run it again; if the runner crashes, another takes over after its
//     lease expires, and if the job panics, the slot is released at once.
//     Every run counts in the slot's row; WithMaxFailures stops trying a
//     slot that failed that often, and Jobs lists the slots. The record is a
//     row of the table: in a table with cleanup_after, it is deleted that
//     long after the slot was last acquired, so do not call RunOnce for
//     slots older than that.
//   - AcquireWorkerID leases a unique ID in [0, max) from a pool for
//     Snowflake-style generators (package idgen adapts sony/sonyflake and
//     bwmarrin/snowflake); a reacquired ID never goes back in time (see
//     WorkerID for the clock assumption): a holder that gives up while it
//     waits past its predecessor's mark leaves that mark.
//   - AcquirePermit and AcquireWorkerID return an error wrapping ctx.Err()
//     when ctx ends, and Release of a permit or worker ID already lost returns
//     an error matching ErrLeaseLost, as for locks.
//
// # Observability
//
// A Client records OpenTelemetry metrics and spans through the global
// MeterProvider and TracerProvider, or those given with WithMeterProvider and
// WithTracerProvider; the package depends on the OpenTelemetry API only. The
// instrumentation scope is this package's import path. Every instrument
// carries spannerlock.table; lock names go on spans only.
//
//   - spannerlock.lease.held (UpDownCounter, {lease}): leases held now, by
//     spannerlock.kind (lock, permit, worker_id).
//   - spannerlock.lease.acquisitions (Counter, {acquisition}): acquisition
//     calls by spannerlock.kind and spannerlock.result: acquired;
//     not_acquired (held by another until TryAcquire refused or a blocking
//     call's context ended, or the context ended before Spanner answered);
//     error (including a wait whose context ended while Spanner could not be
//     reached). A blocking call counts once, when it ends; its polls do not
//     count.
//   - spannerlock.lease.losses (Counter, {loss}): held leases lost, by
//     spannerlock.kind and spannerlock.reason: deadline (no renewal was
//     confirmed before the local deadline, or one committed too late to
//     count), taken (a renewal, Guard or
//     Release found the row released or with another token), session_gone
//     (Spanner says the Client's session expired or was deleted).
//   - spannerlock.renewal.duration (Histogram, s): each renewal transaction.
//   - spannerlock.acquire.wait (Histogram, s): how long a blocking
//     acquisition waited, by spannerlock.kind and spannerlock.result.
//   - spannerlock.lease.hold (Histogram, s): how long each lease was held,
//     by spannerlock.kind and spannerlock.outcome: released, lost, closed.
//   - spannerlock.lease.waiting (UpDownCounter, {waiter}): this process's
//     blocking acquisitions in line now, by spannerlock.kind; the lines of
//     every process are in Spanner (Client.Waiters, spannerlock status).
//
// Spans: spannerlock.Acquire, spannerlock.TryAcquire, spannerlock.AcquireShared,
// spannerlock.TryAcquireShared, spannerlock.AcquireAll,
// spannerlock.AcquirePermit, spannerlock.TryAcquirePermit,
// spannerlock.AcquireWorkerID, spannerlock.RunOnce (with the Acquire and
// spannerlock.Complete of its slot beneath it), spannerlock.Release and
// spannerlock.Renew, children of the caller's span, with spannerlock.name,
// spannerlock.token, spannerlock.slot and spannerlock.outcome. The Spanner
// client's own spans are beneath them. A RunOnce job runs under the
// spannerlock.RunOnce span, and a leader's OnStartedLeading under the span
// of Campaign's caller. A loss is also visible without
// OpenTelemetry: the lease's Context has a cause saying why, and the Client
// logs it once at Warn.
//
// # Assumptions
//
// Safety (one holder at a time as seen by Guard, tokens that only grow, a
// semaphore within its limit at every grant) relies only on Spanner's
// transactions. Every read-write transaction the Client makes asks for
// serializable isolation, whatever the spanner.Client's default: at
// repeatable read a plain read is not checked at commit.
//
// The early loss signal (a lease's Context ends before a rival can acquire)
// also assumes that two things together stay within the safety margin
// (TTL/10): how far the holder's monotonic clock falls behind Spanner's over
// one TTL, and how late the holder's timers fire or how long the process is
// paused. A clock 10% slow uses the whole margin by itself; one within 1%
// (any healthy clock) leaves 9% of the TTL for delays. A process resumed
// after a longer pause must check its Context or use Guard before acting,
// which is what fencing tokens are for. WorkerID.Use checks the deadline
// itself rather than trust the timer.
//
// Worker IDs never go back in time whatever the offset between the wall
// clocks of successive holders: each waits until its own clock passes its
// predecessor's mark, taken by the predecessor's clock. This assumes a
// holder's wall clock does not step forward by more than the safety margin
// (TTL/10), nor step back at all, while it holds the ID: a release records
// the wall clock at that moment, which a backward step would put before IDs
// already issued. Slewing (NTP's gradual correction) is not a step.
//
// # Structure
//
// The package is built in layers, and a file calls no function or method
// of a later layer than its own: a lease's life reads from the bottom up,
// and what a layer does never depends on who uses it. Files of one layer
// may call each other. TestFilesCallOnlyDownward reads this list and checks
// it, file by file.
//
//  1. Foundations (options.go, errors.go, telemetry.go and backoff.go):
//     configuration, errors, metrics and spans, and the pacing of retries.
//  2. Statements and rows (sql.go, row.go, store.go, transactions.go,
//     holders_old.go and signal.go): every statement in both dialects,
//     the rows and lines they read, every read-write transaction with the
//     rows it reads and writes, and the wake-ups between the Clients of
//     one process.
//  3. Session and renewal (session.go, keeper.go, lease.go and renew.go):
//     a Client's session and its local deadline, the leases that name it
//     and their Contexts, and the keeper's loop that renews them all.
//  4. The line (line.go): a name's waiters in order, which of them are
//     live and may take a free name, and a grant's life once its
//     acquiring transaction has taken it: leaving the line, letting go,
//     and clearing in the background what a release could not.
//  5. The acquisition pipeline (target.go, acquire.go, wait.go,
//     release.go, acquireall.go and permit.go): what each kind of target
//     takes in its transaction, attempts and their unknown outcomes,
//     waiting in line, registering what was acquired, and Release.
//  6. The Client and what it offers (client.go, semaphore.go, election.go,
//     runonce.go, jobs.go, workerid.go, forcerelease.go, observe.go,
//     holder.go and sqltx.go).
package lease
