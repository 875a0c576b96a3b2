package locktable

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
)

func TestMain(m *testing.M) { emulator.Main(m) }

// eachDialect runs test once per dialect, as parallel subtests named after
// it, so that every guarantee is checked on a database of each.
func eachDialect(t *testing.T, test func(t *testing.T, d Dialect)) {
	t.Helper()
	for _, d := range Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			test(t, d)
		})
	}
}

// newDatabase is a fresh database of dialect d with ddl applied.
func newDatabase(t *testing.T, d Dialect, ddl ...string) string {
	t.Helper()
	return emulator.DatabaseIn(t, string(d), ddl...)
}

// byDialect picks the value for d: what differs between the dialects in a
// test is only their spelling.
func byDialect[T any](d Dialect, googleSQL, postgreSQL T) T {
	if d == PostgreSQL {
		return postgreSQL
	}
	return googleSQL
}

func TestValidateTableName(t *testing.T) {
	for _, ok := range []string{"locks", "Locks_2", "l", strings.Repeat("a", MaxTableNameLength)} {
		if err := ValidateTableName(ok); err != nil {
			t.Errorf("ValidateTableName(%q) = %v, want nil", ok, err)
		}
	}
	for _, c := range []struct{ name, why string }{
		{"", "table name is empty"},
		{"2locks", `table name "2locks" must start with a letter (A-Z or a-z: ASCII only), not '2'`},
		// A letter, but not one Spanner takes in an identifier.
		{"élocks", `table name "élocks" must start with a letter (A-Z or a-z: ASCII only), not 'é'`},
		{"locké", `table name "locké" may contain only ASCII letters, digits and underscores, not 'é' (character 5)`},
		{"my-locks", `not '-' (character 3)`},
		{"locks;DROP", "not ';'"},
		{"`locks`", "not '`'"},
		{`"locks"`, `not '"'`},
		{strings.Repeat("a", MaxTableNameLength+1), "is 101 characters long; the limit is 100"},
	} {
		if err := ValidateTableName(c.name); err == nil || !strings.Contains(err.Error(), c.why) {
			t.Errorf("ValidateTableName(%q) = %v, want an error saying %q", c.name, err, c.why)
		}
	}
}

// PostgreSQL keeps 63 characters of a name, and the longest companion adds
// 9; it refuses tables named pg_*. The emulator shows both: a longer name
// is truncated, so the table is not found by its name.
func TestValidateTableNameInPostgreSQL(t *testing.T) {
	longest := strings.Repeat("a", MaxPostgreSQLTableNameLength)
	if MaxPostgreSQLTableNameLength != 54 || len(SessionsTable(longest)) != 63 {
		t.Fatalf("MaxPostgreSQLTableNameLength = %d; want 54, so that %s is 63 characters", MaxPostgreSQLTableNameLength, SessionsTable(longest))
	}
	for _, ok := range []string{"locks", longest, "PG_locks", "Pg_locks", "locks_pg_"} {
		if err := PostgreSQL.ValidateTableName(ok); err != nil {
			t.Errorf("PostgreSQL.ValidateTableName(%q) = %v, want nil", ok, err)
		}
	}
	for _, c := range []struct{ name, why string }{
		{longest + "b", "is 55 characters long; in a PostgreSQL-dialect database the limit is 54"},
		{"pg_locks", `starts with "pg_", which a PostgreSQL-dialect database reserves`},
		{"2locks", "must start with a letter (A-Z or a-z: ASCII only)"},
	} {
		if err := PostgreSQL.ValidateTableName(c.name); err == nil || !strings.Contains(err.Error(), c.why) {
			t.Errorf("PostgreSQL.ValidateTableName(%q) = %v, want an error saying %q", c.name, err, c.why)
		}
		if strings.HasPrefix(c.name, "2") {
			continue
		}
		if err := GoogleSQL.ValidateTableName(c.name); err != nil {
			t.Errorf("GoogleSQL.ValidateTableName(%q) = %v, want nil: GoogleSQL has neither limit", c.name, err)
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("PostgreSQL.DDL(%q) did not panic", c.name)
				}
			}()
			PostgreSQL.DDL(c.name)
		}()
	}

	// What the rules keep from happening.
	db := emulator.PostgreSQLDatabase(t)
	sc := emulator.Client(t, db)
	ctx := emulator.Context(t)
	e := emulator.Shared(t)
	create := func(name string) error {
		return e.UpdateDDL(ctx, db, `CREATE TABLE "`+name+`" (id bigint, PRIMARY KEY (id))`)
	}
	if err := create("pg_locks"); err == nil {
		t.Error(`CREATE TABLE "pg_locks" succeeded in a PostgreSQL-dialect database; the pg_ rule is not needed`)
	}
	truncated := strings.Repeat("c", maxPostgreSQLIdentifier+1)
	if err := create(truncated); err != nil {
		t.Fatal(err)
	}
	if ins, err := PostgreSQL.Inspect(ctx, sc, truncated); err != nil || ins.Exists {
		t.Errorf("a table created as %q (64 characters) inspects as existing %t, %v; want it not found under its name, "+
			"which PostgreSQL truncated", truncated, ins.Exists, err)
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

// The DDL of each dialect is pinned: a table created by one release must
// inspect as current in the next. The GoogleSQL file is the DDL spannerlock
// wrote before it spoke PostgreSQL.
func TestDDLIsStable(t *testing.T) {
	eachDialect(t, func(t *testing.T, d Dialect) {
		want := readStatements(t, byDialect(d, "locks.googlesql.sql", "locks.postgresql.sql"))
		if got := d.DDL("locks"); !slices.Equal(got, want) {
			t.Fatalf("%s DDL changed:\n%s\nwant\n%s", d, strings.Join(got, ";\n"), strings.Join(want, ";\n"))
		}
		ctx := emulator.Context(t)
		db := newDatabase(t, d, want...)
		if ins := inspect(t, ctx, db); !ins.Current() || ins.Version != Latest {
			t.Fatalf("table from testdata: version %d, diffs %v", ins.Version, ins.Diffs)
		}
	})
	if !slices.Equal(DDL("locks"), GoogleSQL.DDL("locks")) {
		t.Fatal("DDL is not GoogleSQL.DDL")
	}
}

func readStatements(t *testing.T, name string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), ";\n"), ";\n")
}

