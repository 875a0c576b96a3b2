package provider

import (
	"testing"

	"github.com/hashicorp/go-version"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
)

// Resource identities came with Terraform 1.12.
var terraform112 = version.Must(version.NewVersion("1.12.0"))

func TestAccIdentity_import(t *testing.T) {
	eachDialect(t, locktable.Dialects, testAccIdentityImport)
}

// A table and a semaphore have identities made of what names them, and
// import { identity = {...} } adopts each into a plan with no changes.
func testAccIdentityImport(t *testing.T, d locktable.Dialect) {
	db, prov := accDatabaseIn(t, d)
	semaphore := `
resource "spannerlock_semaphore" "jobs" {
  table   = spannerlock_table.locks.name
  name    = "jobs"
  permits = 2
}
`
	config := tableConfig(prov, unprotected) + semaphore
	// What an import block adopts: deletion_protection exists only in
	// Terraform, so an import sets its default. The state of the first step
	// stays unprotected, for the destroy at the end.
	adopting := tableConfig(prov, "") + semaphore
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		TerraformVersionChecks:   []tfversion.TerraformVersionCheck{terraformOnly{minimum: terraform112, feature: "resource identities"}},
		Steps: []resource.TestStep{
			{
				Config: config,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectIdentity(tableAddress, map[string]knownvalue.Check{
						"database": knownvalue.StringExact(db),
						"name":     knownvalue.StringExact("locks"),
					}),
					statecheck.ExpectIdentity(semaphoreAddress, map[string]knownvalue.Check{
						"database": knownvalue.StringExact(db),
						"table":    knownvalue.StringExact("locks"),
						"name":     knownvalue.StringExact("jobs"),
					}),
				},
			},
			{
				Config:          adopting,
				ResourceName:    tableAddress,
				ImportState:     true,
				ImportStateKind: resource.ImportBlockWithResourceIdentity,
			},
			{
				Config:          adopting,
				ResourceName:    semaphoreAddress,
				ImportState:     true,
				ImportStateKind: resource.ImportBlockWithResourceIdentity,
			},
		},
	})
}

func TestAccIdentity_importTableWithCleanupAfter(t *testing.T) {
	eachDialect(t, locktable.Dialects, testAccIdentityImportTableWithCleanupAfter)
}

// A table with cleanup_after imports by identity into a plan with no
// changes. The state of an import holds no cleanup_after, and pending_ddl
// was computed from it before the live period was read, so the import
// recorded DROP ROW DELETION POLICY (DROP TTL in PostgreSQL) and planned
// an update of pending_ddl.
func testAccIdentityImportTableWithCleanupAfter(t *testing.T, d locktable.Dialect) {
	_, prov := accDatabaseIn(t, d)
	cleanup := `  cleanup_after = "30d"` + "\n"
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		TerraformVersionChecks:   []tfversion.TerraformVersionCheck{terraformOnly{minimum: terraform112, feature: "resource identities"}},
		Steps: []resource.TestStep{
			{Config: tableConfig(prov, unprotected+cleanup)},
			{
				Config:          tableConfig(prov, cleanup),
				ResourceName:    tableAddress,
				ImportState:     true,
				ImportStateKind: resource.ImportBlockWithResourceIdentity,
			},
		},
	})
}
