package provider

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

const tableAddress = "spannerlock_table.locks"

const day = 24 * time.Hour

// tableConfig is the provider block and a table named locks with attrs.
func tableConfig(providerBlock, attrs string) string {
	return providerBlock + `
resource "spannerlock_table" "locks" {
  name = "locks"
` + attrs + `}
`
}

func expectState(path string, v knownvalue.Check) statecheck.StateCheck {
	return statecheck.ExpectKnownValue(tableAddress, tfjsonpath.New(path), v)
}

var (
	emptyList   = knownvalue.ListExact([]knownvalue.Check{})
	latest      = knownvalue.Int64Exact(int64(locktable.Latest))
	unprotected = "  deletion_protection = false\n"
	// disposable is for tests that put rows in the table and are not about
	// what guards them: the table is dropped even if a lease is live.
	disposable = unprotected + "  force_destroy = true\n"
)

// widenHolderID changes holder_id behind Terraform's back in a way no
// additive statement undoes.
func widenHolderID(d locktable.Dialect, table string) string {
	return byDialect(d, "ALTER TABLE "+table+" ALTER COLUMN holder_id STRING(MAX)",
		"ALTER TABLE "+table+" ALTER COLUMN holder_id TYPE character varying")
}

// widenedHolderID is how a plan describes widenHolderID's change.
func widenedHolderID(d locktable.Dialect) string {
	return byDialect(d, "holder_id is STRING(MAX), expected STRING(1024)",
		"holder_id is character varying, expected character varying(1024)")
}

func destroyed(t *testing.T, sc *spanner.Client) resource.TestCheckFunc {
	return checkTable(t, sc, gone)
}

func TestAccTable_lifecycle(t *testing.T) {
	eachDialect(t, locktable.Dialects, testAccTableLifecycle)
}

func testAccTableLifecycle(t *testing.T, d locktable.Dialect) {
	db, prov := accDatabaseIn(t, d)
	sc := emulator.Client(t, db)
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             destroyed(t, sc),
		Steps: []resource.TestStep{
			{
				Config: tableConfig(prov, ""),
				ConfigStateChecks: []statecheck.StateCheck{
					expectState("id", knownvalue.StringExact(db+"/tables/locks")),
					expectState("name", knownvalue.StringExact("locks")),
					expectState("database", knownvalue.StringExact(db)),
					expectState("deletion_protection", knownvalue.Bool(true)),
					expectState("force_destroy", knownvalue.Bool(false)),
					expectState("cleanup_after", knownvalue.Null()),
					expectState("schema_version", latest),
					expectState("pending_ddl", emptyList),
				},
				Check: checkTable(t, sc, func(ins locktable.Inspection) error {
					if err := current(ins); err != nil {
						return err
					}
					if ins.Dialect != d {
						return fmt.Errorf("table created in a %s database inspects as %s", d, ins.Dialect)
					}
					if ins.CleanupAfter != 0 || ins.ClockSeeded {
						return fmt.Errorf("table without cleanup_after has cleanup %s, clock-seeded tokens %t", ins.CleanupAfter, ins.ClockSeeded)
					}
					return nil
				}),
			},
			{
				ResourceName:      tableAddress,
				ImportState:       true,
				ImportStateVerify: true,
				// What the creation ran; an import runs nothing.
				ImportStateVerifyIgnore: []string{"planned_ddl"},
			},
			{
				ResourceName:            tableAddress,
				ImportState:             true,
				ImportStateId:           "locks",
				ImportStateVerify:       true,
				ImportStateVerifyIgnore: []string{"planned_ddl"},
			},
			{
				ResourceName:    tableAddress,
				ImportState:     true,
				ImportStateKind: resource.ImportBlockWithID,
			},
			{
				Config: tableConfig(prov, unprotected+`  cleanup_after = "30d"`+"\n"),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(tableAddress, plancheck.ResourceActionUpdate),
						// DDL to run: unknown until apply, listed in a warning.
						plancheck.ExpectUnknownValue(tableAddress, tfjsonpath.New("pending_ddl")),
					},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					expectState("cleanup_after", knownvalue.StringExact("30d")),
					expectState("pending_ddl", emptyList),
				},
				Check: checkTable(t, sc, cleanupIs(30*day)),
			},
			{
				// An equal period spelled differently changes no DDL.
				Config: tableConfig(prov, unprotected+`  cleanup_after = "720h"`+"\n"),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(tableAddress, plancheck.ResourceActionUpdate),
						plancheck.ExpectKnownValue(tableAddress, tfjsonpath.New("pending_ddl"), emptyList),
					},
				},
				Check: checkTable(t, sc, cleanupIs(30*day)),
			},
			{
				Config: tableConfig(prov, unprotected+`  cleanup_after = "14d"`+"\n"),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(tableAddress, plancheck.ResourceActionUpdate),
					},
				},
				Check: checkTable(t, sc, cleanupIs(14*day)),
			},
			{
				Config: tableConfig(prov, unprotected),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(tableAddress, plancheck.ResourceActionUpdate),
					},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					expectState("cleanup_after", knownvalue.Null()),
				},
				// The clock seed stays: names whose rows were deleted must
				// still resume above their old tokens.
				Check: checkTable(t, sc, cleanupIs(0)),
			},
			{
				// Spanner resolves names regardless of case: replacing locks
				// with Locks would drop the table it then finds existing.
				Config: prov + `
resource "spannerlock_table" "locks" {
  name                = "Locks"
  deletion_protection = false
}
`,
				PlanOnly:    true,
				ExpectError: diagnostic("Table name differs only in letter case", `Keep name = "locks"`),
			},
		},
	})
}

