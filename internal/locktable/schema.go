// Package locktable is the one source of truth for the schema of a spannerlock
// table: the versioned definition, the DDL rendered from it for each Spanner
// dialect (GoogleSQL and PostgreSQL), inspection of a live table through
// INFORMATION_SCHEMA, and the additive plan that brings any older or drifted
// table to the latest version without losing data.
//
// A version is a list of changes applied on top of the previous one, written
// in neither dialect's spelling; each Dialect renders and reads it. Every
// change is additive (a new table, a new nullable column, an option, a
// default), so a table at any older version can be migrated in place and the
// plan never drops a column or table.
//
// Names: a lock table's name is an ASCII letter, then ASCII letters, digits
// and underscores (ValidateTableName), used exactly as given; in PostgreSQL
// at most 54 characters and not starting with pg_ (Dialect.ValidateTableName). GoogleSQL resolves
// table names regardless of letter case. PostgreSQL resolves quoted names
// exactly and folds unquoted ones to lower case, so the PostgreSQL DDL and
// every statement the runtime sends quote each name (Dialect.Quote): a table
// named Locks is "Locks" in SQL. Spanner keeps names unique regardless of
// case in both dialects, so Locks and locks can never both exist.
package locktable

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Kind is a column type in neither dialect's spelling; each dialect spells it
// its own way (STRING(1024) or character varying(1024), INT64 or bigint).
type Kind int

const (
	// OtherKind is a live type the definition never uses; Type.Reported
	// spells it.
	OtherKind Kind = iota
	StringKind
	Int64Kind
	TimestampKind
	BytesKind
)

// Type is a column's type.
type Type struct {
	Kind Kind
	// Length bounds a string or bytes column; 0 is the most Spanner allows
	// (GoogleSQL's MAX, PostgreSQL's unbounded character varying and bytea).
	Length int64
	// Reported is a live type as INFORMATION_SCHEMA spells it; "" in definitions.
	Reported string
}

// stringOf is a string type of at most n characters, 0 for the most Spanner allows.
func stringOf(n int64) Type { return Type{Kind: StringKind, Length: n} }

// The types of the definition besides strings.
var (
	int64Type     = Type{Kind: Int64Kind}
	timestampType = Type{Kind: TimestampKind}
	bytesType     = Type{Kind: BytesKind}
)

// Same reports whether t and o are one type, whatever their spelling. A type
// the definition never uses is the same as no other.
func (t Type) Same(o Type) bool {
	return t.Kind != OtherKind && t.Kind == o.Kind && t.Length == o.Length
}

// DefaultValue is what a column default means, in neither dialect's spelling.
type DefaultValue int

const (
	NoDefault DefaultValue = iota
	// OtherDefault is a live default the definition never uses;
	// Default.Reported spells it.
	OtherDefault
	// FirstToken starts a name's tokens at 1.
	FirstToken
	// ClockToken starts a name's tokens at Spanner's clock in microseconds
	// since the Unix epoch (see Options.CleanupAfter).
	ClockToken
)

// Default is a column's DEFAULT.
type Default struct {
	Value DefaultValue
	// Reported is a live default expression as INFORMATION_SCHEMA spells
	// it; "" in definitions.
	Reported string
}

// Column is one column of a table, in a definition or as inspected.
type Column struct {
	Name    string
	Type    Type
	NotNull bool
	// CommitTimestamp is a column the runtime writes the commit timestamp
	// into: in GoogleSQL a TIMESTAMP with OPTIONS (allow_commit_timestamp =
	// true), in PostgreSQL the type SPANNER.COMMIT_TIMESTAMP. Without it,
	// every acquisition fails.
	CommitTimestamp bool
	Default         Default
}

// RowDeletion is a row deletion policy: Spanner deletes the rows whose Column
// is more than Days days old.
type RowDeletion struct {
	Column string
	// Days is 0 for a live policy that is not of this form; Reported then
	// is all there is to say about it.
	Days int
	// Reported is a live policy as INFORMATION_SCHEMA spells it; "" in
	// definitions. Spanner rewrites what DDL says (a PostgreSQL '30 days'
	// reads back as '4 WEEKS 2 DAYS'), so policies compare by Column and
	// Days, never by text.
	Reported string
}