func TestDDLCreatesTheLatestVersion(t *testing.T) {
	eachDialect(t, func(t *testing.T, d Dialect) {
		ctx := emulator.Context(t)
		db := newDatabase(t, d, d.DDL("locks")...)
		ins := inspect(t, ctx, db)
		if !ins.Current() || ins.Version != Latest || ins.Dialect != d {
			t.Fatalf("fresh table: version %d, dialect %s, diffs %v; want version %d and no diffs", ins.Version, ins.Dialect, ins.Diffs, Latest)
		}
		if stmts, err := ins.Plan(Options{}); err != nil || len(stmts) != 0 {
			t.Fatalf("plan for a current table = %v, %v; want nothing", stmts, err)
		}
	})
}

func TestMissingTablePlansItsCreation(t *testing.T) {
	eachDialect(t, func(t *testing.T, d Dialect) {
		ctx := emulator.Context(t)
		db := newDatabase(t, d)
		ins := inspect(t, ctx, db)
		if ins.Exists || ins.Version != 0 {
			t.Fatalf("missing table: exists %t version %d", ins.Exists, ins.Version)
		}
		apply(t, ctx, db, ins, Options{})
		if ins := inspect(t, ctx, db); !ins.Current() {
			t.Fatalf("after applying the plan: %v", ins.Diffs)
		}
	})
}

// Every older version migrates in place to the latest, keeping its rows.
func TestMigrationFromEveryVersionKeepsRows(t *testing.T) {
	eachDialect(t, func(t *testing.T, d Dialect) {
		for v := 1; v <= Latest; v++ {
			t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
				ctx := emulator.Context(t)
				db := newDatabase(t, d, d.DDLAt("locks", v)...)
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
				apply(t, ctx, db, ins, Options{})
				if ins := inspect(t, ctx, db); !ins.Current() || ins.Version != Latest {
					t.Fatalf("after migrating: version %d, diffs %v", ins.Version, ins.Diffs)
				}
				assertRows(t, ctx, sc, map[string]int64{"a": 7, "b": 3})
			})
		}
	})
}

