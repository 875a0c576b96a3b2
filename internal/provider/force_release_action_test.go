package provider

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"github.com/hashicorp/go-version"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// Actions, list resources and terraform query came with Terraform 1.14.
var terraform114 = version.Must(version.NewVersion("1.14.0"))

// actionProgress returns the messages an action reported while terraform
// apply -invoke -json ran it.
func (r result) actionProgress() []string {
	var msgs []string
	sc := bufio.NewScanner(strings.NewReader(r.output))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m struct {
			Type string `json:"type"`
			Hook struct {
				Message string `json:"message"`
			} `json:"hook"`
		}
		if json.Unmarshal(sc.Bytes(), &m) == nil && m.Type == "action_progress" {
			msgs = append(msgs, m.Hook.Message)
		}
	}
	return msgs
}

// reportsDDL is a table an application fences its writes to with Guard.
func reportsDDL(d locktable.Dialect) string {
	return byDialect(d, "CREATE TABLE reports (id INT64 NOT NULL, body STRING(MAX)) PRIMARY KEY (id)",
		"CREATE TABLE reports (id bigint NOT NULL PRIMARY KEY, body character varying)")
}

// fencedWrite writes report id as the holder of l would: in a transaction
// that Guard fences.
func fencedWrite(ctx context.Context, sc *spanner.Client, l *lease.Lease, id int64) error {
	_, err := sc.ReadWriteTransaction(ctx, func(ctx context.Context, txn *spanner.ReadWriteTransaction) error {
		if err := l.Guard(ctx, txn); err != nil {
			return err
		}
		return txn.BufferWrite([]*spanner.Mutation{spanner.Insert("reports", []string{"id", "body"}, []any{id, "from " + l.Name()})})
	})
	return err
}

func TestAccForceReleaseAction(t *testing.T) {
	eachDialect(t, locktable.Dialects, testAccForceReleaseAction)
}

// terraform apply -invoke ends a live holder's lease: its Guard-fenced
// write fails, the next holder gets a larger token, and the progress
// message names the holder it ended. A permit is ended the same way.
func testAccForceReleaseAction(t *testing.T, d locktable.Dialect) {
	db, prov := accDatabaseIn(t, d, append(d.DDL("locks"), reportsDDL(d))...)
	sc := emulator.Client(t, db)
	tf := newTerraformCLI(t)
	ctx := cliContext(t)
	tf.requireTerraformOnly(ctx, terraform114, "actions")

	stuck := holdLease(t, sc, "deploy", "stuck-job")
	if err := fencedWrite(ctx, sc, stuck, 1); err != nil {
		t.Fatalf("the holder's fenced write before the force-release: %v", err)
	}
	permit, slot := stuckMigrationPermit(ctx, t, sc)
	tf.write(prov + fmt.Sprintf(`
action "spannerlock_force_release" "deploy" {
  config {
    table = "locks"
    name  = "deploy"
  }
}

action "spannerlock_force_release" "migration" {
  config {
    database = %q
    table    = "locks"
    name     = "migrations"
    slot     = %d
  }
}

action "spannerlock_force_release" "semaphore_without_slot" {
  config {
    table = "locks"
    name  = "migrations"
  }
}
`, db, slot))

	r := tf.run(ctx, "apply", "-auto-approve", "-json", "-invoke=action.spannerlock_force_release.deploy").ok(t)
	if p := r.actionProgress(); len(p) != 1 || !strings.Contains(p[0], "stuck-job") || !strings.Contains(p[0], fmt.Sprint(stuck.Token())) {
		t.Errorf("progress messages %q; want one naming holder stuck-job and token %d", p, stuck.Token())
	}
	if err := fencedWrite(ctx, sc, stuck, 2); !errors.Is(err, lease.ErrLeaseLost) {
		t.Errorf("the old holder's fenced write after the force-release: %v; want ErrLeaseLost", err)
	}
	if next := holdLease(t, sc, "deploy", "next-job"); next.Token() <= stuck.Token() {
		t.Errorf("the next holder's token %d is not above the ended holder's %d", next.Token(), stuck.Token())
	}

	r = tf.run(ctx, "apply", "-auto-approve", "-json", "-invoke=action.spannerlock_force_release.migration").ok(t)
	if p := r.actionProgress(); len(p) != 1 || !strings.Contains(p[0], "stuck-migration") {
		t.Errorf("progress messages %q; want one naming holder stuck-migration", p)
	}
	if err := fencedWrite(ctx, sc, permit, 3); !errors.Is(err, lease.ErrLeaseLost) {
		t.Errorf("the old permit holder's fenced write after the force-release: %v; want ErrLeaseLost", err)
	}

	// Ended already: nothing to do is not a failure. Terraform puts the
	// action's summary at the start of the detail.
	tf.run(ctx, "apply", "-auto-approve", "-json", "-invoke=action.spannerlock_force_release.migration").ok(t).
		has(t, "warning", "Warning when invoking action", "Nothing to release", `slot `+fmt.Sprint(slot)+` of "migrations"`)
	tf.run(ctx, "apply", "-auto-approve", "-json", "-invoke=action.spannerlock_force_release.semaphore_without_slot").failed(t).
		has(t, "error", "Error when invoking action", `Cannot force-release lease "migrations" in table locks`, "Set slot")
}

