package provider

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

func TestAccLeaderDataSource(t *testing.T) {
	eachDialect(t, locktable.Dialects, testAccLeaderDataSource)
}

func testAccLeaderDataSource(t *testing.T, d locktable.Dialect) {
	db, prov := accDatabaseIn(t, d)
	sc := emulator.Client(t, db)
	// The lease this test holds would otherwise block the final destroy.
	table := tableConfig(prov, unprotected+"  force_destroy = true\n")
	free := `
data "spannerlock_leader" "free" {
  table = spannerlock_table.locks.name
  name  = "nobody"
}
`
	upperCase := `
data "spannerlock_leader" "upper" {
  table = "LOCKS"
  name  = "jobs"
}
`
	held := `
data "spannerlock_leader" "jobs" {
  table = spannerlock_table.locks.name
  name  = "jobs"
}
`
	var l *lease.Lease
	// Holder is what applications see; the data source must say the same.
	var want lease.Holder
	sameAs := func(field func(lease.Holder) string) knownvalue.Check {
		return knownvalue.StringFunc(func(got string) error {
			if w := field(want); got != w {
				return fmt.Errorf("got %q, want %q (from lease.Client.Holder)", got, w)
			}
			return nil
		})
	}
	stamp := func(at func(lease.Holder) time.Time) func(lease.Holder) string {
		return func(h lease.Holder) string { return at(h).UTC().Format(time.RFC3339Nano) }
	}
	jobs := func(attr string, v knownvalue.Check) statecheck.StateCheck {
		return statecheck.ExpectKnownValue("data.spannerlock_leader.jobs", tfjsonpath.New(attr), v)
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: table + free,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("data.spannerlock_leader.free", tfjsonpath.New("held"), knownvalue.Bool(false)),
					statecheck.ExpectKnownValue("data.spannerlock_leader.free", tfjsonpath.New("holder_id"), knownvalue.Null()),
					statecheck.ExpectKnownValue("data.spannerlock_leader.free", tfjsonpath.New("token"), knownvalue.Null()),
					statecheck.ExpectKnownValue("data.spannerlock_leader.free", tfjsonpath.New("expires_at"), knownvalue.Null()),
					statecheck.ExpectKnownValue("data.spannerlock_leader.free", tfjsonpath.New("id"),
						knownvalue.StringExact(db+"/tables/locks/leases/nobody")),
				},
			},
			{
				PreConfig: func() {
					l = holdLease(t, sc, "jobs", "worker-1")
					lc, err := lease.NewClient(sc, "locks")
					if err != nil {
						t.Fatal(err)
					}
					defer func() { _ = lc.Close() }()
					if want, err = lc.Holder(emulator.Context(t), "jobs"); err != nil {
						t.Fatal(err)
					}
				},
				Config: table + free + held,
				ConfigStateChecks: []statecheck.StateCheck{
					jobs("held", knownvalue.Bool(true)),
					jobs("holder_id", knownvalue.StringExact("worker-1")),
					jobs("token", knownvalue.Int64Func(func(got int64) error {
						if got != l.Token() || got != want.Token {
							return fmt.Errorf("token %d, want the lease's %d", got, l.Token())
						}
						return nil
					})),
					jobs("acquired_at", sameAs(stamp(func(h lease.Holder) time.Time { return h.AcquiredAt }))),
					jobs("renewed_at", sameAs(stamp(func(h lease.Holder) time.Time { return h.RenewedAt }))),
					jobs("expires_at", sameAs(stamp(func(h lease.Holder) time.Time { return h.ExpiresAt }))),
					jobs("database", knownvalue.StringExact(db)),
					statecheck.ExpectKnownValue("data.spannerlock_leader.free", tfjsonpath.New("held"), knownvalue.Bool(false)),
				},
			},
			// The table in another letter case: the same table to GoogleSQL;
			// to PostgreSQL's SQL none, and the error says what to write.
			byDialect(d, resource.TestStep{
				Config: table + upperCase,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("data.spannerlock_leader.upper", tfjsonpath.New("holder_id"), knownvalue.StringExact("worker-1")),
				},
			}, resource.TestStep{
				Config:      table + upperCase,
				ExpectError: diagnostic("Cannot read lease", "Lock table locks exists in "+db+" as locks", `Set table = "locks"`),
			}),
		},
	})
}

// The data sources on a table that does not exist say so, as the semaphore
// resource does, rather than with the SQL error of their query; the leader
// data source on a semaphore's name says why nobody holds it.
func TestAccDataSources_missingTableAndSemaphoreName(t *testing.T) {
	eachDialect(t, locktable.Dialects, func(t *testing.T, d locktable.Dialect) {
		db, prov := accDatabaseIn(t, d, d.DDL("locks")...)
		sc := emulator.Client(t, db)
		tf := newTerraformCLI(t)
		ctx := cliContext(t)
		for _, c := range []struct{ kind, summary string }{
			{"spannerlock_leader", "Cannot read lease"},
			{"spannerlock_semaphore", "Cannot read semaphore"},
		} {
			tf.write(prov + fmt.Sprintf(`
data %q "x" {
  table = "absent"
  name  = "jobs"
}
`, c.kind))
			r := tf.run(ctx, "plan", "-json").failed(t)
			r.has(t, "error", c.summary, "Lock table absent does not exist in "+db, "spannerlock_table.<name>.name")
			for _, diag := range r.diagnostics {
				for _, sql := range []string{"Table not found", "LEFT JOIN", "relation"} {
					if strings.Contains(diag.Detail, sql) {
						t.Errorf("data source %s on a missing table: %q; want no SQL error", c.kind, diag.Detail)
					}
				}
			}
		}

		if err := appClient(t, sc, "admin").SetPermits(ctx, "jobs", 3); err != nil {
			t.Fatal(err)
		}
		tf.write(prov + `
data "spannerlock_leader" "jobs" {
  table = "locks"
  name  = "jobs"
}
`)
		tf.run(ctx, "plan", "-json").ok(t).has(t, "warning", "jobs is a semaphore",
			`"jobs" in table locks is a semaphore with 3 permit(s), 0 of them held now`, "spannerlock_semaphore data source")
	})
}
