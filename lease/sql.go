package lease

import (
	"fmt"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
)

// The expiry rule, the only place it is written. A session (one per Client)
// lives while Spanner's clock has not passed the commit timestamp of its last
// renewal plus the TTL stored with it; a lease lives while its row names a
// live session. Spanner evaluates both, so no client clock is ever compared
// with another, and every reader judges expiry by the holder's TTL. s is the
// alias of the sessions table, row that of the lease row.
func sessionExpires(s string) string {
	return fmt.Sprintf("TIMESTAMP_ADD(%[1]s.renewed_at, INTERVAL %[1]s.ttl_ms MILLISECOND)", s)
}

func sessionLive(s string) string {
	return fmt.Sprintf("IFNULL(%s > CURRENT_TIMESTAMP(), FALSE)", sessionExpires(s))
}

func leaseLive(row, s string) string {
	return fmt.Sprintf("(%s.session_id IS NOT NULL AND %s)", row, sessionLive(s))
}

// restampAfter is how old a held lock row's renewed_at may get before a
// renewal stamps it again: row deletion policies (cleanup_after, at least a
// day) judge rows by it, and must never delete a held lock.
const restampAfter = "INTERVAL 1 HOUR"

// statements are the SQL a Client runs against its tables, built once.
type statements struct {
	table, permits, sessions string

	// selectRow is the one read of a lock row, with its holder's session and
	// ours: Holder, Guard, Acquire and every waiter use it, so they cannot
	// disagree about who holds a lease. It returns one row even when the
	// lock row does not exist.
	selectRow string
	// selectLive and selectLivePermits list every live lock and permit, with
	// the columns of selectRow and selectPermit.
	selectLive, selectLivePermits string
	// selectPermit is the one read of a permit row (a semaphore permit or a
	// worker ID), with the columns of selectRow where they mean the same.
	selectPermit string
	// selectSemaphore reads a semaphore or worker pool: its parent row and
	// every permit row, in one query.
	selectSemaphore string
	// insert creates a name's first row unless it exists; the schema's
	// default decides its token (1, or the commit clock under cleanup).
	insert       string
	insertParent string
	// renew reads, for one session, whether it is live and which of the
	// given leases it still holds with their tokens: the compare-and-set of
	// a renewal, whose write is then the session row alone.
	renew string

	release, releasePermit, complete string
}

