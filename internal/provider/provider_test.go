package provider

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"github.com/hashicorp/go-version"
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
	"github.com/hashicorp/terraform-plugin-testing/tfversion"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

func TestMain(m *testing.M) {
	// Terraform started this binary as the provider plugin (see
	// terraformCLI): serve, and run no tests.
	if os.Getenv(serveProviderEnv) != "" {
		serveProvider()
		return
	}
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

// accDatabase gives an acceptance test a fresh GoogleSQL database, with ddl
// applied, and the provider block that points at it on the emulator.
func accDatabase(t *testing.T, ddl ...string) (db, providerBlock string) {
	t.Helper()
	return accDatabaseIn(t, locktable.GoogleSQL, ddl...)
}

// accDatabaseIn is accDatabase for a database of dialect d; ddl is in d.
func accDatabaseIn(t *testing.T, d locktable.Dialect, ddl ...string) (db, providerBlock string) {
	t.Helper()
	if os.Getenv(resource.EnvTfAcc) == "" {
		t.Skipf("acceptance test: set %s=1 (make testacc)", resource.EnvTfAcc)
	}
	db = emulator.DatabaseIn(t, string(d), ddl...)
	// Registered after the database's drop, so it runs before it.
	t.Cleanup(func() { testAccProvider.cache.forget(db) })
	return db, providerBlockFor(t, db)
}

// eachDialect runs test once per dialect in dialects, as parallel subtests
// named after it: what a user of one dialect relies on, a user of the other
// relies on too.
func eachDialect(t *testing.T, dialects []locktable.Dialect, test func(t *testing.T, d locktable.Dialect)) {
	t.Helper()
	t.Parallel()
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			test(t, d)
		})
	}
}