// cleanupIs checks the live deletion policy; once cleanup was ever enabled,
// tokens of new names must start at the commit clock.
func cleanupIs(want time.Duration) func(locktable.Inspection) error {
	return func(ins locktable.Inspection) error {
		if err := current(ins); err != nil {
			return err
		}
		if ins.CleanupAfter != want || !ins.ClockSeeded {
			return fmt.Errorf("live cleanup %s, clock-seeded tokens %t; want %s and true", ins.CleanupAfter, ins.ClockSeeded, want)
		}
		return nil
	}
}

func TestAccTable_cleanupOnCreate(t *testing.T) {
	eachDialect(t, locktable.Dialects, func(t *testing.T, d locktable.Dialect) {
		db, prov := accDatabaseIn(t, d)
		sc := emulator.Client(t, db)
		resource.Test(t, resource.TestCase{
			PreCheck:                 func() { testAccPreCheck(t) },
			ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
			CheckDestroy:             destroyed(t, sc),
			Steps: []resource.TestStep{{
				// The post-apply plan must be empty: "720h" and the live 30-day
				// policy are the same period.
				Config: tableConfig(prov, unprotected+`  cleanup_after = "720h"
  timeouts {
    create = "2m"
  }
`),
				ConfigStateChecks: []statecheck.StateCheck{
					expectState("cleanup_after", knownvalue.StringExact("720h")),
					expectState("schema_version", latest),
				},
				Check: checkTable(t, sc, cleanupIs(30*day)),
			}},
		})
	})
}

func TestAccTable_importExisting(t *testing.T) {
	eachDialect(t, locktable.Dialects, testAccTableImportExisting)
}

func testAccTableImportExisting(t *testing.T, d locktable.Dialect) {
	db, prov := accDatabaseIn(t, d, d.DDL("locks")...)
	sc := emulator.Client(t, db)
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             destroyed(t, sc),
		Steps: []resource.TestStep{
			{
				Config:        tableConfig(prov, ""),
				ResourceName:  tableAddress,
				ImportState:   true,
				ImportStateId: "absent",
				ExpectError:   diagnostic("Cannot import non-existent remote object"),
			},
			{
				Config:        tableConfig(prov, ""),
				ResourceName:  tableAddress,
				ImportState:   true,
				ImportStateId: emulator.Shared(t).Instance() + "/databases/absent/tables/locks",
				ExpectError:   diagnostic("Cannot import non-existent remote object"),
			},
			{
				Config:        tableConfig(prov, ""),
				ResourceName:  tableAddress,
				ImportState:   true,
				ImportStateId: "projects/p/tables/locks",
				ExpectError:   diagnostic("Invalid import ID", "must be projects/P/instances/I/databases/D/tables/T"),
			},
			{
				// Never adopted silently.
				Config:      tableConfig(prov, ""),
				ExpectError: diagnostic("Table already exists", "terraform import"),
			},
			{
				Config:             tableConfig(prov, ""),
				ResourceName:       tableAddress,
				ImportState:        true,
				ImportStateId:      db + "/tables/locks",
				ImportStatePersist: true,
			},
			{
				// Defaults in the configuration match what import sets.
				Config:   tableConfig(prov, ""),
				PlanOnly: true,
			},
			{
				Config: tableConfig(prov, unprotected),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(tableAddress, plancheck.ResourceActionUpdate),
						plancheck.ExpectKnownValue(tableAddress, tfjsonpath.New("pending_ddl"), emptyList),
					},
				},
				Check: checkTable(t, sc, current),
			},
		},
	})
}

// A table with cleanup_after imports clean: the configuration that names
// its cleanup period plans no change, by import command or import block.
// pending_ddl was computed from the state before the live cleanup period
// was read, so every import of such a table planned an update of it.
func TestAccTable_importWithCleanupAfterPlansNoChange(t *testing.T) {
	eachDialect(t, locktable.Dialects, func(t *testing.T, d locktable.Dialect) {
		db, prov := accDatabaseIn(t, d, d.CreateDDL("locks", locktable.Options{CleanupAfter: 30 * 24 * time.Hour})...)
		sc := emulator.Client(t, db)
		config := tableConfig(prov, `  cleanup_after = "30d"`+"\n")
		resource.Test(t, resource.TestCase{
			PreCheck:                 func() { testAccPreCheck(t) },
			ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
			CheckDestroy:             destroyed(t, sc),
			Steps: []resource.TestStep{
				{
					Config:          config,
					ResourceName:    tableAddress,
					ImportState:     true,
					ImportStateKind: resource.ImportBlockWithID,
					ImportStateId:   db + "/tables/locks",
				},
				{
					Config:             config,
					ResourceName:       tableAddress,
					ImportState:        true,
					ImportStateId:      db + "/tables/locks",
					ImportStatePersist: true,
				},
				{
					Config:   config,
					PlanOnly: true,
				},
				{
					// Only the Terraform-only setting changes, so that the
					// test can destroy what it imported.
					Config: tableConfig(prov, unprotected+`  cleanup_after = "30d"`+"\n"),
					ConfigPlanChecks: resource.ConfigPlanChecks{
						PreApply: []plancheck.PlanCheck{
							plancheck.ExpectKnownValue(tableAddress, tfjsonpath.New("pending_ddl"), emptyList),
						},
					},
				},
			},
		})
	})
}

