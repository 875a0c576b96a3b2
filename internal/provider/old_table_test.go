package provider

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
)

// The tables of a release before this one: a table at schema version 3
// (what the releases before the line of waiters wrote), with a lease that
// an application of such a release holds in it.

// oldTableVersion is the version these tests keep a table at.
const oldTableVersion = 3

// holdOldLease writes, as an application of a version-3 release does, a
// live lease of name held by holder: a session row renewed now with a TTL
// of ten minutes (the test never outlives it), and the lock row naming it.
func holdOldLease(t *testing.T, sc *spanner.Client, name, holder string) {
	t.Helper()
	ttl := (10 * time.Minute).Milliseconds()
	session := "old-session-" + name
	if _, err := sc.Apply(emulator.Context(t), []*spanner.Mutation{
		spanner.Insert(locktable.SessionsTable("locks"), []string{"session_id", "holder_id", "ttl_ms", "renewed_at"},
			[]any{session, holder, ttl, spanner.CommitTimestamp}),
		spanner.Insert("locks", []string{"name", "token", "holder_id", "session_id", "ttl_ms", "acquired_at", "renewed_at"},
			[]any{name, 7, holder, session, ttl, spanner.CommitTimestamp, spanner.CommitTimestamp}),
	}); err != nil {
		t.Fatal(err)
	}
}

// releaseOldLease releases it as that application does: the row no longer
// names a session.
func releaseOldLease(t *testing.T, sc *spanner.Client, name string) {
	t.Helper()
	if _, err := sc.Apply(emulator.Context(t), []*spanner.Mutation{
		spanner.Update("locks", []string{"name", "session_id"}, []any{name, nil}),
	}); err != nil {
		t.Fatal(err)
	}
}

// downgrade takes table locks, created at the latest version, back to
// oldTableVersion, as if an older release had created it: what the
// versions after it added is dropped.
func downgrade(t *testing.T, d locktable.Dialect, db string) {
	t.Helper()
	if oldTableVersion != locktable.Latest-1 {
		t.Fatalf("downgrade knows version %d only", locktable.Latest-1)
	}
	q := d.Quote
	if err := emulator.Shared(t).UpdateDDL(emulator.Context(t), db,
		"DROP TABLE "+d.QuoteWaitersTable("locks"),
		"ALTER TABLE "+d.QuotePermitsTable("locks")+" DROP COLUMN "+q("grant_id"),
		"ALTER TABLE "+d.QuoteTable("locks")+" DROP COLUMN "+q("grant_id"),
		"ALTER TABLE "+d.QuoteTable("locks")+" DROP COLUMN "+q("attempts"),
	); err != nil {
		t.Fatal(err)
	}
}

// atOldVersion checks that the table is still at oldTableVersion: nothing
// migrated it.
func atOldVersion(t *testing.T, sc *spanner.Client) {
	t.Helper()
	ins, err := inspect(t, sc, "locks")
	if err != nil {
		t.Fatal(err)
	}
	if !ins.Exists || ins.Version != oldTableVersion {
		t.Fatalf("table locks exists %t at version %d; want version %d: something migrated it", ins.Exists, ins.Version, oldTableVersion)
	}
}

func TestAccOldTable_destroyNeedsNoMigration(t *testing.T) {
	eachDialect(t, locktable.Dialects, testAccOldTableDestroyNeedsNoMigration)
}

// A table at an older schema version is destroyed as it is, after an
// upgrade of the provider: the plan checks it for live leases as the
// applications of its version judge them, refuses while one of theirs is
// live, naming it, and drops the table once it is released, without
// migrating it first. The check read the table at the latest version only,
// so every plan failed ("Cannot check table for live leases"), and the
// advice (force_destroy) ran a migration before the drop.
func testAccOldTableDestroyNeedsNoMigration(t *testing.T, d locktable.Dialect) {
	db, prov := accDatabaseIn(t, d)
	sc := emulator.Client(t, db)
	config := tableConfig(prov, unprotected)
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             checkTable(t, sc, gone),
		Steps: []resource.TestStep{
			{Config: config},
			{
				PreConfig: func() {
					downgrade(t, d, db)
					holdOldLease(t, sc, "deploy", "old-app")
				},
				Config:      config,
				Destroy:     true,
				ExpectError: diagnostic("Table has live leases", `"deploy" held by "old-app" with token 7`),
			},
			{
				PreConfig: func() {
					atOldVersion(t, sc)
					releaseOldLease(t, sc, "deploy")
				},
				Config:  config,
				Destroy: true,
			},
		},
	})
}

func TestAccOldTable_readersSayWhatToDo(t *testing.T) {
	eachDialect(t, locktable.Dialects, testAccOldTableReadersSayWhatToDo)
}

