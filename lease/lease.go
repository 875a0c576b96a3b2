package lease

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"time"

	"cloud.google.com/go/spanner"
	sppb "cloud.google.com/go/spanner/apiv1/spannerpb"
	"google.golang.org/grpc/codes"
)

// Lease is one held acquisition of a named lease. Its Context ends when the
// lease is lost, released, or its Client closes.
type Lease struct {
	c    *Client
	sess *session
	name string
	kind string // spannerlock.kind
	// slot is the permit's slot (a worker ID) for semaphores and worker
	// pools, lockSlot for a lock.
	slot       int64
	token      int64
	grant      string // the grant ID in its row
	payload    []byte
	acquiredAt time.Time
	// notBefore is, for a worker ID, when its previous holder stopped using it.
	notBefore time.Time

	ctx    context.Context
	cancel context.CancelCauseFunc

	// using is held shared while a worker ID is in use (WorkerID.Use) and
	// exclusively while the lease ends, so once it has ended nothing uses it.
	using sync.RWMutex
	// releasing serializes Release calls, so a concurrent second call sees
	// the outcome of the first instead of racing it to the row.
	releasing sync.Mutex

	mu sync.Mutex
	// counted is set while the lease counts in spannerlock.lease.held;
	// heldSince is when it began to, for spannerlock.lease.hold.
	counted   bool
	heldSince time.Time
	ended     bool
	endedAt   time.Time // when the Context was cancelled, for tests
	// lossReported makes only the first Release of a lost lease return ErrLeaseLost.
	lossReported bool
}

func newLease(c *Client, s *session, kind string, g grant, payload []byte) *Lease {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &Lease{c: c, sess: s, name: g.name, kind: kind, slot: g.slot, token: g.token, grant: g.id, payload: payload,
		acquiredAt: g.acquiredAt, notBefore: g.notBefore, ctx: ctx, cancel: cancel}
}

// Name returns the lease's name.
func (l *Lease) Name() string { return l.name }

// Token returns the fencing token: it is larger than the token of every
// earlier acquisition of this name, by any holder. Pass it to systems outside
// Spanner so they can reject writes from a holder that lost the lease.
func (l *Lease) Token() int64 { return l.token }

// AcquiredAt returns the commit timestamp of the acquisition.
func (l *Lease) AcquiredAt() time.Time { return l.acquiredAt }

// Payload returns the data stored with the lease when it was acquired.
func (l *Lease) Payload() []byte { return l.payload }

// Context is cancelled when the lease ends. context.Cause tells why:
// ErrLeaseLost (a renewal or Guard found it taken or expired, or renewals
// failed until the local deadline), ErrReleased, or ErrClosed. The local
// deadline is the start of the last confirmed renewal plus TTL minus a
// safety margin of TTL/10, so the holder learns of a loss before a rival can
// acquire.
func (l *Lease) Context() context.Context { return l.ctx }

// Deadline returns when the lease will be presumed lost unless renewed.
func (l *Lease) Deadline() time.Time { return l.sess.localDeadline() }

// stoppedAt is the worker-ID mark of a lease that ended by now: when its
// holder stopped using the ID, by this process's wall clock. A holder that
// let go while still waiting past its predecessor's mark never used the ID,
// and leaves that mark: a mark never moves back.
func (l *Lease) stoppedAt(now time.Time) time.Time {
	now = now.Round(0)
	if l.notBefore.After(now) {
		return l.notBefore
	}
	return now
}

func (l *Lease) key() leaseKey {
	return leaseKey{name: l.name, slot: l.slot, token: l.token, grant: l.grant}
}

// registered makes the lease count as held, until it ends.
func (l *Lease) registered() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.ended && !l.counted {
		l.counted, l.heldSince = true, time.Now()
		l.c.tel.heldChanged(l.kind, 1)
	}
}

// lose ends a lease whose ownership is gone.
func (l *Lease) lose(reason lossReason, why string) {
	// The loss is counted and logged before the Context ends, so whoever
	// watches the Context finds it recorded.
	if l.end(lostError(l.name, l.token, why), func() {
		l.c.log.Warn("lease lost", "name", l.name, "slot", l.slot, "token", l.token, "reason", why)
		l.c.tel.lost(l.kind, reason)
	}) {
		l.c.forget(l)
	}
}

// end cancels the lease's Context with cause, once, after any use of a
// worker ID in flight and after announce (when not nil); it reports whether
// this call did it.
func (l *Lease) end(cause error, announce func()) bool {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return false
	}
	l.ended = true
	if l.counted {
		l.counted = false
		l.c.tel.heldChanged(l.kind, -1)
		l.c.tel.heldFor(l.kind, time.Since(l.heldSince), cause)
	}
	l.mu.Unlock()
	if announce != nil {
		announce()
	}
	l.using.Lock()
	l.cancel(cause)
	l.using.Unlock()
	l.mu.Lock()
	l.endedAt = time.Now()
	l.mu.Unlock()
	return true
}

func (l *Lease) isEnded() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ended
}