// Same reports whether p and o delete the same rows.
func (p *RowDeletion) Same(o *RowDeletion) bool {
	if p == nil || o == nil {
		return p == nil && o == nil
	}
	return p.Days > 0 && p.Days == o.Days && strings.EqualFold(p.Column, o.Column)
}

// Table is one table of the family a lock table consists of.
type Table struct {
	Name    string
	Columns []Column
	Key     []string
	// Parent is the table this one is interleaved in, "" for a top-level table.
	Parent string
	// RowDeletion is the table's row deletion policy, nil for none. For the
	// lock table itself definitions leave it nil: that policy is an option
	// (CleanupAfter).
	RowDeletion *RowDeletion
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

// versions lists, per schema version, the changes on top of the previous one,
// in neither dialect's spelling: each dialect renders the same definition
// (see Dialect.DDL), so a change to the schema is made here, once. Append
// only: a released version never changes, or tables created from it would
// inspect as drifted.
var versions = [][]change{
	1: {
		createTable(func(table string) Table {
			return Table{
				Name: table,
				Columns: []Column{
					{Name: "name", Type: stringOf(1024), NotNull: true},
					// token is the fencing token: it only ever grows, by one per
					// acquisition of the name.
					{Name: "token", Type: int64Type, NotNull: true},
					{Name: "holder_id", Type: stringOf(1024)},
					// session_id identifies the Client that holds the lease; NULL
					// once released. Renewals compare-and-set on it.
					{Name: "session_id", Type: stringOf(64)},
					// ttl_ms is the TTL the holder acquired with. Up to version
					// 2 readers judged expiry by it; from version 3 they judge
					// by the session's ttl_ms, and this one is written but no
					// longer read.
					{Name: "ttl_ms", Type: int64Type},
					{Name: "acquired_at", Type: timestampType, CommitTimestamp: true},
					{Name: "renewed_at", Type: timestampType, CommitTimestamp: true},
					{Name: "payload", Type: bytesType},
				},
				Key: []string{"name"},
			}
		}),
	},
	2: {
		// The runtime inserts a name's first row without a token, so the
		// schema decides where its tokens start: 1, or the commit clock
		// once cleanup may delete rows (see Options.CleanupAfter).
		setDefault("token", FirstToken),
	},
	3: {
		// A lease lives as long as the session of the Client holding it: one
		// row per Client, renewed once per interval for all its leases.
		createTable(func(table string) Table {
			return Table{
				Name: table + sessionsSuffix,
				Columns: []Column{
					{Name: "session_id", Type: stringOf(64), NotNull: true},
					{Name: "holder_id", Type: stringOf(1024)},
					{Name: "ttl_ms", Type: int64Type, NotNull: true},
					{Name: "renewed_at", Type: timestampType, NotNull: true, CommitTimestamp: true},
					// high_water is, by the holder's wall clock, the latest
					// moment its worker IDs may have been used.
					{Name: "high_water", Type: timestampType},
				},
				Key: []string{"session_id"},
				// A live session is renewed every TTL/3 and TTLs are at most a
				// day, so only dead sessions are ever this old.
				RowDeletion: &RowDeletion{Column: "renewed_at", Days: 2},
			}
		}),
		addColumns(
			// kind is NULL for a lock, "semaphore" or "workers" for the
			// parent row of a semaphore or a worker-ID pool, whose token is
			// the next permit token.
			Column{Name: "kind", Type: stringOf(16)},
			// permits is a semaphore's capacity; NULL when not declared.
			Column{Name: "permits", Type: int64Type},
			// completed_at records that a RunOnce slot succeeded.
			Column{Name: "completed_at", Type: timestampType, CommitTimestamp: true},
		),
		createTable(func(table string) Table {
			return Table{
				Name:   table + permitsSuffix,
				Parent: table,
				Columns: []Column{
					{Name: "name", Type: stringOf(1024), NotNull: true},
					// slot numbers the permits of one semaphore; for a worker
					// pool it is the worker ID.
					{Name: "slot", Type: int64Type, NotNull: true},
					{Name: "token", Type: int64Type, NotNull: true},
					{Name: "holder_id", Type: stringOf(1024)},
					{Name: "session_id", Type: stringOf(64)},
					{Name: "ttl_ms", Type: int64Type},
					{Name: "acquired_at", Type: timestampType, CommitTimestamp: true},
					{Name: "renewed_at", Type: timestampType, CommitTimestamp: true},
					{Name: "payload", Type: bytesType},
					// high_water is, by the holder's wall clock, the latest
					// moment it may have used the slot, as of its acquisition
					// or release; a worker ID's next holder waits past it (or
					// past its session's) so IDs never go back in time.
					{Name: "high_water", Type: timestampType},
				},
				Key: []string{"name", "slot"},
			}
		}),
	},
	4: {
		addColumns(
			// attempts counts the runs of a RunOnce slot: every acquisition
			// of the slot adds one, so the runs that failed or crashed are
			// attempts minus the one running and the one that succeeded.
			// NULL on every other row.
			Column{Name: "attempts", Type: int64Type},
			// grant_id names the acquisition that wrote the row, unique to
			// it: a Client that never learnt whether an acquisition
			// committed clears the row only if it names that acquisition,
			// not a later one that got the same token.
			Column{Name: "grant_id", Type: stringOf(32)},
		),
		addColumnsTo(permitsSuffix,
			Column{Name: "grant_id", Type: stringOf(32)},
		),
		// The line of waiters for each lock, semaphore or worker pool, in
		// the order they began waiting: a grant goes to the first live
		// waiter, and a release hands the name to it in the same commit. A
		// permit row of a lock's name is a shared (reader) holding.
		createTable(func(table string) Table {
			return Table{
				Name:   table + waitersSuffix,
				Parent: table,
				Columns: []Column{
					{Name: "name", Type: stringOf(1024), NotNull: true},
					// enqueued_at is the commit timestamp of the waiter's
					// entry, the same on every name of one AcquireAll, so
					// lines that share waiters order them alike.
					{Name: "enqueued_at", Type: timestampType, NotNull: true, CommitTimestamp: true},
					// session_id is the waiting Client's: the entry lives as
					// long as the session does.
					{Name: "session_id", Type: stringOf(64), NotNull: true},
					{Name: "holder_id", Type: stringOf(1024)},
					// mode is "shared" for a reader, NULL for a writer.
					{Name: "mode", Type: stringOf(16)},
					// names lists, as a JSON array, every name an AcquireAll
					// waits for; NULL for one name.
					{Name: "names", Type: stringOf(0)},
					{Name: "payload", Type: bytesType},
				},
				Key: []string{"name", "enqueued_at", "session_id"},
			}
		}),
	},
}

// The suffixes of the companion tables of a lock table.
const (
	permitsSuffix  = "_permits"
	sessionsSuffix = "_sessions"
	waitersSuffix  = "_waiters"
)

// PermitsTable returns the name of the table of semaphore permits and worker IDs.
func PermitsTable(table string) string { return table + permitsSuffix }

// SessionsTable returns the name of the table of Client sessions.
func SessionsTable(table string) string { return table + sessionsSuffix }

// WaitersTable returns the name of the table of waiters in line.
func WaitersTable(table string) string { return table + waitersSuffix }

func addColumns(cols ...Column) change {
	return func(s *Schema, _ string) {
		s.Tables[0].Columns = append(s.Tables[0].Columns, cols...)
	}
}

// addColumnsTo adds columns to the companion table with the given suffix.
func addColumnsTo(suffix string, cols ...Column) change {
	return func(s *Schema, table string) {
		for i := range s.Tables {
			if s.Tables[i].Name == table+suffix {
				s.Tables[i].Columns = append(s.Tables[i].Columns, cols...)
			}
		}
	}
}

func setDefault(column string, v DefaultValue) change {
	return func(s *Schema, _ string) {
		t := &s.Tables[0]
		for i := range t.Columns {
			if t.Columns[i].Name == column {
				t.Columns[i].Default = Default{Value: v}
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
			if c.Name == "token" && c.Default.Value != NoDefault {
				s.Tables[0].Columns[i].Default = Default{Value: ClockToken}
			}
		}
	}
	return s
}

// Definition returns the schema of the given version for the named lock
// table, in neither dialect's spelling.
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

// MaxPostgreSQLTableNameLength is the limit in a PostgreSQL-dialect
// database, where names keep only their first 63 characters (PostgreSQL's
// NAMEDATALEN - 1): the longest companion, SessionsTable, must fit too.
const MaxPostgreSQLTableNameLength = maxPostgreSQLIdentifier - len(sessionsSuffix)

const maxPostgreSQLIdentifier = 63

// reservedPostgreSQLPrefix starts names that a PostgreSQL-dialect database
// keeps for its own tables: CREATE TABLE refuses them. It is case-sensitive,
// as the quoted names of spannerlock's DDL are.
const reservedPostgreSQLPrefix = "pg_"

// ValidateTableName reports why name cannot name a lock table in any
// database, or nil. Dialect.ValidateTableName adds the dialect's limits.
func ValidateTableName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("table name is empty")
	case len(name) > MaxTableNameLength:
		return fmt.Errorf("table name %q is %d characters long; the limit is %d", name, len(name), MaxTableNameLength)
	}
	// Named by position, so that a letter outside ASCII, which looks like
	// one, is not reported as if it were not a letter.
	for i, r := range []rune(name) {
		switch {
		case r < utf8.RuneSelf && unicode.IsLetter(r):
		case i == 0:
			return fmt.Errorf("table name %q must start with a letter (A-Z or a-z: ASCII only), not %q", name, r)
		case r < utf8.RuneSelf && unicode.IsDigit(r) || r == '_':
		default:
			return fmt.Errorf("table name %q may contain only ASCII letters, digits and underscores, not %q (character %d)", name, r, i+1)
		}
	}
	return nil
}