// An import block with -generate-config-out: the generated block plans no
// change.
func TestAccTable_importBlockGeneratesConfig(t *testing.T) {
	eachDialect(t, locktable.Dialects, func(t *testing.T, d locktable.Dialect) {
		db, prov := accDatabaseIn(t, d, d.DDL("locks")...)
		sc := emulator.Client(t, db)
		resource.Test(t, resource.TestCase{
			PreCheck:                 func() { testAccPreCheck(t) },
			ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
			CheckDestroy:             func(*terraform.State) error { return checkTable(t, sc, current)(nil) },
			Steps: []resource.TestStep{{
				Config:          prov,
				ResourceName:    tableAddress,
				ImportState:     true,
				ImportStateKind: resource.ImportBlockWithID,
				ImportStateId:   db + "/tables/locks",
				GenerateConfig:  true,
			}},
		})
	})
}

func TestAccTable_migrationKeepsRows(t *testing.T) {
	eachDialect(t, locktable.Dialects, testAccTableMigrationKeepsRows)
}

func testAccTableMigrationKeepsRows(t *testing.T, d locktable.Dialect) {
	db, prov := accDatabaseIn(t, d, d.DDLAt("locks", 1)...)
	sc := emulator.Client(t, db)
	_, err := sc.Apply(emulator.Context(t), []*spanner.Mutation{
		spanner.Insert("locks", []string{"name", "token", "holder_id"}, []any{"a", 7, "x"}),
		spanner.Insert("locks", []string{"name", "token", "holder_id"}, []any{"b", 3, "y"}),
	})
	if err != nil {
		t.Fatal(err)
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             destroyed(t, sc),
		Steps: []resource.TestStep{
			{
				Config:             tableConfig(prov, disposable),
				ResourceName:       tableAddress,
				ImportState:        true,
				ImportStateId:      "locks",
				ImportStatePersist: true,
				ImportStateCheck: func(states []*terraform.InstanceState) error {
					a := states[0].Attributes
					if a["schema_version"] != "1" || a["pending_ddl.#"] == "0" {
						return fmt.Errorf("imported version-1 table: schema_version %s, pending_ddl %s statements; want 1 and the migration's statements",
							a["schema_version"], a["pending_ddl.#"])
					}
					return nil
				},
			},
			{
				Config: tableConfig(prov, disposable),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(tableAddress, plancheck.ResourceActionUpdate),
						plancheck.ExpectKnownValue(tableAddress, tfjsonpath.New("schema_version"), latest),
						expectPendingDDL{address: tableAddress, contains: "ALTER COLUMN " + d.Quote("token") + " SET DEFAULT (1)"},
					},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					expectState("schema_version", latest),
					expectState("pending_ddl", emptyList),
				},
				Check: resource.ComposeAggregateTestCheckFunc(
					checkTable(t, sc, current),
					checkTokens(t, sc, map[string]int64{"a": 7, "b": 3}),
				),
			},
		},
	})
}

// checkTokens asserts that the rows still hold these tokens.
func checkTokens(t *testing.T, sc *spanner.Client, want map[string]int64) resource.TestCheckFunc {
	return func(*terraform.State) error {
		for name, token := range want {
			row, err := sc.Single().ReadRow(emulator.Context(t), "locks", spanner.Key{name}, []string{"token"})
			if err != nil {
				return fmt.Errorf("row %q: %w", name, err)
			}
			var got int64
			if err := row.Column(0, &got); err != nil {
				return err
			}
			if got != token {
				return fmt.Errorf("row %q has token %d, want %d", name, got, token)
			}
		}
		return nil
	}
}

func TestAccTable_drift(t *testing.T) {
	eachDialect(t, locktable.Dialects, testAccTableDrift)
}