// Guard checks, inside the caller's read-write transaction, that this lease
// is still held with its token: it reads the lease's row in txn, so the
// transaction cannot commit if another holder acquires the lease after the
// read, and it asks Spanner whether the lease's session is live, so expiry
// is judged on Spanner's clock. Run the transaction under l.Context() and
// return Guard's error from it. Guard returns an error matching ErrLeaseLost
// when the lease is no longer held.
//
// Guard does not read the session row in txn: renewals write that row, and
// a long guarded transaction would delay them. It costs one more read,
// made concurrently, bounded like every call the Client makes on its own
// even when ctx has no deadline.
//
// txn must run at serializable isolation, Spanner's default: at repeatable
// read (a spanner.ClientConfig whose TransactionOptions say so, or the
// transaction's own options) a plain read is not checked at commit, and
// Guard returns an error matching ErrNotSerializable without reading.
// Give such a transaction spanner.TransactionOptions{IsolationLevel:
// sppb.TransactionOptions_SERIALIZABLE} with ReadWriteTransactionWithOptions.
// Guard does not lock the row instead: FOR UPDATE, which would keep the
// read checked at repeatable read, takes an exclusive lock at serializable
// that would hold up the renewals of the lease, and the emulator does not
// parse it. The Spanner client does not say at which level a transaction
// runs; Guard reads the options it keeps for txn (tested with client
// v1.87.0), and lets a transaction whose options it cannot find pass.
func (l *Lease) Guard(ctx context.Context, txn *spanner.ReadWriteTransaction) error {
	if level, known := isolationOf(txn); known && level == sppb.TransactionOptions_REPEATABLE_READ {
		return fmt.Errorf("%w: txn runs at repeatable read, where reading %q's row does not stop a rival's acquisition from committing first", ErrNotSerializable, l.name)
	}
	return l.guard(ctx, func() (bool, error) { return l.named(ctx, txn) })
}

// isolationOf is the isolation level txn was begun with, or is to begin
// with: its own options merged with its client's defaults, as the Spanner
// client keeps them (an unexported field, read by reflection, since the
// client has no accessor). known is false when the field is not there.
func isolationOf(txn *spanner.ReadWriteTransaction) (level sppb.TransactionOptions_IsolationLevel, known bool) {
	if txn == nil {
		return 0, false
	}
	opts := reflect.ValueOf(txn).Elem().FieldByName("txOpts")
	if !opts.IsValid() || opts.Kind() != reflect.Struct {
		return 0, false
	}
	f := opts.FieldByName("IsolationLevel")
	if !f.IsValid() || f.Kind() != reflect.Int32 {
		return 0, false
	}
	return sppb.TransactionOptions_IsolationLevel(f.Int()), true
}

// guard is Guard with the read of the lease's row inside the caller's
// transaction given as named, so every kind of transaction has one Guard.
func (l *Lease) guard(ctx context.Context, named func() (bool, error)) error {
	if err := context.Cause(l.ctx); err != nil {
		return fmt.Errorf("lease: Guard: %w", err)
	}
	var (
		wg      sync.WaitGroup
		live    bool
		liveErr error
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		rctx, cancel := outsideTransaction(ctx)
		defer cancel()
		rctx, cancelBound := context.WithTimeout(rctx, l.c.cfg.callTimeout())
		defer cancelBound()
		var states map[string]sessionView
		states, liveErr = readSessions(rctx, l.c.st.db, l.c.st.sql, []string{l.sess.id})
		live = states[l.sess.id].live
	}()
	held, err := named()
	wg.Wait()
	if err == nil {
		err = liveErr
	}
	switch {
	case err != nil:
		return l.c.st.explain(err)
	case !held:
		// Tokens only grow, so a row that no longer names this lease never
		// will again.
		l.lose(lossTaken, "Guard found it released or held by another")
	case !live:
		l.c.keeper.endSession(l.sess, lossSessionGone, "Guard found its session expired in Spanner")
	default:
		return nil
	}
	return fmt.Errorf("lease: Guard: %w", context.Cause(l.ctx))
}

// named reads, in txn, whether the lease's row still names its session and
// token.
func (l *Lease) named(ctx context.Context, txn *spanner.ReadWriteTransaction) (bool, error) {
	table, key := l.c.st.sql.table, spanner.Key{l.name}
	if l.slot != lockSlot {
		table, key = l.c.st.sql.permits, spanner.Key{l.name, l.slot}
	}
	r, err := txn.ReadRow(ctx, table, key, []string{"token", "session_id"})
	if spanner.ErrCode(err) == codes.NotFound {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var token int64
	var sessionID spanner.NullString
	if err := r.Columns(&token, &sessionID); err != nil {
		return false, err
	}
	return token == l.token && sessionID.StringVal == l.sess.id, nil
}

// nameState is what this Client is doing with one lock name. A Client runs
// at most one acquisition per name at a time and holds a name at most once.
type nameState struct {
	acquiring bool
	held      *Lease
	// changed is closed when the name stops being acquired or held here.
	changed chan struct{}
}

// forget drops an ended lease from the Client and wakes local waiters.
func (c *Client) forget(l *Lease) {
	c.keeper.forget(l)
	if l.kind != kindLock {
		return // a Client may hold several permits of a semaphore or pool
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.names[l.name]; st != nil && st.held == l {
		st.held = nil
		c.settle(l.name, st)
	}
}

// state returns the state of name, creating it.
func (c *Client) state(name string) *nameState {
	st := c.names[name]
	if st == nil {
		st = &nameState{changed: make(chan struct{})}
		c.names[name] = st
	}
	return st
}

// settle records that name is neither acquiring nor held here any more if
// that is so, and wakes this Client's waiters for it.
func (c *Client) settle(name string, st *nameState) {
	if !st.acquiring && st.held == nil {
		delete(c.names, name)
	}
	close(st.changed)
	st.changed = make(chan struct{})
}
