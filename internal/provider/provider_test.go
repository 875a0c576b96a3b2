package provider

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
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

func TestMain(m *testing.M) {
	// The acceptance tests skip without TF_ACC; in CI that would pass
	// without running them.
	if emulator.CI() && os.Getenv(resource.EnvTfAcc) == "" {
		fmt.Fprintf(os.Stderr, "CI=true but %s is not set, so the acceptance tests would skip: run them with make test\n", resource.EnvTfAcc)
		os.Exit(1)
	}
	emulator.Main(m)
}

// testAccProvider serves every acceptance test, as one provider process
// serves a whole Terraform run; tests close their database's clients in it
// before the database is dropped.
var testAccProvider = &spannerlockProvider{version: "test"}

var testAccProtoV6ProviderFactories = map[string]func() (tfprotov6.ProviderServer, error){
	"spannerlock": providerserver.NewProtocol6WithError(testAccProvider),
}

func testAccPreCheck(t *testing.T) {
	t.Helper()
	emulator.Shared(t)
}

// accDatabase gives an acceptance test a fresh database, with ddl applied,
// and the provider block that points at it on the emulator.
func accDatabase(t *testing.T, ddl ...string) (db, providerBlock string) {
	t.Helper()
	if os.Getenv(resource.EnvTfAcc) == "" {
		t.Skipf("acceptance test: set %s=1 (make testacc)", resource.EnvTfAcc)
	}
	db = emulator.Database(t, ddl...)
	// Registered after Database's drop, so it runs before it.
	t.Cleanup(func() { testAccProvider.cache.forget(db) })
	return db, providerBlockFor(t, db)
}

func providerBlockFor(t *testing.T, db string) string {
	return requiredProviders + fmt.Sprintf(`
provider "spannerlock" {
  emulator_host = %q
  database      = %q
}
`, emulator.Shared(t).Host(), db)
}

// requiredProviders keeps terraform import (which reads no resource's
// provider from state) from resolving the provider as hashicorp/spannerlock.
const requiredProviders = `
terraform {
  required_providers {
    spannerlock = {
      source = "spannerlock/spannerlock"
    }
  }
}
`

// diagnostic matches an error whose text contains parts in order. Terraform
// wraps diagnostic text at 78 columns, so any space may be a line break.
func diagnostic(parts ...string) *regexp.Regexp {
	quoted := make([]string, len(parts))
	for i, p := range parts {
		quoted[i] = strings.ReplaceAll(regexp.QuoteMeta(p), " ", `\s+`)
	}
	return regexp.MustCompile(`(?s)` + strings.Join(quoted, ".*"))
}

// inspect reads the table's live schema, the source of truth every check
// compares with, rather than trusting Terraform's state.
func inspect(t *testing.T, sc *spanner.Client, table string) (locktable.Inspection, error) {
	t.Helper()
	return locktable.Inspect(emulator.Context(t), sc, table)
}

// checkTable asserts on the live table locks, which every test manages.
func checkTable(t *testing.T, sc *spanner.Client, check func(locktable.Inspection) error) resource.TestCheckFunc {
	t.Helper()
	return func(*terraform.State) error {
		ins, err := inspect(t, sc, "locks")
		if err != nil {
			return err
		}
		return check(ins)
	}
}

func current(ins locktable.Inspection) error {
	if !ins.Current() || ins.Version != locktable.Latest {
		return fmt.Errorf("table %s: exists %t, version %d, diffs %v; want version %d and no diffs", ins.Table, ins.Exists, ins.Version, ins.Diffs, locktable.Latest)
	}
	return nil
}

func gone(ins locktable.Inspection) error {
	if ins.Exists {
		return fmt.Errorf("table %s still exists", ins.Table)
	}
	return nil
}

// holdLease acquires name in table as holder, held until the test ends.
func holdLease(t *testing.T, sc *spanner.Client, table, name, holder string) *lease.Lease {
	t.Helper()
	l, err := appClient(t, sc, table, holder).TryAcquire(emulator.Context(t), name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// appClient is a Client on table as an application has one, with holder as
// its identity, closed when the test ends.
func appClient(t *testing.T, sc *spanner.Client, table, holder string) *lease.Client {
	t.Helper()
	lc, err := lease.NewClient(sc, table,
		lease.WithHolderID(holder),
		// Long enough that neither expiry nor a renewal happens mid-test.
		lease.WithTTL(10*time.Minute),
		// Renewals fail once a test drops the table under the lease.
		lease.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lc.Close() })
	return lc
}

func TestAccProvider_emulatorLooksUpNoCredentials(t *testing.T) {
	db, _ := accDatabase(t, locktable.DDL("locks")...)
	// Each of these would fail a credential lookup.
	t.Setenv("GOOGLE_CREDENTIALS", "not credentials")
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", filepath.Join(t.TempDir(), "missing.json"))
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			Config: requiredProviders + fmt.Sprintf(`
provider "spannerlock" {
  emulator_host = %q
  database      = %q
  credentials   = "not credentials either"
}

data "spannerlock_leader" "free" {
  table = "locks"
  name  = "nobody"
}
`, emulator.Shared(t).Host(), db),
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue("data.spannerlock_leader.free", tfjsonpath.New("held"), knownvalue.Bool(false)),
			},
		}},
	})
}

