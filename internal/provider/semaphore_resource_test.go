package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

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

const semaphoreAddress = "spannerlock_semaphore.jobs"

// semaphoreConfig declares the semaphore jobs with permits in table locks,
// which the test's database already has.
func semaphoreConfig(providerBlock string, permits int) string {
	return providerBlock + fmt.Sprintf(`
resource "spannerlock_semaphore" "jobs" {
  table   = "locks"
  name    = "jobs"
  permits = %d
}
`, permits)
}

func expectSemaphore(path string, v knownvalue.Check) statecheck.StateCheck {
	return statecheck.ExpectKnownValue(semaphoreAddress, tfjsonpath.New(path), v)
}

func expectAction(action plancheck.ResourceActionType) resource.ConfigPlanChecks {
	return resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
		plancheck.ExpectNonEmptyPlan(),
		plancheck.ExpectResourceAction(semaphoreAddress, action),
	}}
}

// checkSemaphore asserts on semaphore jobs as applications see it, through
// lease rather than Terraform's state.
func checkSemaphore(t *testing.T, sc *spanner.Client, check func(lease.Semaphore, error) error) resource.TestCheckFunc {
	t.Helper()
	return func(*terraform.State) error {
		lc, err := lease.NewClient(sc, "locks")
		if err != nil {
			return err
		}
		defer func() { _ = lc.Close() }()
		return check(lc.Semaphore(emulator.Context(t), "jobs"))
	}
}

// declared checks the live limit and the number of permits held.
func declared(permits int64, inUse int) func(lease.Semaphore, error) error {
	return func(s lease.Semaphore, err error) error {
		if err != nil {
			return err
		}
		if s.Permits != permits || s.InUse() != inUse {
			return fmt.Errorf("semaphore %q has %d permits, %d in use; want %d and %d", s.Name, s.Permits, s.InUse(), permits, inUse)
		}
		return nil
	}
}

func undeclared(_ lease.Semaphore, err error) error {
	if !errors.Is(err, lease.ErrUnknownSemaphore) {
		return fmt.Errorf("Semaphore: %v; want ErrUnknownSemaphore", err)
	}
	return nil
}

// tokens takes and releases one permit at a time, as an application would,
// and checks that every permit's token is above all earlier ones.
type tokens struct {
	t    *testing.T
	sc   *spanner.Client
	last int64
}

func (tk *tokens) next() error {
	lc := appClient(tk.t, tk.sc, "token-checker")
	ctx := emulator.Context(tk.t)
	l, err := lc.TryAcquirePermit(ctx, "jobs")
	if err != nil {
		return err
	}
	defer func() { _ = l.Release(ctx) }()
	if l.Token() <= tk.last {
		return fmt.Errorf("permit token %d is not above the earlier %d: the token counter went back", l.Token(), tk.last)
	}
	tk.last = l.Token()
	return nil
}

func TestAccSemaphore_lifecycle(t *testing.T) {
	eachDialect(t, locktable.Dialects, testAccSemaphoreLifecycle)
}