// ValidateTableName reports why name cannot name a lock table in a database
// of dialect d, or nil: ValidateTableName's rules, and in PostgreSQL, a name
// that is no longer than MaxPostgreSQLTableNameLength and does not start
// with "pg_". PostgreSQL would truncate a longer name, and the table (or a
// companion) would not be found by its name.
func (d Dialect) ValidateTableName(name string) error {
	if err := ValidateTableName(name); err != nil {
		return err
	}
	if d != PostgreSQL {
		return nil
	}
	switch {
	case len(name) > MaxPostgreSQLTableNameLength:
		return fmt.Errorf("table name %q is %d characters long; in a PostgreSQL-dialect database the limit is %d, "+
			"because PostgreSQL keeps only the first %d characters of a name and the companion table %s is %d characters longer",
			name, len(name), MaxPostgreSQLTableNameLength, maxPostgreSQLIdentifier, SessionsTable(name), len(sessionsSuffix))
	case strings.HasPrefix(name, reservedPostgreSQLPrefix):
		return fmt.Errorf("table name %q starts with %q, which a PostgreSQL-dialect database reserves for its own tables",
			name, reservedPostgreSQLPrefix)
	}
	return nil
}

// Companions returns the names of the tables that make up the lock table
// named table besides itself, at the latest version.
func Companions(table string) []string {
	s := Definition(table, Latest)
	names := make([]string, 0, len(s.Tables)-1)
	for _, t := range s.Tables[1:] {
		names = append(names, t.Name)
	}
	return names
}