func TestAccProvider_emulatorHostFromEnvironment(t *testing.T) {
	db, _ := accDatabase(t, locktable.DDL("locks")...)
	// emulator.Main exported SPANNER_EMULATOR_HOST; the provider block
	// names neither the emulator nor credentials.
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			Config: requiredProviders + fmt.Sprintf(`
provider "spannerlock" {
  database = %q
}

data "spannerlock_leader" "free" {
  table = "locks"
  name  = "nobody"
}
`, db),
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue("data.spannerlock_leader.free", tfjsonpath.New("held"), knownvalue.Bool(false)),
			},
		}},
	})
}

func TestAccProvider_badSettingsNameTheAttribute(t *testing.T) {
	db, _ := accDatabase(t)
	// Real Spanner, so that credentials are looked at.
	t.Setenv("SPANNER_EMULATOR_HOST", "")
	t.Setenv("GOOGLE_CREDENTIALS", "")
	t.Setenv("GOOGLE_OAUTH_ACCESS_TOKEN", "")
	t.Setenv("GOOGLE_IMPERSONATE_SERVICE_ACCOUNT", "")
	withProvider := func(settings string) string {
		return requiredProviders + fmt.Sprintf(`
provider "spannerlock" {
%s
}

data "spannerlock_leader" "x" {
  database = %q
  table    = "locks"
  name     = "x"
}
`, settings, db)
	}
	missing := filepath.Join(t.TempDir(), "missing.json")
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config:      withProvider(`credentials = "{not json"`),
				ExpectError: diagnostic("Invalid credentials", "credentials is not valid JSON"),
			},
			{
				Config:      withProvider(fmt.Sprintf(`credentials = %q`, missing)),
				ExpectError: diagnostic("Invalid credentials", "reading it as a file failed"),
			},
			{
				Config:      withProvider(`credentials = "{\"client_email\": \"x\"}"`),
				ExpectError: diagnostic("Invalid credentials", `has no "type"`),
			},
			{
				Config:      withProvider(`credentials = "{\"type\": \"service_account\"}"` + "\n" + `access_token = "t"`),
				ExpectError: diagnostic("Invalid Attribute Combination", "access_token"),
			},
			{
				Config:      withProvider(`database = "projects/p/databases/d"`),
				ExpectError: diagnostic("Attribute database must be a database path like projects/P/instances/I/databases/D"),
			},
			{
				Config:      withProvider(`emulator_host = "localhost"`),
				ExpectError: diagnostic("Invalid emulator host", "emulator_host must be host:port"),
			},
		},
	})
}

// expectPendingDDL checks the plan's prior value of pending_ddl: the
// statements a plan shows that apply will run (the planned value is unknown).
type expectPendingDDL struct {
	address, contains string
}

func (e expectPendingDDL) CheckPlan(_ context.Context, req plancheck.CheckPlanRequest, resp *plancheck.CheckPlanResponse) {
	for _, rc := range req.Plan.ResourceChanges {
		if rc.Address != e.address {
			continue
		}
		before, _ := rc.Change.Before.(map[string]any)
		stmts, _ := before["pending_ddl"].([]any)
		for _, s := range stmts {
			if str, ok := s.(string); ok && strings.Contains(str, e.contains) {
				return
			}
		}
		resp.Error = fmt.Errorf("%s: pending_ddl before apply is %v; want a statement containing %q", e.address, stmts, e.contains)
		return
	}
	resp.Error = fmt.Errorf("the plan has no change for %s", e.address)
}

func TestCredentialsJSON(t *testing.T) {
	key := `{"type": "service_account", "client_email": "x@p.iam.gserviceaccount.com"}`
	file := filepath.Join(t.TempDir(), "key.json")
	if err := os.WriteFile(file, []byte(key), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, in := range []string{key, "  " + key + "\n", file} {
		got, err := credentialsJSON(in)
		if err != nil || !strings.Contains(string(got), "service_account") {
			t.Errorf("credentialsJSON(%q) = %q, %v; want the key", in, got, err)
		}
	}
	secret := "ya29.not-a-key"
	for _, in := range []string{"{not json", `{"client_email": "x"}`, secret, filepath.Join(t.TempDir(), "missing.json")} {
		_, err := credentialsJSON(in)
		if err == nil {
			t.Errorf("credentialsJSON(%q) succeeded; want an error", in)
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("error %q quotes the value, which may be a secret", err)
		}
	}
}

func TestResolveCredentialsPrecedence(t *testing.T) {
	t.Setenv("GOOGLE_OAUTH_ACCESS_TOKEN", "env-token")
	t.Setenv("GOOGLE_CREDENTIALS", `{"type": "service_account"}`)
	t.Setenv("GOOGLE_IMPERSONATE_SERVICE_ACCOUNT", "")

	s, diags := resolveCredentials(providerModel{})
	if diags.HasError() || s.accessToken != "env-token" || s.credentialsJSON != nil {
		t.Errorf("environment only: %+v %v; want the access token to win, as in the google provider", s, diags)
	}
	s, diags = resolveCredentials(providerModel{Credentials: types.StringValue(`{"type": "authorized_user"}`)})
	if diags.HasError() || s.accessToken != "" || !strings.Contains(string(s.credentialsJSON), "authorized_user") {
		t.Errorf("credentials in the configuration: %+v %v; want them to beat the environment", s, diags)
	}
	_, diags = resolveCredentials(providerModel{Credentials: types.StringValue("nonsense")})
	if d, ok := firstError(diags).(diag.DiagnosticWithPath); !ok || !d.Path().Equal(path.Root("credentials")) {
		t.Errorf("bad credentials: %v; want an error on credentials", diags)
	}
}

func firstError(diags diag.Diagnostics) diag.Diagnostic {
	if errs := diags.Errors(); len(errs) > 0 {
		return errs[0]
	}
	return nil
}