func testAccSemaphoreLifecycle(t *testing.T, d locktable.Dialect) {
	db, prov := accDatabaseIn(t, d, d.DDL("locks")...)
	sc := emulator.Client(t, db)
	admin := appClient(t, sc, "admin")
	tk := &tokens{t: t, sc: sc}
	behindTheBack := func(change func(*lease.Client) error) func() {
		return func() {
			if err := change(admin); err != nil {
				t.Fatal(err)
			}
		}
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		// Undeclared, but the token counter is kept: declared again, the
		// semaphore's next permit continues above every earlier one.
		CheckDestroy: resource.ComposeAggregateTestCheckFunc(
			checkSemaphore(t, sc, undeclared),
			func(*terraform.State) error {
				if err := admin.SetPermits(emulator.Context(t), "jobs", 1); err != nil {
					return err
				}
				return tk.next()
			},
		),
		Steps: []resource.TestStep{
			{
				Config: semaphoreConfig(prov, 3),
				ConfigStateChecks: []statecheck.StateCheck{
					expectSemaphore("id", knownvalue.StringExact(db+"/tables/locks/semaphores/jobs")),
					expectSemaphore("table", knownvalue.StringExact("locks")),
					expectSemaphore("name", knownvalue.StringExact("jobs")),
					expectSemaphore("database", knownvalue.StringExact(db)),
					expectSemaphore("permits", knownvalue.Int64Exact(3)),
				},
				Check: resource.ComposeAggregateTestCheckFunc(
					checkSemaphore(t, sc, declared(3, 0)),
					func(*terraform.State) error { return tk.next() },
				),
			},
			{
				ResourceName:      semaphoreAddress,
				ImportState:       true,
				ImportStateVerify: true,
			},
			{
				ResourceName:      semaphoreAddress,
				ImportState:       true,
				ImportStateId:     "locks/semaphores/jobs",
				ImportStateVerify: true,
			},
			{
				ResourceName:    semaphoreAddress,
				ImportState:     true,
				ImportStateKind: resource.ImportBlockWithID,
			},
			{
				Config:           semaphoreConfig(prov, 5),
				ConfigPlanChecks: expectAction(plancheck.ResourceActionUpdate),
				Check:            checkSemaphore(t, sc, declared(5, 0)),
			},
			{
				// A limit changed behind Terraform's back is drift.
				PreConfig: behindTheBack(func(lc *lease.Client) error { return lc.SetPermits(emulator.Context(t), "jobs", 2) }),
				Config:    semaphoreConfig(prov, 5),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectNonEmptyPlan(),
					plancheck.ExpectResourceAction(semaphoreAddress, plancheck.ResourceActionUpdate),
					expectPriorPermits{2},
				}},
				Check: checkSemaphore(t, sc, declared(5, 0)),
			},
			{
				// So is a semaphore undeclared behind its back; declaring it
				// again continues its tokens.
				PreConfig:        behindTheBack(func(lc *lease.Client) error { return lc.Undeclare(emulator.Context(t), "jobs") }),
				Config:           semaphoreConfig(prov, 5),
				ConfigPlanChecks: expectAction(plancheck.ResourceActionCreate),
				Check: resource.ComposeAggregateTestCheckFunc(
					checkSemaphore(t, sc, declared(5, 0)),
					func(*terraform.State) error { return tk.next() },
				),
			},
		},
	})
}

// expectPriorPermits checks the permits a plan starts from: what Read found
// in Spanner, not what the state had.
type expectPriorPermits struct{ want int64 }

func (e expectPriorPermits) CheckPlan(_ context.Context, req plancheck.CheckPlanRequest, resp *plancheck.CheckPlanResponse) {
	for _, rc := range req.Plan.ResourceChanges {
		if rc.Address != semaphoreAddress {
			continue
		}
		before, _ := rc.Change.Before.(map[string]any)
		if got := fmt.Sprint(before["permits"]); got != fmt.Sprint(e.want) {
			resp.Error = fmt.Errorf("%s: permits before apply %v; want %v, the live limit", semaphoreAddress, before["permits"], e.want)
		}
		return
	}
	resp.Error = fmt.Errorf("the plan has no change for %s", semaphoreAddress)
}

func TestAccSemaphore_lowerWhileHeld(t *testing.T) {
	eachDialect(t, locktable.Dialects, testAccSemaphoreLowerWhileHeld)
}

