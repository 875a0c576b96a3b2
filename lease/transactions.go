package lease

import (
	"context"
	"fmt"
	"strings"
	"time"

	"cloud.google.com/go/spanner"
	"google.golang.org/grpc/codes"
)

// Every read-write transaction the package makes, and the rows it reads and
// writes. L is a lock row (or a semaphore's or pool's parent row, which
// lives in the same table), P a permit row (a semaphore's or pool's, or a
// reader's of a lock), W a waiter row of a name's line, S a session row. On
// Spanner a transaction holds a shared lock on every row it reads until it
// ends (commit, rollback, or Spanner aborting it as idle when its end is
// lost), and a younger writer of such a row waits for it. A Commit holds
// exclusive locks on the rows it writes, from when it reaches Spanner
// (while it waits for older readers' shared locks, too) until it is
// applied, and a read in a transaction of such a row waits for it.
//
//	transaction         tag                      reads               writes
//	acquire a lock      spannerlock-acquire      L, P, W of names    L or P; W (join, or leave taking its turn; dead waiters); S (see below)
//	grant a slot        spannerlock-acquire      parent, P, W        parent, P; W (as for a lock); S (see below)
//	renew               spannerlock-renew        -                   S (blind; then L, P it checks, by a strong read)
//	let go              spannerlock-release      L, P, W of names    L, P of the leases let go (cleared); W (dead waiters); S (Close)
//	leave a line        spannerlock-leave        L, P, W of names    W (the place left, dead waiters)
//	restamp             spannerlock-restamp      L it stamps         L
//	set permits         spannerlock-set-permits  parent              parent
//	force release       spannerlock-force-release L or parent, P     L or parent, P
//	                                             (S of a worker ID)
//	expire a session    spannerlock-end-session  -                   S
//
// No transaction writes a row naming another session than its own: a
// release clears, and the first live waiter takes a free name itself.
// Whether a waiter, or the holder of a row, is live is read outside the
// transaction, like every session. An acquisition writes S only when it creates the session (an insert) or
// the session has idled (a renewal). Every write of S is blind, and no
// read-write transaction reads S but an operator's force release of a
// worker ID (forceReleasePermit says why): whether a session is live is read
// outside transactions (readSessions, and the joins of the reads in
// row.go), by strong reads that take no lock. So a renewal, the one
// transaction that keeps a Client's leases, never waits for a lock that
// another transaction holds, whatever that transaction's fate: it reads
// nothing in its transaction (its check of the leases' rows is a strong
// read after it, see renew), so no Commit's exclusive lock holds it up, and
// it writes only its own session's row, which no transaction but a force
// release of a worker ID the session holds locks (see doc.go for that
// bound). Lock rows, which rivals and Guard read, are written only by
// transactions other than the renewal (let go, restamp), which may wait
// without harm.

// ownedRow is a row that a compare-and-set read found still naming the
// session with the token asked about.
type ownedRow struct {
	// stale is set for a lock row whose renewed_at is old enough that
	// cleanup might delete it: a restamp is due.
	stale bool
}

// readOwned reads, in q (a transaction, or a strong read outside any),
// which of keys still name session with their tokens.
func (st *store) readOwned(ctx context.Context, q querier, session string, keys []leaseKey) (map[leaseKey]ownedRow, error) {
	// The query returns every row naming the session among these names;
	// the tokens are compared here, against the keys asked about.
	asked := map[leaseKey]bool{}
	var locks, pools []string
	seenPool := map[string]bool{}
	for _, k := range keys {
		asked[k] = true
		switch {
		case k.slot == lockSlot:
			locks = append(locks, k.name)
		case !seenPool[k.name]:
			seenPool[k.name] = true
			pools = append(pools, k.name)
		}
	}
	owned := map[leaseKey]ownedRow{}
	if len(keys) == 0 {
		return owned, nil
	}
	err := q.Query(ctx, st.sql.owned.bind(map[string]any{"session": session, "locks": locks, "pools": pools})).Do(func(r *spanner.Row) error {
		var (
			part  string
			name  string
			slot  spanner.NullInt64
			token int64
			grant spanner.NullString
			o     ownedRow
		)
		if err := r.Columns(&part, &name, &slot, &token, &grant, &o.stale); err != nil {
			return err
		}
		k := leaseKey{name: name, slot: lockSlot, token: token, grant: grant.StringVal}
		if part == "permit" {
			k.slot = slot.Int64
		}
		if asked[k] {
			owned[k] = o
		}
		return nil
	})
	return owned, err
}

