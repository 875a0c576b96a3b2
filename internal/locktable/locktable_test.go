package locktable

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
)

func TestMain(m *testing.M) { emulator.Main(m) }

func TestValidateTableName(t *testing.T) {
	for _, ok := range []string{"locks", "Locks_2", "l", strings.Repeat("a", MaxTableNameLength)} {
		if err := ValidateTableName(ok); err != nil {
			t.Errorf("ValidateTableName(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", "2locks", "my-locks", "locks;DROP", "`locks`", strings.Repeat("a", MaxTableNameLength+1)} {
		if err := ValidateTableName(bad); err == nil {
			t.Errorf("ValidateTableName(%q) = nil, want an error", bad)
		}
	}
}

func TestNormalizeExpression(t *testing.T) {
	same := [][2]string{
		{"(1)", "1"},
		{"UNIX_MICROS(CURRENT_TIMESTAMP())", "(unix_micros( current_timestamp() ))"},
	}
	for _, p := range same {
		if normalizeExpression(p[0]) != normalizeExpression(p[1]) {
			t.Errorf("%q and %q should normalize equal", p[0], p[1])
		}
	}
	if normalizeExpression("(1)+(2)") != "(1)+(2)" {
		t.Errorf("unbalanced outer parentheses were stripped: %q", normalizeExpression("(1)+(2)"))
	}
}

func TestDDLCreatesTheLatestVersion(t *testing.T) {
	ctx := emulator.Context(t)
	db := emulator.Database(t, DDL("locks")...)
	ins := inspect(t, ctx, db)
	if !ins.Current() || ins.Version != Latest {
		t.Fatalf("fresh table: version %d, diffs %v; want version %d and no diffs", ins.Version, ins.Diffs, Latest)
	}
	if stmts, err := ins.Plan(Options{}); err != nil || len(stmts) != 0 {
		t.Fatalf("plan for a current table = %v, %v; want nothing", stmts, err)
	}
}

func TestMissingTablePlansItsCreation(t *testing.T) {
	ctx := emulator.Context(t)
	e := emulator.Shared(t)
	db := emulator.Database(t)
	ins := inspect(t, ctx, db)
	if ins.Exists || ins.Version != 0 {
		t.Fatalf("missing table: exists %t version %d", ins.Exists, ins.Version)
	}
	apply(t, ctx, e, db, ins, Options{})
	if ins := inspect(t, ctx, db); !ins.Current() {
		t.Fatalf("after applying the plan: %v", ins.Diffs)
	}
}

// Every older version migrates in place to the latest, keeping its rows.
func TestMigrationFromEveryVersionKeepsRows(t *testing.T) {
	for v := 1; v <= Latest; v++ {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			ctx := emulator.Context(t)
			e := emulator.Shared(t)
			db := emulator.Database(t, DDLAt("locks", v)...)
			sc := emulator.Client(t, db)
			_, err := sc.Apply(ctx, []*spanner.Mutation{
				spanner.Insert("locks", []string{"name", "token", "holder_id"}, []any{"a", 7, "x"}),
				spanner.Insert("locks", []string{"name", "token", "holder_id"}, []any{"b", 3, "y"}),
			})
			if err != nil {
				t.Fatal(err)
			}
			ins := inspect(t, ctx, db)
			if ins.Version != v {
				t.Fatalf("table created at version %d inspects as version %d (diffs %v)", v, ins.Version, ins.Diffs)
			}
			apply(t, ctx, e, db, ins, Options{})
			if ins := inspect(t, ctx, db); !ins.Current() || ins.Version != Latest {
				t.Fatalf("after migrating: version %d, diffs %v", ins.Version, ins.Diffs)
			}
			assertRows(t, ctx, sc, map[string]int64{"a": 7, "b": 3})
		})
	}
}

func TestDriftIsRepairedExactly(t *testing.T) {
	ctx := emulator.Context(t)
	e := emulator.Shared(t)
	db := emulator.Database(t, DDL("locks")...)
	sc := emulator.Client(t, db)
	_, err := sc.Apply(ctx, []*spanner.Mutation{spanner.Insert("locks", []string{"name", "token", "holder_id"}, []any{"a", 5, "h"})})
	if err != nil {
		t.Fatal(err)
	}
	update(t, ctx, e, db,
		"ALTER TABLE locks ALTER COLUMN renewed_at SET OPTIONS (allow_commit_timestamp = null)",
		"ALTER TABLE locks DROP COLUMN payload",
		"ALTER TABLE locks ALTER COLUMN holder_id STRING(1024) NOT NULL DEFAULT ('')",
	)
	ins := inspect(t, ctx, db)
	if ins.Version != 0 || len(ins.Diffs) != 4 {
		t.Fatalf("drifted table: version %d, diffs %v; want version 0 and 4 diffs (option, column, NOT NULL, default)", ins.Version, ins.Diffs)
	}
	apply(t, ctx, e, db, ins, Options{})
	after := inspect(t, ctx, db)
	if !after.Current() {
		t.Fatalf("after repair: %v", after.Diffs)
	}
	renewed, _ := after.Live.Tables[0].Column("renewed_at")
	if !renewed.CommitTimestamp {
		t.Fatal("repair did not restore allow_commit_timestamp on renewed_at")
	}
	assertRows(t, ctx, sc, map[string]int64{"a": 5})
}