// Family describes the tables a lock table named table is made of, at the
// latest version, for messages: "4 tables, T, T_sessions, T_permits and
// T_waiters" for table T.
func Family(table string) string {
	names := append([]string{table}, Companions(table)...)
	return fmt.Sprintf("%d tables, %s and %s", len(names), strings.Join(names[:len(names)-1], ", "), names[len(names)-1])
}

// ConflictingNames returns the names of the tables whose existence keeps a
// lock table named table from being created: its companions' names, and the
// lock tables whose companion it would be named like. Spanner keeps table
// names unique regardless of case, in both dialects, and so does Conflict.
func ConflictingNames(table string) []string {
	names := Companions(table)
	for _, companion := range Companions("") {
		// Companions("") is the bare suffixes.
		if len(table) > len(companion) && strings.EqualFold(table[len(table)-len(companion):], companion) {
			if base := table[:len(table)-len(companion)]; ValidateTableName(base) == nil {
				names = append(names, base)
			}
		}
	}
	return names
}

// Conflict says why a table named other (existing, or to be created) keeps a
// lock table named table from being created, or returns "" when it does not.
func Conflict(table, other string) string {
	for _, c := range Companions(table) {
		if strings.EqualFold(c, other) {
			return fmt.Sprintf("lock table %s needs the name %s for a companion table", table, c)
		}
	}
	for _, c := range Companions(other) {
		if strings.EqualFold(c, table) {
			return fmt.Sprintf("%s is the name of a companion table of lock table %s", table, other)
		}
	}
	return ""
}