// renewal is what a renewal found.
type renewal struct {
	// owned are the leases checked whose rows still name the session.
	owned map[leaseKey]ownedRow
	// sent is when the committed attempt began, commitTs when it committed.
	sent, commitTs time.Time
}

// renewTag tags a renewal's Commit and its read.
const renewTag = "spannerlock-renew"

// renew extends s: it renews S with a blind write in a transaction of its
// own, which reads no row, then checks keys (L, P) with a strong read,
// which takes no lock: three RPCs, one more than a check made in the
// transaction. It fails with errSessionGone if S is
// no longer in Spanner.
//
// The check is not made in the transaction, as a compare-and-set, though
// it could: a read in a read-write transaction waits for any Commit that
// writes the rows it reads, and such a Commit (a rival's grant of another
// permit of the same semaphore, a release) itself waits for older
// transactions that read those rows, up to a stalled one's idle abort on
// Spanner, about 10 s. The renewal would wait behind it, time out again
// and again, and lose every lease of the session with Spanner reachable
// (TestAStalledGrantOfAnotherPermitDoesNotHoldUpTheHoldersRenewals). A
// strong read waits only for a Commit that Spanner is applying, which it
// finishes without its client. Read after the Commit, the check is as good
// as one made in it: a row read naming the session with its token has
// named it since the grant, which came before the renewal (tokens never
// repeat, and a row that leaves a session never comes back to it with the
// same token), so it did at the commit too.
//
// The strong read has a bound of its own, as long as the transaction's
// (readCtx gives it), so that a check that would come in time is not cut
// short by a slow Commit: a renewal whose check fails extends nothing.
func (st *store) renew(ctx context.Context, s *session, keys []leaseKey, readCtx func() (context.Context, context.CancelFunc)) (renewal, error) {
	var out renewal
	// The transaction begins with a statement that reads no row (SELECT 1),
	// not with the Commit alone (a single-use Commit, or a BeginTransaction
	// first): the emulator holds a Commit that begins a transaction up while
	// another transaction runs, where it aborts a statement at once, which
	// transact retries. It costs the same RPCs as a BeginTransaction.
	ts, err := st.transact(ctx, keeperLane, renewTag, func(ctx context.Context, tx *spanner.ReadWriteTransaction) ([]*spanner.Mutation, error) {
		out.sent = time.Now()
		err := tx.Query(ctx, spanner.Statement{SQL: "SELECT 1"}).Do(func(*spanner.Row) error { return nil })
		return []*spanner.Mutation{st.sql.sessionRenewal(s.id, s.cfg.markFrom(out.sent))}, err
	})
	switch {
	case isRowNotFound(err):
		return out, errSessionGone{s}
	case err != nil:
		return out, err
	}
	out.commitTs = ts
	rctx, cancel := readCtx()
	defer cancel()
	out.owned, err = st.readOwned(rctx, taggedRead{st.db.Single(), renewTag}, s.id, keys)
	return out, err
}

// taggedRead is a single-use strong read whose query carries a request tag.
type taggedRead struct {
	ro  *spanner.ReadOnlyTransaction
	tag string
}

func (r taggedRead) Query(ctx context.Context, stmt spanner.Statement) *spanner.RowIterator {
	return r.ro.QueryWithOptions(ctx, stmt, spanner.QueryOptions{RequestTag: r.tag})
}

