package provider

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// leaseConfig is an ephemeral lease deploy in table locks with attrs, whose
// token a local-exec command receives in $TOKEN and runs command with.
func leaseConfig(providerBlock, attrs, command string) string {
	return providerBlock + fmt.Sprintf(`
ephemeral "spannerlock_lease" "deploy" {
  table = "locks"
  name  = "deploy"
%s}

resource "terraform_data" "deploy" {
  provisioner "local-exec" {
    command = %q
    environment = {
      TOKEN = ephemeral.spannerlock_lease.deploy.token
    }
  }
}
`, attrs, command)
}

// blockingCommand writes $TOKEN to dir/token, then waits for dir/done, so a
// test can look at the lease while Terraform runs the command. It also ends
// when dir is removed, so that it never outlives the test.
func blockingCommand(dir string) string {
	return fmt.Sprintf(`echo "$TOKEN" > %[1]s/token.tmp && mv %[1]s/token.tmp %[1]s/token && while [ ! -e %[1]s/done ] && [ -d %[1]s ]; do sleep 0.05; done`, dir)
}

// runningApply is a terraform apply whose local-exec command blocks (see
// blockingCommand) until finish.
type runningApply struct {
	*command
	dir string
}

func startApply(ctx context.Context, t *testing.T, tf *terraformCLI, dir string) *runningApply {
	// The command ends with the test, whatever became of terraform.
	t.Cleanup(func() { _ = os.WriteFile(filepath.Join(dir, "done"), nil, 0o600) })
	return &runningApply{command: tf.start(ctx, "apply", "-auto-approve", "-json"), dir: dir}
}

