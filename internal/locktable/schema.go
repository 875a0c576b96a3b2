// Package locktable is the one source of truth for the schema of a spannerlock
// table: the versioned definition, the DDL rendered from it, inspection of a
// live table through INFORMATION_SCHEMA, and the additive plan that brings any
// older or drifted table to the latest version without losing data.
//
// A version is a list of changes applied on top of the previous one. Every
// change is additive (a new table, a new nullable column, an option, a
// default), so a table at any older version can be migrated in place and the
// plan never drops a column or table.
package locktable

import (
	"fmt"
	"regexp"
	"slices"
)

// Column is one column as both the DDL and INFORMATION_SCHEMA describe it.
type Column struct {
	Name    string
	Type    string // SPANNER_TYPE spelling, e.g. "STRING(MAX)", "INT64".
	NotNull bool
	// CommitTimestamp is OPTIONS (allow_commit_timestamp = true). The runtime
	// writes PENDING_COMMIT_TIMESTAMP() into these columns, so drift here
	// breaks every acquisition.
	CommitTimestamp bool
	// Default is the DEFAULT expression without its parentheses, "" for none.
	Default string
}

// Table is one table of the family a lock table consists of.
type Table struct {
	Name    string
	Columns []Column
	Key     []string
	// Parent is the table this one is interleaved in, "" for a top-level table.
	Parent string
	// RowDeletionPolicy is the policy expression. For the lock table itself
	// definitions leave it empty: that policy is an option (CleanupAfter).
	RowDeletionPolicy string
	// LiveName is the spelling Spanner has for a live table, which DDL must
	// use; Name is always the definition's spelling, so lookups by it work.
	LiveName string
}

// Column returns the named column, or false.
func (t Table) Column(name string) (Column, bool) {
	i := slices.IndexFunc(t.Columns, func(c Column) bool { return c.Name == name })
	if i < 0 {
		return Column{}, false
	}
	return t.Columns[i], true
}

// Schema is every table that makes up one lock table, parents first.
type Schema struct {
	Tables []Table
}

// Table returns the named table, or false.
func (s Schema) Table(name string) (Table, bool) {
	i := slices.IndexFunc(s.Tables, func(t Table) bool { return t.Name == name })
	if i < 0 {
		return Table{}, false
	}
	return s.Tables[i], true
}

// change is one additive step of a version.
type change func(s *Schema, table string)

// versions lists, per schema version, the changes on top of the previous one.
// Append only: a released version never changes, or tables created from it
// would inspect as drifted.
var versions = [][]change{
	1: {
		createTable(func(table string) Table {
			return Table{
				Name: table,
				Columns: []Column{
					{Name: "name", Type: "STRING(1024)", NotNull: true},
					// token is the fencing token: it only ever grows, by one per
					// acquisition of the name.
					{Name: "token", Type: "INT64", NotNull: true},
					{Name: "holder_id", Type: "STRING(1024)"},
					// session_id identifies the Client that holds the lease; NULL
					// once released. Renewals compare-and-set on it.
					{Name: "session_id", Type: "STRING(64)"},
					// ttl_ms is the TTL the holder acquired with; every reader
					// judges expiry by it, not by its own setting.
					{Name: "ttl_ms", Type: "INT64"},
					{Name: "acquired_at", Type: "TIMESTAMP", CommitTimestamp: true},
					{Name: "renewed_at", Type: "TIMESTAMP", CommitTimestamp: true},
					{Name: "payload", Type: "BYTES(MAX)"},
				},
				Key: []string{"name"},
			}
		}),
	},
	2: {
		// The runtime inserts a name's first row without a token, so the
		// schema decides where its tokens start: 1, or the commit clock
		// once cleanup may delete rows (see Options.CleanupAfter).
		setDefault("token", firstToken),
	},
	3: {
		// A lease lives as long as the session of the Client holding it: one
		// row per Client, renewed once per interval for all its leases.
		createTable(func(table string) Table {
			return Table{
				Name: table + sessionsSuffix,
				Columns: []Column{
					{Name: "session_id", Type: "STRING(64)", NotNull: true},
					{Name: "holder_id", Type: "STRING(1024)"},
					{Name: "ttl_ms", Type: "INT64", NotNull: true},
					{Name: "renewed_at", Type: "TIMESTAMP", NotNull: true, CommitTimestamp: true},
					// high_water is, by the holder's wall clock, the latest
					// moment its worker IDs may have been used.
					{Name: "high_water", Type: "TIMESTAMP"},
				},
				Key: []string{"session_id"},
				// A live session is renewed every TTL/3 and TTLs are at most a
				// day, so only dead sessions are ever this old.
				RowDeletionPolicy: "OLDER_THAN(renewed_at, INTERVAL 2 DAY)",
			}
		}),
		addColumns(
			// kind is NULL for a lock, "semaphore" or "workers" for the
			// parent row of a semaphore or a worker-ID pool, whose token is
			// the next permit token.
			Column{Name: "kind", Type: "STRING(16)"},
			// permits is a semaphore's capacity; NULL when not declared.
			Column{Name: "permits", Type: "INT64"},
			// completed_at records that a RunOnce slot succeeded.
			Column{Name: "completed_at", Type: "TIMESTAMP", CommitTimestamp: true},
		),
		createTable(func(table string) Table {
			return Table{
				Name:   table + permitsSuffix,
				Parent: table,
				Columns: []Column{
					{Name: "name", Type: "STRING(1024)", NotNull: true},
					// slot numbers the permits of one semaphore; for a worker
					// pool it is the worker ID.
					{Name: "slot", Type: "INT64", NotNull: true},
					{Name: "token", Type: "INT64", NotNull: true},
					{Name: "holder_id", Type: "STRING(1024)"},
					{Name: "session_id", Type: "STRING(64)"},
					{Name: "ttl_ms", Type: "INT64"},
					{Name: "acquired_at", Type: "TIMESTAMP", CommitTimestamp: true},
					{Name: "renewed_at", Type: "TIMESTAMP", CommitTimestamp: true},
					{Name: "payload", Type: "BYTES(MAX)"},
					// high_water is, by the holder's wall clock, the latest
					// moment it may have used the slot, as of its acquisition
					// or release; a worker ID's next holder waits past it (or
					// past its session's) so IDs never go back in time.
					{Name: "high_water", Type: "TIMESTAMP"},
				},
				Key: []string{"name", "slot"},
			}
		}),
	},
}

