package provider

import (
	"fmt"
	"strings"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
)

// tableID extends Spanner's resource path convention to tables, so an ID
// names the table unambiguously across projects.
func tableID(db, table string) string {
	return db + "/tables/" + table
}

func leaseID(db, table, name string) string {
	return tableID(db, table) + "/leases/" + name
}

// parseTableImportID accepts a table's full ID, or its bare name for the
// provider's database (defaultDB, "" when there is none).
func parseTableImportID(id, defaultDB string) (db, table string, err error) {
	const form = "projects/P/instances/I/databases/D/tables/T, or T alone to use the provider's database"
	if !strings.Contains(id, "/") {
		if defaultDB == "" {
			return "", "", fmt.Errorf("import ID %q is a bare table name, but the provider has no database: use %s", id, form)
		}
		db, table = defaultDB, id
	} else {
		var ok bool
		db, table, ok = strings.Cut(id, "/tables/")
		if !ok || !databasePattern.MatchString(db) || strings.Contains(table, "/") {
			return "", "", fmt.Errorf("import ID %q must be %s", id, form)
		}
	}
	if err := locktable.ValidateTableName(table); err != nil {
		return "", "", fmt.Errorf("import ID %q: %w", id, err)
	}
	return db, table, nil
}
