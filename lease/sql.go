package lease

import (
	"fmt"
	"regexp"

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
		typ = map[string]string{"STRING": "varchar", "INT64": "bigint", "BOOL": "boolean"}[typ]
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

// statements are the SQL a Client runs against its tables, built once.
type statements struct {
	dialect
	table, permits, sessions string

	// selectRow is the one read of a lock row, with its holder's session and
	// ours: Holder, Acquire and every waiter use it, so they cannot disagree
	// about who holds a lease. It returns one row even when the lock row does
	// not exist.
	selectRow statement
	// selectLive and selectLivePermits list every live lock and permit, with
	// the columns of selectRow and selectPermit.
	selectLive, selectLivePermits statement
	// selectPermit is the one read of a permit row (a semaphore permit or a
	// worker ID), with the columns of selectRow where they mean the same.
	selectPermit statement
	// selectSemaphores lists the declared semaphores and their limits.
	selectSemaphores statement
	// selectSemaphore reads a semaphore or worker pool in one query: a row
	// per permit, each with the parent row's columns, or one row without a
	// permit when there is none.
	selectSemaphore statement
	// insert creates a name's first row unless it exists; the schema's
	// default decides its token (1, or the clock under cleanup). When the
	// acquirer joins an existing session, the row names it only if Spanner
	// has it live, so the insert is also the session check.
	insert       statement
	insertParent statement
	// sync reads, for one session, whether it is live and the rows among
	// the given locks and pools that still name it, with their tokens: the
	// compare-and-set of a renewal, a release, a RunOnce completion and
	// Close. One row per session, lock and permit, told apart by part. The
	// rows are looked up from the arrays of names (a join driven by them),
	// not filtered by them: with thousands of leases the emulator took
	// seconds to filter a whole table, and the renewal timed out.
	sync statement
	// sessionLive reads whether a session is live, for Guard.
	sessionLive statement
}

func newStatements(d locktable.Dialect, table string) statements {
	q := dialect{d}
	t := d.QuoteTable(table)
	p := d.QuotePermitsTable(table)
	s := d.QuoteSessionsTable(table)
	self := fmt.Sprintf(`(SELECT %s FROM %s AS me WHERE me.session_id = @self) AS self_live`, q.sessionLive("me"), s)
	// Columns shared by lock and permit rows, in the order row.fields reads them.
	columns := func(r string) string {
		return fmt.Sprintf(`%[1]s.name, %[1]s.token, %[1]s.holder_id, %[1]s.session_id, %[1]s.acquired_at,
			sess.renewed_at, %[2]s AS expires_at, %[3]s AS live, %[1]s.payload, %[4]s AS now`,
			r, q.sessionExpires("sess"), q.leaseLive(r, "sess"), q.now())
	}
	return statements{
		dialect:  q,
		table:    table,
		permits:  locktable.PermitsTable(table),
		sessions: locktable.SessionsTable(table),
		selectRow: q.statement(fmt.Sprintf(`SELECT %s, t.kind, t.completed_at IS NOT NULL AS completed, %s
			FROM (SELECT 1) AS one LEFT JOIN %s AS t ON t.name = @name
			LEFT JOIN %s AS sess ON sess.session_id = t.session_id`, columns("t"), self, t, s)),
		selectLive: q.statement(fmt.Sprintf(`SELECT %s, t.kind, t.completed_at IS NOT NULL AS completed, %s AS self_live
			FROM %s AS t JOIN %s AS sess ON sess.session_id = t.session_id
			WHERE %s ORDER BY t.name`, columns("t"), q.null("BOOL"), t, s, q.sessionLive("sess"))),
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
			p.payload, p.high_water, sess.high_water AS session_high_water, %s AS now, %s
			FROM (SELECT 1) AS one LEFT JOIN %s AS parent ON parent.name = @name
			LEFT JOIN %s AS p ON p.name = parent.name
			LEFT JOIN %s AS sess ON sess.session_id = p.session_id
			ORDER BY p.slot`,
			q.sessionExpires("sess"), q.leaseLive("p", "sess"), q.now(), self, t, p, s)),
		insert: q.statement(q.insert(t, "name, holder_id, session_id, ttl_ms, acquired_at, renewed_at, payload",
			fmt.Sprintf(`@name, @holder,
			        CASE WHEN @creating THEN @session ELSE (SELECT me.session_id FROM %s AS me WHERE me.session_id = @session AND %s) END,
			        @ttl, %[3]s, %[3]s, @payload`, s, q.sessionLive("me"), q.pendingCommitTimestamp()),
			"name", "token, session_id")),
		insertParent: q.statement(q.insert(t, "name, kind, permits", "@name, @kind, @permits", "", "token")),
		sync: q.statement(fmt.Sprintf(`SELECT 'session' AS part, %[1]s AS name, %[2]s AS slot, %[2]s AS token, %[3]s AS flag
			FROM %[4]s AS sess WHERE sess.session_id = @session
			UNION ALL
			SELECT 'lock', t.name, %[2]s, t.token, COALESCE(t.renewed_at < %[5]s, TRUE)
			FROM UNNEST(@locks) AS k JOIN %[6]s AS t ON t.name = k WHERE t.session_id = @session
			UNION ALL
			SELECT 'permit', p.name, p.slot, p.token, %[7]s
			FROM UNNEST(@pools) AS k JOIN %[8]s AS p ON p.name = k WHERE p.session_id = @session`,
			q.null("STRING"), q.null("INT64"), q.sessionLive("sess"), s,
			q.restampBefore(), t, q.null("BOOL"), p)),
		sessionLive: q.statement(fmt.Sprintf(`SELECT %s FROM %s AS sess WHERE sess.session_id = @session`, q.sessionLive("sess"), s)),
	}
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