func testAccSemaphoreLowerWhileHeld(t *testing.T, d locktable.Dialect) {
	db, prov := accDatabaseIn(t, d, d.DDL("locks")...)
	sc := emulator.Client(t, db)
	ctx := emulator.Context(t)
	var held []*lease.Lease
	// other is an application that wants a permit while the test's holders
	// keep theirs; its permit is still held when the semaphore is destroyed.
	other := appClient(t, sc, "other")
	var othersPermit *lease.Lease
	tryOther := func() error {
		l, err := other.TryAcquirePermit(ctx, "jobs")
		if err == nil {
			othersPermit = l
		}
		return err
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy: resource.ComposeAggregateTestCheckFunc(
			checkSemaphore(t, sc, undeclared),
			// Undeclaring deletes nothing: the permit held is still valid.
			func(*terraform.State) error {
				if err := othersPermit.Context().Err(); err != nil {
					return fmt.Errorf("the permit held when the semaphore was undeclared ended: %w", err)
				}
				holders, err := other.Holders(ctx)
				if err != nil {
					return err
				}
				if len(holders) != 1 || holders[0].Name != "jobs" || holders[0].Token != othersPermit.Token() {
					return fmt.Errorf("holders after destroy: %+v; want other's permit of jobs with token %d", holders, othersPermit.Token())
				}
				return nil
			},
		),
		Steps: []resource.TestStep{
			{
				Config: semaphoreConfig(prov, 3),
				Check:  checkSemaphore(t, sc, declared(3, 0)),
			},
			{
				PreConfig: func() {
					for i := range 3 {
						l, err := appClient(t, sc, fmt.Sprintf("worker-%d", i+1)).TryAcquirePermit(ctx, "jobs")
						if err != nil {
							t.Fatal(err)
						}
						held = append(held, l)
					}
				},
				Config: semaphoreConfig(prov, 1),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(semaphoreAddress, plancheck.ResourceActionUpdate),
					plancheck.ExpectKnownValue(semaphoreAddress, tfjsonpath.New("permits"), knownvalue.Int64Exact(1)),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					// Lowering took nothing away.
					func(*terraform.State) error {
						for i, l := range held {
							if err := l.Context().Err(); err != nil {
								return fmt.Errorf("worker-%d's permit ended when the limit was lowered: %w", i+1, err)
							}
						}
						return nil
					},
					checkSemaphore(t, sc, declared(1, 3)),
					// But nothing is granted until fewer than the limit are held.
					func(*terraform.State) error {
						for len(held) > 0 {
							if err := tryOther(); !errors.Is(err, lease.ErrNotAcquired) {
								return fmt.Errorf("TryAcquirePermit with %d of 1 permits held: %v; want ErrNotAcquired", len(held), err)
							}
							if err := held[0].Release(ctx); err != nil {
								return err
							}
							held = held[1:]
						}
						return tryOther()
					},
					checkSemaphore(t, sc, declared(1, 1)),
				),
			},
		},
	})
}

func TestAccSemaphore_importExisting(t *testing.T) {
	eachDialect(t, locktable.Dialects, testAccSemaphoreImportExisting)
}

func testAccSemaphoreImportExisting(t *testing.T, d locktable.Dialect) {
	db, prov := accDatabaseIn(t, d, d.DDL("locks")...)
	sc := emulator.Client(t, db)
	admin := appClient(t, sc, "admin")
	if err := admin.SetPermits(emulator.Context(t), "jobs", 4); err != nil {
		t.Fatal(err)
	}
	holdLease(t, sc, "a-lock", "worker-1")
	if err := holdLease(t, sc, "old-lock", "worker-1").Release(emulator.Context(t)); err != nil {
		t.Fatal(err)
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             checkSemaphore(t, sc, undeclared),
		Steps: []resource.TestStep{
			{
				// Never taken over silently.
				Config:      semaphoreConfig(prov, 4),
				ExpectError: diagnostic("Semaphore already declared", `"jobs" is already declared`, "with 4 permit(s)", "terraform import"),
			},
			{
				// Locks and semaphores share the table's names: a held lock
				// is refused at plan.
				Config: prov + `
resource "spannerlock_semaphore" "lock" {
  table   = "locks"
  name    = "a-lock"
  permits = 1
}
`,
				PlanOnly:    true,
				ExpectError: diagnostic("Name is a lock", `"a-lock" is a lock in table locks`, `held now by "worker-1"`),
			},
			{
				// One nobody holds is seen only by apply: lease reads
				// holders, not the kind of a name.
				Config: prov + `
resource "spannerlock_semaphore" "lock" {
  table   = "locks"
  name    = "old-lock"
  permits = 1
}
`,
				// Refused at plan, though nobody holds the lock now.
				ExpectError: diagnostic("Name is a lock", `"old-lock" is a lock, not a semaphore`),
			},
			{
				Config:        semaphoreConfig(prov, 4),
				ResourceName:  semaphoreAddress,
				ImportState:   true,
				ImportStateId: db + "/tables/locks/semaphores/absent",
				ExpectError:   diagnostic("Cannot import non-existent remote object"),
			},
			{
				Config:        semaphoreConfig(prov, 4),
				ResourceName:  semaphoreAddress,
				ImportState:   true,
				ImportStateId: emulator.Shared(t).Instance() + "/databases/absent/tables/locks/semaphores/jobs",
				ExpectError:   diagnostic("Cannot import non-existent remote object"),
			},
			{
				Config:        semaphoreConfig(prov, 4),
				ResourceName:  semaphoreAddress,
				ImportState:   true,
				ImportStateId: db + "/tables/locks/jobs",
				ExpectError:   diagnostic("Invalid import ID", "must be projects/P/instances/I/databases/D/tables/T/semaphores/N"),
			},
			{
				Config:             semaphoreConfig(prov, 4),
				ResourceName:       semaphoreAddress,
				ImportState:        true,
				ImportStateId:      db + "/tables/locks/semaphores/jobs",
				ImportStatePersist: true,
			},
			{
				Config:   semaphoreConfig(prov, 4),
				PlanOnly: true,
			},
			{
				// Renaming replaces: refused before the old one is undeclared.
				PreConfig: func() {
					if err := admin.SetPermits(emulator.Context(t), "taken", 1); err != nil {
						t.Fatal(err)
					}
				},
				Config:      strings.Replace(semaphoreConfig(prov, 4), `name    = "jobs"`, `name    = "taken"`, 1),
				PlanOnly:    true,
				ExpectError: diagnostic("Semaphore already declared", `"taken" is already declared`),
			},
		},
	})
}