// byDialect picks the value for d: what differs between the dialects in a
// test is only their spelling.
func byDialect[T any](d locktable.Dialect, googleSQL, postgreSQL T) T {
	if d == locktable.PostgreSQL {
		return postgreSQL
	}
	return googleSQL
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

// holdLease acquires name in table locks as holder, held until the test ends.
func holdLease(t *testing.T, sc *spanner.Client, name, holder string) *lease.Lease {
	t.Helper()
	l, err := appClient(t, sc, holder).TryAcquire(emulator.Context(t), name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// appClient is a Client on table locks as an application has one, with
// holder as its identity, closed when the test ends.
func appClient(t *testing.T, sc *spanner.Client, holder string) *lease.Client {
	t.Helper()
	lc, err := lease.NewClient(sc, "locks",
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

	s, diags := resolveCredentials(context.Background(), providerModel{})
	if diags.HasError() || s.accessToken != "env-token" || s.credentialsJSON != nil {
		t.Errorf("environment only: %+v %v; want the access token to win, as in the google provider", s, diags)
	}
	s, diags = resolveCredentials(context.Background(), providerModel{Credentials: types.StringValue(`{"type": "authorized_user"}`)})
	if diags.HasError() || s.accessToken != "" || !strings.Contains(string(s.credentialsJSON), "authorized_user") {
		t.Errorf("credentials in the configuration: %+v %v; want them to beat the environment", s, diags)
	}
	_, diags = resolveCredentials(context.Background(), providerModel{Credentials: types.StringValue("nonsense")})
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

// silentEndpoint accepts connections and never answers on them, like a
// Spanner endpoint behind a black hole.
func silentEndpoint(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return l.Addr().String()
}

func leaderConfig(providerSettings string) string {
	return requiredProviders + fmt.Sprintf(`
provider "spannerlock" {
%s
}

data "spannerlock_leader" "x" {
  table = "locks"
  name  = "x"
}
`, providerSettings)
}

// A closed port fails the first read at once with the endpoint and the
// cause; every command that reads does, as a user runs it.
func TestAccProvider_unreachableEndpoint(t *testing.T) {
	t.Parallel()
	db, _ := accDatabase(t)
	tf := newTerraformCLI(t)
	ctx := cliContext(t)
	closed := emulator.ClosedPort(t)
	tf.write(requiredProviders + fmt.Sprintf(`
variable "emulator_host" {
  type = string
}

provider "spannerlock" {
  emulator_host = var.emulator_host
  database      = %q
}

resource "spannerlock_table" "locks" {
  name                = "locks"
  deletion_protection = false
}
`, db))
	unreachable := []string{db, closed, "connection refused"}
	at := func(host string) string { return "-var=emulator_host=" + host }

	tf.run(ctx, "plan", "-json", at(closed)).failed(t).has(t, "error", "Cannot read database", unreachable...)
	tf.run(ctx, "apply", "-auto-approve", "-json", at(closed)).failed(t).has(t, "error", "Cannot read database", unreachable...)

	live := emulator.Shared(t).Host()
	tf.run(ctx, "apply", "-auto-approve", "-json", at(live)).ok(t)
	tf.run(ctx, "plan", "-refresh-only", "-json", at(closed)).failed(t).has(t, "error", "Cannot read table", unreachable...)
	tf.run(ctx, "destroy", "-auto-approve", "-json", at(closed)).failed(t).has(t, "error", "Cannot read table", unreachable...)
	tf.run(ctx, "destroy", "-auto-approve", "-json", at(live)).ok(t)
}

// cliContext bounds a test that runs the Terraform CLI several times: each
// command takes seconds on a loaded machine.
func cliContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestAccProvider_connectionSettings(t *testing.T) {
	db, _ := accDatabase(t, locktable.DDL("locks")...)
	closed := emulator.ClosedPort(t)
	silent := silentEndpoint(t)
	key := filepath.Join(t.TempDir(), "missing.json")
	// Real Spanner, so that credentials and endpoints are looked at.
	t.Setenv("SPANNER_EMULATOR_HOST", "")
	t.Setenv("GOOGLE_CREDENTIALS", "")
	t.Setenv("GOOGLE_OAUTH_ACCESS_TOKEN", "")
	t.Setenv("GOOGLE_IMPERSONATE_SERVICE_ACCOUNT", "")
	t.Setenv("GOOGLE_SPANNER_CUSTOM_ENDPOINT", "")
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", key)
	withDatabase := fmt.Sprintf("  database = %q\n", db)
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				// Checked once, when the provider is configured: a plan that
				// reads nothing yet fails too, and says what was tried.
				Config: requiredProviders + fmt.Sprintf(`
provider "spannerlock" {
%s}

resource "spannerlock_table" "locks" {
  name = "locks"
}
`, withDatabase),
				PlanOnly:    true,
				ExpectError: diagnostic("No Google Cloud credentials", "GOOGLE_APPLICATION_CREDENTIALS names "+key, "no such file"),
			},
			{
				Config:      leaderConfig(withDatabase + `  access_token = "t"` + "\n" + fmt.Sprintf(`  spanner_custom_endpoint = %q`, closed)),
				ExpectError: diagnostic("Cannot read lease", "Spanner at "+closed, "connection refused"),
			},
			{
				// The google provider's URL form names the same endpoint.
				Config:      leaderConfig(withDatabase + `  access_token = "t"` + "\n" + fmt.Sprintf(`  spanner_custom_endpoint = "https://%s/v1/"`, closed)),
				ExpectError: diagnostic("Cannot read lease", "Spanner at "+closed, "connection refused"),
			},
			{
				Config:      leaderConfig(withDatabase + `  access_token = "t"` + "\n" + fmt.Sprintf(`  spanner_custom_endpoint = "http://%s/"`, closed)),
				ExpectError: diagnostic("Invalid Spanner endpoint", "plain HTTP", "set emulator_host"),
			},
			{
				Config: leaderConfig(withDatabase + `  access_token = "t"` + "\n" +
					`  impersonate_service_account_delegates = ["a@p.iam.gserviceaccount.com"]`),
				ExpectError: diagnostic("Delegates without impersonation", "set impersonate_service_account"),
			},
			{
				// A black hole is bounded by request_timeout, and the error
				// says that is what happened.
				Config:      leaderConfig(withDatabase + fmt.Sprintf("  emulator_host = %q\n  request_timeout = \"2s\"", silent)),
				ExpectError: diagnostic("Cannot read lease", "the Spanner emulator at "+silent, "no answer within request_timeout (2s)"),
			},
			{
				Config:      leaderConfig(withDatabase + `  request_timeout = "0s"`),
				PlanOnly:    true,
				ExpectError: diagnostic("Invalid duration", `Duration "0s" must be at least 1s.`),
			},
		},
	})
}

func TestAccProvider_databaseFromEnvironment(t *testing.T) {
	db, _ := accDatabase(t, locktable.DDL("locks")...)
	t.Setenv(databaseEnv, db)
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: leaderConfig(fmt.Sprintf("  emulator_host = %q", emulator.Shared(t).Host())),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("data.spannerlock_leader.x", tfjsonpath.New("database"), knownvalue.StringExact(db)),
					statecheck.ExpectKnownValue("data.spannerlock_leader.x", tfjsonpath.New("held"), knownvalue.Bool(false)),
				},
			},
			{
				PreConfig: func() { t.Setenv(databaseEnv, "projects/p/databases/d") },
				Config:    leaderConfig(fmt.Sprintf("  emulator_host = %q", emulator.Shared(t).Host())),
				ExpectError: diagnostic("Invalid database", databaseEnv+` environment variable is "projects/p/databases/d"`,
					"not a database path"),
			},
			{
				// For the destroy after the last step.
				PreConfig: func() { t.Setenv(databaseEnv, db) },
				Config:    leaderConfig(fmt.Sprintf("  emulator_host = %q", emulator.Shared(t).Host())),
			},
		},
	})
}

