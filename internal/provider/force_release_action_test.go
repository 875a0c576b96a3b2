package provider

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

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
	var slot int64 = -1
	for _, h := range holders {
		if h.Kind == "permit" {
			slot = h.Slot
		}
	}
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