func testAccTableDrift(t *testing.T, d locktable.Dialect) {
	db, prov := accDatabaseIn(t, d)
	sc := emulator.Client(t, db)
	e := emulator.Shared(t)
	behindTheBack := func(stmts ...string) func() {
		return func() {
			if err := e.UpdateDDL(emulator.Context(t), db, stmts...); err != nil {
				t.Fatal(err)
			}
		}
	}
	config := tableConfig(prov, disposable)
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             destroyed(t, sc),
		Steps: []resource.TestStep{
			{Config: config},
			{
				PreConfig: behindTheBack(d.DropDDL("locks")...),
				Config:    config,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectNonEmptyPlan(),
						plancheck.ExpectResourceAction(tableAddress, plancheck.ResourceActionCreate),
					},
				},
				Check: checkTable(t, sc, current),
			},
			{
				PreConfig: func() {
					_, err := sc.Apply(emulator.Context(t), []*spanner.Mutation{
						spanner.Insert("locks", []string{"name", "token", "holder_id"}, []any{"kept", 42, "x"}),
					})
					if err != nil {
						t.Fatal(err)
					}
					behindTheBack(byDialect(d, []string{
						// The runtime writes commit timestamps into renewed_at;
						// without the option every acquisition fails.
						"ALTER TABLE locks ALTER COLUMN renewed_at SET OPTIONS (allow_commit_timestamp = null)",
						"ALTER TABLE locks DROP COLUMN payload",
					}, []string{
						// The emulator cannot take commit timestamps away from a
						// PostgreSQL column (internal/locktable tests that repair).
						"ALTER TABLE locks ALTER COLUMN holder_id SET DEFAULT ('nobody')",
						"ALTER TABLE locks DROP COLUMN payload",
					})...)()
				},
				Config: config,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectNonEmptyPlan(),
						plancheck.ExpectResourceAction(tableAddress, plancheck.ResourceActionUpdate),
						expectPendingDDL{address: tableAddress, contains: byDialect(d,
							"SET OPTIONS (allow_commit_timestamp = true)", `ALTER COLUMN "holder_id" DROP DEFAULT`)},
						expectPendingDDL{address: tableAddress, contains: "ADD COLUMN " + d.Quote("payload")},
					},
				},
				Check: resource.ComposeAggregateTestCheckFunc(
					checkTable(t, sc, func(ins locktable.Inspection) error {
						if err := current(ins); err != nil {
							return err
						}
						live, _ := ins.Live.Table("locks")
						if c, _ := live.Column("renewed_at"); !c.CommitTimestamp {
							return fmt.Errorf("repair did not restore allow_commit_timestamp on renewed_at")
						}
						return nil
					}),
					checkTokens(t, sc, map[string]int64{"kept": 42}),
				),
			},
			{
				// No additive statement turns STRING(MAX) back into
				// STRING(1024) without risking data: the plan warns (see
				// TestAccTable_unmigratableDriftIsRecoverable) and plans no DDL.
				PreConfig: behindTheBack(widenHolderID(d, "locks")),
				Config:    config,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					expectState("schema_version", knownvalue.Int64Exact(0)),
					expectState("pending_ddl", emptyList),
				},
			},
			{
				// Only the update that would migrate fails: an error, not a
				// replace.
				Config:      tableConfig(prov, disposable+`  cleanup_after = "30d"`+"\n"),
				ExpectError: diagnostic("Table cannot be migrated in place", widenedHolderID(d), "apply will fail"),
			},
		},
	})
}

// Holding a lease takes the lease package: PostgreSQL joins with it.
func TestAccTable_destroyGuards(t *testing.T) {
	eachDialect(t, locktable.Dialects, testAccTableDestroyGuards)
}

func testAccTableDestroyGuards(t *testing.T, d locktable.Dialect) {
	db, prov := accDatabaseIn(t, d)
	sc := emulator.Client(t, db)
	leaseLive := checkTable(t, sc, func(ins locktable.Inspection) error {
		if !ins.Exists {
			return fmt.Errorf("table was dropped")
		}
		return nil
	})
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             destroyed(t, sc),
		Steps: []resource.TestStep{
			{Config: tableConfig(prov, "")},
			{
				// Replacing drops the table, so the plan already refuses.
				Config: prov + `
resource "spannerlock_table" "locks" {
  name = "other_locks"
}
`,
				PlanOnly:    true,
				ExpectError: diagnostic("Replacement blocked by deletion_protection", "set deletion_protection = false and apply"),
			},
			{
				// A live lease is also in the way; the error is about
				// deletion_protection all the same.
				PreConfig:   func() { holdLease(t, sc, "jobs", "worker-1") },
				Config:      tableConfig(prov, ""),
				Destroy:     true,
				ExpectError: diagnostic("Table is protected by deletion_protection", "set deletion_protection = false"),
			},
			{
				Config: tableConfig(prov, unprotected),
				Check:  leaseLive,
			},
			{
				Config:      tableConfig(prov, unprotected),
				Destroy:     true,
				ExpectError: diagnostic("Table has live leases", "1 lease(s) in it are live", `"jobs" held by "worker-1" with token 1`, "force_destroy = true"),
			},
			{
				Config: tableConfig(prov, unprotected+"  force_destroy = true\n"),
				Check:  leaseLive,
			},
			{
				Config:  tableConfig(prov, unprotected+"  force_destroy = true\n"),
				Destroy: true,
			},
		},
	})
}

