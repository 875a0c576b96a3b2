package provider

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
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

func semaphoreID(db, table, name string) string {
	return tableID(db, table) + "/semaphores/" + name
}

// Semaphore names may contain any character, "/" included, so an import ID
// is split at its first "/semaphores/" after the table, and everything after
// that is the name.
var (
	fullSemaphoreID = regexp.MustCompile(`(?s)^(projects/[^/]+/instances/[^/]+/databases/[^/]+)/tables/([^/]+)/semaphores/(.+)$`)
	bareSemaphoreID = regexp.MustCompile(`(?s)^([^/]+)/semaphores/(.+)$`)
)

// parseSemaphoreImportID accepts a semaphore's full ID, or T/semaphores/N
// for the provider's database (defaultDB, "" when there is none).
func parseSemaphoreImportID(id, defaultDB string) (db, table, name string, err error) {
	const form = "projects/P/instances/I/databases/D/tables/T/semaphores/N, or T/semaphores/N to use the provider's database"
	if m := fullSemaphoreID.FindStringSubmatch(id); m != nil {
		db, table, name = m[1], m[2], m[3]
	} else if m := bareSemaphoreID.FindStringSubmatch(id); m != nil {
		if defaultDB == "" {
			return "", "", "", fmt.Errorf("import ID %q has no database, and the provider has none: use %s", id, form)
		}
		db, table, name = defaultDB, m[1], m[2]
	} else {
		return "", "", "", fmt.Errorf("import ID %q must be %s", id, form)
	}
	if err := locktable.ValidateTableName(table); err != nil {
		return "", "", "", fmt.Errorf("import ID %q: %w", id, err)
	}
	if err := lease.ValidateName(name); err != nil {
		return "", "", "", fmt.Errorf("import ID %q: %w", id, err)
	}
	return db, table, name, nil
}
