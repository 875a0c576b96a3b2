package provider

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

func ddlOutput(args string) string {
	return requiredProviders + fmt.Sprintf("output \"ddl\" {\n  value = provider::spannerlock::ddl(%s)\n}\n", args)
}

// statements is a check that a list output is exactly stmts.
func statements(stmts []string) knownvalue.Check {
	var want []knownvalue.Check
	for _, stmt := range stmts {
		want = append(want, knownvalue.StringExact(stmt))
	}
	return knownvalue.ListExact(want)
}

// The function returns the DDL of the dialect it is given, spelled as
// google_spanner_database's database_dialect, in any letter case.
func TestAccDDLFunction(t *testing.T) {
	accDatabase(t) // skips without TF_ACC; the function itself reads no database
	eachDialect(t, locktable.Dialects, func(t *testing.T, d locktable.Dialect) {
		want := statements(d.DDL("Locks"))
		resource.Test(t, resource.TestCase{
			TerraformVersionChecks:   requireTerraform(tfversion.Version1_8_0),
			ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
			Steps: []resource.TestStep{
				{
					Config:            ddlOutput(fmt.Sprintf(`"Locks", %q`, d)),
					ConfigStateChecks: []statecheck.StateCheck{statecheck.ExpectKnownOutputValue("ddl", want)},
				},
				{
					Config:            ddlOutput(fmt.Sprintf(`"Locks", %q`, strings.ToLower(string(d)))),
					ConfigStateChecks: []statecheck.StateCheck{statecheck.ExpectKnownOutputValue("ddl", want)},
				},
			},
		})
	})
}

func TestAccDDLFunction_defaultAndErrors(t *testing.T) {
	accDatabase(t)
	resource.ParallelTest(t, resource.TestCase{
		TerraformVersionChecks:   requireTerraform(tfversion.Version1_8_0),
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config:            ddlOutput(`"locks"`),
				ConfigStateChecks: []statecheck.StateCheck{statecheck.ExpectKnownOutputValue("ddl", statements(lease.DDL("locks")))},
			},
			{
				Config:      ddlOutput(`"2locks"`),
				ExpectError: diagnostic("Invalid function argument", `Table name "2locks" must start with a letter (A-Z or a-z: ASCII only)`),
			},
			{
				// PostgreSQL would truncate the name of its sessions table.
				Config: ddlOutput(fmt.Sprintf(`"%s", "POSTGRESQL"`, strings.Repeat("a", 55))),
				ExpectError: diagnostic("Invalid function argument", "is 55 characters long; in a PostgreSQL-dialect database the limit is 54",
					"keeps only the first 63 characters"),
			},
			{
				Config:      ddlOutput(`"pg_locks", "POSTGRESQL"`),
				ExpectError: diagnostic("Invalid function argument", `Table name "pg_locks" starts with "pg_"`),
			},
			{
				// GoogleSQL has neither limit.
				Config: ddlOutput(`"pg_locks"`),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownOutputValue("ddl", statements(lease.DDL("pg_locks"))),
				},
			},
			{
				Config:      ddlOutput(`"locks", "MYSQL"`),
				ExpectError: diagnostic("Invalid function argument", `Dialect "MYSQL" is not one of "GOOGLE_STANDARD_SQL" and "POSTGRESQL"`),
			},
			{
				Config:      ddlOutput(`"locks", "GOOGLE_STANDARD_SQL", "POSTGRESQL"`),
				ExpectError: diagnostic("Invalid function argument", "At most one dialect may be given, got 2."),
			},
		},
	})
}

func TestDDLStatements(t *testing.T) {
	for _, c := range []struct {
		dialects []string
		want     []string
	}{
		{nil, lease.DDL("locks")},
		{[]string{"GOOGLE_STANDARD_SQL"}, lease.DDL("locks")},
		{[]string{"google_standard_sql"}, lease.DDL("locks")},
		{[]string{"POSTGRESQL"}, lease.PostgreSQL.DDL("locks")},
		{[]string{"PostgreSQL"}, lease.PostgreSQL.DDL("locks")},
	} {
		got, _, err := ddlStatements("locks", c.dialects)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("ddl(locks, %q) = %q, %v; want %q", c.dialects, got, err, c.want)
		}
	}
	if got, _, _ := ddlStatements("locks", []string{"POSTGRESQL"}); !strings.HasPrefix(got[0], `CREATE TABLE "locks" (`) {
		t.Errorf("ddl(locks, POSTGRESQL) starts %q; want PostgreSQL DDL", got[0])
	}
	for _, c := range []struct {
		table    string
		dialects []string
		arg      int64
		want     string
	}{
		{"", nil, 0, "table name is empty"},
		{"pg_locks", []string{"POSTGRESQL"}, 0, `starts with "pg_"`},
		{"locks", []string{""}, 1, "is not one of"},
		{"locks", []string{"GOOGLE_STANDARD_SQL", "GOOGLE_STANDARD_SQL"}, 2, "at most one dialect may be given"},
	} {
		_, arg, err := ddlStatements(c.table, c.dialects)
		if err == nil || arg != c.arg || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ddl(%q, %q): argument %d, %v; want argument %d at fault, an error saying %q", c.table, c.dialects, arg, err, c.arg, c.want)
		}
	}
}

// Terraform ends a function's error with a period; the provider's message
// must not bring one of its own.
func TestAccDDLFunction_errorsEndInOnePeriod(t *testing.T) {
	t.Parallel()
	accDatabase(t)
	tf := newTerraformCLI(t)
	ctx := cliContext(t)
	tf.require(ctx, tfversion.Version1_8_0)
	for _, args := range []string{`"2locks"`, `"locks", "MYSQL"`, `"locks", "POSTGRESQL", "POSTGRESQL"`, `"pg_locks", "POSTGRESQL"`} {
		tf.write(ddlOutput(args))
		r := tf.run(ctx, "plan", "-json").failed(t)
		for _, d := range r.diagnostics {
			if d.Severity == "error" && (strings.Contains(d.Detail, "..") || !strings.HasSuffix(d.Detail, ".")) {
				t.Errorf("ddl(%s): %q; want one sentence ending in one period", args, d.Detail)
			}
		}
		r.has(t, "error", "Invalid function argument")
	}
}

// The documented example is valid, and gives the DDL of each dialect.
func TestAccDDLFunction_example(t *testing.T) {
	accDatabase(t)
	example, err := os.ReadFile(filepath.Join("..", "..", "examples", "functions", "ddl", "function.tf"))
	if err != nil {
		t.Fatal(err)
	}
	resource.ParallelTest(t, resource.TestCase{
		TerraformVersionChecks:   requireTerraform(tfversion.Version1_8_0),
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			Config: string(example),
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownOutputValue("lock_table_ddl", statements(lease.DDL("locks"))),
				statecheck.ExpectKnownOutputValue("lock_table_ddl_postgresql", statements(locktable.PostgreSQL.DDL("locks"))),
			},
		}},
	})
}
