package locktable

import (
	"fmt"
	"strings"
)

// DDL returns the statements that create the named lock table at the latest
// version, without cleanup. It panics if table is not a valid name (see
// ValidateTableName), like regexp.MustCompile: table names are constants in
// callers.
func DDL(table string) []string {
	if err := ValidateTableName(table); err != nil {
		panic("locktable: " + err.Error())
	}
	return CreateDDL(table, Options{})
}

// CreateDDL returns the statements that create the named lock table at the
// latest version with the given options.
func CreateDDL(table string, o Options) []string {
	s := definition(table, Latest, o.CleanupAfter > 0)
	stmts := make([]string, 0, len(s.Tables)+1)
	for _, t := range s.Tables {
		stmts = append(stmts, createStatement(t))
	}
	return append(stmts, policyStatements(table, 0, false, o.CleanupAfter)...)
}

// DDLAt returns the statements that create the named lock table as it was at
// an older schema version, to test and demonstrate migrations.
func DDLAt(table string, version int) []string {
	s := Definition(table, version)
	stmts := make([]string, 0, len(s.Tables))
	for _, t := range s.Tables {
		stmts = append(stmts, createStatement(t))
	}
	return stmts
}

// DropDDL returns the statements that drop the lock table and its companions,
// children first.
func DropDDL(table string) []string {
	s := Definition(table, Latest)
	stmts := make([]string, 0, len(s.Tables))
	for i := len(s.Tables) - 1; i >= 0; i-- {
		stmts = append(stmts, "DROP TABLE "+Quote(s.Tables[i].Name))
	}
	return stmts
}

func createStatement(t Table) string {
	var b strings.Builder
	fmt.Fprintf(&b, "CREATE TABLE %s (\n", Quote(t.Name))
	for _, c := range t.Columns {
		fmt.Fprintf(&b, "  %s,\n", columnDefinition(c))
	}
	keys := make([]string, len(t.Key))
	for i, k := range t.Key {
		keys[i] = Quote(k)
	}
	fmt.Fprintf(&b, ") PRIMARY KEY (%s)", strings.Join(keys, ", "))
	if t.Parent != "" {
		fmt.Fprintf(&b, ",\n  INTERLEAVE IN PARENT %s ON DELETE CASCADE", Quote(t.Parent))
	}
	if t.RowDeletionPolicy != "" {
		fmt.Fprintf(&b, ",\n  ROW DELETION POLICY (%s)", t.RowDeletionPolicy)
	}
	return b.String()
}

func columnDefinition(c Column) string {
	def := Quote(c.Name) + " " + c.Type
	if c.NotNull {
		def += " NOT NULL"
	}
	if c.Default != "" {
		def += " DEFAULT (" + c.Default + ")"
	}
	if c.CommitTimestamp {
		def += " OPTIONS (allow_commit_timestamp = true)"
	}
	return def
}

func addColumnStatement(table string, c Column) string {
	return fmt.Sprintf("ALTER TABLE %s ADD COLUMN %s", Quote(table), columnDefinition(c))
}

func commitTimestampStatement(table string, c Column) string {
	value := "null"
	if c.CommitTimestamp {
		value = "true"
	}
	return fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s SET OPTIONS (allow_commit_timestamp = %s)", Quote(table), Quote(c.Name), value)
}

func defaultStatement(table string, c Column) string {
	if c.Default == "" {
		return fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s DROP DEFAULT", Quote(table), Quote(c.Name))
	}
	return fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s SET DEFAULT (%s)", Quote(table), Quote(c.Name), c.Default)
}

// relaxNotNullStatement drops a NOT NULL the schema does not have; that only
// widens what the column accepts, so it is safe on a table with rows.
func relaxNotNullStatement(table string, c Column) string {
	return fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s %s", Quote(table), Quote(c.Name), c.Type)
}

// Quote makes an identifier safe to splice into DDL and SQL. Names are
// validated before they get here, so it guards reserved words, not injection.
func Quote(ident string) string {
	return "`" + ident + "`"
}