// The suffixes of the companion tables of a lock table.
const (
	permitsSuffix  = "_permits"
	sessionsSuffix = "_sessions"
)

// PermitsTable returns the name of the table of semaphore permits and worker IDs.
func PermitsTable(table string) string { return table + permitsSuffix }

// SessionsTable returns the name of the table of Client sessions.
func SessionsTable(table string) string { return table + sessionsSuffix }

func addColumns(cols ...Column) change {
	return func(s *Schema, _ string) {
		s.Tables[0].Columns = append(s.Tables[0].Columns, cols...)
	}
}

// firstToken and clockToken are the two defaults of the token column.
const (
	firstToken = "1"
	clockToken = "UNIX_MICROS(CURRENT_TIMESTAMP())"
)

func setDefault(column, expr string) change {
	return func(s *Schema, _ string) {
		t := &s.Tables[0]
		for i := range t.Columns {
			if t.Columns[i].Name == column {
				t.Columns[i].Default = expr
			}
		}
	}
}

// Latest is the schema version new tables are created at and old ones migrated to.
var Latest = len(versions) - 1

func createTable(define func(table string) Table) change {
	return func(s *Schema, table string) {
		s.Tables = append(s.Tables, define(table))
	}
}

// definition is Definition with the token column seeded from the clock when
// clockSeeded: the one way a table may differ from its version and still match it.
func definition(table string, version int, clockSeeded bool) Schema {
	s := Definition(table, version)
	if clockSeeded {
		for i, c := range s.Tables[0].Columns {
			if c.Name == "token" && c.Default != "" {
				s.Tables[0].Columns[i].Default = clockToken
			}
		}
	}
	return s
}

// Definition returns the schema of the given version for the named lock table.
func Definition(table string, version int) Schema {
	if version < 1 || version > Latest {
		panic(fmt.Sprintf("locktable: no schema version %d (versions are 1..%d)", version, Latest))
	}
	var s Schema
	for _, v := range versions[1 : version+1] {
		for _, c := range v {
			c(&s, table)
		}
	}
	return s
}

// MaxTableNameLength leaves room for the suffixes of the companion tables
// (PermitsTable) within Spanner's 128-character limit.
const MaxTableNameLength = 100

var tableNamePattern = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]*$`)

// ValidateTableName reports why name cannot name a lock table, or nil.
func ValidateTableName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("table name is empty")
	case len(name) > MaxTableNameLength:
		return fmt.Errorf("table name %q is %d characters long; the limit is %d", name, len(name), MaxTableNameLength)
	case !tableNamePattern.MatchString(name):
		return fmt.Errorf("table name %q must start with a letter and contain only letters, digits and underscores", name)
	}
	return nil
}