func TestUnrepairableDriftIsExplained(t *testing.T) {
	ctx := emulator.Context(t)
	db := emulator.Database(t,
		"CREATE TABLE locks (name STRING(1024) NOT NULL, token STRING(MAX) NOT NULL, owner STRING(MAX) NOT NULL) PRIMARY KEY (name)")
	ins := inspect(t, ctx, db)
	_, err := ins.Plan(Options{})
	if err == nil {
		t.Fatal("Plan of a table with a STRING token succeeded")
	}
	for _, want := range []string{"locks.token is STRING(MAX), expected INT64", "locks.owner is NOT NULL without a default", "never drops"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Plan error %q does not mention %q", err, want)
		}
	}
}

func TestTableNamesMatchCaseInsensitively(t *testing.T) {
	ctx := emulator.Context(t)
	db := emulator.Database(t, DDL("Locks")...)
	ins := inspect(t, ctx, db)
	if !ins.Current() {
		t.Fatalf("table created as Locks, inspected as locks: exists %t diffs %v", ins.Exists, ins.Diffs)
	}
}

func inspect(t *testing.T, ctx context.Context, db string) Inspection {
	t.Helper()
	ins, err := Inspect(ctx, emulator.Client(t, db), "locks")
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	return ins
}

func apply(t *testing.T, ctx context.Context, e *emulator.Emulator, db string, ins Inspection, o Options) {
	t.Helper()
	stmts, err := ins.Plan(o)
	if err != nil {
		t.Fatalf("Plan: %v", err)
	}
	update(t, ctx, e, db, stmts...)
}

func update(t *testing.T, ctx context.Context, e *emulator.Emulator, db string, stmts ...string) {
	t.Helper()
	if len(stmts) == 0 {
		return
	}
	if err := e.UpdateDDL(ctx, db, stmts...); err != nil {
		t.Fatalf("UpdateDDL %v: %v", stmts, err)
	}
}