func TestDriftIsRepairedExactly(t *testing.T) {
	eachDialect(t, func(t *testing.T, d Dialect) {
		ctx := emulator.Context(t)
		ddl := d.DDL("locks")
		if d == PostgreSQL {
			// The emulator keeps a PostgreSQL column taking commit
			// timestamps through ALTER COLUMN ... TYPE timestamp with time
			// zone, so this drift is a table created so by hand.
			ddl[0] = withoutCommitTimestamp(ddl[0], "renewed_at")
		}
		db := newDatabase(t, d, ddl...)
		sc := emulator.Client(t, db)
		renewed := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
		_, err := sc.Apply(ctx, []*spanner.Mutation{
			spanner.Insert("locks", []string{"name", "token", "holder_id", "renewed_at"}, []any{"a", 5, "h", renewed}),
		})
		if err != nil {
			t.Fatal(err)
		}
		update(t, ctx, db, byDialect(d, []string{
			"ALTER TABLE locks ALTER COLUMN renewed_at SET OPTIONS (allow_commit_timestamp = null)",
			"ALTER TABLE locks DROP COLUMN payload",
			"ALTER TABLE locks ALTER COLUMN holder_id STRING(1024) NOT NULL DEFAULT ('')",
		}, []string{
			"ALTER TABLE locks DROP COLUMN payload",
			// The emulator cannot make a PostgreSQL column NOT NULL in place.
			"ALTER TABLE locks ALTER COLUMN holder_id SET DEFAULT ('')",
		})...)
		ins := inspect(t, ctx, db)
		// commit timestamps, the column, NOT NULL (GoogleSQL only), the default
		want := byDialect(d, 4, 3)
		if ins.Version != 0 || len(ins.Diffs) != want {
			t.Fatalf("drifted table: version %d, diffs %v; want version 0 and %d diffs", ins.Version, ins.Diffs, want)
		}
		apply(t, ctx, db, ins, Options{})
		if after := inspect(t, ctx, db); !after.Current() {
			t.Fatalf("after repair: %v", after.Diffs)
		}
		// renewed_at takes commit timestamps again, and kept its value.
		var kept time.Time
		if err := readColumn(ctx, sc, "a", "renewed_at", &kept); err != nil || !kept.Equal(renewed) {
			t.Fatalf("renewed_at after repair = %v, %v; want %v", kept, err, renewed)
		}
		commit, err := sc.Apply(ctx, []*spanner.Mutation{spanner.Update("locks", []string{"name", "renewed_at"}, []any{"a", spanner.CommitTimestamp})})
		if err != nil {
			t.Fatalf("writing the commit timestamp into renewed_at after repair: %v", err)
		}
		if err := readColumn(ctx, sc, "a", "renewed_at", &kept); err != nil || !kept.Equal(commit) {
			t.Fatalf("renewed_at = %v, %v; want the commit timestamp %v", kept, err, commit)
		}
		assertRows(t, ctx, sc, map[string]int64{"a": 5})
	})
}

// withoutCommitTimestamp is a PostgreSQL CREATE TABLE with column a plain
// timestamp.
func withoutCommitTimestamp(create, column string) string {
	return strings.Replace(create, `"`+column+`" spanner.commit_timestamp`, `"`+column+`" timestamp with time zone`, 1)
}

func readColumn(ctx context.Context, sc *spanner.Client, name, column string, into any) error {
	r, err := sc.Single().ReadRow(ctx, "locks", spanner.Key{name}, []string{column})
	if err != nil {
		return err
	}
	return r.Column(0, into)
}

func TestUnrepairableDriftIsExplained(t *testing.T) {
	eachDialect(t, func(t *testing.T, d Dialect) {
		ctx := emulator.Context(t)
		db := newDatabase(t, d, byDialect(d,
			"CREATE TABLE locks (name STRING(1024) NOT NULL, token STRING(MAX) NOT NULL, owner STRING(MAX) NOT NULL) PRIMARY KEY (name)",
			"CREATE TABLE locks (name character varying(1024) NOT NULL, token character varying NOT NULL, owner character varying NOT NULL, "+
				"holder_id character varying(1024) NOT NULL, PRIMARY KEY (name))"))
		ins := inspect(t, ctx, db)
		_, err := ins.Plan(Options{})
		if err == nil {
			t.Fatal("Plan of a table with a string token succeeded")
		}
		wants := byDialect(d,
			[]string{"locks.token is STRING(MAX), expected INT64", "locks.owner is NOT NULL without a default", "never drops"},
			[]string{"locks.token is character varying, expected bigint", "locks.owner is NOT NULL without a default", "never drops",
				`locks.holder_id is NOT NULL, expected nullable (change it by hand with ALTER TABLE "locks" ALTER COLUMN "holder_id" DROP NOT NULL)`})
		for _, want := range wants {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("Plan error %q does not mention %q", err, want)
			}
		}
	})
}

// GoogleSQL resolves table names regardless of letter case, PostgreSQL
// resolves quoted names exactly, and Spanner keeps names unique regardless
// of case in both: a table spelled otherwise is the lock table in
// GoogleSQL, and in PostgreSQL one the runtime's SQL would not find.
func TestLetterCaseOfTableNames(t *testing.T) {
	eachDialect(t, func(t *testing.T, d Dialect) {
		ctx := emulator.Context(t)
		db := newDatabase(t, d, d.DDL("Locks")...)
		sc := emulator.Client(t, db)

		err := emulator.Shared(t).UpdateDDL(ctx, db, d.DDL("locks")[0])
		if err == nil || !strings.Contains(err.Error(), "Duplicate name in schema") {
			t.Fatalf("creating locks next to Locks: %v; want Spanner to refuse a duplicate name", err)
		}
		// Unquoted, PostgreSQL folds Locks to locks, which does not exist.
		if err := selectFrom(ctx, sc, "Locks"); (err != nil) != (d == PostgreSQL) {
			t.Errorf("SELECT FROM unquoted Locks, table Locks: %v; want it found only in GoogleSQL", err)
		}
		if err := selectFrom(ctx, sc, d.QuoteTable("Locks")); err != nil {
			t.Errorf("SELECT FROM %s: %v", d.QuoteTable("Locks"), err)
		}

		if ins := inspectTable(t, ctx, db, "Locks"); !ins.Current() {
			t.Fatalf("table created as Locks, inspected as Locks: %v", ins.Diffs)
		}
		ins := inspect(t, ctx, db)
		if live, misspelled := ins.Misspelled(); misspelled != (d == PostgreSQL) || misspelled && live != "Locks" {
			t.Errorf("table Locks inspected as locks: Misspelled() = %q, %t; want Locks, true only in PostgreSQL", live, misspelled)
		}
		if d == GoogleSQL {
			if !ins.Current() {
				t.Fatalf("table created as Locks, inspected as locks: exists %t diffs %v", ins.Exists, ins.Diffs)
			}
			return
		}
		_, err = ins.Plan(Options{})
		if !ins.Exists || ins.Current() || err == nil ||
			!strings.Contains(err.Error(), `table locks is spelled Locks in the database`) || !strings.Contains(err.Error(), "set the table name to Locks") {
			t.Fatalf("PostgreSQL table Locks inspected as locks: exists %t, diffs %v, plan error %v; want it reported, with what to do", ins.Exists, ins.Diffs, err)
		}
	})
}