// restamp stamps the lock rows among keys that still name s (reads and
// writes L), so that a table's row deletion policy, which judges rows by
// renewed_at, never deletes a held lock.
func (st *store) restamp(ctx context.Context, s *session, keys []leaseKey) error {
	_, err := st.transact(ctx, keeperLane, "spannerlock-restamp", func(ctx context.Context, tx *spanner.ReadWriteTransaction) ([]*spanner.Mutation, error) {
		owned, err := st.readOwned(ctx, tx, s.id, keys)
		var writes []*spanner.Mutation
		for k, o := range owned {
			if o.stale {
				writes = append(writes, spanner.Update(st.sql.table, []string{"name", "renewed_at"}, []any{k.name, spanner.CommitTimestamp}))
			}
		}
		return writes, err
	})
	return err
}

// expireSession writes the session row as expired (S, one Commit),
// inserting it if the creation never landed: a creating commit still in
// flight then fails on the existing row, and one that landed is expired at
// once, so no lease naming the session lives on. The row keeps its
// worker-ID high-water mark.
func (st *store) expireSession(ctx context.Context, id, holderID string) error {
	return st.expireSessions(ctx, []string{id}, holderID)
}

// expireSessions is expireSession for several sessions, in one Commit.
func (st *store) expireSessions(ctx context.Context, ids []string, holderID string) error {
	ms := make([]*spanner.Mutation, len(ids))
	for i, id := range ids {
		ms[i] = st.sql.sessionTombstone(id, holderID)
	}
	return st.apply(ctx, "spannerlock-end-session", ms...)
}

// insertFirstRow inserts, in tx, the first row of a lock named name held by
// session unless a row exists (reads and writes L), and reports whether it
// did, with the token the schema gave it. attempts is set for a RunOnce
// slot.
func (st *store) insertFirstRow(ctx context.Context, tx *spanner.ReadWriteTransaction, name, grant, holderID, session string, ttl time.Duration, payload []byte, attempts spanner.NullInt64) (token int64, inserted bool, err error) {
	err = tx.Query(ctx, st.sql.insert.bind(map[string]any{
		"name": name, "holder": holderID, "session": session, "ttl": ttl.Milliseconds(), "payload": payload, "attempts": attempts,
		"grant": grant,
	})).Do(func(r *spanner.Row) error {
		inserted = true
		return r.Column(0, &token)
	})
	return token, inserted, err
}

// insertFreeRow inserts, in tx, a free first row for name unless one exists
// (a line needs its name's row), and returns the name's token.
func (st *store) insertFreeRow(ctx context.Context, tx *spanner.ReadWriteTransaction, name string) (int64, error) {
	var token int64
	err := tx.Query(ctx, st.sql.insert.bind(map[string]any{
		"name": name, "holder": spanner.NullString{}, "session": spanner.NullString{}, "ttl": spanner.NullInt64{},
		"payload": []byte(nil), "attempts": spanner.NullInt64{}, "grant": spanner.NullString{},
	})).Do(func(r *spanner.Row) error { return r.Column(0, &token) })
	return token, err
}

// lockGrant is the write that gives an existing lock row to session with
// token.
func (st *store) lockGrant(name string, token int64, grant, holderID, session string, ttl time.Duration, payload []byte, attempts spanner.NullInt64) *spanner.Mutation {
	return spanner.Update(st.sql.table,
		[]string{"name", "token", "grant_id", "holder_id", "session_id", "ttl_ms", "acquired_at", "renewed_at", "payload", "attempts"},
		[]any{name, token, grant, holderID, session, ttl.Milliseconds(), spanner.CommitTimestamp, spanner.CommitTimestamp, payload, attempts})
}

// permitGrant is the write that gives slot of pool to session with token;
// the parent row's next token moves past it.
func (st *store) permitGrant(pool string, slot, token int64, grant, holderID, session string, ttl time.Duration, payload []byte, highWater time.Time) []*spanner.Mutation {
	return []*spanner.Mutation{
		spanner.Update(st.sql.table, []string{"name", "token"}, []any{pool, token + 1}),
		st.permitRow(pool, slot, token, grant, holderID, session, ttl, payload, highWater),
	}
}

