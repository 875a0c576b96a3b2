package lease

import (
	"fmt"
	"regexp"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
)

// The expiry rule, the only place it is written. A session (one per Client)
// lives while Spanner's clock has not passed the commit timestamp of its last
// renewal plus the TTL stored with it; a lease lives while its row names a
// live session. Spanner evaluates both, so no client clock is ever compared
// with another, and every reader judges expiry by the holder's TTL. s is the
// alias of the sessions table, row that of the lease row.
func (q dialect) sessionExpires(s string) string {
	if q.pg() {
		// The CASE keeps NULL away from spanner.timestamptz_add: given a
		// NULL timestamp (a free lease's missing session), the emulator's
		// never returns.
		return fmt.Sprintf("CASE WHEN %[1]s.renewed_at IS NULL THEN NULL "+
			"ELSE spanner.timestamptz_add(%[1]s.renewed_at, CAST(%[1]s.ttl_ms AS varchar) || ' milliseconds') END", s)
	}
	return fmt.Sprintf("TIMESTAMP_ADD(%[1]s.renewed_at, INTERVAL %[1]s.ttl_ms MILLISECOND)", s)
}

func (q dialect) sessionLive(s string) string {
	return fmt.Sprintf("COALESCE(%s > %s, FALSE)", q.sessionExpires(s), q.now())
}

func (q dialect) leaseLive(row, s string) string {
	return fmt.Sprintf("(%s.session_id IS NOT NULL AND %s)", row, q.sessionLive(s))
}

// restampBefore is how old a held lock row's renewed_at may get before a
// renewal stamps it again: row deletion policies (cleanup_after, at least a
// day) judge rows by it, and must never delete a held lock.
func (q dialect) restampBefore() string {
	if q.pg() {
		return "spanner.timestamptz_subtract(now(), '1 hour')"
	}
	return "TIMESTAMP_SUB(CURRENT_TIMESTAMP(), INTERVAL 1 HOUR)"
}

// dialect spells the statements in one of Spanner's SQL dialects. The
// statements, and so the reads, writes and RPCs, are the same in both; only
// these spellings differ.
type dialect struct{ locktable.Dialect }

func (q dialect) pg() bool { return q.Dialect == locktable.PostgreSQL }

func (q dialect) now() string {
	if q.pg() {
		return "now()"
	}
	return "CURRENT_TIMESTAMP()"
}

func (q dialect) pendingCommitTimestamp() string {
	if q.pg() {
		return "spanner.pending_commit_timestamp()"
	}
	return "PENDING_COMMIT_TIMESTAMP()"
}

// null is a NULL of a GoogleSQL type, in the dialect's type names.
func (q dialect) null(typ string) string {
	if q.pg() {
		typ = map[string]string{"STRING": "varchar", "INT64": "bigint", "BOOL": "boolean", "TIMESTAMP": "timestamptz", "BYTES": "bytea"}[typ]
	}
	return "CAST(NULL AS " + typ + ")"
}

// insert is an INSERT returning columns; with ignoreConflictOn (the key
// columns), a row whose key exists is left alone and returns nothing.
func (q dialect) insert(table, columns, values, ignoreConflictOn, returning string) string {
	switch {
	case q.pg() && ignoreConflictOn != "":
		return fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s) ON CONFLICT (%s) DO NOTHING RETURNING %s", table, columns, values, ignoreConflictOn, returning)
	case q.pg():
		return fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s) RETURNING %s", table, columns, values, returning)
	case ignoreConflictOn != "":
		return fmt.Sprintf("INSERT OR IGNORE INTO %s (%s) VALUES (%s) THEN RETURN %s", table, columns, values, returning)
	}
	return fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s) THEN RETURN %s", table, columns, values, returning)
}

// statement is one SQL statement with named parameters (@name). In the
// PostgreSQL dialect they are numbered ($1, bound as p1) in order of first
// appearance.
type statement struct {
	sql   string
	order []string // PostgreSQL: the parameter bound as p1, p2, ...
}

var paramPattern = regexp.MustCompile(`@([a-z_]+)`)