func selectFrom(ctx context.Context, sc *spanner.Client, table string) error {
	return sc.Single().Query(ctx, spanner.Statement{SQL: "SELECT name FROM " + table}).Do(func(*spanner.Row) error { return nil })
}

func TestQuote(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{Quote("locks"), "`locks`"},
		{GoogleSQL.Quote("Locks"), "`Locks`"},
		{GoogleSQL.QuoteTable("locks"), "`locks`"},
		{GoogleSQL.QuotePermitsTable("locks"), "`locks_permits`"},
		{GoogleSQL.QuoteSessionsTable("locks"), "`locks_sessions`"},
		{PostgreSQL.Quote("Locks"), `"Locks"`},
		{PostgreSQL.QuoteTable("locks"), `"locks"`},
		{PostgreSQL.QuotePermitsTable("Locks"), `"Locks_permits"`},
		{PostgreSQL.QuoteSessionsTable("Locks"), `"Locks_sessions"`},
		{PostgreSQL.Quote(`a"b`), `"a""b"`},
		{Dialect("").Quote("locks"), "`locks`"},
	} {
		if c.got != c.want {
			t.Errorf("quoted %s, want %s", c.got, c.want)
		}
	}
}

func inspect(t *testing.T, ctx context.Context, db string) Inspection {
	t.Helper()
	return inspectTable(t, ctx, db, "locks")
}

// inspectTable inspects through Inspect, which reads the dialect, and checks
// that Dialect.Inspect finds the same.
func inspectTable(t *testing.T, ctx context.Context, db, table string) Inspection {
	t.Helper()
	sc := emulator.Client(t, db)
	ins, err := Inspect(ctx, sc, table)
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	again, err := ins.Dialect.Inspect(ctx, sc, table)
	if err != nil || !reflect.DeepEqual(again, ins) {
		t.Fatalf("%s.Inspect and Inspect differ (%v): diffs %v and %v", ins.Dialect, err, again.Diffs, ins.Diffs)
	}
	return ins
}

func apply(t *testing.T, ctx context.Context, db string, ins Inspection, o Options) {
	t.Helper()
	stmts, err := ins.Plan(o)
	if err != nil {
		t.Fatalf("Plan: %v", err)
	}
	update(t, ctx, db, stmts...)
}

