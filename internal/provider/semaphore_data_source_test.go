package provider

import (
	"fmt"
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

func TestAccSemaphoreDataSource(t *testing.T) {
	eachDialect(t, locktable.Dialects, testAccSemaphoreDataSource)
}

func testAccSemaphoreDataSource(t *testing.T, d locktable.Dialect) {
	db, prov := accDatabaseIn(t, d)
	sc := emulator.Client(t, db)
	ctx := emulator.Context(t)
	// The permits this test holds would otherwise block the final destroy.
	config := tableConfig(prov, unprotected+"  force_destroy = true\n") + `
resource "spannerlock_semaphore" "jobs" {
  table   = spannerlock_table.locks.name
  name    = "jobs"
  permits = 2
}

data "spannerlock_semaphore" "jobs" {
  table = spannerlock_semaphore.jobs.table
  name  = spannerlock_semaphore.jobs.name
}
`
	never := `
data "spannerlock_semaphore" "never" {
  table = spannerlock_table.locks.name
  name  = "never-declared"
}
`
	upperCase := `
data "spannerlock_semaphore" "upper" {
  table = "LOCKS"
  name  = spannerlock_semaphore.jobs.name
}
`
	jobs := func(attr tfjsonpath.Path, v knownvalue.Check) statecheck.StateCheck {
		return statecheck.ExpectKnownValue("data.spannerlock_semaphore.jobs", attr, v)
	}
	// Semaphore is what applications see; the data source must say the same.
	var want lease.Semaphore
	holder := func(i int, attr string) tfjsonpath.Path {
		return tfjsonpath.New("holders").AtSliceIndex(i).AtMapKey(attr)
	}
	holderChecks := func(i int) []statecheck.StateCheck {
		return []statecheck.StateCheck{
			jobs(holder(i, "holder_id"), knownvalue.StringFunc(func(got string) error {
				if w := want.Holders[i].HolderID; got != w {
					return fmt.Errorf("holders[%d].holder_id %q, want %q", i, got, w)
				}
				return nil
			})),
			jobs(holder(i, "token"), knownvalue.Int64Func(func(got int64) error {
				if w := want.Holders[i].Token; got != w {
					return fmt.Errorf("holders[%d].token %d, want %d", i, got, w)
				}
				return nil
			})),
			jobs(holder(i, "expires_at"), knownvalue.StringFunc(func(got string) error {
				if w := want.Holders[i].ExpiresAt.UTC().Format(time.RFC3339Nano); got != w {
					return fmt.Errorf("holders[%d].expires_at %q, want %q", i, got, w)
				}
				return nil
			})),
		}
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				// Read during apply, after the table and the declaration.
				Config: config,
				ConfigStateChecks: []statecheck.StateCheck{
					jobs(tfjsonpath.New("id"), knownvalue.StringExact(db+"/tables/locks/semaphores/jobs")),
					jobs(tfjsonpath.New("database"), knownvalue.StringExact(db)),
					jobs(tfjsonpath.New("permits"), knownvalue.Int64Exact(2)),
					jobs(tfjsonpath.New("in_use"), knownvalue.Int64Exact(0)),
					jobs(tfjsonpath.New("holders"), knownvalue.ListExact([]knownvalue.Check{})),
				},
			},
			{
				PreConfig: func() {
					var tokens []int64
					for _, h := range []string{"worker-1", "worker-2"} {
						l, err := appClient(t, sc, h).TryAcquirePermit(ctx, "jobs")
						if err != nil {
							t.Fatal(err)
						}
						tokens = append(tokens, l.Token())
					}
					lc := appClient(t, sc, "reader")
					var err error
					if want, err = lc.Semaphore(ctx, "jobs"); err != nil {
						t.Fatal(err)
					}
					if want.InUse() != 2 || want.Holders[0].Token != tokens[0] || want.Holders[1].Token != tokens[1] {
						t.Fatalf("Semaphore: %+v; want the permits with tokens %v", want, tokens)
					}
				},
				Config: config,
				ConfigStateChecks: append([]statecheck.StateCheck{
					jobs(tfjsonpath.New("permits"), knownvalue.Int64Exact(2)),
					jobs(tfjsonpath.New("in_use"), knownvalue.Int64Exact(2)),
					jobs(tfjsonpath.New("holders"), knownvalue.ListSizeExact(2)),
				}, append(holderChecks(0), holderChecks(1)...)...),
			},
			// The table in another letter case: the same table to GoogleSQL;
			// to PostgreSQL's SQL none, and the error says what to write.
			byDialect(d, resource.TestStep{
				Config:            config + upperCase,
				ConfigStateChecks: []statecheck.StateCheck{statecheck.ExpectKnownValue("data.spannerlock_semaphore.upper", tfjsonpath.New("in_use"), knownvalue.Int64Exact(2))},
			}, resource.TestStep{
				Config:      config + upperCase,
				ExpectError: diagnostic("Cannot read semaphore", "Lock table locks exists in "+db+" as locks", `Set table = "locks"`),
			}),
			{
				Config:      config + never,
				ExpectError: diagnostic("Semaphore never-declared is not declared", `"never-declared" is not declared in table locks`, "spannerlock_semaphore resource", "SetPermits"),
			},
		},
	})
}