// permitRow is the write of one permit row: a semaphore's permit, a worker
// ID, or a lock's shared holding. A zero highWater keeps the row's mark.
func (st *store) permitRow(name string, slot, token int64, grant, holderID, session string, ttl time.Duration, payload []byte, highWater time.Time) *spanner.Mutation {
	cols := []string{"name", "slot", "token", "grant_id", "holder_id", "session_id", "ttl_ms", "acquired_at", "renewed_at", "payload"}
	vals := []any{name, slot, token, grant, holderID, session, ttl.Milliseconds(), spanner.CommitTimestamp, spanner.CommitTimestamp, payload}
	if !highWater.IsZero() {
		cols, vals = append(cols, "high_water"), append(vals, highWater)
	}
	return spanner.InsertOrUpdate(st.sql.permits, cols, vals)
}

// permitUnlink is the write that frees an expired permit: its session link
// goes and its high-water mark takes the session's. Writing the row makes
// a stale holder's guarded write still in flight (Guard reads that row)
// conflict with the writer: Spanner orders it first or aborts it.
func (st *store) permitUnlink(pool string, r row) *spanner.Mutation {
	return spanner.Update(st.sql.permits,
		[]string{"name", "slot", "session_id", "high_water"}, []any{pool, r.slot, nil, nullTime(r.notBefore())})
}

// createPool inserts a worker pool's parent row (reads and writes L) and
// returns its first permit token, which the schema's default seeds.
func (st *store) createParent(ctx context.Context, tx *spanner.ReadWriteTransaction, name, kind string, permits spanner.NullInt64) (next spanner.NullInt64, err error) {
	err = tx.Query(ctx, st.sql.insertParent.bind(map[string]any{
		"name": name, "kind": kind, "permits": permits,
	})).Do(func(r *spanner.Row) error { return r.Column(0, &next) })
	return next, err
}

// setPermits declares a semaphore with n permits, or changes its limit; n
// NULL undeclares it (reads and writes the parent row).
func (st *store) setPermits(ctx context.Context, name string, n spanner.NullInt64, declareIfMissing bool) error {
	_, err := st.transact(ctx, callerLane, "spannerlock-set-permits", func(ctx context.Context, tx *spanner.ReadWriteTransaction) ([]*spanner.Mutation, error) {
		lines, err := readLines(ctx, tx, st.sql, []string{name}, false)
		if err != nil {
			return nil, err
		}
		s := lines[name].state()
		switch {
		case !s.found && declareIfMissing:
			_, err := st.createParent(ctx, tx, name, kindSemaphore, n)
			return nil, err
		case !s.found:
			return nil, nil
		case s.kind.StringVal != kindSemaphore:
			return nil, notASemaphore(name, s.kind)
		}
		return []*spanner.Mutation{spanner.Update(st.sql.table, []string{"name", "permits"}, []any{name, n})}, nil
	})
	return err
}

// forceRelease ends the live holder's lease on a lock (reads and writes L
// and, when it is held shared, its readers' rows in P): the row forgets the
// holder's session and its token moves on, so the holder's renewal and
// Guard find it gone and its next acquirer gets a larger token. A lock
// held shared loses every live reader the same way: each reader's row
// forgets its session. It returns the row as it was, with its holder's
// session: the writer's, or the first live reader's, as Holder reports.
func (st *store) forceRelease(ctx context.Context, name string, token int64) (row, error) {
	var r row
	_, err := st.transact(ctx, callerLane, "spannerlock-force-release", func(ctx context.Context, tx *spanner.ReadWriteTransaction) ([]*spanner.Mutation, error) {
		lines, err := readLines(ctx, tx, st.sql, []string{name}, false)
		if err != nil {
			return nil, err
		}
		l := lines[name]
		r = l.row
		if r.kind.Valid {
			return nil, fmt.Errorf("%w: %q is %s, not a lock: force-release one of its permits", ErrWrongKind, name, describeKind(r.kind))
		}
		rows := []*row{&r}
		for i := range l.permits {
			rows = append(rows, &l.permits[i])
		}
		if err := st.holdersLive(ctx, rows...); err != nil {
			return nil, err
		}
		var writes []*spanner.Mutation
		for _, p := range l.permits {
			if !p.live {
				continue
			}
			if !r.live {
				r = p // the first live reader, as Holder reports
			}
			writes = append(writes, spanner.Update(st.sql.permits, []string{"name", "slot", "session_id", "grant_id"},
				[]any{name, p.slot, nil, nil}))
		}
		if !r.live || token != 0 && r.token.Int64 != token {
			return nil, nil // nothing to end, or not the holder asked about
		}
		return append(writes, spanner.Update(st.sql.table, []string{"name", "token", "session_id", "grant_id"},
			[]any{name, l.row.token.Int64 + 1, nil, nil})), nil
	})
	return r, err
}