func assertRows(t *testing.T, ctx context.Context, sc *spanner.Client, want map[string]int64) {
	t.Helper()
	got := map[string]int64{}
	err := sc.Single().Query(ctx, spanner.Statement{SQL: "SELECT name, token FROM locks"}).Do(func(r *spanner.Row) error {
		var name string
		var token int64
		if err := r.Columns(&name, &token); err != nil {
			return err
		}
		got[name] = token
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("rows after migration = %v, want %v", got, want)
	}
}

func TestParseCleanupAfter(t *testing.T) {
	for in, want := range map[string]time.Duration{"30d": 30 * day, "720h": 30 * day, "24h": day, "1d": day} {
		got, err := ParseCleanupAfter(in)
		if err != nil || got != want {
			t.Errorf("ParseCleanupAfter(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "-24h", "-1d", "0d", "36h", "1.5d", "soon", "30 days"} {
		if _, err := ParseCleanupAfter(bad); err == nil {
			t.Errorf("ParseCleanupAfter(%q) succeeded, want an error", bad)
		}
	}
}

func TestCleanupSeedsTokensFromTheClockAndStaysSeeded(t *testing.T) {
	ctx := emulator.Context(t)
	e := emulator.Shared(t)
	db := emulator.Database(t, DDL("locks")...)
	sc := emulator.Client(t, db)

	apply(t, ctx, e, db, inspect(t, ctx, db), Options{CleanupAfter: 30 * day})
	ins := inspect(t, ctx, db)
	if !ins.Current() || !ins.ClockSeeded || ins.CleanupAfter != 30*day || ins.Version != Latest {
		t.Fatalf("after enabling cleanup: %+v", ins)
	}
	// A name's first token now comes from the commit clock.
	_, err := sc.Apply(ctx, []*spanner.Mutation{spanner.Insert("locks", []string{"name"}, []any{"fresh"})})
	if err != nil {
		t.Fatal(err)
	}
	r, err := sc.Single().ReadRow(ctx, "locks", spanner.Key{"fresh"}, []string{"token"})
	if err != nil {
		t.Fatal(err)
	}
	var token int64
	if err := r.Column(0, &token); err != nil {
		t.Fatal(err)
	}
	if token < time.Now().Add(-time.Hour).UnixMicro() {
		t.Fatalf("first token under cleanup = %d, want the commit time in microseconds", token)
	}

	// Turning cleanup off drops the policy but keeps the clock seed.
	apply(t, ctx, e, db, inspect(t, ctx, db), Options{})
	ins = inspect(t, ctx, db)
	if !ins.Current() || !ins.ClockSeeded || ins.CleanupAfter != 0 {
		t.Fatalf("after disabling cleanup: clock seeded %t, cleanup %s, diffs %v", ins.ClockSeeded, ins.CleanupAfter, ins.Diffs)
	}
	if stmts, err := ins.Plan(Options{}); err != nil || len(stmts) != 0 {
		t.Fatalf("plan after disabling cleanup = %v, %v; want nothing (the clock seed is not drift)", stmts, err)
	}
}

func TestCreateWithCleanup(t *testing.T) {
	ctx := emulator.Context(t)
	db := emulator.Database(t, CreateDDL("locks", Options{CleanupAfter: 7 * day})...)
	ins := inspect(t, ctx, db)
	if !ins.Current() || ins.CleanupAfter != 7*day || !ins.ClockSeeded {
		t.Fatalf("created with cleanup: %+v", ins)
	}
	stmts, err := ins.Plan(Options{CleanupAfter: 14 * day})
	if err != nil || len(stmts) != 1 || !strings.Contains(stmts[0], "REPLACE ROW DELETION POLICY (OLDER_THAN(renewed_at, INTERVAL 14 DAY))") {
		t.Fatalf("plan to change the period = %v, %v", stmts, err)
	}
}

func TestForeignDeletionPolicyIsReplaced(t *testing.T) {
	ctx := emulator.Context(t)
	e := emulator.Shared(t)
	db := emulator.Database(t, DDL("locks")...)
	update(t, ctx, e, db, "ALTER TABLE locks ADD ROW DELETION POLICY (OLDER_THAN(acquired_at, INTERVAL 1 DAY))")
	ins := inspect(t, ctx, db)
	if ins.ForeignPolicy == "" {
		t.Fatal("a policy on acquired_at (which would delete live leases) was not reported")
	}
	apply(t, ctx, e, db, ins, Options{})
	if ins := inspect(t, ctx, db); ins.ForeignPolicy != "" || ins.CleanupAfter != 0 {
		t.Fatalf("after the plan: foreign policy %q, cleanup %s", ins.ForeignPolicy, ins.CleanupAfter)
	}
}

func TestDropDDL(t *testing.T) {
	ctx := emulator.Context(t)
	e := emulator.Shared(t)
	db := emulator.Database(t, CreateDDL("locks", Options{CleanupAfter: day})...)
	update(t, ctx, e, db, DropDDL("locks")...)
	if ins := inspect(t, ctx, db); ins.Exists {
		t.Fatal("table still exists after DropDDL")
	}
}

// A table created under another spelling is one Spanner resolves either
// way, but the emulator's DDL wants its own spelling: plans must use it.
func TestPlansUseTheLiveSpelling(t *testing.T) {
	ctx := emulator.Context(t)
	e := emulator.Shared(t)
	db := emulator.Database(t, DDLAt("Locks", 1)...)
	ins := inspect(t, ctx, db)
	if ins.Version != 1 {
		t.Fatalf("table created as Locks at version 1 inspects as version %d", ins.Version)
	}
	apply(t, ctx, e, db, ins, Options{CleanupAfter: day})
	ins = inspect(t, ctx, db)
	if !ins.Current() {
		t.Fatalf("after migrating Locks: %v", ins.Diffs)
	}
	update(t, ctx, e, db, ins.DropPlan()...)
	if inspect(t, ctx, db).Exists {
		t.Fatal("DropPlan left the table")
	}
}

// An older table lacks the later companion tables; dropping it drops what exists.
func TestDropPlanDropsOnlyWhatExists(t *testing.T) {
	ctx := emulator.Context(t)
	e := emulator.Shared(t)
	db := emulator.Database(t, DDLAt("locks", 1)...)
	ins := inspect(t, ctx, db)
	if got := ins.DropPlan(); len(got) != 1 {
		t.Fatalf("DropPlan of a version-1 table = %v, want one statement", got)
	}
	update(t, ctx, e, db, ins.DropPlan()...)
}

func TestChangesExplainTheCleanupStatements(t *testing.T) {
	ctx := emulator.Context(t)
	db := emulator.Database(t, DDL("locks")...)
	changes := inspect(t, ctx, db).Changes(Options{CleanupAfter: 7 * day})
	if len(changes) != 2 || !strings.Contains(changes[0].Fix, clockToken) || !strings.Contains(changes[0].Problem, clockToken) ||
		!strings.Contains(changes[1].Problem, "expected deletion of rows not renewed for 7d") {
		t.Fatalf("changes to enable cleanup: %v", changes)
	}
}