func TestAccTable_planTimeErrors(t *testing.T) {
	db, prov := accDatabase(t)
	noDatabase := requiredProviders + fmt.Sprintf("provider \"spannerlock\" {\n  emulator_host = %q\n}\n", emulator.Shared(t).Host())
	resource.ParallelTest(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config:      prov + `resource "spannerlock_table" "t" { name = "2locks" }`,
				PlanOnly:    true,
				ExpectError: diagnostic("Invalid table name", "\n"+`Table name "2locks" must start with a letter (A-Z or a-z: ASCII only), not '2'`),
			},
			{
				// A letter, but not one Spanner takes in a name.
				Config:      prov + `resource "spannerlock_table" "t" { name = "élocks" }`,
				PlanOnly:    true,
				ExpectError: diagnostic("Invalid table name", `Table name "élocks" must start with a letter (A-Z or a-z: ASCII only), not 'é'`),
			},
			{
				Config:      prov + `resource "spannerlock_table" "t" { name = "my-locks" }`,
				PlanOnly:    true,
				ExpectError: diagnostic("Invalid table name", "only ASCII letters, digits and underscores, not '-'"),
			},
			{
				Config: prov + `resource "spannerlock_table" "t" {
  name     = "locks"
  database = "projects/p/instances/i/locks"
}`,
				PlanOnly:    true,
				ExpectError: diagnostic("Attribute database must be a database path like projects/P/instances/I/databases/D"),
			},
			{
				Config: prov + `resource "spannerlock_table" "t" {
  name          = "locks"
  cleanup_after = "-24h"
}`,
				PlanOnly:    true,
				ExpectError: diagnostic("Invalid cleanup period", "\n"+`Cleanup period "-24h" must be a positive`),
			},
			{
				Config: prov + `resource "spannerlock_table" "t" {
  name          = "locks"
  cleanup_after = "36h"
}`,
				PlanOnly:    true,
				ExpectError: diagnostic("Invalid cleanup period", "whole number of days"),
			},
			{
				// A database created by the same apply does not exist at
				// plan time: no error.
				Config: prov + fmt.Sprintf(`resource "spannerlock_table" "t" {
  name     = "locks"
  database = "%s/databases/created-later"
}`, emulator.Shared(t).Instance()),
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
			},
			{
				Config:      noDatabase + `resource "spannerlock_table" "t" { name = "locks" }`,
				PlanOnly:    true,
				ExpectError: diagnostic("No database", "set database here, in the provider block"),
			},
			{
				Config: prov + fmt.Sprintf(`data "spannerlock_leader" "l" {
  database = %q
  table    = "locks"
  name     = ""
}`, db),
				PlanOnly:    true,
				ExpectError: diagnostic("Invalid lease name", "\nLease name is empty."),
			},
		},
	})
}

func TestParseTableImportID(t *testing.T) {
	const db = "projects/p/instances/i/databases/d"
	for _, c := range []struct {
		id, defaultDB, wantDB, wantTable string
	}{
		{db + "/tables/locks", "", db, "locks"},
		{db + "/tables/locks", "projects/q/instances/j/databases/e", db, "locks"},
		{"locks", db, db, "locks"},
	} {
		gotDB, gotTable, err := parseTableImportID(c.id, c.defaultDB)
		if err != nil || gotDB != c.wantDB || gotTable != c.wantTable {
			t.Errorf("parseTableImportID(%q, %q) = %q, %q, %v; want %q, %q", c.id, c.defaultDB, gotDB, gotTable, err, c.wantDB, c.wantTable)
		}
	}
	for _, c := range []struct{ id, defaultDB string }{
		{"locks", ""}, // no database to use
		{"2locks", db},
		{"projects/p/instances/i/tables/locks", db},
		{db + "/tables/", db},
		{db + "/tables/a/b", db},
		{db + "/locks", db},
	} {
		if _, _, err := parseTableImportID(c.id, c.defaultDB); err == nil {
			t.Errorf("parseTableImportID(%q, %q) succeeded; want an error", c.id, c.defaultDB)
		}
	}
}

func TestDescribeHoldersListsAtMostFive(t *testing.T) {
	var holders []lease.Holder
	for i := range 7 {
		holders = append(holders, lease.Holder{Name: fmt.Sprintf("n%d", i), HolderID: "h", Token: int64(i + 1)})
	}
	got := describeHolders("7 lease(s) are live:", holders, "Set force_destroy = true.")
	for _, want := range []string{"7 lease(s)", `"n4" held by "h" with token 5`, "and 2 more", "force_destroy = true"} {
		if !strings.Contains(got, want) {
			t.Errorf("refusal %q does not mention %q", got, want)
		}
	}
	if strings.Contains(got, `"n5"`) {
		t.Errorf("refusal lists more than five holders: %q", got)
	}
}

// cliTables configures tables with attrs, each as spannerlock_table.<name>,
// or spannerlock_table.<address> for a name written address=name.
func cliTables(providerBlock, attrs string, names ...string) string {
	config := providerBlock
	for _, n := range names {
		address, name, renamed := strings.Cut(n, "=")
		if !renamed {
			name = address
		}
		config += fmt.Sprintf("\nresource \"spannerlock_table\" %q {\n  name = %q\n%s}\n", address, name, attrs)
	}
	return config
}

func tableExists(t *testing.T, sc *spanner.Client, table string) bool {
	t.Helper()
	ins, err := inspect(t, sc, table)
	if err != nil {
		t.Fatal(err)
	}
	return ins.Exists
}

// A table drifted in a way no additive statement repairs must never trap
// the operator: every plan warns, and Terraform can still change the
// settings that live in it, replace the table, and destroy it, with the
// refresh that terraform destroy runs first.
func TestAccTable_unmigratableDriftIsRecoverable(t *testing.T) {
	eachDialect(t, locktable.Dialects, testAccTableUnmigratableDriftIsRecoverable)
}