// forceReleasePermit is forceRelease for one permit or worker ID (reads
// and writes the parent row and the permit row): the permit's token moves
// to the pool's next one, and a worker ID keeps its holder's latest mark,
// so its next holder still waits past it.
//
// For a worker ID it reads the holder's session row in the transaction,
// the one transaction that reads S: the mark is the session's, and a
// renewal that committed after a read outside the transaction (which takes
// no lock) and before this commit would move the mark past the one written
// here, while the holder, renewed, goes on using the ID until a later
// renewal finds it gone. Read in the transaction, the renewal waits for
// it or it sees the renewal. The renewal waiting is the cost: at worst,
// when this commit's reply is lost, until Spanner aborts the transaction
// as idle (about 10 s), for a holder an operator is ending anyway.
func (st *store) forceReleasePermit(ctx context.Context, name string, slot, token int64) (row, error) {
	var r row
	_, err := st.transact(ctx, callerLane, "spannerlock-force-release", func(ctx context.Context, tx *spanner.ReadWriteTransaction) ([]*spanner.Mutation, error) {
		lines, err := readLines(ctx, tx, st.sql, []string{name}, false)
		if err != nil {
			return nil, err
		}
		s := lines[name].state()
		switch {
		case s.found && s.kind.StringVal != kindSemaphore && s.kind.StringVal != kindWorkers && len(s.slots) == 0:
			return nil, fmt.Errorf("%w: %q is %s, not a semaphore or worker pool: force-release it as a lock", ErrWrongKind, name, describeKind(s.kind))
		}
		r = s.slot(slot)
		r.name, r.slot = name, slot
		if s.kind.StringVal == kindWorkers && r.sessionID.Valid {
			views, err := querySessions(ctx, tx, st.sql, []string{r.sessionID.StringVal})
			if err != nil {
				return nil, err
			}
			r.withSession(views[r.sessionID.StringVal])
		} else if err := st.holdersLive(ctx, &r); err != nil {
			return nil, err
		}
		if !r.live || token != 0 && r.token.Int64 != token {
			return nil, nil // nothing to end, or not the holder asked about
		}
		return []*spanner.Mutation{
			spanner.Update(st.sql.table, []string{"name", "token"}, []any{name, s.next.Int64 + 1}),
			spanner.Update(st.sql.permits, []string{"name", "slot", "token", "session_id", "grant_id", "high_water"},
				[]any{name, slot, s.next.Int64, nil, nil, nullTime(r.notBefore())}),
		}, nil
	})
	return r, err
}

// holdersLive completes rows read inside a transaction with one read of
// their holders' sessions outside it.
func (st *store) holdersLive(ctx context.Context, rows ...*row) error {
	var ids []string
	for _, r := range rows {
		if r.sessionID.Valid {
			ids = append(ids, r.sessionID.StringVal)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	rctx, cancel := outsideTransaction(ctx)
	defer cancel()
	views, err := readSessions(rctx, st.db, st.sql, ids)
	for _, r := range rows {
		if r.sessionID.Valid {
			r.withSession(views[r.sessionID.StringVal])
		}
	}
	return err
}

// isRowNotFound reports whether a commit failed because a row it updated
// does not exist (rather than its table, database or Spanner session).
func isRowNotFound(err error) bool {
	if spanner.ErrCode(err) != codes.NotFound {
		return false
	}
	msg := err.Error()
	return !strings.Contains(msg, "Table not found") && !strings.Contains(msg, "Database not found") &&
		!strings.Contains(msg, "Session not found")
}

// nullTime is a TIMESTAMP parameter that is NULL for the zero time.
func nullTime(t time.Time) spanner.NullTime {
	return spanner.NullTime{Time: t, Valid: !t.IsZero()}
}