// diagnostic returns the command's diagnostic of severity with summary, and
// fails the test when there is none.
func (r result) diagnostic(t *testing.T, severity, summary string) diagnosticJSON {
	t.Helper()
	for _, d := range r.diagnostics {
		if d.Severity == severity && d.Summary == summary {
			return d
		}
	}
	t.Fatalf("terraform %s reported no %s %q; it reported:\n%s", strings.Join(r.args, " "), severity, summary, r.describe())
	return diagnosticJSON{}
}

// pointsAt fails the test unless d points at the configuration's attribute
// attr, as Terraform shows a provider's diagnostic on an attribute.
func (d diagnosticJSON) pointsAt(t *testing.T, attr string) {
	t.Helper()
	if d.Snippet == nil || !strings.HasPrefix(strings.TrimSpace(d.Snippet.Code), attr+" ") {
		t.Errorf("%s %q points at %+v, want the attribute %s", d.Severity, d.Summary, d.Snippet, attr)
	}
}

func TestAccForceReleaseAction_token(t *testing.T) {
	eachDialect(t, locktable.Dialects, testAccForceReleaseActionToken)
}

// With token, the action ends the lease only while the holder that has
// that token holds it: an operator who read the holder breaks that one,
// and one that took the lease since keeps it, and the action fails saying
// who holds it now.
func testAccForceReleaseActionToken(t *testing.T, d locktable.Dialect) {
	db, prov := accDatabaseIn(t, d, append(d.DDL("locks"), reportsDDL(d))...)
	sc := emulator.Client(t, db)
	tf := newTerraformCLI(t)
	ctx := cliContext(t)
	tf.requireTerraformOnly(ctx, terraform114, "actions")

	stuck := holdLease(t, sc, "deploy", "stuck-job")
	first := holdLease(t, sc, "reindex", "first-job")
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	second := holdLease(t, sc, "reindex", "second-job")
	tf.write(prov + fmt.Sprintf(`
action "spannerlock_force_release" "deploy" {
  config {
    table = "locks"
    name  = "deploy"
    token = %d
  }
}

action "spannerlock_force_release" "reindex" {
  config {
    table = "locks"
    name  = "reindex"
    token = %d
  }
}
`, stuck.Token(), first.Token()))

	// The token read is still the holder's: it is ended.
	r := tf.run(ctx, "apply", "-auto-approve", "-json", "-invoke=action.spannerlock_force_release.deploy").ok(t)
	if p := r.actionProgress(); len(p) != 1 || !strings.Contains(p[0], "stuck-job") {
		t.Errorf("progress messages %q; want one naming holder stuck-job", p)
	}
	if err := fencedWrite(ctx, sc, stuck, 1); !errors.Is(err, lease.ErrLeaseLost) {
		t.Errorf("the holder's fenced write after the force-release with its token: %v; want ErrLeaseLost", err)
	}

	// The lease changed hands since its token was read: nothing is ended,
	// and the error names the attribute, the token and the holder now.
	r = tf.run(ctx, "apply", "-auto-approve", "-json", "-invoke=action.spannerlock_force_release.reindex").failed(t)
	r.has(t, "error", "Error when invoking action",
		fmt.Sprintf(`Holder changed: token %d does not hold lease "reindex" in table locks`, first.Token()),
		fmt.Sprintf("token = %d,", first.Token()),
		fmt.Sprintf("held by second-job with token %d", second.Token()),
		"nothing was released")
	if err := fencedWrite(ctx, sc, second, 2); err != nil {
		t.Errorf("the new holder's fenced write after a force-release with the old holder's token: %v; want it to succeed", err)
	}
	h, err := appClient(t, sc, "reader").Holder(ctx, "reindex")
	if err != nil || h.HolderID != "second-job" || h.Token != second.Token() {
		t.Errorf("reindex is held by %+v (%v); want second-job with token %d still", h, err, second.Token())
	}

	// A token is a positive number; Terraform says so before anything runs.
	tf.write(prov + `
action "spannerlock_force_release" "zero" {
  config {
    table = "locks"
    name  = "deploy"
    token = 0
  }
}
`)
	tf.run(ctx, "plan", "-json", "-invoke=action.spannerlock_force_release.zero").failed(t).
		diagnostic(t, "error", "Invalid Attribute Value").pointsAt(t, "token")
}

func TestAccForceReleaseAction_planWarns(t *testing.T) {
	eachDialect(t, locktable.Dialects, testAccForceReleaseActionPlanWarns)
}

