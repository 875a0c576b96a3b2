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
)

func TestAccLeasesDataSource(t *testing.T) {
	eachDialect(t, locktable.Dialects, testAccLeasesDataSource)
}

// The data source lists what lease.Client.Holders (and spannerlock
// status) lists: every live lock and permit with its holder and token, and
// nothing released.
func testAccLeasesDataSource(t *testing.T, d locktable.Dialect) {
	db, prov := accDatabaseIn(t, d, d.DDL("locks")...)
	sc := emulator.Client(t, db)
	ctx := emulator.Context(t)
	lock := holdLease(t, sc, "deploy", "worker-1")
	if err := holdLease(t, sc, "released", "worker-1").Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := appClient(t, sc, "admin").SetPermits(ctx, "migrations", 3); err != nil {
		t.Fatal(err)
	}
	permit, err := appClient(t, sc, "worker-2").TryAcquirePermit(ctx, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	stamp := func(at time.Time) string { return at.UTC().Format(time.RFC3339Nano) }
	holders, err := appClient(t, sc, "reader").Holders(ctx)
	if err != nil || len(holders) != 2 {
		t.Fatalf("Holders = %v, %v; want the lock and the permit", holders, err)
	}
	expires := map[string]string{}
	for _, h := range holders {
		expires[h.Name] = stamp(h.ExpiresAt)
	}
	config := prov + `
data "spannerlock_leases" "all" {
  table = "locks"
}
`
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			Config: config,
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue("data.spannerlock_leases.all", tfjsonpath.New("id"), knownvalue.StringExact(db+"/tables/locks")),
				statecheck.ExpectKnownValue("data.spannerlock_leases.all", tfjsonpath.New("leases"), knownvalue.ListExact([]knownvalue.Check{
					knownvalue.ObjectExact(map[string]knownvalue.Check{
						"kind":        knownvalue.StringExact("lock"),
						"name":        knownvalue.StringExact("deploy"),
						"slot":        knownvalue.Null(),
						"holder_id":   knownvalue.StringExact("worker-1"),
						"token":       knownvalue.Int64Exact(lock.Token()),
						"acquired_at": knownvalue.StringExact(stamp(lock.AcquiredAt())),
						"renewed_at":  knownvalue.NotNull(),
						"expires_at":  knownvalue.StringExact(expires["deploy"]),
					}),
					knownvalue.ObjectExact(map[string]knownvalue.Check{
						"kind":        knownvalue.StringExact("permit"),
						"name":        knownvalue.StringExact("migrations"),
						"slot":        knownvalue.NotNull(),
						"holder_id":   knownvalue.StringExact("worker-2"),
						"token":       knownvalue.Int64Exact(permit.Token()),
						"acquired_at": knownvalue.StringExact(stamp(permit.AcquiredAt())),
						"renewed_at":  knownvalue.NotNull(),
						"expires_at":  knownvalue.StringExact(expires["migrations"]),
					}),
				})),
			},
		}},
	})
}

func TestAccLeasesDataSource_emptyAndMissingTable(t *testing.T) {
	eachDialect(t, locktable.Dialects, testAccLeasesDataSourceEmptyAndMissingTable)
}

func testAccLeasesDataSourceEmptyAndMissingTable(t *testing.T, d locktable.Dialect) {
	db, prov := accDatabaseIn(t, d, d.DDL("locks")...)
	read := func(table string) string {
		return prov + fmt.Sprintf(`
data "spannerlock_leases" "all" {
  table = %q
}
`, table)
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: read("locks"),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("data.spannerlock_leases.all", tfjsonpath.New("leases"), knownvalue.ListSizeExact(0)),
				},
			},
			{
				Config:      read("absent"),
				ExpectError: diagnostic("Cannot read leases", "Lock table absent does not exist in "+db),
			},
		},
	})
}