func testAccTableUnmigratableDriftIsRecoverable(t *testing.T, d locktable.Dialect) {
	db, prov := accDatabaseIn(t, d)
	sc := emulator.Client(t, db)
	tf := newTerraformCLI(t)
	ctx := cliContext(t)

	tf.write(cliTables(prov, "", "locks", "jobs"))
	tf.run(ctx, "apply", "-auto-approve", "-json").ok(t)
	for _, table := range []string{"locks", "jobs"} {
		if err := emulator.Shared(t).UpdateDDL(ctx, db, widenHolderID(d, table)); err != nil {
			t.Fatal(err)
		}
	}

	plan := tf.run(ctx, "plan", "-json").ok(t)
	plan.has(t, "warning", "Table locks cannot be migrated in place", widenedHolderID(d),
		"Terraform still changes deletion_protection")
	plan.lacks(t, "Table cannot be migrated in place")

	// The update that would migrate is the one that fails.
	tf.write(cliTables(prov, `  cleanup_after = "30d"`+"\n", "locks", "jobs"))
	tf.run(ctx, "apply", "-auto-approve", "-json").failed(t).has(t, "error", "Table cannot be migrated in place", widenedHolderID(d))

	tf.write(cliTables(prov, unprotected, "locks", "jobs"))
	tf.run(ctx, "apply", "-auto-approve", "-json").ok(t)

	// The replacement the warning recommends.
	tf.write(cliTables(prov, unprotected, "locks", "jobs=jobs_v2"))
	tf.run(ctx, "apply", "-auto-approve", "-json").ok(t)
	if tableExists(t, sc, "jobs") || !tableExists(t, sc, "jobs_v2") {
		t.Fatal("replacing the drifted table jobs with jobs_v2 did not drop jobs and create jobs_v2")
	}

	tf.run(ctx, "destroy", "-auto-approve", "-json").ok(t)
	for _, table := range []string{"locks", "jobs_v2"} {
		if tableExists(t, sc, table) {
			t.Errorf("table %s exists after terraform destroy", table)
		}
	}
}

// terraform destroy refuses a protected table before it destroys anything
// else, such as the semaphores declared in it; a table with live leases is
// named in a warning when the destroy is planned.
func TestAccTable_destroyRefusedBeforeAnythingIsDestroyed(t *testing.T) {
	eachDialect(t, locktable.Dialects, testAccTableDestroyRefusedBeforeAnythingIsDestroyed)
}

func testAccTableDestroyRefusedBeforeAnythingIsDestroyed(t *testing.T, d locktable.Dialect) {
	db, prov := accDatabaseIn(t, d)
	sc := emulator.Client(t, db)
	tf := newTerraformCLI(t)
	ctx := cliContext(t)
	semaphore := `
resource "spannerlock_semaphore" "jobs" {
  table   = spannerlock_table.locks.name
  name    = "jobs"
  permits = 2
}
`
	stillDeclared := func() {
		t.Helper()
		s, err := appClient(t, sc, "checker").Semaphore(ctx, "jobs")
		if err != nil || s.Permits != 2 {
			t.Fatalf("semaphore jobs after the refused destroy: %+v, %v; want it declared with 2 permits", s, err)
		}
	}

	tf.write(tableConfig(prov, "") + semaphore)
	tf.run(ctx, "apply", "-auto-approve", "-json").ok(t)

	refused := tf.run(ctx, "destroy", "-auto-approve", "-json").failed(t)
	stillDeclared()
	refused.has(t, "error", "Table is protected by deletion_protection", "Nothing was destroyed")

	// Removing the table from the configuration plans its destruction too.
	tf.write(prov)
	tf.run(ctx, "plan", "-json").failed(t).has(t, "error", "Table is protected by deletion_protection")

	// Protection off, a live lease, no force_destroy: apply would refuse
	// to drop the table, so the plan does, before the semaphore in it is
	// undeclared under the applications using it.
	tf.write(tableConfig(prov, unprotected) + semaphore)
	tf.run(ctx, "apply", "-auto-approve", "-json").ok(t)
	holdLease(t, sc, "deploy", "deployer")
	tf.run(ctx, "destroy", "-auto-approve", "-json").failed(t).has(t, "error", "Table has live leases",
		"Destroying table "+db+"/tables/locks drops it, and 1 lease(s) in it are live", "Nothing was destroyed",
		`"deploy" held by "deployer" with token 1`, "force_destroy = true")
	stillDeclared()

	// With force_destroy, the plan names the leases apply drops.
	tf.write(tableConfig(prov, unprotected+"  force_destroy = true\n") + semaphore)
	tf.run(ctx, "apply", "-auto-approve", "-json").ok(t)
	tf.run(ctx, "plan", "-destroy", "-json").ok(t).has(t, "warning", "Table will be dropped with live leases",
		"force_destroy is true: apply drops it with the 1 live lease(s) in it", `"deploy" held by "deployer" with token 1`)
	tf.run(ctx, "destroy", "-auto-approve", "-json").ok(t)
	if tableExists(t, sc, "locks") {
		t.Fatal("table locks exists after terraform destroy with force_destroy")
	}
}

// Changing name replaces the table, which drops it: with live leases and no
// force_destroy, the plan refuses, as apply would; with force_destroy, it
// names the leases it drops.
func TestAccTable_replacementWithLiveLeases(t *testing.T) {
	eachDialect(t, locktable.Dialects, testAccTableReplacementWithLiveLeases)
}