// userAgentRecorder is a gRPC endpoint that records the user agent of every
// call and answers none of them.
func userAgentRecorder(t *testing.T) (addr string, agents func() []string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string
	srv := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		md, _ := metadata.FromIncomingContext(stream.Context())
		mu.Lock()
		seen = append(seen, md.Get("user-agent")...)
		mu.Unlock()
		return status.Error(codes.Unimplemented, "this endpoint only records user agents")
	}))
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return l.Addr().String(), func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

func TestAccProvider_userAgent(t *testing.T) {
	db, _ := accDatabase(t)
	addr, agents := userAgentRecorder(t)
	resource.ParallelTest(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			Config: leaderConfig(fmt.Sprintf("  emulator_host = %q\n  database = %q", addr, db)),
			// What the error says is TestAccProvider_unreachableEndpoint's.
			ExpectError: diagnostic("Cannot read lease"),
		}},
	})
	want := regexp.MustCompile(`^terraform-provider-spannerlock/test terraform/\d+\.\d+\.\d+\S* `)
	got := agents()
	if len(got) == 0 {
		t.Fatal("the endpoint received no call")
	}
	for _, ua := range got {
		if !want.MatchString(ua) {
			t.Errorf("user agent %q; want it to start with terraform-provider-spannerlock/<version> terraform/<version>", ua)
		}
	}
}

// TF_LOG_PROVIDER=DEBUG shows what the provider did to the database: here,
// each DDL statement it ran, with the table it belongs to.
func TestAccProvider_debugLogShowsDDL(t *testing.T) {
	eachDialect(t, locktable.Dialects, testAccProviderDebugLogShowsDDL)
}

func testAccProviderDebugLogShowsDDL(t *testing.T, d locktable.Dialect) {
	db, prov := accDatabaseIn(t, d)
	tf := newTerraformCLI(t)
	ctx := cliContext(t)
	logFile := filepath.Join(t.TempDir(), "terraform.log")
	tf.env = append(tf.env, "TF_LOG_PROVIDER=DEBUG", "TF_LOG_PATH="+logFile)
	tf.write(tableConfig(prov, unprotected))
	tf.run(ctx, "apply", "-auto-approve").ok(t)
	defer tf.run(ctx, "destroy", "-auto-approve").ok(t)

	b, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	// Entries start with a timestamp; a value of several lines follows its
	// key on lines of its own, each prefixed "  | ".
	entries := regexp.MustCompile(`(?m)^\d{4}-\d\d-\d\dT\S+ `).Split(string(b), -1)
	for _, stmt := range d.DDL("locks") {
		found := false
		for _, e := range entries {
			e = strings.ReplaceAll(e, "\n  | ", "\n")
			if strings.Contains(e, "DDL statement:") && strings.Contains(e, stmt) &&
				strings.Contains(e, "spannerlock_table=locks") && strings.Contains(e, "spannerlock_database="+db) {
				found = true
			}
		}
		if !found {
			t.Errorf("the provider's debug log has no DDL statement entry for table locks of %s with\n%s", db, stmt)
		}
	}
}

// requireTerraform makes a test that needs Terraform v or later skip on an
// older one, except under CI=true, where it fails: CI must run every test.
func requireTerraform(v *version.Version) []tfversion.TerraformVersionCheck {
	if emulator.CI() {
		return []tfversion.TerraformVersionCheck{tfversion.RequireAbove(v)}
	}
	return []tfversion.TerraformVersionCheck{tfversion.SkipBelow(v)}
}