func (q dialect) statement(sql string) statement {
	if !q.pg() {
		return statement{sql: sql}
	}
	var order []string
	number := map[string]int{}
	sql = paramPattern.ReplaceAllStringFunc(sql, func(m string) string {
		name := m[1:]
		if number[name] == 0 {
			order = append(order, name)
			number[name] = len(order)
		}
		return fmt.Sprintf("$%d", number[name])
	})
	return statement{sql: sql, order: order}
}

// bind gives the statement its parameters by name.
func (s statement) bind(params map[string]any) spanner.Statement {
	if s.order == nil {
		return spanner.Statement{SQL: s.sql, Params: params}
	}
	numbered := make(map[string]any, len(s.order))
	for i, name := range s.order {
		numbered[fmt.Sprintf("p%d", i+1)] = params[name]
	}
	return spanner.Statement{SQL: s.sql, Params: numbered}
}

// statements are the SQL a Client runs against its tables, built once. Those
// used inside read-write transactions never mention the sessions table: a
// session row is read only outside them, by lock-free strong reads, so no
// transaction ever holds a lock that a renewal (which writes the row) would
// have to wait for. See transactions.go.
type statements struct {
	dialect
	table, permits, sessions, waiters string

	// selectRow is the one read of a lock row outside transactions, with its
	// holder's session: Holder, Observe and every waiter use it, so they
	// cannot disagree about who holds a lease. It returns one row even when
	// the lock row does not exist.
	selectRow statement
	// selectLive and selectLivePermits list every live lock and permit, with
	// the columns of selectRow and selectPermit.
	selectLive, selectLivePermits statement
	// selectPermit is the one read of a permit row (a semaphore permit or a
	// worker ID) outside transactions, with the columns of selectRow where
	// they mean the same.
	selectPermit statement
	// selectSemaphores lists the declared semaphores and their limits.
	selectSemaphores statement
	// selectSemaphore reads a semaphore or worker pool outside transactions
	// in one query: a row per permit, each with the parent row's columns and
	// its holder's session, or one row without a permit when there is none.
	selectSemaphore statement
	// selectJobs lists the RunOnce slots, with the live runner's session.
	selectJobs statement

	// lineInTx reads, inside a transaction, everything that decides who may
	// hold the given names: each name's row (a lock, or a semaphore's or
	// pool's parent), its permit rows (a lock's shared holders, a pool's
	// permits) and its line of waiters, in order. Nothing about sessions:
	// see lineOutside. lineOutside is the same read outside transactions,
	// with each row's session judged live or not by Spanner.
	lineInTx, lineOutside statement
	// selectWaiters reads every live waiter of the table, in line order.
	selectWaiters statement
	// sessionViews reads, outside transactions, what Spanner says of the
	// given sessions now: whether each is live, and its worker-ID mark.
	sessionViews statement
	// insert creates a name's first row unless it exists; the schema's
	// default decides its token (1, or the clock under cleanup).
	insert       statement
	insertParent statement
	// owned reads which of the given locks and pools' permits still name a
	// session, with their tokens: the compare-and-set of a renewal, a
	// release, a RunOnce completion, a restamp and Close. One row per lock
	// and permit, told apart by part. The rows are looked up from the arrays
	// of names (a join driven by them), not filtered by them: with thousands
	// of leases the emulator took seconds to filter a whole table, and the
	// renewal timed out.
	owned statement
}

