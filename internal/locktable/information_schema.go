package locktable

import (
	"context"
	"strings"

	"cloud.google.com/go/spanner"
)

// readSchema loads, in one consistent snapshot, the live shape of the tables
// named in want. Table names match case-insensitively, as Spanner resolves
// them; the live spelling is kept so diffs and fixes name the real table.
func readSchema(ctx context.Context, db *spanner.Client, want Schema) (Schema, error) {
	names := make([]string, len(want.Tables))
	for i, t := range want.Tables {
		names[i] = strings.ToLower(t.Name)
	}
	txn := db.ReadOnlyTransaction()
	defer txn.Close()

	byName := map[string]*Table{}
	err := query(ctx, txn, `
		SELECT TABLE_NAME, IFNULL(PARENT_TABLE_NAME, ''), IFNULL(ROW_DELETION_POLICY_EXPRESSION, '')
		FROM INFORMATION_SCHEMA.TABLES
		WHERE TABLE_SCHEMA = '' AND TABLE_TYPE = 'BASE TABLE' AND LOWER(TABLE_NAME) IN UNNEST(@names)`,
		names, func(r *spanner.Row) error {
			var t Table
			if err := r.Columns(&t.Name, &t.Parent, &t.RowDeletionPolicy); err != nil {
				return err
			}
			byName[strings.ToLower(t.Name)] = &t
			return nil
		})
	if err != nil {
		return Schema{}, err
	}
	err = query(ctx, txn, `
		SELECT TABLE_NAME, COLUMN_NAME, SPANNER_TYPE, IS_NULLABLE = 'NO', IFNULL(COLUMN_DEFAULT, '')
		FROM INFORMATION_SCHEMA.COLUMNS
		WHERE TABLE_SCHEMA = '' AND LOWER(TABLE_NAME) IN UNNEST(@names)
		ORDER BY TABLE_NAME, ORDINAL_POSITION`,
		names, func(r *spanner.Row) error {
			var table string
			var c Column
			if err := r.Columns(&table, &c.Name, &c.Type, &c.NotNull, &c.Default); err != nil {
				return err
			}
			if t := byName[strings.ToLower(table)]; t != nil {
				t.Columns = append(t.Columns, c)
			}
			return nil
		})
	if err != nil {
		return Schema{}, err
	}
	err = query(ctx, txn, `
		SELECT TABLE_NAME, COLUMN_NAME
		FROM INFORMATION_SCHEMA.COLUMN_OPTIONS
		WHERE TABLE_SCHEMA = '' AND LOWER(TABLE_NAME) IN UNNEST(@names)
		  AND OPTION_NAME = 'allow_commit_timestamp' AND UPPER(OPTION_VALUE) = 'TRUE'`,
		names, func(r *spanner.Row) error {
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
	err = query(ctx, txn, `
		SELECT TABLE_NAME, COLUMN_NAME
		FROM INFORMATION_SCHEMA.INDEX_COLUMNS
		WHERE TABLE_SCHEMA = '' AND INDEX_TYPE = 'PRIMARY_KEY' AND LOWER(TABLE_NAME) IN UNNEST(@names)
		ORDER BY TABLE_NAME, ORDINAL_POSITION`,
		names, func(r *spanner.Row) error {
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
	// wanted name work; Spanner treats the two spellings as one table.
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

func query(ctx context.Context, txn *spanner.ReadOnlyTransaction, sql string, names []string, each func(*spanner.Row) error) error {
	return txn.Query(ctx, spanner.Statement{SQL: sql, Params: map[string]any{"names": names}}).Do(each)
}
