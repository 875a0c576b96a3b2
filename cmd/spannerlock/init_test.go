//go:build unix

package main

import (
	"strings"
	"testing"
	"time"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
)

func inspect(t *testing.T, c *cli, table string) locktable.Inspection {
	t.Helper()
	ins, err := locktable.Inspect(testContext(t), emulator.Client(t, c.db), table)
	if err != nil {
		t.Fatal(err)
	}
	return ins
}

// init creates the table at the latest version in the database's dialect,
// prints the DDL it ran, and does nothing the second time; --dry-run
// changes nothing.
func TestInit(t *testing.T) {
	inEachDialect(t, func(t *testing.T, d locktable.Dialect) {
		c := emptyCLIIn(t, d)
		r := c.expect(0, "init", "--dry-run")
		if !strings.Contains(r.stdout, "CREATE TABLE "+d.Quote("locks")) || inspect(t, c, "locks").Exists {
			t.Fatalf("--dry-run: stdout %q; the table must not exist after it", r.stdout)
		}
		r = c.expect(0, "init")
		if want := strings.Join(d.DDL("locks"), ";\n") + ";\n"; r.stdout != want {
			t.Errorf("init printed:\n%s\nwant the statements it ran:\n%s", r.stdout, want)
		}
		if ins := inspect(t, c, "locks"); !ins.Current() || ins.Dialect != d {
			t.Fatalf("after init: dialect %s, diffs %v", ins.Dialect, ins.Diffs)
		}
		r = c.expect(0, "init")
		if r.stdout != "" || !strings.Contains(r.stderr, "nothing to do") {
			t.Fatalf("second init: stdout %q, stderr %q", r.stdout, r.stderr)
		}
		c.expect(0, "lock", "x", "--", "true") // the table works
	})
}

// init refuses, changing nothing, a table name that a PostgreSQL-dialect
// database would truncate (with its companion tables) or reserves; GoogleSQL
// takes both.
func TestInitRefusesNamesPostgreSQLCannotHold(t *testing.T) {
	inEachDialect(t, func(t *testing.T, d locktable.Dialect) {
		c := emptyCLIIn(t, d)
		long := strings.Repeat("a", locktable.MaxPostgreSQLTableNameLength+1)
		for _, name := range []string{long, "pg_locks"} {
			if d == locktable.GoogleSQL {
				c.expect(0, "--table", name, "init", "--dry-run")
				continue
			}
			r := c.expect(exitUsage, "--table", name, "init")
			if !strings.Contains(r.stderr, "--table: table name \""+name+"\"") || !strings.Contains(r.stderr, "PostgreSQL-dialect database") {
				t.Errorf("init --table %s: %s", name, r.stderr)
			}
		}
		for _, name := range []string{long, locktable.SessionsTable(long)[:63], "pg_locks"} {
			if inspect(t, c, name).Exists {
				t.Errorf("table %s exists after init refused it", name)
			}
		}
	})
}

// init migrates a table of an older schema version in place, keeps the
// table's cleanup setting unless told otherwise, and sets it when told.
func TestInitMigrates(t *testing.T) {
	inEachDialect(t, func(t *testing.T, d locktable.Dialect) {
		c := emptyCLIIn(t, d)
		if err := emulator.Shared(t).UpdateDDL(testContext(t), c.db, d.DDLAt("old", 1)...); err != nil {
			t.Fatal(err)
		}
		r := c.expect(0, "--table", "old", "init")
		if !strings.Contains(r.stderr, "from schema version 1") {
			t.Errorf("stderr %q", r.stderr)
		}
		if ins := inspect(t, c, "old"); ins.Version != locktable.Latest {
			t.Fatalf("after init: version %d, diffs %v", ins.Version, ins.Diffs)
		}
		c.expect(0, "--table", "old", "init", "--cleanup-after", "30d")
		c.expect(0, "--table", "old", "init")
		if ins := inspect(t, c, "old"); ins.CleanupAfter != 30*24*time.Hour || !ins.Current() {
			t.Fatalf("cleanup %s (diffs %v), want 30 days kept by a plain init", ins.CleanupAfter, ins.Diffs)
		}
		c.expect(0, "--table", "old", "lock", "x", "--", "true") // the migrated table works
	})
}

