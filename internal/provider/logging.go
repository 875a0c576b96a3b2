package provider

import (
	"context"
	"strings"

	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
)

// The provider's tflog subsystems. TF_LOG_PROVIDER sets their level with the
// rest of the provider's; TF_LOG_PROVIDER_SPANNERLOCK_SPANNER and
// TF_LOG_PROVIDER_SPANNERLOCK_SCHEMA set each one's alone.
const (
	// logSpanner is what the provider asks of Spanner: connections, database
	// dialects, and every failed RPC attempt with its cause (the Spanner
	// client retries some, so one request may log several).
	logSpanner = "spanner"
	// logSchema is what the provider finds in and does to lock tables:
	// inspections and their findings, migrations, and each DDL statement.
	logSchema = "schema"
)

// Fields every subsystem entry carries when it concerns one database or table.
const (
	logFieldDatabase = "spannerlock_database"
	logFieldTable    = "spannerlock_table"
)

// withLogging returns ctx with the provider's log subsystems, each carrying
// the database and table (when not "") the work is about.
func withLogging(ctx context.Context, db, table string) context.Context {
	for _, s := range []string{logSpanner, logSchema} {
		ctx = tflog.NewSubsystem(ctx, s, tflog.WithRootFields(),
			tflog.WithLevelFromEnv("TF_LOG_PROVIDER_SPANNERLOCK", strings.ToUpper(s)))
		ctx = tflog.SubsystemSetField(ctx, s, logFieldDatabase, db)
		if table != "" {
			ctx = tflog.SubsystemSetField(ctx, s, logFieldTable, table)
		}
	}
	return ctx
}

// logInspection records what an inspection found: one entry for the table,
// and one per difference from the latest schema version.
func logInspection(ctx context.Context, ins locktable.Inspection) {
	tflog.SubsystemDebug(ctx, logSchema, "Inspected table", map[string]any{
		"dialect": string(ins.Dialect), "exists": ins.Exists, "schema_version": ins.Version, "differences": len(ins.Diffs),
		"cleanup_after": locktable.FormatCleanupAfter(ins.CleanupAfter),
	})
	for _, d := range ins.Diffs {
		tflog.SubsystemDebug(ctx, logSchema, "Table differs from the latest schema version", map[string]any{
			"problem": d.Problem, "repair": d.Fix, "advice": d.Advice,
		})
	}
}