func TestAccSemaphore_planTimeErrors(t *testing.T) {
	_, prov := accDatabase(t)
	noDatabase := requiredProviders + fmt.Sprintf("provider \"spannerlock\" {\n  emulator_host = %q\n}\n", emulator.Shared(t).Host())
	semaphore := func(provider, table, name string, permits any) string {
		return provider + fmt.Sprintf(`
resource "spannerlock_semaphore" "s" {
  table   = %q
  name    = %q
  permits = %v
}
`, table, name, permits)
	}
	resource.ParallelTest(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config:      semaphore(prov, "locks", "jobs", 0),
				PlanOnly:    true,
				ExpectError: diagnostic("Invalid number", "Must be a whole number, at least 1, not 0."),
			},
			{
				// Not the framework's conversion error, "always an error in
				// the provider".
				Config:      semaphore(prov, "locks", "jobs", 2.5),
				PlanOnly:    true,
				ExpectError: diagnostic("Invalid number", "Must be a whole number, at least 1, not 2.5."),
			},
			{
				Config:      semaphore(prov, "2locks", "jobs", 1),
				PlanOnly:    true,
				ExpectError: diagnostic("Invalid table name", "\n"+`Table name "2locks" must start with a letter (A-Z or a-z: ASCII only), not '2'`),
			},
			{
				Config:      semaphore(prov, "locks", "", 1),
				PlanOnly:    true,
				ExpectError: diagnostic("Invalid semaphore name", "\nLease name is empty."),
			},
			{
				Config:      semaphore(noDatabase, "locks", "jobs", 1),
				PlanOnly:    true,
				ExpectError: diagnostic("No database", "set database here, in the provider block"),
			},
			{
				Config: prov + `
data "spannerlock_semaphore" "s" {
  table = "my-locks"
  name  = ""
}
`,
				PlanOnly:    true,
				ExpectError: diagnostic("Invalid table name", "only ASCII letters, digits and underscores, not '-'"),
			},
		},
	})
}