func newStatements(d locktable.Dialect, table string) statements {
	q := dialect{d}
	t := d.QuoteTable(table)
	p := d.QuotePermitsTable(table)
	s := d.QuoteSessionsTable(table)
	w := d.QuoteWaitersTable(table)
	// Columns shared by lock and permit rows read with their holder's
	// session, in the order row.commonFields reads them.
	columns := func(r string) string {
		return fmt.Sprintf(`%[1]s.name, %[1]s.token, %[1]s.holder_id, %[1]s.session_id, %[1]s.acquired_at,
			sess.renewed_at, %[2]s AS expires_at, %[3]s AS live, %[1]s.payload, %[4]s AS now, %[1]s.grant_id`,
			r, q.sessionExpires("sess"), q.leaseLive(r, "sess"), q.now())
	}
	lockColumns := "t.kind, t.completed_at IS NOT NULL AS completed, t.attempts"
	return statements{
		dialect:  q,
		table:    table,
		permits:  locktable.PermitsTable(table),
		sessions: locktable.SessionsTable(table),
		waiters:  locktable.WaitersTable(table),
		selectRow: q.statement(fmt.Sprintf(`SELECT %s, %s
			FROM (SELECT 1) AS one LEFT JOIN %s AS t ON t.name = @name
			LEFT JOIN %s AS sess ON sess.session_id = t.session_id`, columns("t"), lockColumns, t, s)),
		selectLive: q.statement(fmt.Sprintf(`SELECT %s, %s
			FROM %s AS t JOIN %s AS sess ON sess.session_id = t.session_id
			WHERE %s ORDER BY t.name`, columns("t"), lockColumns, t, s, q.sessionLive("sess"))),
		selectLivePermits: q.statement(fmt.Sprintf(`SELECT %s, p.slot, p.high_water, sess.high_water AS session_high_water, parent.kind
			FROM %s AS p JOIN %s AS parent ON parent.name = p.name JOIN %s AS sess ON sess.session_id = p.session_id
			WHERE %s ORDER BY p.name, p.slot`, columns("p"), p, t, s, q.sessionLive("sess"))),
		selectPermit: q.statement(fmt.Sprintf(`SELECT %s, p.slot, p.high_water, sess.high_water AS session_high_water, parent.kind
			FROM (SELECT 1) AS one LEFT JOIN %s AS p ON p.name = @name AND p.slot = @slot
			LEFT JOIN %s AS parent ON parent.name = p.name
			LEFT JOIN %s AS sess ON sess.session_id = p.session_id`, columns("p"), p, t, s)),
		selectSemaphores: q.statement(fmt.Sprintf(`SELECT parent.name, parent.permits FROM %s AS parent
			WHERE parent.kind = '%s' AND parent.permits IS NOT NULL ORDER BY parent.name`, t, kindSemaphore)),
		selectSemaphore: q.statement(fmt.Sprintf(`SELECT parent.name IS NOT NULL AS found, parent.kind, parent.permits, parent.token,
			p.slot, p.token, p.holder_id, p.session_id, p.acquired_at, sess.renewed_at, %s AS expires_at, %s AS live,
			p.payload, p.high_water, sess.high_water AS session_high_water, %s AS now, p.grant_id
			FROM (SELECT 1) AS one LEFT JOIN %s AS parent ON parent.name = @name
			LEFT JOIN %s AS p ON p.name = parent.name
			LEFT JOIN %s AS sess ON sess.session_id = p.session_id
			ORDER BY p.slot`,
			q.sessionExpires("sess"), q.leaseLive("p", "sess"), q.now(), t, p, s)),
		selectJobs: q.statement(fmt.Sprintf(`SELECT %s, %s, t.completed_at
			FROM %s AS t LEFT JOIN %s AS sess ON sess.session_id = t.session_id
			WHERE t.kind IS NULL AND (t.attempts IS NOT NULL OR t.completed_at IS NOT NULL)
			ORDER BY t.name`, columns("t"), lockColumns, t, s)),
		lineInTx:    q.statement(lineQuery(q, t, p, w, "")),
		lineOutside: q.statement(lineQuery(q, t, p, w, s)),
		selectWaiters: q.statement(fmt.Sprintf(`SELECT w.name, w.holder_id, w.mode, w.enqueued_at
			FROM %s AS w JOIN %s AS sess ON sess.session_id = w.session_id
			WHERE %s ORDER BY w.name, w.enqueued_at, w.session_id`, w, s, q.sessionLive("sess"))),
		sessionViews: q.statement(fmt.Sprintf(`SELECT sess.session_id, %s AS live, sess.renewed_at, %s AS expires_at, sess.high_water, %s AS now
			FROM UNNEST(@ids) AS k JOIN %s AS sess ON sess.session_id = k`,
			q.sessionLive("sess"), q.sessionExpires("sess"), q.now(), s)),
		insert: q.statement(q.insert(t, "name, holder_id, session_id, ttl_ms, acquired_at, renewed_at, payload, attempts, grant_id",
			fmt.Sprintf("@name, @holder, @session, @ttl, %[1]s, %[1]s, @payload, @attempts, @grant", q.pendingCommitTimestamp()),
			"name", "token")),
		insertParent: q.statement(q.insert(t, "name, kind, permits", "@name, @kind, @permits", "", "token")),
		owned: q.statement(fmt.Sprintf(`SELECT 'lock' AS part, t.name, %[1]s AS slot, t.token, t.grant_id, COALESCE(t.renewed_at < %[2]s, TRUE) AS stale
			FROM UNNEST(@locks) AS k JOIN %[3]s AS t ON t.name = k WHERE t.session_id = @session
			UNION ALL
			SELECT 'permit', p.name, p.slot, p.token, p.grant_id, FALSE
			FROM UNNEST(@pools) AS k JOIN %[4]s AS p ON p.name = k WHERE p.session_id = @session`,
			q.null("INT64"), q.restampBefore(), t, p)),
	}
}

