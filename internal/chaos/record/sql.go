package record

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// The resource tables are described once and spelled in each of Spanner's
// dialects by Spelling, like every other statement the fault suite runs, so
// that a run on a PostgreSQL-dialect database differs from one on GoogleSQL
// only in its spelling.

type columnType int

const (
	text columnType = iota
	integer
	boolean
	// commitTimestamp is a timestamp column that accepts
	// spanner.CommitTimestamp.
	commitTimestamp
)

type column struct {
	name string
	typ  columnType
}

type table struct {
	name    string
	columns []column
	key     []string
}

var countersColumns = []column{{"name", text}, {"value", integer}}

// writesColumns: the key includes the commit timestamp so that an operation
// committed twice is two rows, which the checker then reports.
var writesColumns = []column{
	{"op_id", text},
	{"committed_at", commitTimestamp},
	{"name", text},
	{"sem", boolean},
	{"token", integer},
	{"holder", text},
	{"prev", integer},
	{"value", integer},
}

var resourceTables = []table{
	{name: CountersTable, columns: countersColumns, key: []string{"name"}},
	{name: WritesTable, columns: writesColumns, key: []string{"op_id", "committed_at"}},
}

func columnNames(cs []column) []string {
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = c.name
	}
	return names
}

// Spelling is the fault suite's DDL and SQL in one dialect. Every name it
// uses is lower case and unquoted, which means the same in both.
type Spelling struct {
	dialect lease.Dialect
}

// In returns the suite's spelling for a database of dialect d; the zero
// Dialect is GoogleSQL.
func In(d lease.Dialect) Spelling {
	if d == "" {
		d = lease.GoogleSQL
	}
	return Spelling{dialect: d}
}

// Dialect is the dialect s spells.
func (s Spelling) Dialect() lease.Dialect { return s.dialect }

func (s Spelling) pg() bool { return s.dialect == lease.PostgreSQL }

// DDL creates everything a run's database needs: the lock table (Table)
// and the resource tables.
func (s Spelling) DDL() []string {
	ddl := s.dialect.DDL(Table)
	for _, t := range resourceTables {
		ddl = append(ddl, s.createTable(t))
	}
	return ddl
}

func (s Spelling) createTable(t table) string {
	var b strings.Builder
	fmt.Fprintf(&b, "CREATE TABLE %s (\n", t.name)
	for i, c := range t.columns {
		if i > 0 {
			b.WriteString(",\n")
		}
		fmt.Fprintf(&b, "\t%s %s", c.name, s.columnType(c.typ))
	}
	key := strings.Join(t.key, ", ")
	if s.pg() {
		fmt.Fprintf(&b, ",\n\tPRIMARY KEY (%s)\n)", key)
	} else {
		fmt.Fprintf(&b, "\n) PRIMARY KEY (%s)", key)
	}
	return b.String()
}

// columnType spells a NOT NULL column of type t.
func (s Spelling) columnType(t columnType) string {
	var googleSQL, postgreSQL string
	switch t {
	case text:
		googleSQL, postgreSQL = "STRING(MAX) NOT NULL", "varchar NOT NULL"
	case integer:
		googleSQL, postgreSQL = "INT64 NOT NULL", "bigint NOT NULL"
	case boolean:
		googleSQL, postgreSQL = "BOOL NOT NULL", "boolean NOT NULL"
	case commitTimestamp:
		googleSQL, postgreSQL = "TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true)", "spanner.commit_timestamp NOT NULL"
	default:
		panic(fmt.Sprintf("record: unknown column type %d", t))
	}
	if s.pg() {
		return postgreSQL
	}
	return googleSQL
}

// Writes reads every row of WritesTable, in the columns of Write.
func (s Spelling) Writes() spanner.Statement {
	return spanner.NewStatement("SELECT " + strings.Join(WritesColumns, ", ") + " FROM " + WritesTable)
}

// Counters reads every counter: its name and value.
func (s Spelling) Counters() spanner.Statement {
	return spanner.NewStatement("SELECT " + strings.Join(columnNames(countersColumns), ", ") + " FROM " + CountersTable)
}

// Now reads Spanner's clock, to compare with commit timestamps.
func (s Spelling) Now() spanner.Statement {
	if s.pg() {
		return spanner.NewStatement("SELECT CURRENT_TIMESTAMP")
	}
	return spanner.NewStatement("SELECT CURRENT_TIMESTAMP()")
}

// RivalWrite finds a write to name by another token than token committed
// after since: one row, or none.
func (s Spelling) RivalWrite(name string, token int64, since time.Time) spanner.Statement {
	st := spanner.NewStatement("")
	st.SQL = "SELECT 1 FROM " + WritesTable +
		" WHERE name = " + s.bind(&st, "name", name) +
		" AND token <> " + s.bind(&st, "token", token) +
		" AND committed_at > " + s.bind(&st, "since", since) +
		" LIMIT 1"
	return st
}

// bind adds a parameter to st and returns its placeholder: @name in
// GoogleSQL; in PostgreSQL, which numbers them, $n bound as pn.
func (s Spelling) bind(st *spanner.Statement, name string, v any) string {
	if s.pg() {
		n := strconv.Itoa(len(st.Params) + 1)
		st.Params["p"+n] = v
		return "$" + n
	}
	st.Params[name] = v
	return "@" + name
}
