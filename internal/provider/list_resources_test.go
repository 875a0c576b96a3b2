package provider

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
)

func TestAccListResources_queryAdopts(t *testing.T) {
	eachDialect(t, locktable.Dialects, testAccListResourcesQueryAdopts)
}

// terraform query lists the lock tables of a database (and no other table)
// and the semaphores of a table; the configuration it generates imports
// them by identity, and the plan after the import is empty, for a table
// with cleanup_after too (jobs): the listed state's pending_ddl was computed
// before its live cleanup period was read, and so held DROP ROW DELETION
// POLICY, which every plan of the generated configuration updated.
func testAccListResourcesQueryAdopts(t *testing.T, d locktable.Dialect) {
	ddl := append(append(d.DDL("locks"), d.CreateDDL("jobs", locktable.Options{CleanupAfter: 30 * 24 * time.Hour})...), reportsDDL(d))
	db, prov := accDatabaseIn(t, d, ddl...)
	sc := emulator.Client(t, db)
	tf := newTerraformCLI(t)
	ctx := cliContext(t)
	tf.requireTerraformOnly(ctx, terraform114, "list resources")
	admin := appClient(t, sc, "admin")
	for name, permits := range map[string]int64{"migrations": 3, "deploys": 1} {
		if err := admin.SetPermits(ctx, name, permits); err != nil {
			t.Fatal(err)
		}
	}
	// A lock is not a semaphore, and is not listed as one.
	holdLease(t, sc, "a-lock", "worker-1")

	tf.write(prov)
	query := `
list "spannerlock_table" "all" {
  provider = spannerlock
  config {}
}

list "spannerlock_semaphore" "locks" {
  provider = spannerlock
  config {
    table = "locks"
  }
}
`
	if err := os.WriteFile(filepath.Join(tf.dir, "adopt.tfquery.hcl"), []byte(query), 0o600); err != nil {
		t.Fatal(err)
	}
	r := tf.run(ctx, "query", "-json", "-generate-config-out=generated.tf").ok(t)
	found := map[string][]string{}
	for _, line := range strings.Split(r.output, "\n") {
		var m struct {
			Type       string `json:"type"`
			ListResult struct {
				Address  string            `json:"address"`
				Identity map[string]string `json:"identity"`
			} `json:"list_resource_found"`
		}
		if json.Unmarshal([]byte(line), &m) != nil || m.Type != "list_resource_found" {
			continue
		}
		id := m.ListResult.Identity
		if id["database"] != db {
			t.Errorf("%s: identity %v; want database %s", m.ListResult.Address, id, db)
		}
		found[m.ListResult.Address] = append(found[m.ListResult.Address], id["name"])
	}
	for addr, want := range map[string][]string{
		"list.spannerlock_table.all":       {"jobs", "locks"},
		"list.spannerlock_semaphore.locks": {"deploys", "migrations"},
	} {
		got := found[addr]
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("terraform query found %v for %s, want %v\n%s", got, addr, want, r.output)
		}
	}
	generated, err := os.ReadFile(filepath.Join(tf.dir, "generated.tf"))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(regexp.MustCompile(`(?m)^import \{`).FindAll(generated, -1)); n != 4 {
		t.Errorf("generated.tf has %d import blocks, want 4:\n%s", n, generated)
	}
	if !regexp.MustCompile(`(?m)^\s*cleanup_after\s*=\s*"30d"$`).Match(generated) {
		t.Errorf("generated.tf does not give table jobs its cleanup_after of 30 days:\n%s", generated)
	}

	// The generated configuration adopts what exists, changing nothing.
	r = tf.run(ctx, "plan", "-json").ok(t)
	if got := r.output; !strings.Contains(got, `"import":4`) && !strings.Contains(got, `"import": 4`) {
		t.Errorf("the plan of the generated configuration does not import 4 resources:\n%s\n%s", generated, r.describe())
	}
	for addr, action := range r.planned {
		if action != "import" && action != "noop" {
			t.Errorf("the plan of the generated configuration would %s %s:\n%s", action, addr, generated)
		}
	}
	tf.run(ctx, "apply", "-auto-approve", "-json").ok(t)
	state := tf.run(ctx, "show", "-json").ok(t)
	var shown struct {
		Values struct {
			RootModule struct {
				Resources []struct {
					Type   string         `json:"type"`
					Values map[string]any `json:"values"`
				} `json:"resources"`
			} `json:"root_module"`
		} `json:"values"`
	}
	if err := json.Unmarshal([]byte(state.output), &shown); err != nil {
		t.Fatalf("terraform show -json: %v\n%s", err, state.output)
	}
	var adopted []string
	for _, res := range shown.Values.RootModule.Resources {
		adopted = append(adopted, fmt.Sprintf("%s %v %v", res.Type, res.Values["name"], res.Values["permits"]))
	}
	slices.Sort(adopted)
	want := []string{
		"spannerlock_semaphore deploys 1", "spannerlock_semaphore migrations 3",
		"spannerlock_table jobs <nil>", "spannerlock_table locks <nil>",
	}
	if !slices.Equal(adopted, want) {
		t.Errorf("the state after applying the generated configuration holds %q, want %q", adopted, want)
	}
	// Adopted, not taken over carelessly: the tables stay protected.
	tf.run(ctx, "plan", "-json", "-detailed-exitcode").ok(t)
}