func TestParseSemaphoreImportID(t *testing.T) {
	const db = "projects/p/instances/i/databases/d"
	for _, c := range []struct {
		id, defaultDB, wantDB, wantTable, wantName string
	}{
		{db + "/tables/locks/semaphores/jobs", "", db, "locks", "jobs"},
		{db + "/tables/locks/semaphores/jobs", "projects/q/instances/j/databases/e", db, "locks", "jobs"},
		{"locks/semaphores/jobs", db, db, "locks", "jobs"},
		// Names may hold anything, the separators included.
		{db + "/tables/locks/semaphores/a/semaphores/b", "", db, "locks", "a/semaphores/b"},
		{"locks/semaphores/" + db + "/tables/x", db, db, "locks", db + "/tables/x"},
		{"projects/semaphores/jobs", db, db, "projects", "jobs"},
	} {
		gotDB, gotTable, gotName, err := parseSemaphoreImportID(c.id, c.defaultDB)
		if err != nil || gotDB != c.wantDB || gotTable != c.wantTable || gotName != c.wantName {
			t.Errorf("parseSemaphoreImportID(%q, %q) = %q, %q, %q, %v; want %q, %q, %q",
				c.id, c.defaultDB, gotDB, gotTable, gotName, err, c.wantDB, c.wantTable, c.wantName)
		}
	}
	for _, c := range []struct{ id, defaultDB string }{
		{"locks/semaphores/jobs", ""}, // no database to use
		{"jobs", db},
		{"locks/jobs", db},
		{"locks/semaphores/", db},
		{"2locks/semaphores/jobs", db},
		{db + "/tables/locks", db},
		{db + "/tables/locks/leases/jobs", db},
		{"projects/p/instances/i/tables/locks/semaphores/jobs", ""},
		{db + "/tables/locks/semaphores/\xff", db},
	} {
		if _, _, _, err := parseSemaphoreImportID(c.id, c.defaultDB); err == nil {
			t.Errorf("parseSemaphoreImportID(%q, %q) succeeded; want an error", c.id, c.defaultDB)
		}
	}
}

func TestDescribePermitsListsAtMostFive(t *testing.T) {
	s := lease.Semaphore{Name: "jobs", Permits: 1}
	for i := range 7 {
		s.Holders = append(s.Holders, lease.Holder{Name: "jobs", HolderID: fmt.Sprintf("w%d", i), Token: int64(i + 10)})
	}
	got := describePermits("locks", s)
	for _, want := range []string{`"jobs" in table locks`, "7 permit(s)", `held by "w4" with token 14`, "and 2 more", "stay valid"} {
		if !strings.Contains(got, want) {
			t.Errorf("warning %q does not mention %q", got, want)
		}
	}
	if strings.Contains(got, `"w5"`) {
		t.Errorf("warning lists more than five holders: %q", got)
	}
}

// Spanner resolves table names regardless of case, so a change of case
// only is the same table: recorded in place, never a new declaration. In a
// PostgreSQL-dialect database, whose SQL names tables case-sensitively,
// nothing given the other spelling finds the table, so the plan refuses it.
func TestAccSemaphore_tableLetterCase(t *testing.T) {
	eachDialect(t, locktable.Dialects, testAccSemaphoreTableLetterCase)
}

func testAccSemaphoreTableLetterCase(t *testing.T, d locktable.Dialect) {
	db, prov := accDatabaseIn(t, d, d.DDL("locks")...)
	sc := emulator.Client(t, db)
	tk := &tokens{t: t, sc: sc}
	unchanged := resource.ComposeAggregateTestCheckFunc(
		checkSemaphore(t, sc, declared(2, 0)),
		func(*terraform.State) error { return tk.next() },
	)
	upperCase := strings.Replace(semaphoreConfig(prov, 2), `table   = "locks"`, `table   = "LOCKS"`, 1)
	misspelled := diagnostic("Table LOCKS is spelled locks", "PostgreSQL-dialect database", `Set table = "locks"`)
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             checkSemaphore(t, sc, undeclared),
		Steps: append([]resource.TestStep{{
			Config: semaphoreConfig(prov, 2),
			Check:  unchanged,
		}}, byDialect(d, []resource.TestStep{{
			Config:           upperCase,
			ConfigPlanChecks: expectAction(plancheck.ResourceActionUpdate),
			ConfigStateChecks: []statecheck.StateCheck{
				expectSemaphore("table", knownvalue.StringExact("LOCKS")),
				expectSemaphore("id", knownvalue.StringExact(db+"/tables/LOCKS/semaphores/jobs")),
			},
			Check: unchanged,
		}}, []resource.TestStep{
			{
				Config:      upperCase,
				ExpectError: misspelled,
			},
			{
				// A new semaphore too, before apply could fail on it.
				Config: semaphoreConfig(prov, 2) + `
resource "spannerlock_semaphore" "other" {
  table   = "LOCKS"
  name    = "other"
  permits = 1
}
`,
				PlanOnly:    true,
				ExpectError: misspelled,
			},
			{
				Config: semaphoreConfig(prov, 2),
				Check:  unchanged,
			},
		})...),
	})
}