// On a table at an older schema version the data sources either read it
// or say what to do: spannerlock_leases lists the leases its applications
// hold; spannerlock_leader and spannerlock_semaphore, which read with the
// lease package's statements of the latest version, fail naming the
// table's version and the migration. They failed with Spanner's complaint
// about a column that version lacks.
func testAccOldTableReadersSayWhatToDo(t *testing.T, d locktable.Dialect) {
	db, prov := accDatabaseIn(t, d, d.DDLAt("locks", oldTableVersion)...)
	sc := emulator.Client(t, db)
	holdOldLease(t, sc, "deploy", "old-app")
	if _, err := sc.Apply(emulator.Context(t), []*spanner.Mutation{spanner.Insert("locks",
		[]string{"name", "token", "kind", "permits"}, []any{"jobs", 1, "semaphore", 2})}); err != nil {
		t.Fatal(err)
	}
	what := []string{fmt.Sprintf("table locks is at schema version %d; this provider needs %d:", oldTableVersion, locktable.Latest),
		"run `spannerlock init` or apply spannerlock_table"}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: prov + `
data "spannerlock_leader" "deploy" {
  table = "locks"
  name  = "deploy"
}
`,
				ExpectError: diagnostic(append([]string{"Cannot read lease"}, what...)...),
			},
			{
				Config: prov + `
data "spannerlock_semaphore" "jobs" {
  table = "locks"
  name  = "jobs"
}
`,
				ExpectError: diagnostic(what...),
			},
			{
				Config: prov + `
data "spannerlock_leases" "all" {
  table = "locks"
}
`,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("data.spannerlock_leases.all", tfjsonpath.New("leases"), knownvalue.ListExact([]knownvalue.Check{
						knownvalue.ObjectPartial(map[string]knownvalue.Check{
							"kind":      knownvalue.StringExact("lock"),
							"name":      knownvalue.StringExact("deploy"),
							"holder_id": knownvalue.StringExact("old-app"),
							"token":     knownvalue.Int64Exact(7),
						}),
					})),
				},
				Check: func(*terraform.State) error { atOldVersion(t, sc); return nil },
			},
		},
	})
}

func TestAccOldTable_semaphoreListSaysWhatToDo(t *testing.T) {
	eachDialect(t, locktable.Dialects, testAccOldTableSemaphoreListSaysWhatToDo)
}

// terraform query of the semaphores of a table at an older schema version
// says what to do, as the data sources do (lease.Client.Semaphores needs the
// latest version).
func testAccOldTableSemaphoreListSaysWhatToDo(t *testing.T, d locktable.Dialect) {
	db, prov := accDatabaseIn(t, d, d.DDLAt("locks", oldTableVersion)...)
	sc := emulator.Client(t, db)
	tf := newTerraformCLI(t)
	ctx := cliContext(t)
	tf.requireTerraformOnly(ctx, terraform114, "list resources")
	if _, err := sc.Apply(ctx, []*spanner.Mutation{spanner.Insert("locks",
		[]string{"name", "token", "kind", "permits"}, []any{"jobs", 1, "semaphore", 2})}); err != nil {
		t.Fatal(err)
	}
	tf.write(prov)
	query := `
list "spannerlock_semaphore" "locks" {
  provider = spannerlock
  config {
    table = "locks"
  }
}
`
	if err := os.WriteFile(filepath.Join(tf.dir, "old.tfquery.hcl"), []byte(query), 0o600); err != nil {
		t.Fatal(err)
	}
	r := tf.run(ctx, "query", "-json").failed(t)
	r.has(t, "error", "Cannot list semaphores", fmt.Sprintf("table locks is at schema version %d; this provider needs %d:",
		oldTableVersion, locktable.Latest), "run `spannerlock init` or apply spannerlock_table")
	atOldVersion(t, sc)
}

func TestAccOldTable_migrationWarnsOfOlderApplications(t *testing.T) {
	eachDialect(t, locktable.Dialects, testAccOldTableMigrationWarnsOfOlderApplications)
}

// The plan that migrates a table from a version before the latest says
// what it means for the applications of the release that wrote it: the
// leases of a version-2 application are free after the migration (this
// release judges a lease by its holder's session, which they never write);
// those of a version-3 application stay held, but it ignores the line of
// waiters. TestOlderApplicationsLeasesAcrossMigration (lease) checks both.
func testAccOldTableMigrationWarnsOfOlderApplications(t *testing.T, d locktable.Dialect) {
	for version, says := range map[int]string{
		2: "A live lease of an application of a release that wrote version 2 is free once this migration is applied",
		3: "Applications of a release that wrote version 3 keep their leases",
	} {
		db, prov := accDatabaseIn(t, d, d.DDLAt("locks", version)...)
		tf := newTerraformCLI(t)
		ctx := cliContext(t)
		tf.write(prov + fmt.Sprintf(`
import {
  to = spannerlock_table.locks
  id = %q
}
`, db+"/tables/locks") + tableConfig("", ""))
		tf.run(ctx, "plan", "-json").ok(t).has(t, "warning", "Table locks will be changed in place",
			fmt.Sprintf("The live table is at schema version %d; the latest is %d.", version, locktable.Latest), says)
	}
}
