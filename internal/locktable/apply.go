package locktable

import (
	"context"
	"fmt"
	"strings"

	database "cloud.google.com/go/spanner/admin/database/apiv1"
	"cloud.google.com/go/spanner/admin/database/apiv1/databasepb"
)

// Apply runs DDL statements against db and waits for the schema change to
// finish or ctx to end. Spanner applies the statements in order; after a
// failure the earlier ones stay applied, so plans are ordered to be safe to
// stop anywhere.
func Apply(ctx context.Context, admin *database.DatabaseAdminClient, db string, stmts []string) error {
	if len(stmts) == 0 {
		return nil
	}
	op, err := admin.UpdateDatabaseDdl(ctx, &databasepb.UpdateDatabaseDdlRequest{Database: db, Statements: stmts})
	if err == nil {
		err = op.Wait(ctx)
	}
	if err != nil {
		return fmt.Errorf("applying DDL to %s:\n  %s\n: %w", db, strings.Join(stmts, ";\n  "), err)
	}
	return nil
}