// Commands on a database without the table say to run spannerlock init;
// a database that does not exist says so.
func TestMissingTableOrDatabase(t *testing.T) {
	inEachDialect(t, func(t *testing.T, d locktable.Dialect) {
		c := emptyCLIIn(t, d)
		for _, args := range [][]string{
			{"lock", "x", "--", "true"},
			{"holder", "x"},
			{"status"},
			{"status", "--watch"},
			{"run-once", "job", "--slot", slot, "--", "true"},
			{"elect", "--observe", "x"},
		} {
			r := c.expect(exitFailure, args...)
			if !strings.Contains(r.stderr, "table locks does not exist") || !strings.Contains(r.stderr, "run 'spannerlock init'") {
				t.Errorf("%v: %s", args, r.stderr)
			}
		}
		if err := emulator.Shared(t).UpdateDDL(testContext(t), c.db, d.DDLAt("old", 2)...); err != nil {
			t.Fatal(err)
		}
		r := c.expect(exitFailure, "--table", "old", "permit", "sem", "--", "true")
		if !strings.Contains(r.stderr, "run 'spannerlock --table old init' to migrate it") {
			t.Errorf("outdated table: %s", r.stderr)
		}

		gone := c.db[:strings.LastIndex(c.db, "/")+1] + "no-such-db"
		r = run(t, c.dir, env(gone), nil, "holder", "x")
		if r.code != exitFailure || !strings.Contains(r.stderr, "database "+gone+" does not exist") {
			t.Errorf("missing database: exit %d, %s", r.code, r.stderr)
		}
	})
}

// The hint to run init names the --table it is for; on PostgreSQL, a
// --table spelled in another letter case than the table says which to use.
func TestInitHint(t *testing.T) {
	inEachDialect(t, func(t *testing.T, d locktable.Dialect) {
		c := newCLIIn(t, d)
		r := c.expect(exitFailure, "--table", "job_locks", "lock", "x", "--", "true")
		if !strings.Contains(r.stderr, "run 'spannerlock --table job_locks init' to create it") {
			t.Errorf("the hint does not name --table:\n%s", r.stderr)
		}
		c.expect(0, "--table", "job_locks", "init")
		c.expect(0, "--table", "job_locks", "lock", "x", "--", "true")
		if d == locktable.PostgreSQL {
			r := c.expect(exitFailure, "--table", "LOCKS", "lock", "x", "--", "true")
			if !strings.Contains(r.stderr, "table LOCKS is spelled locks in") || !strings.Contains(r.stderr, "use --table locks") {
				t.Errorf("a misspelled --table on PostgreSQL:\n%s", r.stderr)
			}
		}
	})
}

// init refuses a --table that is another lock table's companion, and every
// command on a table whose companions' names are taken says so, instead of
// sending users to an init that cannot create it.
func TestInitCompanionNames(t *testing.T) {
	inEachDialect(t, func(t *testing.T, d locktable.Dialect) {
		c := emptyCLIIn(t, d)
		c.expect(0, "init")
		r := c.expect(exitFailure, "--table", "locks_permits", "init")
		if !strings.Contains(r.stderr, "locks_permits is the name of a companion table of lock table locks") {
			t.Errorf("init --table locks_permits:\n%s", r.stderr)
		}

		c = emptyCLIIn(t, d)
		c.expect(0, "--table", "locks_sessions", "init")
		for _, args := range [][]string{{"init"}, {"lock", "x", "--", "true"}} {
			r := c.expect(exitFailure, args...)
			if !strings.Contains(r.stderr, "lock table locks needs the name locks_sessions for a companion table") ||
				strings.Contains(r.stderr, "run 'spannerlock init'") {
				t.Errorf("%v with lock table locks_sessions in the database:\n%s", args, r.stderr)
			}
		}
	})
}