func testAccTableReplacementWithLiveLeases(t *testing.T, d locktable.Dialect) {
	db, prov := accDatabaseIn(t, d)
	sc := emulator.Client(t, db)
	tf := newTerraformCLI(t)
	ctx := cliContext(t)
	renamed := func(attrs string) string {
		return strings.Replace(tableConfig(prov, attrs), `name = "locks"`, `name = "locks_v2"`, 1)
	}
	tf.write(tableConfig(prov, unprotected))
	tf.run(ctx, "apply", "-auto-approve", "-json").ok(t)
	holdLease(t, sc, "deploy", "deployer")

	tf.write(renamed(unprotected))
	tf.run(ctx, "plan", "-json").failed(t).has(t, "error", "Table has live leases",
		"Changing name replaces table "+db+"/tables/locks, which drops it", "1 lease(s) in it are live",
		`"deploy" held by "deployer" with token 1`)

	tf.write(tableConfig(prov, unprotected+"  force_destroy = true\n"))
	tf.run(ctx, "apply", "-auto-approve", "-json").ok(t)
	tf.write(renamed(unprotected + "  force_destroy = true\n"))
	tf.run(ctx, "plan", "-json").ok(t).has(t, "warning", "Table will be dropped with live leases",
		"Changing name replaces table "+db+"/tables/locks", `"deploy" held by "deployer" with token 1`)
}

// The plan shows what apply will run on a new table, and what replacing a
// table costs the applications using it.
func TestAccTable_planExplainsCreationAndReplacement(t *testing.T) {
	eachDialect(t, locktable.Dialects, testAccTablePlanExplainsCreationAndReplacement)
}

func testAccTablePlanExplainsCreationAndReplacement(t *testing.T, d locktable.Dialect) {
	db, prov := accDatabaseIn(t, d)
	tf := newTerraformCLI(t)
	ctx := cliContext(t)

	// The statements are in the plan, once: no warning repeats them at
	// apply, when Terraform plans the change again.
	tf.write(tableConfig(prov, unprotected))
	planned := tf.plannedValues(ctx, tableAddress)
	if got := strings.Join(stringList(planned["planned_ddl"]), ";\n"); got != strings.Join(d.DDL("locks"), ";\n") {
		t.Errorf("planned_ddl of a new table is\n%s\nwant\n%s", got, strings.Join(d.DDL("locks"), ";\n"))
	}
	applied := tf.run(ctx, "apply", "-auto-approve", "-json").ok(t)
	applied.lacks(t, "Table locks will be created")
	tf.run(ctx, "plan", "-detailed-exitcode", "-json").ok(t)
	// Nor without a refresh, when the state still holds what apply ran.
	tf.run(ctx, "plan", "-refresh=false", "-detailed-exitcode", "-json").ok(t)

	tf.write(strings.Replace(tableConfig(prov, unprotected), `name = "locks"`, `name = "locks_v2"`, 1))
	replaced := tf.run(ctx, "plan", "-json").ok(t)
	replaced.has(t, "warning", "Table locks will be replaced",
		"Changing name replaces table "+db+"/tables/locks with "+db+"/tables/locks_v2", "every name's tokens start again")
	if n := replaced.count("warning", "Table locks will be replaced"); n != 1 {
		t.Errorf("the plan of the replacement warned %d times; want once", n)
	}
	tf.run(ctx, "destroy", "-auto-approve").ok(t)
}

func TestAccTable_nameCollisions(t *testing.T) {
	eachDialect(t, locktable.Dialects, testAccTableNameCollisions)
}

func testAccTableNameCollisions(t *testing.T, d locktable.Dialect) {
	// locks at version 2 has no companion tables yet; its migration creates
	// locks_sessions, so no lock table may take that name.
	_, prov := accDatabaseIn(t, d, append(d.DDLAt("locks", 2), byDialect(d,
		"CREATE TABLE audit_permits (id INT64) PRIMARY KEY (id)",
		"CREATE TABLE audit_permits (id bigint, PRIMARY KEY (id))"))...)
	collides := func(parts ...string) *regexp.Regexp {
		return diagnostic(append([]string{"Table name collides with another lock table"}, parts...)...)
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config:      cliTables(prov, "", "locks_sessions"),
				PlanOnly:    true,
				ExpectError: collides("locks_sessions is the name of a companion table of lock table locks", "Table locks exists"),
			},
			{
				Config:      cliTables(prov, "", "audit"),
				PlanOnly:    true,
				ExpectError: collides("lock table audit needs the name audit_permits", "Table audit_permits exists"),
			},
			{
				Config:      cliTables(prov, "", "jobs", "Jobs_Permits"),
				PlanOnly:    true,
				ExpectError: collides("This configuration creates both"),
			},
		},
	})
}

// A PostgreSQL-dialect database truncates names to 63 characters (the
// sessions table adds 9 to the table's) and reserves pg_: both are refused
// when the plan reads the database's dialect, before anything is created.
// GoogleSQL takes both.
func TestAccTable_postgreSQLNames(t *testing.T) {
	eachDialect(t, locktable.Dialects, testAccTablePostgreSQLNames)
}

func testAccTablePostgreSQLNames(t *testing.T, d locktable.Dialect) {
	_, prov := accDatabaseIn(t, d)
	tf := newTerraformCLI(t)
	ctx := cliContext(t)
	long := strings.Repeat("a", locktable.MaxPostgreSQLTableNameLength+1)
	for _, name := range []string{long, "pg_locks"} {
		tf.write(cliTables(prov, unprotected, "t="+name))
		r := tf.run(ctx, "plan", "-json")
		if d == locktable.GoogleSQL {
			r.ok(t).plans(t, map[string]string{"spannerlock_table.t": "create"})
			continue
		}
		r.failed(t).has(t, "error", "Invalid table name", fmt.Sprintf("Table name %q", name), "PostgreSQL-dialect database")
	}
	if d == locktable.PostgreSQL {
		// The longest name PostgreSQL holds works, companions included.
		tf.write(cliTables(prov, unprotected, "t="+long[:locktable.MaxPostgreSQLTableNameLength]))
		tf.run(ctx, "apply", "-auto-approve", "-json").ok(t)
		tf.run(ctx, "plan", "-detailed-exitcode", "-json").ok(t)
	}
}