// token waits for the command to start and returns the token it received.
func (a *runningApply) token(ctx context.Context) int64 {
	a.t.Helper()
	for {
		if b, err := os.ReadFile(filepath.Join(a.dir, "token")); err == nil {
			token, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			if err != nil {
				a.t.Fatalf("the command received TOKEN=%q", b)
			}
			return token
		}
		select {
		case <-a.done:
			if _, err := os.Stat(filepath.Join(a.dir, "token")); err == nil {
				continue // the command ran, and terraform ended after it
			}
			r := a.wait()
			a.t.Fatalf("terraform apply ended before its command ran: %v\n%s", r.err, r.output)
		case <-ctx.Done():
			a.t.Fatal("the command did not start")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// finish lets the command end and returns the apply's result.
func (a *runningApply) finish() result {
	a.t.Helper()
	if err := os.WriteFile(filepath.Join(a.dir, "done"), nil, 0o600); err != nil {
		a.t.Fatal(err)
	}
	return a.wait()
}

// The lease is held, with the token the command receives, while Terraform
// runs the apply, and released when the apply ends. Terraform opens it
// once for the plan and again for the apply: two acquisitions.
func TestAccLeaseEphemeralResource_heldDuringApply(t *testing.T) {
	eachDialect(t, locktable.Dialects, testAccLeaseEphemeralResourceHeldDuringApply)
}

func testAccLeaseEphemeralResourceHeldDuringApply(t *testing.T, d locktable.Dialect) {
	db, prov := accDatabaseIn(t, d, d.DDL("locks")...)
	sc := emulator.Client(t, db)
	tf := newTerraformCLI(t)
	ctx := cliContext(t)
	tf.require(ctx, tfversion.Version1_10_0)
	observer := appClient(t, sc, "observer")
	dir := t.TempDir()
	tf.write(leaseConfig(prov, `  holder_id = "pipeline-1"`+"\n", blockingCommand(dir)))

	apply := startApply(ctx, t, tf, dir)
	token := apply.token(ctx)
	h, err := observer.Holder(ctx, "deploy")
	if err != nil || h.HolderID != "pipeline-1" || h.Token != token {
		t.Errorf("while the apply runs, the holder of deploy is %+v, %v; want pipeline-1 with the token the command got, %d", h, err, token)
	}
	if token != 2 {
		t.Errorf("the apply's token is %d; want 2, after the plan's acquisition", token)
	}
	apply.finish().ok(t)
	if h, err := observer.Holder(ctx, "deploy"); !errors.Is(err, lease.ErrNoHolder) {
		t.Errorf("after the apply, the holder of deploy is %+v, %v; want none", h, err)
	}
}

// A lease lost while Terraform runs (its session vanished, and another
// holder took it) fails the run when Terraform closes it.
func TestAccLeaseEphemeralResource_lossFailsTheRun(t *testing.T) {
	eachDialect(t, locktable.Dialects, testAccLeaseEphemeralResourceLossFailsTheRun)
}

func testAccLeaseEphemeralResourceLossFailsTheRun(t *testing.T, d locktable.Dialect) {
	db, prov := accDatabaseIn(t, d, d.DDL("locks")...)
	sc := emulator.Client(t, db)
	tf := newTerraformCLI(t)
	ctx := cliContext(t)
	tf.require(ctx, tfversion.Version1_10_0)
	dir := t.TempDir()
	tf.write(leaseConfig(prov, `  holder_id = "pipeline-1"`+"\n", blockingCommand(dir)))

	apply := startApply(ctx, t, tf, dir)
	token := apply.token(ctx)
	_, err := sc.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		_, err := tx.Update(ctx, spanner.Statement{SQL: "DELETE FROM " + d.QuoteSessionsTable("locks") + " WHERE holder_id = 'pipeline-1'"})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	rival, err := appClient(t, sc, "rival").TryAcquire(ctx, "deploy")
	if err != nil {
		t.Fatalf("taking the lease from the vanished session: %v", err)
	}
	apply.finish().failed(t).has(t, "error", "Lease was lost before Terraform finished",
		fmt.Sprintf(`Lease "deploy" (token %d) ended before Terraform closed it`, token))
	if err := rival.Context().Err(); err != nil {
		t.Errorf("closing the lost lease ended the rival's: %v", err)
	}
}

func TestAccLeaseEphemeralResource_wait(t *testing.T) {
	skipOnOpenTofu(t, "after the last step's apply, terraform-plugin-testing finds its plan not empty, though "+
		"OpenTofu 1.11.5 reports no changes")
	eachDialect(t, locktable.Dialects, testAccLeaseEphemeralResourceWait)
}

func testAccLeaseEphemeralResourceWait(t *testing.T, d locktable.Dialect) {
	db, prov := accDatabaseIn(t, d, d.DDL("locks")...)
	sc := emulator.Client(t, db)
	held := holdLease(t, sc, "deploy", "other-pipeline")
	refused := fmt.Sprintf(`lease "deploy" is held by "other-pipeline" with token %d until`, held.Token())
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		TerraformVersionChecks:   requireTerraform(tfversion.Version1_10_0),
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config:      leaseConfig(prov, `  wait = "0s"`+"\n", "true"),
				ExpectError: diagnostic("Cannot acquire lease", refused, `wait = "0s" does not wait for it`),
			},
			{
				// The same table to GoogleSQL; to PostgreSQL's SQL none.
				Config: strings.Replace(leaseConfig(prov, `  wait = "0s"`+"\n", "true"), `table = "locks"`, `table = "LOCKS"`, 1),
				ExpectError: byDialect(d, diagnostic("Cannot acquire lease", refused),
					diagnostic("Cannot acquire lease", "Lock table locks exists in "+db+" as locks", `Set table = "locks"`)),
			},
			{
				Config:      leaseConfig(prov, `  wait = "2s"`+"\n", "true"),
				ExpectError: diagnostic("Cannot acquire lease", refused, "it was still held after waiting 2s (wait)"),
			},
			{
				Config:      leaseConfig(prov, `  ttl = "500ms"`+"\n", "true"),
				ExpectError: diagnostic("Invalid duration", `Duration "500ms" must be from 1s to 24h0m0s.`),
			},
			{
				// Not "Lease name is empty".
				Config:      leaseConfig(prov, `  holder_id = ""`+"\n", "true"),
				ExpectError: diagnostic("Invalid holder ID", "Holder ID is empty: leave holder_id unset for the default"),
			},
			{
				// Terraform keeps ephemeral values out of what it stores.
				Config: leaseConfig(prov, `  wait = "0s"`+"\n", "true") + `
output "token" {
  value = ephemeral.spannerlock_lease.deploy.token
}
`,
				// OpenTofu says it in its own words.
				ExpectError: regexp.MustCompile(`Ephemeral value not allowed|Output does not allow ephemeral value`),
			},
			{
				Config: leaseConfig(prov, `  wait = "0s"`+"\n", "true") + `
resource "terraform_data" "stored" {
  input = ephemeral.spannerlock_lease.deploy.token
}
`,
				ExpectError: regexp.MustCompile(`Invalid use of ephemeral value|Ephemeral value used in non-ephemeral context`),
			},
			{
				PreConfig: func() {
					if err := held.Release(emulator.Context(t)); err != nil {
						t.Fatal(err)
					}
				},
				Config: leaseConfig(prov, `  wait = "0s"`+"\n", "true"),
			},
		},
	})
}

