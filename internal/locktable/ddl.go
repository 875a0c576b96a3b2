package locktable

import "fmt"

// DDL returns the GoogleSQL statements that create the named lock table at
// the latest version, without cleanup: GoogleSQL.DDL(table).
func DDL(table string) []string { return GoogleSQL.DDL(table) }

// CreateDDL returns the GoogleSQL statements that create the named lock
// table at the latest version with the given options: GoogleSQL.CreateDDL.
func CreateDDL(table string, o Options) []string { return GoogleSQL.CreateDDL(table, o) }

// DDLAt returns the GoogleSQL statements that create the named lock table
// as it was at an older schema version: GoogleSQL.DDLAt.
func DDLAt(table string, version int) []string { return GoogleSQL.DDLAt(table, version) }

// DropDDL returns the GoogleSQL statements that drop the lock table and its
// companions: GoogleSQL.DropDDL.
func DropDDL(table string) []string { return GoogleSQL.DropDDL(table) }

// Quote makes ident a GoogleSQL identifier: GoogleSQL.Quote.
func Quote(ident string) string { return GoogleSQL.Quote(ident) }

// DDL returns the statements, in dialect d, that create the named lock table
// at the latest version, without cleanup. It panics if table is not a valid
// name in d (see Dialect.ValidateTableName), like regexp.MustCompile: table
// names are constants in callers.
func (d Dialect) DDL(table string) []string {
	if err := d.ValidateTableName(table); err != nil {
		panic("locktable: " + err.Error())
	}
	return d.CreateDDL(table, Options{})
}

// CreateDDL returns the statements, in dialect d, that create the named lock
// table at the latest version with the given options.
func (d Dialect) CreateDDL(table string, o Options) []string {
	sp := d.spelling()
	s := definition(table, Latest, o.CleanupAfter > 0)
	stmts := make([]string, 0, len(s.Tables)+1)
	for _, t := range s.Tables {
		stmts = append(stmts, sp.createTable(t))
	}
	return append(stmts, policyStatements(sp, table, 0, false, o.CleanupAfter)...)
}

// DDLAt returns the statements, in dialect d, that create the named lock
// table as it was at an older schema version, to test and demonstrate
// migrations.
func (d Dialect) DDLAt(table string, version int) []string {
	sp := d.spelling()
	s := Definition(table, version)
	stmts := make([]string, 0, len(s.Tables))
	for _, t := range s.Tables {
		stmts = append(stmts, sp.createTable(t))
	}
	return stmts
}

// DropDDL returns the statements, in dialect d, that drop the lock table and
// its companions, children first.
func (d Dialect) DropDDL(table string) []string {
	sp := d.spelling()
	s := Definition(table, Latest)
	stmts := make([]string, 0, len(s.Tables))
	for i := len(s.Tables) - 1; i >= 0; i-- {
		stmts = append(stmts, dropTableStatement(sp, s.Tables[i].Name))
	}
	return stmts
}

// The statements both dialects write alike, but for quoting and types.

func dropTableStatement(sp spelling, table string) string {
	return "DROP TABLE " + sp.quote(table)
}

func addColumnStatement(sp spelling, table string, c Column) string {
	return fmt.Sprintf("ALTER TABLE %s ADD COLUMN %s", sp.quote(table), sp.columnDefinition(c))
}

func defaultStatement(sp spelling, table string, c Column) string {
	if c.Default.Value == NoDefault {
		return fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s DROP DEFAULT", sp.quote(table), sp.quote(c.Name))
	}
	return fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s SET DEFAULT (%s)", sp.quote(table), sp.quote(c.Name), defaultExpr(sp, c.Default))
}