func update(t *testing.T, ctx context.Context, db string, stmts ...string) {
	t.Helper()
	if len(stmts) == 0 {
		return
	}
	if err := emulator.Shared(t).UpdateDDL(ctx, db, stmts...); err != nil {
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
	eachDialect(t, func(t *testing.T, d Dialect) {
		ctx := emulator.Context(t)
		db := newDatabase(t, d, d.DDL("locks")...)
		sc := emulator.Client(t, db)

		apply(t, ctx, db, inspect(t, ctx, db), Options{CleanupAfter: 30 * day})
		ins := inspect(t, ctx, db)
		if !ins.Current() || !ins.ClockSeeded || ins.CleanupAfter != 30*day || ins.Version != Latest {
			t.Fatalf("after enabling cleanup: %+v", ins)
		}
		// A name's first token now comes from the commit clock, in
		// microseconds: not seconds, not nanoseconds.
		before := time.Now()
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
		if token < before.Add(-time.Hour).UnixMicro() || token > time.Now().Add(time.Hour).UnixMicro() {
			t.Fatalf("first token under cleanup = %d, want Spanner's clock in microseconds (about %d)", token, before.UnixMicro())
		}

		// Turning cleanup off drops the policy but keeps the clock seed.
		apply(t, ctx, db, inspect(t, ctx, db), Options{})
		ins = inspect(t, ctx, db)
		if !ins.Current() || !ins.ClockSeeded || ins.CleanupAfter != 0 {
			t.Fatalf("after disabling cleanup: clock seeded %t, cleanup %s, diffs %v", ins.ClockSeeded, ins.CleanupAfter, ins.Diffs)
		}
		if stmts, err := ins.Plan(Options{}); err != nil || len(stmts) != 0 {
			t.Fatalf("plan after disabling cleanup = %v, %v; want nothing (the clock seed is not drift)", stmts, err)
		}
	})
}

// INFORMATION_SCHEMA reports the defaults spannerlock writes in a spelling of
// its own; each dialect reads them back as what they mean.
func TestDefaultsAsReported(t *testing.T) {
	eachDialect(t, func(t *testing.T, d Dialect) {
		ctx := emulator.Context(t)
		db := newDatabase(t, d, d.DDL("locks")...)
		token, _ := inspect(t, ctx, db).Live.Tables[0].Column("token")
		if want := byDialect(d, "1", "'1'::bigint"); token.Default != (Default{Value: FirstToken, Reported: want}) {
			t.Errorf("token default %+v; want FirstToken reported as %s", token.Default, want)
		}
		apply(t, ctx, db, inspect(t, ctx, db), Options{CleanupAfter: day})
		token, _ = inspect(t, ctx, db).Live.Tables[0].Column("token")
		want := byDialect(d, "UNIX_MICROS(CURRENT_TIMESTAMP())",
			`(("extract"('epoch'::text, CURRENT_TIMESTAMP) * ('1000000'::bigint)::numeric))::bigint`)
		if token.Default != (Default{Value: ClockToken, Reported: want}) {
			t.Errorf("token default with cleanup %+v; want ClockToken reported as %s", token.Default, want)
		}
	})
}

func TestCreateWithCleanup(t *testing.T) {
	eachDialect(t, func(t *testing.T, d Dialect) {
		ctx := emulator.Context(t)
		db := newDatabase(t, d, d.CreateDDL("locks", Options{CleanupAfter: 7 * day})...)
		ins := inspect(t, ctx, db)
		if !ins.Current() || ins.CleanupAfter != 7*day || !ins.ClockSeeded {
			t.Fatalf("created with cleanup: %+v", ins)
		}
		stmts, err := ins.Plan(Options{CleanupAfter: 14 * day})
		want := byDialect(d, "ALTER TABLE `locks` REPLACE ROW DELETION POLICY (OLDER_THAN(renewed_at, INTERVAL 14 DAY))",
			`ALTER TABLE "locks" ALTER TTL INTERVAL '14 days' ON "renewed_at"`)
		if err != nil || len(stmts) != 1 || stmts[0] != want {
			t.Fatalf("plan to change the period = %q, %v; want %q", stmts, err, want)
		}
		update(t, ctx, db, stmts...)
		if ins := inspect(t, ctx, db); !ins.Current() || ins.CleanupAfter != 14*day {
			t.Fatalf("after changing the period: cleanup %s, diffs %v", ins.CleanupAfter, ins.Diffs)
		}
	})
}

// Spanner stores a PostgreSQL TTL's interval normalised: drift detection
// must read what it means, or every plan would replace the policy.
func TestIntervalsCompareByMeaning(t *testing.T) {
	ctx := emulator.Context(t)
	periods := []int{1, 2, 7, 14, 30, 31, 60, 100, 365}
	var ddl []string
	for _, n := range periods {
		ddl = append(ddl, PostgreSQL.CreateDDL(fmt.Sprintf("locks%d", n), Options{CleanupAfter: time.Duration(n) * day})...)
	}
	db := newDatabase(t, PostgreSQL, ddl...)
	reported := map[int]string{}
	for _, n := range periods {
		ins := inspectTable(t, ctx, db, fmt.Sprintf("locks%d", n))
		if !ins.Current() || ins.CleanupAfter != time.Duration(n)*day || ins.ForeignPolicy != "" {
			t.Errorf("TTL of %d days: cleanup %s, foreign %q, diffs %v", n, ins.CleanupAfter, ins.ForeignPolicy, ins.Diffs)
		}
		if stmts, err := ins.Plan(Options{CleanupAfter: time.Duration(n) * day}); err != nil || len(stmts) != 0 {
			t.Errorf("plan for a TTL of %d days, as configured = %q, %v; want nothing", n, stmts, err)
		}
		reported[n] = ins.Live.Tables[0].RowDeletion.Reported
	}
	// The normalisations the comments describe.
	for n, want := range map[int]string{
		30:  "INTERVAL '4 WEEKS 2 DAYS' ON renewed_at",
		31:  "INTERVAL '1 MONTHS 24 HOURS' ON renewed_at",
		365: "INTERVAL '12 MONTHS 5 DAYS' ON renewed_at",
	} {
		if reported[n] != want {
			t.Errorf("a TTL of %d days reads back as %q, want %q", n, reported[n], want)
		}
	}
}

func TestIntervalDays(t *testing.T) {
	for in, want := range map[string]int{
		"2 DAYS": 2, "24 HOURS": 1, "4 WEEKS 2 DAYS": 30, "1 MONTHS 24 HOURS": 31, "2 MONTHS": 60,
		"3 MONTHS 1 WEEKS 3 DAYS": 100, "12 MONTHS 5 DAYS": 365, "1 year": 360, "1 day": 1, "0 DAYS": 0,
		"1 week 24 hours 0 minutes 0 seconds": 8,
	} {
		if got, ok := intervalDays(in); !ok || got != want {
			t.Errorf("intervalDays(%q) = %d, %t; want %d", in, got, ok, want)
		}
	}
	for _, bad := range []string{"", "P30D", "36 hours", "1 week 30 minutes", "-1 days", "2", "days 2", "2 fortnights", "1.5 days"} {
		if got, ok := intervalDays(bad); ok {
			t.Errorf("intervalDays(%q) = %d; want it unreadable", bad, got)
		}
	}
}

func TestForeignDeletionPolicyIsReplaced(t *testing.T) {
	eachDialect(t, func(t *testing.T, d Dialect) {
		for _, policy := range byDialect(d, []string{
			"ALTER TABLE locks ADD ROW DELETION POLICY (OLDER_THAN(acquired_at, INTERVAL 1 DAY))",
			"ALTER TABLE locks ADD ROW DELETION POLICY (OLDER_THAN(renewed_at, INTERVAL 0 DAY))",
		}, []string{
			"ALTER TABLE locks ADD TTL INTERVAL '1 day' ON acquired_at",
			"ALTER TABLE locks ADD TTL INTERVAL '0 days' ON renewed_at",
		}) {
			t.Run(policy, func(t *testing.T) {
				ctx := emulator.Context(t)
				db := newDatabase(t, d, d.DDL("locks")...)
				update(t, ctx, db, policy)
				ins := inspect(t, ctx, db)
				if ins.ForeignPolicy == "" {
					t.Fatal("a policy that would delete live leases was not reported")
				}
				apply(t, ctx, db, ins, Options{})
				if ins := inspect(t, ctx, db); ins.ForeignPolicy != "" || ins.CleanupAfter != 0 || !ins.Current() {
					t.Fatalf("after the plan: foreign policy %q, cleanup %s, diffs %v", ins.ForeignPolicy, ins.CleanupAfter, ins.Diffs)
				}
			})
		}
	})
}

// The sessions table's own policy is part of the definition: drift from it
// is repaired like any other.
func TestSessionsPolicyDriftIsRepaired(t *testing.T) {
	eachDialect(t, func(t *testing.T, d Dialect) {
		ctx := emulator.Context(t)
		db := newDatabase(t, d, d.DDL("locks")...)
		update(t, ctx, db, byDialect(d,
			"ALTER TABLE locks_sessions REPLACE ROW DELETION POLICY (OLDER_THAN(renewed_at, INTERVAL 30 DAY))",
			"ALTER TABLE locks_sessions ALTER TTL INTERVAL '30 days' ON renewed_at"))
		ins := inspect(t, ctx, db)
		if ins.Current() || len(ins.Diffs) != 1 || ins.Diffs[0].Table != "locks_sessions" {
			t.Fatalf("sessions policy of 30 days: diffs %v; want one, on locks_sessions", ins.Diffs)
		}
		apply(t, ctx, db, ins, Options{})
		if ins := inspect(t, ctx, db); !ins.Current() {
			t.Fatalf("after the plan: %v", ins.Diffs)
		}
	})
}

// The emulator's PostgreSQL dialect cannot change a column's nullability in
// place, a type change resets the column to nullable without a default, and
// it ignores a change from SPANNER.COMMIT_TIMESTAMP to a plain timestamp:
// so PostgreSQL plans advise on NOT NULL rather than fix it, and change a
// commit-timestamp column's type only where nothing else is lost. If this
// test fails, the emulator learned more, and those plans can too.
func TestEmulatorLimitsThePostgreSQLRepairs(t *testing.T) {
	ctx := emulator.Context(t)
	db := newDatabase(t, PostgreSQL, "CREATE TABLE t (k bigint NOT NULL, n bigint NOT NULL DEFAULT (1), m bigint, c spanner.commit_timestamp, PRIMARY KEY (k))")
	for _, stmt := range []string{"ALTER TABLE t ALTER COLUMN n DROP NOT NULL", "ALTER TABLE t ALTER COLUMN m SET NOT NULL"} {
		if err := emulator.Shared(t).UpdateDDL(ctx, db, stmt); err == nil {
			t.Errorf("the emulator ran %s", stmt)
		}
	}
	update(t, ctx, db, "ALTER TABLE t ALTER COLUMN n TYPE bigint", "ALTER TABLE t ALTER COLUMN c TYPE timestamp with time zone")
	live, err := PostgreSQL.readSchema(ctx, emulator.Client(t, db), Schema{Tables: []Table{{Name: "t"}}})
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := live.Tables[0].Column("n"); n.NotNull || n.Default.Value != NoDefault {
		t.Errorf("after ALTER COLUMN n TYPE bigint: NOT NULL %t, default %+v; the emulator used to reset both", n.NotNull, n.Default)
	}
	// Which is why TestDriftIsRepairedExactly creates its drift by hand.
	if c, _ := live.Tables[0].Column("c"); !c.CommitTimestamp {
		t.Errorf("after ALTER COLUMN c TYPE timestamp with time zone, c no longer takes commit timestamps; the emulator used to keep it")
	}
}

// A NOT NULL commit-timestamp column gets advice, not a type change the
// emulator would turn nullable.
func TestPostgreSQLCommitTimestampRepairKeepsNotNull(t *testing.T) {
	ctx := emulator.Context(t)
	ddl := PostgreSQL.DDL("locks")
	ddl[0] = withoutCommitTimestamp(ddl[0], "acquired_at")
	ddl[1] = withoutCommitTimestamp(ddl[1], "renewed_at")
	db := newDatabase(t, PostgreSQL, ddl...)
	var acquired, renewed Diff
	for _, c := range inspect(t, ctx, db).Changes(Options{}) {
		switch {
		case c.Table == "locks" && c.Column == "acquired_at":
			acquired = c
		case c.Table == "locks_sessions" && c.Column == "renewed_at":
			renewed = c
		}
	}
	if acquired.Problem != "column locks.acquired_at is timestamp with time zone, expected spanner.commit_timestamp" ||
		acquired.Fix != `ALTER TABLE "locks" ALTER COLUMN "acquired_at" TYPE spanner.commit_timestamp` {
		t.Errorf("repair of locks.acquired_at: %+v", acquired)
	}
	if renewed.Fix != "" || !strings.Contains(renewed.Advice, `ALTER TABLE "locks_sessions" ALTER COLUMN "renewed_at" TYPE spanner.commit_timestamp`) {
		t.Errorf("repair of locks_sessions.renewed_at, NOT NULL: %+v; want advice only", renewed)
	}
}

func TestDropDDL(t *testing.T) {
	eachDialect(t, func(t *testing.T, d Dialect) {
		ctx := emulator.Context(t)
		db := newDatabase(t, d, d.CreateDDL("locks", Options{CleanupAfter: day})...)
		update(t, ctx, db, d.DropDDL("locks")...)
		if ins := inspect(t, ctx, db); ins.Exists {
			t.Fatal("table still exists after DropDDL")
		}
	})
}

// A GoogleSQL table created under another spelling is one Spanner resolves
// either way, but the emulator's DDL wants its own spelling: plans must use
// it. (In PostgreSQL such a table is not the lock table; see
// TestLetterCaseOfTableNames.)
func TestPlansUseTheLiveSpelling(t *testing.T) {
	ctx := emulator.Context(t)
	db := emulator.Database(t, DDLAt("Locks", 1)...)
	ins := inspect(t, ctx, db)
	if ins.Version != 1 {
		t.Fatalf("table created as Locks at version 1 inspects as version %d", ins.Version)
	}
	apply(t, ctx, db, ins, Options{CleanupAfter: day})
	ins = inspect(t, ctx, db)
	if !ins.Current() {
		t.Fatalf("after migrating Locks: %v", ins.Diffs)
	}
	update(t, ctx, db, ins.DropPlan()...)
	if inspect(t, ctx, db).Exists {
		t.Fatal("DropPlan left the table")
	}
}

// An older table lacks the later companion tables; dropping it drops what exists.
func TestDropPlanDropsOnlyWhatExists(t *testing.T) {
	eachDialect(t, func(t *testing.T, d Dialect) {
		ctx := emulator.Context(t)
		db := newDatabase(t, d, d.DDLAt("locks", 1)...)
		ins := inspect(t, ctx, db)
		if got := ins.DropPlan(); len(got) != 1 {
			t.Fatalf("DropPlan of a version-1 table = %v, want one statement", got)
		}
		update(t, ctx, db, ins.DropPlan()...)
		if inspect(t, ctx, db).Exists {
			t.Fatal("DropPlan left the table")
		}
	})
}

func TestChangesExplainTheCleanupStatements(t *testing.T) {
	eachDialect(t, func(t *testing.T, d Dialect) {
		ctx := emulator.Context(t)
		db := newDatabase(t, d, d.DDL("locks")...)
		changes := inspect(t, ctx, db).Changes(Options{CleanupAfter: 7 * day})
		clock := byDialect(d, "UNIX_MICROS(CURRENT_TIMESTAMP())", "CAST(EXTRACT(EPOCH FROM CURRENT_TIMESTAMP) * 1000000 AS bigint)")
		if len(changes) != 2 || !strings.Contains(changes[0].Fix, clock) || !strings.Contains(changes[0].Problem, clock) ||
			!strings.Contains(changes[1].Problem, "expected deletion of rows not renewed for 7d") {
			t.Fatalf("changes to enable cleanup: %v", changes)
		}
	})
}

func TestDatabaseDialect(t *testing.T) {
	eachDialect(t, func(t *testing.T, d Dialect) {
		got, err := DatabaseDialect(emulator.Context(t), emulator.Client(t, newDatabase(t, d)))
		if err != nil || got != d {
			t.Errorf("DatabaseDialect of a %s database = %q, %v", d, got, err)
		}
	})
}

func TestParseDialect(t *testing.T) {
	for in, want := range map[string]Dialect{"GOOGLE_STANDARD_SQL": GoogleSQL, "postgresql": PostgreSQL} {
		if got, err := ParseDialect(in); err != nil || got != want {
			t.Errorf("ParseDialect(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "GOOGLESQL", "DATABASE_DIALECT_UNSPECIFIED"} {
		if _, err := ParseDialect(bad); err == nil {
			t.Errorf("ParseDialect(%q) succeeded; want an error", bad)
		}
	}
}

func TestConflicts(t *testing.T) {
	if got := ConflictingNames("locks"); strings.Join(got, ",") != "locks_sessions,locks_permits,locks_waiters" {
		t.Errorf("ConflictingNames(locks) = %v", got)
	}
	if got := ConflictingNames("Locks_Sessions"); !slices.Contains(got, "Locks") {
		t.Errorf("ConflictingNames(Locks_Sessions) = %v; want it to name Locks, whose companion it is named like", got)
	}
	if got := ConflictingNames("_sessions"); slices.ContainsFunc(got, func(n string) bool { return n == "" }) {
		t.Errorf("ConflictingNames(_sessions) = %q; want no empty name", got)
	}
	for _, c := range [][2]string{{"locks", "LOCKS_sessions"}, {"locks_permits", "locks"}, {"Locks_Sessions", "locks"}} {
		if Conflict(c[0], c[1]) == "" {
			t.Errorf("Conflict(%q, %q) is empty; want an explanation", c[0], c[1])
		}
	}
	for _, c := range [][2]string{{"locks", "jobs"}, {"locks", "locks_other"}, {"locks_sessions_x", "locks"}} {
		if got := Conflict(c[0], c[1]); got != "" {
			t.Errorf("Conflict(%q, %q) = %q; want none", c[0], c[1], got)
		}
	}
}

func TestExistingTables(t *testing.T) {
	eachDialect(t, func(t *testing.T, d Dialect) {
		ctx := emulator.Context(t)
		sc := emulator.Client(t, newDatabase(t, d, d.DDL("locks")...))
		for _, existing := range []func(context.Context, *spanner.Client, []string) ([]string, error){ExistingTables, d.ExistingTables} {
			got, err := existing(ctx, sc, []string{"LOCKS_SESSIONS", "absent", "locks"})
			if err != nil || strings.Join(got, ",") != "locks,locks_sessions" {
				t.Fatalf("ExistingTables = %v, %v; want the live spellings of locks and locks_sessions", got, err)
			}
		}
	})
}

func TestEmpty(t *testing.T) {
	eachDialect(t, func(t *testing.T, d Dialect) {
		ctx := emulator.Context(t)
		sc := emulator.Client(t, newDatabase(t, d, d.DDL("Locks")...))
		if empty, err := d.Empty(ctx, sc, "Locks"); err != nil || !empty {
			t.Fatalf("Empty of a new table = %t, %v; want true", empty, err)
		}
		if _, err := sc.Apply(ctx, []*spanner.Mutation{spanner.Insert("Locks", []string{"name", "token"}, []any{"a", 1})}); err != nil {
			t.Fatal(err)
		}
		if empty, err := d.Empty(ctx, sc, "Locks"); err != nil || empty {
			t.Fatalf("Empty of a table with a row = %t, %v; want false", empty, err)
		}
	})
}

// The README shows the PostgreSQL DDL in full, the table resource's docs
// its first statement: both must be what the function returns.
func TestDocsShowThePostgreSQLDDL(t *testing.T) {
	for file, stmts := range map[string][]string{
		filepath.Join("..", "..", "README.md"):                               PostgreSQL.DDL("locks"),
		filepath.Join("..", "..", "templates", "resources", "table.md.tmpl"): PostgreSQL.DDL("locks")[:1],
	} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if want := "```sql\n" + strings.Join(stmts, ";\n"); !strings.Contains(string(b), want) {
			t.Errorf("%s does not show\n%s", file, want)
		}
	}
}

// Messages that say what a lock table is made of name every table of the
// latest version, the waiters table of version 4 included.
func TestFamilyNamesEveryTable(t *testing.T) {
	if got, want := Family("T"), "4 tables, T, T_sessions, T_permits and T_waiters"; got != want {
		t.Errorf("Family(T) = %q, want %q", got, want)
	}
}