// The documented example is valid against the provider's schema.
func TestAccLeaseEphemeralResource_exampleValidates(t *testing.T) {
	t.Parallel()
	accDatabase(t)
	tf := newTerraformCLI(t)
	ctx := cliContext(t)
	tf.require(ctx, tfversion.Version1_10_0)
	example, err := os.ReadFile(filepath.Join("..", "..", "examples", "ephemeral-resources", "spannerlock_lease", "ephemeral-resource.tf"))
	if err != nil {
		t.Fatal(err)
	}
	tf.write(requiredProviders + string(example))
	tf.run(ctx, "validate", "-json").ok(t)
}

// The documented configuration, with the table and the lease in one
// configuration, works from an empty database: the plan cannot hold a lease
// in a table it is about to create, so it holds none and the token is
// unknown until apply; the apply creates the table, then takes the lease.
func TestAccLeaseEphemeralResource_tableCreatedByTheSameApply(t *testing.T) {
	eachDialect(t, locktable.Dialects, testAccLeaseEphemeralResourceTableCreatedByTheSameApply)
}

func testAccLeaseEphemeralResourceTableCreatedByTheSameApply(t *testing.T, d locktable.Dialect) {
	db, prov := accDatabaseIn(t, d)
	sc := emulator.Client(t, db)
	tf := newTerraformCLI(t)
	ctx := cliContext(t)
	tf.require(ctx, tfversion.Version1_10_0)
	dir := t.TempDir()
	tf.write(prov + fmt.Sprintf(`
resource "spannerlock_table" "locks" {
  name                = "locks"
  deletion_protection = false
}

ephemeral "spannerlock_lease" "deploy" {
  table     = spannerlock_table.locks.name
  name      = "deploy"
  holder_id = "pipeline-1"
}

resource "terraform_data" "deploy" {
  provisioner "local-exec" {
    command = %q
    environment = {
      TOKEN = ephemeral.spannerlock_lease.deploy.token
    }
  }
}
`, blockingCommand(dir)))

	tf.run(ctx, "plan", "-json").ok(t)
	apply := startApply(ctx, t, tf, dir)
	token := apply.token(ctx)
	if token != 1 {
		t.Errorf("the apply's token is %d; want 1: the plans acquired nothing in a table that did not exist", token)
	}
	if h, err := appClient(t, sc, "observer").Holder(ctx, "deploy"); err != nil || h.HolderID != "pipeline-1" || h.Token != token {
		t.Errorf("while the apply runs, the holder of deploy is %+v, %v; want pipeline-1 with token %d", h, err, token)
	}
	apply.finish().ok(t)
}

// The same, with a table that exists at an older schema version than the
// lease package needs (a provider upgrade brings a migration): the plan
// holds nothing in a table it migrates, rather than failing on a column the
// migration adds, which would keep the migration from ever being applied;
// the apply migrates the table, then takes the lease.
func TestAccLeaseEphemeralResource_tableMigratedByTheSameApply(t *testing.T) {
	eachDialect(t, locktable.Dialects, testAccLeaseEphemeralResourceTableMigratedByTheSameApply)
}

func testAccLeaseEphemeralResourceTableMigratedByTheSameApply(t *testing.T, d locktable.Dialect) {
	db, prov := accDatabaseIn(t, d, d.DDLAt("locks", locktable.Latest-1)...)
	sc := emulator.Client(t, db)
	tf := newTerraformCLI(t)
	ctx := cliContext(t)
	tf.require(ctx, tfversion.Version1_10_0)
	dir := t.TempDir()
	tf.write(prov + fmt.Sprintf(`
import {
  to = spannerlock_table.locks
  id = "locks"
}

resource "spannerlock_table" "locks" {
  name                = "locks"
  deletion_protection = false
}

ephemeral "spannerlock_lease" "deploy" {
  table     = spannerlock_table.locks.name
  name      = "deploy"
  holder_id = "pipeline-1"
}

resource "terraform_data" "deploy" {
  provisioner "local-exec" {
    command = %q
    environment = {
      TOKEN = ephemeral.spannerlock_lease.deploy.token
    }
  }
}
`, blockingCommand(dir)))

	tf.run(ctx, "plan", "-json").ok(t).plans(t, map[string]string{tableAddress: "update", "terraform_data.deploy": "create"})
	apply := startApply(ctx, t, tf, dir)
	token := apply.token(ctx)
	if token != 1 {
		t.Errorf("the apply's token is %d; want 1: the plans acquired nothing in a table they migrate", token)
	}
	if h, err := appClient(t, sc, "observer").Holder(ctx, "deploy"); err != nil || h.HolderID != "pipeline-1" || h.Token != token {
		t.Errorf("while the apply runs, the holder of deploy is %+v, %v; want pipeline-1 with token %d", h, err, token)
	}
	apply.finish().ok(t)
	// The table is current now: the next plan holds the lease again.
	tf.run(ctx, "plan", "-json").ok(t)
	if next := holdLease(t, sc, "deploy", "next"); next.Token() != token+2 {
		t.Errorf("after the apply and another plan, deploy's next token is %d; want %d: the plan of a current table takes the lease",
			next.Token(), token+2)
	}
}