// Planning the action warns whom it would end: the holder, its token and
// its deadline, or that nobody holds the lease. The plan ends nothing, and
// a holder it cannot read is a warning, not a failed plan.
func testAccForceReleaseActionPlanWarns(t *testing.T, d locktable.Dialect) {
	db, prov := accDatabaseIn(t, d, append(d.DDL("locks"), reportsDDL(d))...)
	sc := emulator.Client(t, db)
	tf := newTerraformCLI(t)
	ctx := cliContext(t)
	tf.requireTerraformOnly(ctx, terraform114, "actions")

	stuck := holdLease(t, sc, "deploy", "stuck-job")
	_, slot := stuckMigrationPermit(ctx, t, sc)
	reader := appClient(t, sc, "reader")
	tf.write(prov + fmt.Sprintf(`
action "spannerlock_force_release" "deploy" {
  config {
    table = "locks"
    name  = "deploy"
  }
}

action "spannerlock_force_release" "deploy_pinned_elsewhere" {
  config {
    table = "locks"
    name  = "deploy"
    token = %d
  }
}

action "spannerlock_force_release" "migration" {
  config {
    table = "locks"
    name  = "migrations"
    slot  = %d
  }
}

action "spannerlock_force_release" "free" {
  config {
    table = "locks"
    name  = "free"
  }
}

action "spannerlock_force_release" "no_table" {
  config {
    table = "missing"
    name  = "deploy"
  }
}
`, stuck.Token()+100, slot))

	// The holder may renew while the plan runs: its deadline is the one
	// read before or the one read after.
	before, err := reader.Holder(ctx, "deploy")
	if err != nil {
		t.Fatal(err)
	}
	r := tf.run(ctx, "plan", "-json", "-invoke=action.spannerlock_force_release.deploy").ok(t)
	after, err := reader.Holder(ctx, "deploy")
	if err != nil {
		t.Fatal(err)
	}
	w := r.diagnostic(t, "warning", "This ends stuck-job's lease")
	w.pointsAt(t, "name")
	deadline := func(h lease.Holder) string { return "expires " + h.ExpiresAt.UTC().Format(time.RFC3339) }
	if !strings.Contains(w.Detail, fmt.Sprintf(`lease "deploy" in table locks is held by stuck-job with token %d`, stuck.Token())) ||
		!strings.Contains(w.Detail, deadline(before)) && !strings.Contains(w.Detail, deadline(after)) {
		t.Errorf("the plan's warning says %q; want holder stuck-job, token %d and %q", w.Detail, stuck.Token(), deadline(before))
	}
	// Planning ended nothing.
	if err := fencedWrite(ctx, sc, stuck, 1); err != nil {
		t.Errorf("the holder's fenced write after the plan: %v; want it to succeed", err)
	}

	w = tf.run(ctx, "plan", "-json", "-invoke=action.spannerlock_force_release.deploy_pinned_elsewhere").ok(t).
		diagnostic(t, "warning", fmt.Sprintf(`Token %d does not hold lease "deploy" in table locks`, stuck.Token()+100))
	w.pointsAt(t, "token")
	if !strings.Contains(w.Detail, fmt.Sprintf("held by stuck-job with token %d", stuck.Token())) {
		t.Errorf("the plan's warning says %q; want the holder stuck-job and its token %d", w.Detail, stuck.Token())
	}

	tf.run(ctx, "plan", "-json", "-invoke=action.spannerlock_force_release.migration").ok(t).
		has(t, "warning", "This ends stuck-migration's lease", fmt.Sprintf(`slot %d of "migrations" in table locks is held by stuck-migration`, slot))

	tf.run(ctx, "plan", "-json", "-invoke=action.spannerlock_force_release.free").ok(t).
		diagnostic(t, "warning", `Nobody holds lease "free" in table locks`).pointsAt(t, "name")

	tf.run(ctx, "plan", "-json", "-invoke=action.spannerlock_force_release.no_table").ok(t).
		has(t, "warning", `Cannot read who holds lease "deploy" in table missing`, "The plan goes on")
}

// stuckMigrationPermit declares the semaphore "migrations" with 2 permits,
// has "stuck-migration" hold one, and returns it with its slot.
func stuckMigrationPermit(ctx context.Context, t *testing.T, sc *spanner.Client) (*lease.Lease, int64) {
	t.Helper()
	if err := appClient(t, sc, "admin").SetPermits(ctx, "migrations", 2); err != nil {
		t.Fatal(err)
	}
	permit, err := appClient(t, sc, "stuck-migration").TryAcquirePermit(ctx, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	holders, err := appClient(t, sc, "reader").Holders(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range holders {
		if h.Kind == "permit" {
			return permit, h.Slot
		}
	}
	t.Fatal("Holders lists no permit of migrations")
	return nil, 0
}
