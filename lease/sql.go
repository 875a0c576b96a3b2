package lease

import (
	"fmt"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
)

// expiresAt and live are the expiry rule, the only place it is written: a
// lease lives while it has a session and Spanner's clock has not passed its
// last renewal's commit timestamp plus the TTL it was acquired with. Both are
// evaluated by Spanner, so no client clock is ever compared with another.
// alias qualifies the columns ("s." in a join, "" otherwise).
func expiresAt(alias string) string {
	return fmt.Sprintf("TIMESTAMP_ADD(%[1]srenewed_at, INTERVAL %[1]sttl_ms MILLISECOND)", alias)
}

func live(alias string) string {
	return fmt.Sprintf("IFNULL(%ssession_id IS NOT NULL AND %s > CURRENT_TIMESTAMP(), FALSE)", alias, expiresAt(alias))
}

// statements are the SQL a Client runs against its tables, built once.
type statements struct {
	table   string
	permits string
	// selectRow is the one read of a lock row: Holder, Guard, Acquire and
	// every waiter use it, so they cannot disagree about who holds a lease.
	selectRow string
	// selectLive lists every live lock, with the same columns as selectRow.
	selectLive string
	// selectPermit is the one read of a permit row (a semaphore permit or a
	// worker ID), with the columns of selectRow where they mean the same.
	selectPermit string
	// selectSemaphore reads a semaphore or worker pool: its parent row and
	// every permit row, in one query.
	selectSemaphore string
	// insert creates a name's first row; the schema's default decides its
	// token (1, or the commit clock under cleanup).
	insert       string
	insertParent string

	renew, renewPermits         string
	confirmed, confirmedPermits string
	release, releasePermits     string
	complete                    string
}

// Columns shared by lock and permit rows, in the order scanRow reads them.
func rowColumns(alias string) string {
	return fmt.Sprintf(`%[1]sname, %[1]stoken, %[1]sholder_id, %[1]ssession_id, %[1]sacquired_at, %[1]srenewed_at,
		%[2]s AS expires_at, %[3]s AS live, %[1]spayload, CURRENT_TIMESTAMP() AS now`, alias, expiresAt(alias), live(alias))
}

func newStatements(table string) statements {
	t := locktable.Quote(table)
	p := locktable.Quote(locktable.PermitsTable(table))
	lockColumns := rowColumns("") + ", kind, completed_at IS NOT NULL AS completed"
	permitColumns := rowColumns("") + ", slot, high_water"
	return statements{
		table:        table,
		permits:      locktable.PermitsTable(table),
		selectRow:    fmt.Sprintf(`SELECT %s FROM %s WHERE name = @name`, lockColumns, t),
		selectLive:   fmt.Sprintf(`SELECT %s FROM %s WHERE %s ORDER BY name`, lockColumns, t, live("")),
		selectPermit: fmt.Sprintf(`SELECT %s FROM %s WHERE name = @name AND slot = @slot`, permitColumns, p),
		selectSemaphore: fmt.Sprintf(`SELECT parent.kind, parent.permits, parent.token, %s, s.slot, s.high_water
			FROM %s AS parent LEFT JOIN %s AS s ON s.name = parent.name
			WHERE parent.name = @name ORDER BY s.slot`, rowColumns("s."), t, p),
		insert: fmt.Sprintf(`INSERT INTO %s (name, holder_id, session_id, ttl_ms, acquired_at, renewed_at, payload)
			VALUES (@name, @holder, @session, @ttl, PENDING_COMMIT_TIMESTAMP(), PENDING_COMMIT_TIMESTAMP(), @payload)
			THEN RETURN token`, t),
		insertParent: fmt.Sprintf(`INSERT INTO %s (name, kind, permits) VALUES (@name, @kind, @permits) THEN RETURN token`, t),
		// The name list drives key lookups; the struct list is the
		// compare-and-set on token.
		renew: fmt.Sprintf(`UPDATE %s SET renewed_at = PENDING_COMMIT_TIMESTAMP()
			WHERE name IN UNNEST(@names)
			  AND STRUCT<name STRING, token INT64>(name, token) IN UNNEST(@leases)
			  AND session_id = @session AND %s`, t, live("")),
		renewPermits: fmt.Sprintf(`UPDATE %s SET renewed_at = PENDING_COMMIT_TIMESTAMP(),
			  high_water = IF(high_water IS NULL OR high_water < @high_water, @high_water, high_water)
			WHERE name IN UNNEST(@names)
			  AND STRUCT<name STRING, slot INT64, token INT64>(name, slot, token) IN UNNEST(@permits)
			  AND session_id = @session AND %s`, p, live("")),
		confirmed: fmt.Sprintf(`SELECT name, -1, token FROM %s
			WHERE name IN UNNEST(@names) AND session_id = @session AND renewed_at = @committed`, t),
		confirmedPermits: fmt.Sprintf(`SELECT name, slot, token FROM %s
			WHERE name IN UNNEST(@names) AND session_id = @session AND renewed_at = @committed`, p),
		// Release clears only the session: the row keeps its token, so the
		// next acquisition continues the sequence.
		release: fmt.Sprintf(`UPDATE %s SET session_id = NULL
			WHERE name IN UNNEST(@names)
			  AND STRUCT<name STRING, token INT64>(name, token) IN UNNEST(@leases)
			  AND session_id = @session AND %s`, t, live("")),
		// A released worker ID was last usable now: Release cancels the
		// holder's Context first, so the next holder need not wait longer.
		releasePermits: fmt.Sprintf(`UPDATE %s SET session_id = NULL, high_water = @high_water
			WHERE name IN UNNEST(@names)
			  AND STRUCT<name STRING, slot INT64, token INT64>(name, slot, token) IN UNNEST(@permits)
			  AND session_id = @session AND %s`, p, live("")),
		complete: fmt.Sprintf(`UPDATE %s SET completed_at = PENDING_COMMIT_TIMESTAMP(), session_id = NULL
			WHERE name = @name AND token = @token AND session_id = @session AND %s`, t, live("")),
	}
}

// lockKey and permitKey identify one acquisition as the statements'
// @leases and @permits parameters take them.
type lockKey struct {
	Name  string `spanner:"name"`
	Token int64  `spanner:"token"`
}

type permitKey struct {
	Name  string `spanner:"name"`
	Slot  int64  `spanner:"slot"`
	Token int64  `spanner:"token"`
}
