package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/spanner"
	sppb "cloud.google.com/go/spanner/apiv1/spannerpb"
	"github.com/googleapis/gax-go/v2"
	"google.golang.org/grpc/codes"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
)

// store is the layer below Client that talks to Spanner: the statements in
// the database's dialect (sql.go), the decoding of their rows (row.go), and
// the one way a read-write transaction is run (transact). Every read-write
// transaction the package makes is a method of store in transactions.go, so
// which rows each reads and writes is written down in one place.
type store struct {
	db    *spanner.Client
	table string
	cfg   config

	// sql is set by prepare, once the database's dialect is known; every
	// statement comes from it.
	sql      statements
	prepMu   sync.Mutex
	prepared bool

	// calls bounds the read-write transactions made for callers; the
	// keeper's never wait for it (see lane).
	calls chan struct{}
}

func newStore(db *spanner.Client, table string, cfg config) *store {
	return &store{db: db, table: table, cfg: cfg, calls: make(chan struct{}, cfg.maxTransactions)}
}

// dialects caches each database's dialect for the process: it is chosen
// when the database is created and never changes, so Clients of one
// database read it once between them.
var dialects sync.Map // database name -> locktable.Dialect

// prepare readies the statements in the database's dialect, which it reads
// (one query) the first time this process uses the database. Every
// operation that reaches Spanner calls it first; NewClient does no I/O.
func (st *store) prepare(ctx context.Context) error {
	st.prepMu.Lock()
	defer st.prepMu.Unlock()
	if st.prepared {
		return nil
	}
	cached, known := dialects.Load(st.db.DatabaseName())
	d, _ := cached.(locktable.Dialect)
	if !known {
		ctx, cancel := context.WithTimeout(ctx, st.cfg.callTimeout())
		defer cancel()
		read, err := locktable.DatabaseDialect(ctx, st.db)
		if err != nil {
			return fmt.Errorf("lease: %w", err)
		}
		stored, _ := dialects.LoadOrStore(st.db.DatabaseName(), read)
		d, _ = stored.(locktable.Dialect)
	}
	st.sql = newStatements(d, st.table)
	st.prepared = true
	return nil
}

// lane says whether a transaction waits for a turn among the caller-driven
// ones. The Spanner client's session pool used to throttle concurrent
// transactions; from client v1.88 multiplexed sessions do not, so the
// Client bounds its own. The keeper runs at most two transactions at a
// time (a renewal, and a clear of let-goes or leaves) and must never queue
// behind callers', or a burst of acquisitions could delay the renewal of
// every lease.
type lane int

const (
	callerLane lane = iota
	keeperLane
)

// body is the work of one read-write transaction: it reads what it needs
// and returns the writes to commit, or an error to end the transaction
// without writing. A body may run several times (Spanner aborts and the
// transaction is retried), so it must not keep state from a previous run.
type body func(ctx context.Context, tx *spanner.ReadWriteTransaction) ([]*spanner.Mutation, error)

