package lease

import (
	"fmt"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
)

// expiresAt and live are the expiry rule, the only place it is written: a
// lease lives while it has a session and Spanner's clock has not passed its
// last renewal's commit timestamp plus the TTL it was acquired with. Both are
// evaluated by Spanner, so no client clock is ever compared with another.
const (
	expiresAt = "TIMESTAMP_ADD(renewed_at, INTERVAL ttl_ms MILLISECOND)"
	live      = "IFNULL(session_id IS NOT NULL AND " + expiresAt + " > CURRENT_TIMESTAMP(), FALSE)"
)

// statements are the SQL a Client runs against its table, built once.
type statements struct {
	table string
	// selectRow is the one read of a lease row: Holder, Guard, Acquire and
	// every waiter use it, so they cannot disagree about who holds a lease.
	selectRow string
	// selectLive lists every live lease, with the same columns as selectRow.
	selectLive string
	// insert creates a name's first row; the schema's default decides its
	// token (1, or the commit clock under cleanup).
	insert    string
	renew     string
	confirmed string
	release   string
}

func newStatements(table string) statements {
	t := locktable.Quote(table)
	columns := fmt.Sprintf(`name, token, holder_id, session_id, acquired_at, renewed_at, %s AS expires_at,
			%s AS live, payload, CURRENT_TIMESTAMP() AS now`, expiresAt, live)
	return statements{
		table:      table,
		selectRow:  fmt.Sprintf(`SELECT %s FROM %s WHERE name = @name`, columns, t),
		selectLive: fmt.Sprintf(`SELECT %s FROM %s WHERE %s ORDER BY name`, columns, t, live),
		insert: fmt.Sprintf(`INSERT INTO %s (name, holder_id, session_id, ttl_ms, acquired_at, renewed_at, payload)
			VALUES (@name, @holder, @session, @ttl, PENDING_COMMIT_TIMESTAMP(), PENDING_COMMIT_TIMESTAMP(), @payload)
			THEN RETURN token`, t),
		// The name list drives key lookups; the struct list is the
		// compare-and-set on token.
		renew: fmt.Sprintf(`UPDATE %s SET renewed_at = PENDING_COMMIT_TIMESTAMP()
			WHERE name IN UNNEST(@names)
			  AND STRUCT<name STRING, token INT64>(name, token) IN UNNEST(@leases)
			  AND session_id = @session AND %s`, t, live),
		confirmed: fmt.Sprintf(`SELECT name, token FROM %s
			WHERE name IN UNNEST(@names) AND session_id = @session AND renewed_at = @committed`, t),
		// Release clears only the session: the row keeps its token, so the
		// next acquisition continues the sequence.
		release: fmt.Sprintf(`UPDATE %s SET session_id = NULL
			WHERE name IN UNNEST(@names)
			  AND STRUCT<name STRING, token INT64>(name, token) IN UNNEST(@leases)
			  AND session_id = @session AND %s`, t, live),
	}
}

// leaseKey is a (name, token) pair as the statements' @leases parameter takes it.
type leaseKey struct {
	Name  string `spanner:"name"`
	Token int64  `spanner:"token"`
}
