package locktable

import (
	"context"
	"fmt"

	"cloud.google.com/go/spanner"
)

// LockTables inspects every top-level table of db, a database of dialect
// d, that could be a lock table, and returns those that satisfy some version
// of the definition (Inspection.Version > 0), in name order. A table that
// drifted so far that it satisfies none is not listed, nor are the permits
// and sessions tables of a lock table, which belong to it. It reads the
// schema once per table: it is for people and tools (terraform query).
func (d Dialect) LockTables(ctx context.Context, db *spanner.Client) ([]Inspection, error) {
	sp := d.spelling()
	var names []string
	err := db.Single().Query(ctx, spanner.Statement{
		SQL: fmt.Sprintf(`SELECT table_name FROM information_schema.tables
			WHERE table_schema = '%s' AND table_type = 'BASE TABLE' AND parent_table_name IS NULL
			ORDER BY table_name`, sp.schemaName()),
	}).Do(func(r *spanner.Row) error {
		var name string
		if err := r.Column(0, &name); err != nil {
			return err
		}
		names = append(names, name)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing tables: %w", err)
	}
	var tables []Inspection
	for _, name := range names {
		// Sessions tables are top-level too; they satisfy no version.
		if ValidateTableName(name) != nil {
			continue
		}
		ins, err := d.Inspect(ctx, db, name)
		if err != nil {
			return nil, err
		}
		if ins.Exists && ins.Version > 0 {
			tables = append(tables, ins)
		}
	}
	return tables, nil
}
