package locktable

import (
	"context"
	"fmt"
	"strings"

	"cloud.google.com/go/spanner"
)

// The queries are valid in both dialects once the spelling fills in the
// default schema's name and the test for a table name: lower-case unquoted
// names, COALESCE and single-quoted literals mean the same to each.

// readSchema loads, in one consistent snapshot, the live shape of the tables
// named in want. Table names match case-insensitively, as Spanner keeps them
// unique; the live spelling is kept so diffs and fixes name the real table.
func (d Dialect) readSchema(ctx context.Context, db *spanner.Client, want Schema) (Schema, error) {
	sp := d.spelling()
	names := make([]string, len(want.Tables))
	for i, t := range want.Tables {
		names[i] = strings.ToLower(t.Name)
	}
	txn := db.ReadOnlyTransaction()
	defer txn.Close()
	query := func(sql string, each func(*spanner.Row) error) error {
		sql = strings.NewReplacer("{schema}", sp.schemaName(), "{table in names}", sp.nameIn("LOWER(table_name)")).Replace(sql)
		return txn.Query(ctx, spanner.Statement{SQL: sql, Params: sp.nameParams(names)}).Do(each)
	}

	byName := map[string]*Table{}
	err := query(`
		SELECT table_name, COALESCE(parent_table_name, ''), COALESCE(row_deletion_policy_expression, '')
		FROM information_schema.tables
		WHERE table_schema = '{schema}' AND table_type = 'BASE TABLE' AND {table in names}`,
		func(r *spanner.Row) error {
			var t Table
			var policy string
			if err := r.Columns(&t.Name, &t.Parent, &policy); err != nil {
				return err
			}
			t.RowDeletion = sp.parsePolicy(policy)
			byName[strings.ToLower(t.Name)] = &t
			return nil
		})
	if err != nil {
		return Schema{}, err
	}
	err = query(`
		SELECT table_name, column_name, spanner_type, is_nullable = 'NO', COALESCE(column_default, '')
		FROM information_schema.columns
		WHERE table_schema = '{schema}' AND {table in names}
		ORDER BY table_name, ordinal_position`,
		func(r *spanner.Row) error {
			var table, typ, def string
			var c Column
			if err := r.Columns(&table, &c.Name, &typ, &c.NotNull, &def); err != nil {
				return err
			}
			c.Type, c.CommitTimestamp = sp.parseType(typ)
			c.Default = parseDefault(sp, def)
			if t := byName[strings.ToLower(table)]; t != nil {
				t.Columns = append(t.Columns, c)
			}
			return nil
		})
	if err != nil {
		return Schema{}, err
	}
	if sp.commitTimestampOptions() {
		err = query(`
			SELECT table_name, column_name
			FROM information_schema.column_options
			WHERE table_schema = '{schema}' AND {table in names}
			  AND option_name = 'allow_commit_timestamp' AND UPPER(option_value) = 'TRUE'`,
			func(r *spanner.Row) error {
				var table, column string
				if err := r.Columns(&table, &column); err != nil {
					return err
				}
				if t := byName[strings.ToLower(table)]; t != nil {
					for i := range t.Columns {
						if t.Columns[i].Name == column {
							t.Columns[i].CommitTimestamp = true
						}
					}
				}
				return nil
			})
		if err != nil {
			return Schema{}, err
		}
	}
	err = query(`
		SELECT table_name, column_name
		FROM information_schema.index_columns
		WHERE table_schema = '{schema}' AND index_type = 'PRIMARY_KEY' AND {table in names}
		ORDER BY table_name, ordinal_position`,
		func(r *spanner.Row) error {
			var table, column string
			if err := r.Columns(&table, &column); err != nil {
				return err
			}
			if t := byName[strings.ToLower(table)]; t != nil {
				t.Key = append(t.Key, column)
			}
			return nil
		})
	if err != nil {
		return Schema{}, err
	}

	// Report live tables under the definition's spelling so lookups by the
	// wanted name work; Spanner keeps the two spellings from coexisting.
	var s Schema
	for _, wt := range want.Tables {
		if t := byName[strings.ToLower(wt.Name)]; t != nil {
			lt := *t
			lt.Name, lt.LiveName = wt.Name, t.Name
			s.Tables = append(s.Tables, lt)
		}
	}
	return s, nil
}

// ExistingTables returns which of names are tables in db, as Spanner spells
// them; names match regardless of case, as Spanner keeps them unique. It
// reads db's dialect first (DatabaseDialect); Dialect.ExistingTables does not.
func ExistingTables(ctx context.Context, db *spanner.Client, names []string) ([]string, error) {
	d, err := DatabaseDialect(ctx, db)
	if err != nil {
		return nil, err
	}
	return d.ExistingTables(ctx, db, names)
}

// ExistingTables returns which of names are tables in db, a database of
// dialect d, as Spanner spells them; names match regardless of case, as
// Spanner keeps them unique.
func (d Dialect) ExistingTables(ctx context.Context, db *spanner.Client, names []string) ([]string, error) {
	sp := d.spelling()
	lower := make([]string, len(names))
	for i, n := range names {
		lower[i] = strings.ToLower(n)
	}
	var found []string
	err := db.Single().Query(ctx, spanner.Statement{
		SQL: fmt.Sprintf(`SELECT table_name FROM information_schema.tables
			WHERE table_schema = '%s' AND table_type = 'BASE TABLE' AND %s
			ORDER BY table_name`, sp.schemaName(), sp.nameIn("LOWER(table_name)")),
		Params: sp.nameParams(lower),
	}).Do(func(r *spanner.Row) error {
		var name string
		if err := r.Column(0, &name); err != nil {
			return err
		}
		found = append(found, name)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing tables: %w", err)
	}
	return found, nil
}

// Empty reports whether the lock table named table, in db, a database of
// dialect d, holds no row. Then no lease in it can be live: a lease is a
// row of it, or of its permits table, whose rows are interleaved in its
// rows. It is for callers that cannot read leases in d
// (lease.Client.Holders says which are live).
func (d Dialect) Empty(ctx context.Context, db *spanner.Client, table string) (bool, error) {
	if err := ValidateTableName(table); err != nil {
		return false, err
	}
	empty := true
	err := db.Single().Query(ctx, spanner.Statement{SQL: "SELECT 1 FROM " + d.QuoteTable(table) + " LIMIT 1"}).Do(func(*spanner.Row) error {
		empty = false
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("reading table %s: %w", table, err)
	}
	return empty, nil
}