// transact runs b in one read-write transaction tagged tag, and returns its
// commit timestamp. ctx bounds it, every RPC included: callers give it a
// deadline. Aborted transactions are retried as the Spanner client does,
// keeping their wound-wait priority.
//
// It drives the transaction itself, rather than through
// Client.ReadWriteTransaction, because that rolls back a body's error with
// context.Background() and its own 30s timeout: an unanswered Rollback
// would hold the caller that long, whatever its bound. Here a Rollback has
// the caller's deadline, or a short one of its own once the caller's
// context has ended, so that Spanner frees the transaction's locks at once
// rather than when it notices the transaction is idle.
func (st *store) transact(ctx context.Context, l lane, tag string, b body) (time.Time, error) {
	if l == callerLane {
		select {
		case st.calls <- struct{}{}:
			defer func() { <-st.calls }()
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
	// The first statement begins the transaction (the Spanner client would
	// otherwise send a BeginTransaction first, one more RPC); a retry begins
	// explicitly, which keeps the aborted attempt's priority. The isolation
	// level is set, not left to the spanner.Client's default: at repeatable
	// read, plain reads are not checked at commit, and every rule of the
	// package (a row read free is still free when the grant commits, a
	// semaphore counts its permits) rests on reads that are.
	opts := spanner.TransactionOptions{TransactionTag: tag, BeginTransactionOption: spanner.InlinedBeginTransaction,
		IsolationLevel: sppb.TransactionOptions_SERIALIZABLE}
	tx, err := spanner.NewReadWriteStmtBasedTransactionWithOptions(ctx, st.db, opts)
	if err != nil {
		return time.Time{}, err
	}
	for attempt := 0; ; attempt++ {
		// committed is set once Commit was sent: the Spanner client then
		// ends the transaction and releases its session itself.
		committed := false
		writes, err := b(ctx, &tx.ReadWriteTransaction)
		if err == nil {
			if err = tx.BufferWrite(writes); err == nil {
				// CommitWithReturnResp rolls back a failed commit under ctx
				// (not an aborted one, which needs none).
				committed = true
				var resp spanner.CommitResponse
				if resp, err = tx.CommitWithReturnResp(ctx); err == nil {
					return resp.CommitTs, nil
				}
			}
		}
		// An abort is retried, unless what aborted it is a connection
		// that is closing, which a retry only meets again.
		aborted := spanner.ErrCode(err) == codes.Aborted && !connClosing(err)
		if !aborted || gax.Sleep(ctx, retryDelay(attempt, err)) != nil {
			if !committed {
				st.rollback(ctx, tx)
			}
			return time.Time{}, err
		}
		// The retry keeps the aborted transaction's session and priority.
		next, rerr := tx.ResetForRetry(ctx)
		if rerr != nil {
			if !committed {
				st.rollback(ctx, tx)
			}
			if next, rerr = spanner.NewReadWriteStmtBasedTransactionWithOptions(ctx, st.db, opts); rerr != nil {
				return time.Time{}, rerr
			}
		}
		tx = next
	}
}

// rollback ends a transaction that will not commit. A caller whose context
// has ended still frees the transaction's locks, within a bound of its own,
// in the background: the caller returns at once, as a call whose context
// ended must, rather than wait on a Spanner that may not answer.
func (st *store) rollback(ctx context.Context, tx *spanner.ReadWriteStmtBasedTransaction) {
	if ctx.Err() == nil {
		tx.Rollback(ctx)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), st.cfg.endTimeout())
	go func() {
		defer cancel()
		tx.Rollback(ctx)
	}()
}

// retryDelay is how long to wait before retrying an aborted transaction:
// what Spanner asks for, or the Spanner client's own backoff.
func retryDelay(attempt int, err error) time.Duration {
	if d, ok := spanner.ExtractRetryDelay(err); ok {
		return d
	}
	d := spanner.DefaultRetryBackoff.Initial
	for range min(attempt, 20) {
		d = time.Duration(float64(d) * spanner.DefaultRetryBackoff.Multiplier)
	}
	return min(d, time.Second)
}

// apply commits idempotent blind writes with a single Commit, bounded by
// ctx. At least once: a Commit retried after a lost reply writes them
// again, which is why they must be idempotent. It reads nothing, so its
// isolation level makes no difference; it is set anyway, so that every
// transaction of the package is serializable whatever the client's default.
func (st *store) apply(ctx context.Context, tag string, ms ...*spanner.Mutation) error {
	_, err := st.db.Apply(ctx, ms, spanner.TransactionTag(tag), spanner.ApplyAtLeastOnce(),
		spanner.IsolationLevel(sppb.TransactionOptions_SERIALIZABLE))
	return err
}

// signalKey names a lease's release signal (signal.go): keyed by database
// and table, so that Clients of one process sharing a table wake each
// other's waiters.
func (st *store) signalKey(name string) string {
	return st.db.DatabaseName() + "\x00" + st.table + "\x00" + name
}

// explain adds what to do to errors whose cause is a missing or outdated table.
func (st *store) explain(err error) error {
	if err == nil {
		return nil
	}
	code := spanner.ErrCode(err)
	msg := err.Error()
	missing := strings.Contains(msg, "Table not found") || strings.Contains(msg, "Column not found") ||
		strings.Contains(msg, "Unrecognized name") || strings.Contains(msg, "does not exist") ||
		strings.Contains(msg, "is not present in table")
	// A table from before schema version 2 has no default for the token.
	outdated := strings.Contains(msg, "token") && (strings.Contains(msg, "null value") || strings.Contains(msg, "NULL value") || strings.Contains(msg, "NOT NULL"))
	if (code == codes.InvalidArgument || code == codes.NotFound || code == codes.FailedPrecondition) && (missing || outdated) {
		ddl := "lease.DDL"
		if st.prepared && st.sql.pg() {
			// Quoted names keep their case in PostgreSQL, so "Locks" and
			// "locks" are two tables there.
			ddl = "lease.PostgreSQL.DDL, with the table's name in the same letter case"
		}
		return fmt.Errorf("%w (is table %s created at schema version %d? apply it with Terraform's spannerlock_table or %s)", err, st.table, locktable.Latest, ddl)
	}
	return err
}

// transient reports whether an error is worth retrying: the Spanner client
// has already retried what it can, so these are outages, not mistakes. A
// call that ran out of the Client's own bound (callTimeout) is one too;
// callers check their own context first. Other errors that did not come
// from Spanner (ErrCode says Unknown for them) never are, nor is CANCELLED:
// the Client's own contexts end with DeadlineExceeded at their deadlines
// (outsideTransaction), so a CANCELLED while the caller's context is live
// comes from the connection, and one that is closing (on its own, or as
// the cause of an ABORTED inline begin) will not open again.
func transient(err error) bool {
	if connClosing(err) {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	switch spanner.ErrCode(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted, codes.ResourceExhausted, codes.Internal:
		return true
	}
	return false
}

// transactionGone reports whether err says Spanner no longer knows the
// transaction a read ran in: the emulator answers NOT_FOUND "Transaction
// not found: <id>" to a query of a read-only transaction it has dropped
// meanwhile (while other transactions ran). The read, begun again, reads
// what it would have: the error says nothing about the rows or the table.
func transactionGone(err error) bool {
	return spanner.ErrCode(err) == codes.NotFound && strings.Contains(err.Error(), "Transaction not found")
}

// readAgainAfter reports whether a read that failed with err is worth
// running again: an outage, or its transaction gone; never a connection
// that is closing.
func readAgainAfter(err error) bool {
	return transient(err) || transactionGone(err) && !connClosing(err)
}

// readAgain runs read, which only reads, again while it fails with an error
// worth retrying (transient, or its transaction gone) and both ctx and the
// call timeout, which bounds all the tries together, leave time for it.
// It returns read's last error: a connection closing, a context that ended
// or any error from the caller's side is returned at once.
func (st *store) readAgain(ctx context.Context, read func(ctx context.Context) error) error {
	rctx, cancel := context.WithTimeout(ctx, st.cfg.callTimeout())
	defer cancel()
	var last error
	for attempt := 0; ; attempt++ {
		err := read(rctx)
		if err != nil && last != nil && ctx.Err() == nil && rctx.Err() != nil {
			// The call timeout ended this try: the error before it says
			// what kept the read from succeeding.
			return last
		}
		if err == nil || rctx.Err() != nil || !readAgainAfter(err) {
			return err
		}
		last = err
		t := time.NewTimer(backoff(attempt, st.cfg.pollInterval))
		select {
		case <-rctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// connClosingMessage is gRPC's message for an RPC on a connection that is
// closing (grpc.ErrClientConnClosing, CANCELLED).
const connClosingMessage = "the client connection is closing"

// connClosing reports whether err came from a gRPC connection that is
// closing, directly or wrapped in another code: the Spanner client reports
// a failed inline begin as ABORTED, with the cause in its message.
func connClosing(err error) bool {
	return err != nil && strings.Contains(err.Error(), connClosingMessage)
}

// outsideTransaction returns a context with ctx's deadline and cancellation
// but none of its values: the Spanner client refuses a read under a context
// that carries a read-write transaction, taking it for a nested one. It is
// ctx itself with its values hidden, so it ends when ctx does and says why
// as ctx says: DeadlineExceeded at ctx's deadline. (A copy with a deadline
// of its own that also cancelled itself when ctx ended raced the two, and
// said Canceled about a quarter of the time, which callers took for an
// RPC cancelled by something between them and Spanner.) The CancelFunc
// does nothing; it is kept so that callers release it as any other.
func outsideTransaction(ctx context.Context) (context.Context, context.CancelFunc) {
	return withoutValues{ctx}, func() {}
}

// withoutValues is a context with its values hidden.
type withoutValues struct{ context.Context }

func (withoutValues) Value(any) any { return nil }

// AfterFunc lets a context derived from this one (the bound of a read)
// follow ctx through context.AfterFunc rather than a goroutine of its own.
func (c withoutValues) AfterFunc(f func()) (stop func() bool) {
	return context.AfterFunc(c.Context, f)
}