// An import in another letter case than Spanner's records Spanner's
// spelling, so that the configuration that spells it so plans nothing.
func TestAccTable_importInAnotherLetterCase(t *testing.T) {
	eachDialect(t, locktable.Dialects, func(t *testing.T, d locktable.Dialect) {
		_, prov := accDatabaseIn(t, d, d.DDL("locks")...)
		tf := newTerraformCLI(t)
		ctx := cliContext(t)
		tf.write(tableConfig(prov, ""))
		tf.run(ctx, "import", tableAddress, "LOCKS").ok(t)
		tf.run(ctx, "plan", "-detailed-exitcode", "-json").ok(t)
	})
}

// Two spannerlock_table resources for one table (Spanner compares names
// regardless of case) fail at plan, before either is created.
func TestAccTable_managedTwice(t *testing.T) {
	eachDialect(t, locktable.Dialects, func(t *testing.T, d locktable.Dialect) {
		db, prov := accDatabaseIn(t, d)
		tf := newTerraformCLI(t)
		ctx := cliContext(t)
		for _, names := range [][]string{{"a=locks", "b=locks"}, {"a=locks", "b=LOCKS"}} {
			tf.write(cliTables(prov, unprotected, names...))
			tf.run(ctx, "plan", "-json").failed(t).has(t, "error", "Table managed twice",
				"Another spannerlock_table of this configuration manages table", "in "+db)
		}
	})
}

// A database that only apply knows (it comes from a resource this plan
// replaces) is said to be that, not a change of name or database.
func TestAccTable_databaseKnownOnlyAtApply(t *testing.T) {
	t.Parallel()
	db, _ := accDatabase(t)
	tf := newTerraformCLI(t)
	ctx := cliContext(t)
	config := func(generation int) string {
		return requiredProviders + fmt.Sprintf(`
provider "spannerlock" {
  emulator_host = %q
}

resource "terraform_data" "database" {
  input            = %q
  triggers_replace = [%d]
}

resource "spannerlock_table" "locks" {
  name     = "locks"
  database = terraform_data.database.output
}
`, emulator.Shared(t).Host(), db, generation)
	}
	tf.write(config(1))
	tf.run(ctx, "apply", "-auto-approve", "-json").ok(t)
	tf.write(config(2))
	r := tf.run(ctx, "plan", "-json").failed(t)
	r.has(t, "error", "Replacement blocked by deletion_protection", "The database of table "+db+"/tables/locks is known only at apply",
		"set database to a value known at plan time")
	for _, d := range r.diagnostics {
		if strings.Contains(d.Detail, "Changing name or database") {
			t.Errorf("the plan says %q; the name and the database did not change", d.Detail)
		}
	}
}

// A timeout that is not positive is refused at plan; one too short for the
// requests it bounds is blamed on itself, not on request_timeout.
func TestAccTable_timeouts(t *testing.T) {
	_, prov := accDatabase(t)
	resource.ParallelTest(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config:      tableConfig(prov, "  timeouts {\n    create = \"-1m\"\n  }\n"),
				PlanOnly:    true,
				ExpectError: diagnostic("Invalid timeout", `Timeout "-1m" must be positive`),
			},
			{
				// The plan's reads are bounded by request_timeout (30s); the
				// creation's, by timeouts.create too, which ends first.
				Config:      tableConfig(prov, unprotected+"  timeouts {\n    create = \"1ns\"\n  }\n"),
				ExpectError: diagnostic("Cannot read table", "no answer before timeouts.create (1ns) ran out"),
			},
		},
	})
}

// Drift that no additive statement repairs is only a warning in the plan;
// drifted and drift let a check or a postcondition assert on it.
func TestAccTable_driftedAttribute(t *testing.T) {
	eachDialect(t, locktable.Dialects, testAccTableDriftedAttribute)
}

func testAccTableDriftedAttribute(t *testing.T, d locktable.Dialect) {
	db, prov := accDatabaseIn(t, d)
	tf := newTerraformCLI(t)
	ctx := cliContext(t)
	check := `
check "lock_table" {
  assert {
    condition     = !spannerlock_table.locks.drifted
    error_message = join("; ", spannerlock_table.locks.drift)
  }
}
`
	tf.write(tableConfig(prov, unprotected) + check)
	tf.run(ctx, "apply", "-auto-approve", "-json").ok(t).lacks(t, "Check block assertion failed")
	if err := emulator.Shared(t).UpdateDDL(ctx, db, widenHolderID(d, "locks")); err != nil {
		t.Fatal(err)
	}
	tf.run(ctx, "plan", "-json").ok(t).has(t, "warning", "Check block assertion failed", widenedHolderID(d))

	// A postcondition makes it an error, which -detailed-exitcode sees.
	tf.write(tableConfig(prov, unprotected+`
  lifecycle {
    postcondition {
      condition     = !self.drifted
      error_message = join("; ", self.drift)
    }
  }
`))
	tf.run(ctx, "plan", "-detailed-exitcode", "-json").failed(t).has(t, "error", "Resource postcondition failed", widenedHolderID(d))
}