func TestAccSemaphore_missingTable(t *testing.T) {
	eachDialect(t, locktable.Dialects, testAccSemaphoreMissingTable)
}

func testAccSemaphoreMissingTable(t *testing.T, d locktable.Dialect) {
	_, prov := accDatabaseIn(t, d, d.DDL("locks")...)
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			Config:      strings.Replace(semaphoreConfig(prov, 2), `table   = "locks"`, `table   = "absent"`, 1),
			ExpectError: diagnostic("Table does not exist", "Lock table absent does not exist in", "spannerlock_table"),
		}},
	})
}

// The plan warns about a semaphore's missing table, except when the same
// plan creates it.
func TestAccSemaphore_missingTableWarnsAtPlan(t *testing.T) {
	eachDialect(t, locktable.Dialects, testAccSemaphoreMissingTableWarnsAtPlan)
}

func testAccSemaphoreMissingTableWarnsAtPlan(t *testing.T, d locktable.Dialect) {
	_, prov := accDatabaseIn(t, d)
	tf := newTerraformCLI(t)
	ctx := cliContext(t)
	tf.write(strings.Replace(semaphoreConfig(prov, 2), `table   = "locks"`, `table   = "absent"`, 1))
	tf.run(ctx, "plan", "-json").ok(t).has(t, "warning", "Table absent does not exist", "apply will fail")

	tf.write(tableConfig(prov, unprotected) + strings.Replace(semaphoreConfig("", 2), `table   = "locks"`, `table   = spannerlock_table.locks.name`, 1))
	tf.run(ctx, "plan", "-json").ok(t).lacks(t, "Table locks does not exist")
}

// Drift that keeps semaphores from being read (locks_permits dropped by
// hand) must not fail the plan that repairs it: the table plans the
// repair, the semaphore keeps its state, and after the apply both work.
func TestAccSemaphore_tableDriftIsRepaired(t *testing.T) {
	eachDialect(t, locktable.Dialects, testAccSemaphoreTableDriftIsRepaired)
}

func testAccSemaphoreTableDriftIsRepaired(t *testing.T, d locktable.Dialect) {
	db, prov := accDatabaseIn(t, d)
	sc := emulator.Client(t, db)
	tf := newTerraformCLI(t)
	ctx := cliContext(t)
	tf.write(tableConfig(prov, disposable) + strings.Replace(semaphoreConfig("", 2), `table   = "locks"`, `table   = spannerlock_table.locks.name`, 1))
	tf.run(ctx, "apply", "-auto-approve", "-json").ok(t)
	if err := emulator.Shared(t).UpdateDDL(ctx, db, "DROP TABLE "+d.QuotePermitsTable("locks")); err != nil {
		t.Fatal(err)
	}

	plan := tf.run(ctx, "plan", "-json").ok(t)
	plan.plans(t, map[string]string{tableAddress: "update", semaphoreAddress: ""})
	plan.has(t, "warning", "Table locks has drifted", `Semaphore "jobs" in table locks cannot be read`)
	plan.has(t, "warning", "Table locks will be changed in place", "table locks_permits does not exist")
	if ddl := stringList(tf.plannedValues(ctx, tableAddress)["planned_ddl"]); len(ddl) != 1 || !strings.HasPrefix(ddl[0], "CREATE TABLE "+d.QuotePermitsTable("locks")) {
		t.Errorf("planned_ddl %q; want the CREATE TABLE of %s", ddl, d.QuotePermitsTable("locks"))
	}
	tf.run(ctx, "apply", "-auto-approve", "-json").ok(t)

	if err := checkSemaphore(t, sc, declared(2, 0))(nil); err != nil {
		t.Fatalf("after the repair: %v", err)
	}
	permit, err := appClient(t, sc, "worker").TryAcquirePermit(ctx, "jobs")
	if err != nil {
		t.Fatalf("taking a permit after the repair: %v", err)
	}
	if err := permit.Release(ctx); err != nil {
		t.Fatal(err)
	}
	tf.run(ctx, "plan", "-detailed-exitcode", "-json").ok(t)
}

