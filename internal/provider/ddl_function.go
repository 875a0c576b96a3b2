package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/function"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
)

var _ function.Function = ddlFunction{}

// ddlFunction is provider::spannerlock::ddl: the statements that create a
// lock table in either dialect, for configurations that own the database's
// schema elsewhere, such as the ddl of a google_spanner_database.
type ddlFunction struct{}

func newDDLFunction() function.Function { return ddlFunction{} }

func (ddlFunction) Metadata(_ context.Context, _ function.MetadataRequest, resp *function.MetadataResponse) {
	resp.Name = "ddl"
}

func (ddlFunction) Definition(_ context.Context, _ function.DefinitionRequest, resp *function.DefinitionResponse) {
	resp.Definition = function.Definition{
		Summary: "The DDL statements that create a lock table",
		MarkdownDescription: "Returns the statements that create the lock table `table` and its companion tables at the " +
			"latest schema version, in the database's dialect, for a database whose schema is managed elsewhere: put them " +
			"in the `ddl` list of a `google_spanner_database`, or in a migration tool. They are exactly what the Go " +
			"package's `lease.DDL(table)` returns, or `lease.PostgreSQL.DDL(table)` for `\"POSTGRESQL\"`. The table has " +
			"no `cleanup_after`.",
		Parameters: []function.Parameter{
			function.StringParameter{
				Name: "table",
				MarkdownDescription: "Name of the lock table: an ASCII letter, then ASCII letters, digits and underscores, at most " +
					fmt.Sprint(locktable.MaxTableNameLength) + " characters; for `\"POSTGRESQL\"` at most " +
					fmt.Sprint(locktable.MaxPostgreSQLTableNameLength) + " and not starting with `pg_`. Applications pass the same name to `lease.NewClient`.",
			},
		},
		VariadicParameter: function.StringParameter{
			Name: "dialect",
			MarkdownDescription: "Optional: the database's dialect, `\"GOOGLE_STANDARD_SQL\"` (the default) or `\"POSTGRESQL\"`, " +
				"spelled as `google_spanner_database`'s `database_dialect`. The PostgreSQL statements quote every name, so " +
				"the table keeps its letter case.",
		},
		Return: function.ListReturn{ElementType: types.StringType},
	}
}

func (ddlFunction) Run(ctx context.Context, req function.RunRequest, resp *function.RunResponse) {
	var table string
	var dialects []string
	if resp.Error = req.Arguments.Get(ctx, &table, &dialects); resp.Error != nil {
		return
	}
	stmts, arg, err := ddlStatements(table, dialects)
	if err != nil {
		// Terraform ends the message with a period of its own.
		resp.Error = function.NewArgumentFuncError(arg, capitalize(err.Error()))
		return
	}
	resp.Error = resp.Result.Set(ctx, stmts)
}

// ddlStatements is the function's work; on error, arg is the position of
// the argument at fault. The DDL is what lease.DDL and lease.PostgreSQL.DDL
// return.
func ddlStatements(table string, dialects []string) (stmts []string, arg int64, err error) {
	d := locktable.GoogleSQL
	switch len(dialects) {
	case 0:
	case 1:
		if d, err = locktable.ParseDialect(dialects[0]); err != nil {
			return nil, 1, err
		}
	default:
		return nil, 2, fmt.Errorf("at most one dialect may be given, got %d", len(dialects))
	}
	if err := d.ValidateTableName(table); err != nil {
		return nil, 0, err
	}
	return d.DDL(table), 0, nil
}