func newStatements(table string) statements {
	t := locktable.Quote(table)
	p := locktable.Quote(locktable.PermitsTable(table))
	s := locktable.Quote(locktable.SessionsTable(table))
	self := fmt.Sprintf(`(SELECT %s FROM %s AS me WHERE me.session_id = @self) AS self_live`, sessionLive("me"), s)
	// Columns shared by lock and permit rows, in the order row.fields reads them.
	columns := func(r string) string {
		return fmt.Sprintf(`%[1]s.name, %[1]s.token, %[1]s.holder_id, %[1]s.session_id, %[1]s.acquired_at,
			sess.renewed_at, %[2]s AS expires_at, %[3]s AS live, %[1]s.payload, CURRENT_TIMESTAMP() AS now`,
			r, sessionExpires("sess"), leaseLive(r, "sess"))
	}
	ownSessionIsLive := fmt.Sprintf(`EXISTS (SELECT 1 FROM %s AS sess WHERE sess.session_id = @session AND %s)`, s, sessionLive("sess"))
	return statements{
		table:    table,
		permits:  locktable.PermitsTable(table),
		sessions: locktable.SessionsTable(table),
		selectRow: fmt.Sprintf(`SELECT %s, t.kind, t.completed_at IS NOT NULL AS completed, %s
			FROM (SELECT 1) AS one LEFT JOIN %s AS t ON t.name = @name
			LEFT JOIN %s AS sess ON sess.session_id = t.session_id`, columns("t"), self, t, s),
		selectLive: fmt.Sprintf(`SELECT %s, t.kind, t.completed_at IS NOT NULL AS completed, CAST(NULL AS BOOL) AS self_live
			FROM %s AS t JOIN %s AS sess ON sess.session_id = t.session_id
			WHERE %s ORDER BY t.name`, columns("t"), t, s, sessionLive("sess")),
		selectLivePermits: fmt.Sprintf(`SELECT %s, p.slot, p.high_water, sess.high_water AS session_high_water
			FROM %s AS p JOIN %s AS sess ON sess.session_id = p.session_id
			WHERE %s ORDER BY p.name, p.slot`, columns("p"), p, s, sessionLive("sess")),
		selectPermit: fmt.Sprintf(`SELECT %s, p.slot, p.high_water, sess.high_water AS session_high_water
			FROM (SELECT 1) AS one LEFT JOIN %s AS p ON p.name = @name AND p.slot = @slot
			LEFT JOIN %s AS sess ON sess.session_id = p.session_id`, columns("p"), p, s),
		selectSemaphore: fmt.Sprintf(`SELECT parent.name IS NOT NULL AS found, parent.kind, parent.permits, parent.token,
			ARRAY(SELECT AS STRUCT p.slot, p.token, p.holder_id, p.session_id, p.acquired_at, sess.renewed_at,
			        %s AS expires_at, %s AS live, p.payload, p.high_water, sess.high_water AS session_high_water
			      FROM %s AS p LEFT JOIN %s AS sess ON sess.session_id = p.session_id
			      WHERE p.name = parent.name ORDER BY p.slot) AS slots,
			CURRENT_TIMESTAMP() AS now, %s
			FROM (SELECT 1) AS one LEFT JOIN %s AS parent ON parent.name = @name`,
			sessionExpires("sess"), leaseLive("p", "sess"), p, s, self, t),
		insert: fmt.Sprintf(`INSERT OR IGNORE INTO %s (name, holder_id, session_id, ttl_ms, acquired_at, renewed_at, payload)
			VALUES (@name, @holder, @session, @ttl, PENDING_COMMIT_TIMESTAMP(), PENDING_COMMIT_TIMESTAMP(), @payload)
			THEN RETURN token`, t),
		insertParent: fmt.Sprintf(`INSERT INTO %s (name, kind, permits) VALUES (@name, @kind, @permits) THEN RETURN token`, t),
		renew: fmt.Sprintf(`SELECT
			(SELECT %s FROM %s AS sess WHERE sess.session_id = @session) AS live,
			ARRAY(SELECT AS STRUCT t.name, t.token, IFNULL(t.renewed_at < TIMESTAMP_SUB(CURRENT_TIMESTAMP(), %s), TRUE) AS stale
			      FROM UNNEST(@locks) AS k JOIN %s AS t ON t.name = k.name
			      WHERE t.token = k.token AND t.session_id = @session) AS locks,
			ARRAY(SELECT AS STRUCT p.name, p.slot, p.token
			      FROM UNNEST(@permits) AS k JOIN %s AS p ON p.name = k.name AND p.slot = k.slot
			      WHERE p.token = k.token AND p.session_id = @session) AS permits`,
			sessionLive("sess"), s, restampAfter, t, p),
		// Release clears only the session: the row keeps its token, so the
		// next acquisition continues the sequence.
		release: fmt.Sprintf(`UPDATE %s SET session_id = NULL
			WHERE name = @name AND token = @token AND session_id = @session AND %s`, t, ownSessionIsLive),
		// A released worker ID was last usable now: Release cancels the
		// holder's Context first, so the next holder need not wait longer.
		releasePermit: fmt.Sprintf(`UPDATE %s SET session_id = NULL, high_water = @high_water
			WHERE name = @name AND slot = @slot AND token = @token AND session_id = @session AND %s`, p, ownSessionIsLive),
		complete: fmt.Sprintf(`UPDATE %s SET completed_at = PENDING_COMMIT_TIMESTAMP(), session_id = NULL
			WHERE name = @name AND token = @token AND session_id = @session AND %s`, t, ownSessionIsLive),
	}
}

// lockKey and permitKey identify one acquisition as the renew statement's
// @locks and @permits parameters take them.
type lockKey struct {
	Name  string `spanner:"name"`
	Token int64  `spanner:"token"`
}

type permitKey struct {
	Name  string `spanner:"name"`
	Slot  int64  `spanner:"slot"`
	Token int64  `spanner:"token"`
}