// A semaphore under the name of a held lock fails at plan, not at apply:
// locks and semaphores share a table's names.
func TestAccSemaphore_lockName(t *testing.T) {
	eachDialect(t, locktable.Dialects, func(t *testing.T, d locktable.Dialect) {
		db, prov := accDatabaseIn(t, d, d.DDL("locks")...)
		sc := emulator.Client(t, db)
		tf := newTerraformCLI(t)
		ctx := cliContext(t)
		holdLease(t, sc, "jobs", "worker-1")
		tf.write(semaphoreConfig(prov, 2))
		tf.run(ctx, "plan", "-json").failed(t).has(t, "error", "Name is a lock",
			`"jobs" is a lock in table locks of `+db+`, held now by "worker-1" with token 1`)
		// A lock nobody holds now keeps its row (and its tokens): refused
		// at plan all the same.
		lc, err := lease.NewClient(sc, "locks")
		if err != nil {
			t.Fatal(err)
		}
		defer lc.Close()
		l, err := lc.TryAcquire(ctx, "free-lock")
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		tf.write(strings.Replace(semaphoreConfig(prov, 2), `name    = "jobs"`, `name    = "free-lock"`, 1))
		tf.run(ctx, "plan", "-json").failed(t).has(t, "error", "Name is a lock", `"free-lock" is a lock, not a semaphore`)
	})
}

// Importing a semaphore from a table that needs a migration first (an
// older schema version, after an upgrade) fails with what to do, rather than
// crashing the provider on a semaphore it could not read; once the table is
// applied, the import goes through.
func TestAccSemaphore_importFromTableBeingMigrated(t *testing.T) {
	eachDialect(t, locktable.Dialects, testAccSemaphoreImportFromTableBeingMigrated)
}

func testAccSemaphoreImportFromTableBeingMigrated(t *testing.T, d locktable.Dialect) {
	db, prov := accDatabaseIn(t, d, d.DDLAt("locks", locktable.Latest-1)...)
	sc := emulator.Client(t, db)
	tf := newTerraformCLI(t)
	ctx := cliContext(t)
	// Declared by an older release (this one's lease needs the migration
	// to write it).
	if _, err := sc.Apply(ctx, []*spanner.Mutation{spanner.Insert("locks",
		[]string{"name", "token", "kind", "permits"}, []any{"jobs", 1, "semaphore", 2})}); err != nil {
		t.Fatal(err)
	}
	tf.write(prov + `
import {
  to = spannerlock_table.locks
  id = "locks"
}

import {
  to = spannerlock_semaphore.jobs
  id = "locks/semaphores/jobs"
}

resource "spannerlock_table" "locks" {
  name                = "locks"
  deletion_protection = false
}
` + strings.Replace(semaphoreConfig("", 2), `table   = "locks"`, `table   = spannerlock_table.locks.name`, 1))

	tf.run(ctx, "plan", "-json").failed(t).has(t, "error", "Cannot import semaphore",
		`Semaphore "jobs" in table locks cannot be read`, "Apply the spannerlock_table resource for table locks first")
	tf.run(ctx, "apply", "-auto-approve", "-target="+tableAddress, "-json").ok(t)
	tf.run(ctx, "apply", "-auto-approve", "-json").ok(t)
	tf.run(ctx, "plan", "-detailed-exitcode", "-json").ok(t)
	if err := checkSemaphore(t, sc, declared(2, 0))(nil); err != nil {
		t.Fatalf("after the import: %v", err)
	}
}