// lineQuery reads the rows of @names that decide who may hold them (see
// statements.lineInTx): parts "row", "permit" and "waiter", in the order
// a line is kept. With sessions (the sessions table, quoted) each row also
// says whether its session is live, by Spanner's clock, and when it
// expires; without, the query touches no session row.
func lineQuery(q dialect, t, p, w, sessions string) string {
	str, i64, b, ts := q.null("STRING"), q.null("INT64"), q.null("BOOL"), q.null("TIMESTAMP")
	live := func(r string) string {
		if sessions == "" {
			return ""
		}
		return fmt.Sprintf(`, %s AS live, sess.renewed_at, %s AS expires_at, sess.high_water AS session_high_water, %s AS now`,
			q.leaseLive(r, "sess"), q.sessionExpires("sess"), q.now())
	}
	join := func(r string) string {
		if sessions == "" {
			return ""
		}
		return fmt.Sprintf(" LEFT JOIN %s AS sess ON sess.session_id = %s.session_id", sessions, r)
	}
	return fmt.Sprintf(`SELECT 'row' AS part, t.name, %[1]s AS slot, t.token, t.grant_id, t.holder_id, t.session_id, t.acquired_at,
			t.payload, t.kind, t.permits, t.completed_at IS NOT NULL AS completed, t.attempts, %[4]s AS high_water,
			%[4]s AS enqueued_at, %[2]s AS mode, %[2]s AS names%[5]s
		FROM UNNEST(@names) AS k JOIN %[6]s AS t ON t.name = k%[7]s
		UNION ALL
		SELECT 'permit', p.name, p.slot, p.token, p.grant_id, p.holder_id, p.session_id, p.acquired_at,
			p.payload, %[2]s, %[1]s, FALSE, %[1]s, p.high_water, %[4]s, %[2]s, %[2]s%[8]s
		FROM UNNEST(@names) AS k JOIN %[9]s AS p ON p.name = k%[10]s
		UNION ALL
		SELECT 'waiter', w.name, %[1]s, %[1]s, %[2]s, w.holder_id, w.session_id, %[4]s,
			w.payload, %[2]s, %[1]s, FALSE, %[1]s, %[4]s, w.enqueued_at, w.mode, w.names%[11]s
		FROM UNNEST(@names) AS k JOIN %[12]s AS w ON w.name = k%[13]s
		ORDER BY part, name, slot, enqueued_at, session_id`,
		i64, str, b, ts, live("t"), t, join("t"), live("p"), p, join("p"), live("w"), w, join("w"))
}

// sessionTombstone writes a session row that is already expired, inserting
// it if absent: renewed_at says when it ended, and its TTL is minus a day,
// so no reader's clock can see it live, however close to the commit it
// reads. An ended session is never renewed, so it stays expired; its
// worker-ID high-water mark is kept, and the row deletion policy removes it
// with the other dead sessions.
func (st statements) sessionTombstone(id, holderID string) *spanner.Mutation {
	return spanner.InsertOrUpdate(st.sessions, []string{"session_id", "holder_id", "ttl_ms", "renewed_at"},
		[]any{id, holderID, -MaxTTL.Milliseconds(), spanner.CommitTimestamp})
}

// sessionRenewal is the blind write that extends a session: its new
// renewed_at, and mark, the latest moment its worker IDs may be used. It
// fails with NOT_FOUND if the row is gone.
func (st statements) sessionRenewal(id string, mark time.Time) *spanner.Mutation {
	return spanner.Update(st.sessions, []string{"session_id", "renewed_at", "high_water"},
		[]any{id, spanner.CommitTimestamp, mark})
}