// Two spannerlock_lease of one configuration on one lease would wait for
// each other for the whole wait: the second fails at once, saying why.
func TestAccLeaseEphemeralResource_sameLeaseTwice(t *testing.T) {
	t.Parallel()
	db, prov := accDatabase(t, locktable.DDL("locks")...)
	sc := emulator.Client(t, db)
	tf := newTerraformCLI(t)
	ctx := cliContext(t)
	tf.require(ctx, tfversion.Version1_10_0)
	tf.write(prov + `
ephemeral "spannerlock_lease" "deploy" {
  table     = "locks"
  name      = "deploy"
  holder_id = "pipeline-1"
  wait      = "1h"
}

# The same table to Spanner, in another letter case.
ephemeral "spannerlock_lease" "again" {
  table     = "LOCKS"
  name      = "deploy"
  holder_id = "pipeline-1"
  wait      = "1h"
}

resource "terraform_data" "deploy" {
  provisioner "local-exec" {
    command = "true"
    environment = {
      A = ephemeral.spannerlock_lease.deploy.token
      B = ephemeral.spannerlock_lease.again.token
    }
  }
}
`)
	plan := tf.start(ctx, "plan", "-json")
	waitUntil(ctx, t, func() (bool, string) {
		select {
		case <-plan.done:
			return true, ""
		default:
			return false, "terraform plan still waits: its two leases wait for each other"
		}
	})
	plan.wait().failed(t).has(t, "error", "Lease already held by this run", `Lease "deploy" in table`,
		"another spannerlock_lease of this Terraform run", "Give each spannerlock_lease its own name")
	// The one that was acquired is released with the run.
	if h, err := appClient(t, sc, "observer").Holder(ctx, "deploy"); !errors.Is(err, lease.ErrNoHolder) {
		t.Errorf("after the plan, the holder of deploy is %+v, %v; want none", h, err)
	}
}

// acquire = terraform.applying: plans neither wait for the lease nor take
// it (no token is spent); the apply does.
func TestAccLeaseEphemeralResource_onlyWhenApplying(t *testing.T) {
	skipOnOpenTofu(t, openTofuUnknownEphemeral)
	t.Parallel()
	db, prov := accDatabase(t, locktable.DDL("locks")...)
	sc := emulator.Client(t, db)
	tf := newTerraformCLI(t)
	ctx := cliContext(t)
	tf.require(ctx, tfversion.Version1_10_0)
	held := holdLease(t, sc, "deploy", "other-pipeline")
	dir := t.TempDir()
	tf.write(leaseConfig(prov, "  acquire = terraform.applying\n  wait = \"1h\"\n", blockingCommand(dir)))

	tf.run(ctx, "plan", "-json").ok(t)
	if h, err := appClient(t, sc, "observer").Holder(ctx, "deploy"); err != nil || h.Token != held.Token() {
		t.Fatalf("after the plan, the holder of deploy is %+v, %v; want other-pipeline, undisturbed", h, err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	apply := startApply(ctx, t, tf, dir)
	if token := apply.token(ctx); token != held.Token()+1 {
		t.Errorf("the apply's token is %d; want %d: the plan of terraform apply took none", token, held.Token()+1)
	}
	apply.finish().ok(t)
}

// A database that only apply knows (the provider's, from a resource this
// apply creates) holds nothing during the plan, rather than failing it
// with advice for data sources; the apply takes the lease.
func TestAccLeaseEphemeralResource_databaseKnownOnlyAtApply(t *testing.T) {
	skipOnOpenTofu(t, openTofuUnknownEphemeral)
	t.Parallel()
	db, _ := accDatabase(t, locktable.DDL("locks")...)
	tf := newTerraformCLI(t)
	ctx := cliContext(t)
	tf.require(ctx, tfversion.Version1_10_0)
	dir := t.TempDir()
	tf.write(leaseConfig(requiredProviders+fmt.Sprintf(`
resource "terraform_data" "database" {
  input = %q
}

provider "spannerlock" {
  emulator_host = %q
  database      = terraform_data.database.output
}
`, db, emulator.Shared(t).Host()), "", blockingCommand(dir)))
	tf.run(ctx, "plan", "-json").ok(t)
	apply := startApply(ctx, t, tf, dir)
	if token := apply.token(ctx); token != 1 {
		t.Errorf("the apply's token is %d; want 1, the first acquisition", token)
	}
	apply.finish().ok(t)
}
