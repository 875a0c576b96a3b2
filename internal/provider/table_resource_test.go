package provider

import (
	"fmt"
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
)

func destroyed(t *testing.T, sc *spanner.Client) resource.TestCheckFunc {
	return checkTable(t, sc, gone)
}

func TestAccTable_lifecycle(t *testing.T) {
	db, prov := accDatabase(t)
	sc := emulator.Client(t, db)
	resource.ParallelTest(t, resource.TestCase{
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
			},
			{
				ResourceName:      tableAddress,
				ImportState:       true,
				ImportStateId:     "locks",
				ImportStateVerify: true,
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
	db, prov := accDatabase(t)
	sc := emulator.Client(t, db)
	resource.ParallelTest(t, resource.TestCase{
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
}

func TestAccTable_importExisting(t *testing.T) {
	db, prov := accDatabase(t, locktable.DDL("locks")...)
	sc := emulator.Client(t, db)
	resource.ParallelTest(t, resource.TestCase{
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

func TestAccTable_migrationKeepsRows(t *testing.T) {
	db, prov := accDatabase(t, locktable.DDLAt("locks", 1)...)
	sc := emulator.Client(t, db)
	_, err := sc.Apply(emulator.Context(t), []*spanner.Mutation{
		spanner.Insert("locks", []string{"name", "token", "holder_id"}, []any{"a", 7, "x"}),
		spanner.Insert("locks", []string{"name", "token", "holder_id"}, []any{"b", 3, "y"}),
	})
	if err != nil {
		t.Fatal(err)
	}
	resource.ParallelTest(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             destroyed(t, sc),
		Steps: []resource.TestStep{
			{
				Config:             tableConfig(prov, unprotected),
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
				Config: tableConfig(prov, unprotected),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(tableAddress, plancheck.ResourceActionUpdate),
						plancheck.ExpectKnownValue(tableAddress, tfjsonpath.New("schema_version"), latest),
						expectPendingDDL{address: tableAddress, contains: "ALTER COLUMN `token` SET DEFAULT (1)"},
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
	db, prov := accDatabase(t)
	sc := emulator.Client(t, db)
	e := emulator.Shared(t)
	behindTheBack := func(stmts ...string) func() {
		return func() {
			if err := e.UpdateDDL(emulator.Context(t), db, stmts...); err != nil {
				t.Fatal(err)
			}
		}
	}
	config := tableConfig(prov, unprotected)
	resource.ParallelTest(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             destroyed(t, sc),
		Steps: []resource.TestStep{
			{Config: config},
			{
				PreConfig: behindTheBack(locktable.DropDDL("locks")...),
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
					// The runtime writes commit timestamps into renewed_at;
					// without the option every acquisition fails.
					behindTheBack(
						"ALTER TABLE locks ALTER COLUMN renewed_at SET OPTIONS (allow_commit_timestamp = null)",
						"ALTER TABLE locks DROP COLUMN payload",
					)()
				},
				Config: config,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectNonEmptyPlan(),
						plancheck.ExpectResourceAction(tableAddress, plancheck.ResourceActionUpdate),
						expectPendingDDL{address: tableAddress, contains: "SET OPTIONS (allow_commit_timestamp = true)"},
						expectPendingDDL{address: tableAddress, contains: "ADD COLUMN `payload`"},
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
				// STRING(1024) without risking data: an error, not a replace.
				PreConfig:   behindTheBack("ALTER TABLE locks ALTER COLUMN holder_id STRING(MAX)"),
				Config:      config,
				ExpectError: diagnostic("Table cannot be migrated in place", "holder_id is STRING(MAX), expected STRING(1024)"),
			},
		},
	})
}

func TestAccTable_destroyGuards(t *testing.T) {
	db, prov := accDatabase(t)
	sc := emulator.Client(t, db)
	leaseLive := checkTable(t, sc, func(ins locktable.Inspection) error {
		if !ins.Exists {
			return fmt.Errorf("table was dropped")
		}
		return nil
	})
	resource.ParallelTest(t, resource.TestCase{
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
				PreConfig:   func() { holdLease(t, sc, "locks", "jobs", "worker-1") },
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
				ExpectError: diagnostic("Invalid table name", `name: table name "2locks" must start with a letter`),
			},
			{
				Config:      prov + `resource "spannerlock_table" "t" { name = "my-locks" }`,
				PlanOnly:    true,
				ExpectError: diagnostic("Invalid table name", "only letters, digits and underscores"),
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
				ExpectError: diagnostic("Invalid cleanup period", `cleanup_after: cleanup period "-24h" must be a positive`),
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
				Config:      noDatabase + `resource "spannerlock_table" "t" { name = "locks" }`,
				PlanOnly:    true,
				ExpectError: diagnostic("No database", "set database here, or in the provider block"),
			},
			{
				Config: prov + fmt.Sprintf(`data "spannerlock_leader" "l" {
  database = %q
  table    = "locks"
  name     = ""
}`, db),
				PlanOnly:    true,
				ExpectError: diagnostic("Invalid lease name", "lease name is empty"),
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
	if got := describeHolders("locks", nil); got != "" {
		t.Fatalf("no holders: %q, want no refusal", got)
	}
	var holders []lease.Holder
	for i := range 7 {
		holders = append(holders, lease.Holder{Name: fmt.Sprintf("n%d", i), HolderID: "h", Token: int64(i + 1)})
	}
	got := describeHolders("locks", holders)
	for _, want := range []string{"7 lease(s)", `"n4" held by "h" with token 5`, "and 2 more", "force_destroy = true"} {
		if !strings.Contains(got, want) {
			t.Errorf("refusal %q does not mention %q", got, want)
		}
	}
	if strings.Contains(got, `"n5"`) {
		t.Errorf("refusal lists more than five holders: %q", got)
	}
}
