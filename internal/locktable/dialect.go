package locktable

import (
	"context"
	"fmt"
	"strings"

	"cloud.google.com/go/spanner"
)

// Dialect is a Spanner database's SQL dialect, spelled as Spanner's API
// spells it (databasepb.DatabaseDialect). A database's dialect is chosen when
// it is created and never changes. Its methods render the one schema
// definition in the dialect (DDL, CreateDDL, DDLAt, DropDDL), name its tables
// in the dialect's SQL (Quote, QuoteTable, QuotePermitsTable,
// QuoteSessionsTable, QuoteWaitersTable) and read a live table in it (Inspect, ExistingTables).
// The zero Dialect is GoogleSQL, the dialect of every database created
// before dialects existed.
type Dialect string

const (
	GoogleSQL  Dialect = "GOOGLE_STANDARD_SQL"
	PostgreSQL Dialect = "POSTGRESQL"
)

// Dialects lists every dialect, GoogleSQL first.
var Dialects = []Dialect{GoogleSQL, PostgreSQL}

// ParseDialect reads a dialect as Spanner's API spells it, in any letter case.
func ParseDialect(s string) (Dialect, error) {
	for _, d := range Dialects {
		if strings.EqualFold(s, string(d)) {
			return d, nil
		}
	}
	return "", fmt.Errorf("dialect %q is not one of %q and %q", s, GoogleSQL, PostgreSQL)
}

// dialectQuery is valid SQL in both dialects: unquoted lower-case names and a
// single-quoted literal mean the same to each.
const dialectQuery = `SELECT option_value FROM information_schema.database_options WHERE option_name = 'database_dialect'`

// DatabaseDialect reads db's dialect from information_schema.database_options,
// in one query. The admin API's GetDatabase reports it too, but the emulator
// answers DATABASE_DIALECT_UNSPECIFIED there, and reading it needs more
// permissions than reading the database does.
func DatabaseDialect(ctx context.Context, db *spanner.Client) (Dialect, error) {
	var value string
	found := false
	err := db.Single().Query(ctx, spanner.Statement{SQL: dialectQuery}).Do(func(r *spanner.Row) error {
		found = true
		return r.Column(0, &value)
	})
	if err != nil {
		return "", fmt.Errorf("reading the database dialect: %w", err)
	}
	if !found {
		// Databases from before dialects existed report no option, and
		// they are all GoogleSQL.
		return GoogleSQL, nil
	}
	d, err := ParseDialect(value)
	if err != nil {
		return "", fmt.Errorf("reading the database dialect: %w", err)
	}
	return d, nil
}

// spelling returns how d writes DDL and reads INFORMATION_SCHEMA. It panics
// on a Dialect that is neither GoogleSQL nor PostgreSQL: dialects come from
// ParseDialect or DatabaseDialect, which return no other.
func (d Dialect) spelling() spelling {
	switch d {
	case GoogleSQL, "":
		return googleSQL{}
	case PostgreSQL:
		return postgreSQL{}
	}
	panic(fmt.Sprintf("locktable: unknown dialect %q (want %q or %q)", string(d), GoogleSQL, PostgreSQL))
}

// Quote makes ident an identifier of d's SQL that means exactly ident:
// `ident` in GoogleSQL, "ident" in PostgreSQL, whose unquoted identifiers
// fold to lower case. Table names are validated (ValidateTableName) before
// they get here, so quoting guards letter case and reserved words, not
// injection.
func (d Dialect) Quote(ident string) string { return d.spelling().quote(ident) }

// QuoteTable returns the lock table's name as d's SQL must write it.
func (d Dialect) QuoteTable(table string) string { return d.Quote(table) }

// QuotePermitsTable returns the name of the lock table's permits table
// (PermitsTable) as d's SQL must write it.
func (d Dialect) QuotePermitsTable(table string) string { return d.Quote(PermitsTable(table)) }

// QuoteWaitersTable returns the name of the lock table's waiters table
// quoted for SQL in the dialect.
func (d Dialect) QuoteWaitersTable(table string) string { return d.Quote(WaitersTable(table)) }

// QuoteSessionsTable returns the name of the lock table's sessions table
// (SessionsTable) as d's SQL must write it.
func (d Dialect) QuoteSessionsTable(table string) string { return d.Quote(SessionsTable(table)) }
