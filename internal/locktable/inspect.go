package locktable

import (
	"context"
	"fmt"
	"strings"
	"time"

	"cloud.google.com/go/spanner"
)

// Inspection is a live lock table compared with its definition.
type Inspection struct {
	Table string
	// Dialect is the database's: the plans are statements in it.
	Dialect Dialect
	// Exists reports whether the lock table itself is in the database.
	Exists bool
	// Version is the highest schema version the live table fully satisfies,
	// 0 when it satisfies none (it drifted, or does not exist).
	Version int
	// Live is what INFORMATION_SCHEMA reports for the tables of the family,
	// read into the definition's terms.
	Live Schema
	// Diffs are the differences from the latest version; empty when current.
	Diffs []Diff
	// CleanupAfter is the period of the live row deletion policy, 0 for none.
	CleanupAfter time.Duration
	// ForeignPolicy is a live row deletion policy spannerlock did not write,
	// as INFORMATION_SCHEMA reports it; it could delete live leases, so
	// every plan replaces or drops it.
	ForeignPolicy string
	// ClockSeeded reports that new names' tokens start at the commit clock,
	// which cleanup requires and which then stays.
	ClockSeeded bool
}

// Diff is one difference between a live table and the latest definition.
type Diff struct {
	Table   string
	Column  string // "" when the difference is about the table
	Problem string
	// Fix is the statement that repairs the difference in place without
	// touching data, or "" when there is no such statement.
	Fix string
	// Advice says what an operator can do when there is no Fix.
	Advice string
}

func (d Diff) String() string {
	if d.Fix == "" && d.Advice != "" {
		return d.Problem + " (" + d.Advice + ")"
	}
	return d.Problem
}

// Current reports whether the table exists at the latest version with no drift.
func (i Inspection) Current() bool {
	return i.Exists && len(i.Diffs) == 0
}

// VersionError says that a lock table exists but is not at the schema
// version this release's runtime reads and writes (Latest): the runtime's
// statements name columns and tables that older versions lack, so Spanner
// refuses them with an error about SQL that says nothing of versions.
type VersionError struct {
	// Table is the lock table's name as Spanner spells it.
	Table string
	// Version is the highest schema version the table satisfies, 0 when it
	// has drifted from every version.
	Version int
}

func (e *VersionError) Error() string {
	if e.Version == 0 {
		return fmt.Sprintf("table %s satisfies no schema version (it has drifted); this release needs version %d", e.Table, Latest)
	}
	return fmt.Sprintf("table %s is at schema version %d; this release needs %d", e.Table, e.Version, Latest)
}

// Outdated returns a *VersionError when the table exists and is not at the
// latest schema version, and nil otherwise (a table that does not exist is
// another matter). It is the one check, for every program of this module,
// of whether the runtime can use a table: each says in its own terms how to
// migrate it.
func (i Inspection) Outdated() error {
	if !i.Exists || i.Version >= Latest {
		return nil
	}
	return &VersionError{Table: i.liveName(), Version: i.Version}
}

// Changes returns what differs from the latest version with options o, each
// difference with the statement that repairs it (or, without one, what to
// do): the table's creation when it is missing, else repairs and
// migrations, then the row deletion policy.
func (i Inspection) Changes(o Options) []Diff {
	if !i.Exists {
		var diffs []Diff
		for _, stmt := range i.Dialect.CreateDDL(i.Table, o) {
			diffs = append(diffs, Diff{Table: i.Table, Problem: fmt.Sprintf("table %s does not exist", i.Table), Fix: stmt})
		}
		return diffs
	}
	sp := i.Dialect.spelling()
	diffs := append(i.nameDiffs(), compare(sp, i.Live, definition(i.Table, Latest, i.ClockSeeded || o.CleanupAfter > 0))...)
	liveExists := i.CleanupAfter > 0 || i.ForeignPolicy != ""
	for _, stmt := range policyStatements(sp, i.liveName(), i.CleanupAfter, liveExists, o.CleanupAfter) {
		problem := fmt.Sprintf("table %s deletes rows not renewed for %s, expected no deletion", i.Table, FormatCleanupAfter(i.CleanupAfter))
		switch {
		case i.ForeignPolicy != "":
			problem = fmt.Sprintf("table %s has the row deletion policy %s, which spannerlock did not write and which could delete live leases", i.Table, i.ForeignPolicy)
		case o.CleanupAfter > 0 && liveExists:
			problem = fmt.Sprintf("table %s deletes rows not renewed for %s, expected %s", i.Table, FormatCleanupAfter(i.CleanupAfter), FormatCleanupAfter(o.CleanupAfter))
		case o.CleanupAfter > 0:
			problem = fmt.Sprintf("table %s has no cleanup, expected deletion of rows not renewed for %s", i.Table, FormatCleanupAfter(o.CleanupAfter))
		}
		diffs = append(diffs, Diff{Table: i.Table, Problem: problem, Fix: stmt})
	}
	return diffs
}

// Plan returns the statements of Changes, in order. It returns an error
// listing every difference that no additive statement can repair; nothing in
// a plan drops a column or a table.
func (i Inspection) Plan(o Options) ([]string, error) {
	var stmts, unfixable []string
	for _, d := range i.Changes(o) {
		if d.Fix == "" {
			unfixable = append(unfixable, d.String())
			continue
		}
		stmts = append(stmts, d.Fix)
	}
	if len(unfixable) > 0 {
		return nil, fmt.Errorf("table %s cannot be migrated in place: %s", i.Table, strings.Join(unfixable, "; "))
	}
	return stmts, nil
}

// DropPlan returns the statements that drop the tables of the family that
// exist, children first, as Spanner spells them.
func (i Inspection) DropPlan() []string {
	var stmts []string
	for t := len(i.Live.Tables) - 1; t >= 0; t-- {
		stmts = append(stmts, dropTableStatement(i.Dialect.spelling(), i.Live.Tables[t].LiveName))
	}
	return stmts
}

// LiveName returns the lock table's name as Spanner spells it, which may
// differ from Table in letter case; Table when the table does not exist.
func (i Inspection) LiveName() string { return i.liveName() }

func (i Inspection) liveName() string {
	if lt, ok := i.Live.Table(i.Table); ok && lt.LiveName != "" {
		return lt.LiveName
	}
	return i.Table
}

// Inspect reads the named lock table's schema through INFORMATION_SCHEMA and
// compares it with every version of the definition. It reads db's dialect
// first (DatabaseDialect); Dialect.Inspect does not.
func Inspect(ctx context.Context, db *spanner.Client, table string) (Inspection, error) {
	if err := ValidateTableName(table); err != nil {
		return Inspection{}, err
	}
	d, err := DatabaseDialect(ctx, db)
	if err != nil {
		return Inspection{}, fmt.Errorf("inspect table %s: %w", table, err)
	}
	return d.Inspect(ctx, db, table)
}

// Inspect reads the named lock table's schema through INFORMATION_SCHEMA of
// db, a database of dialect d, and compares it with every version of the
// definition.
func (d Dialect) Inspect(ctx context.Context, db *spanner.Client, table string) (Inspection, error) {
	if err := ValidateTableName(table); err != nil {
		return Inspection{}, err
	}
	sp := d.spelling()
	want := Definition(table, Latest)
	live, err := d.readSchema(ctx, db, want)
	if err != nil {
		return Inspection{}, fmt.Errorf("inspect table %s: %w", table, err)
	}
	ins := Inspection{Table: table, Dialect: d, Live: live}
	lt, exists := live.Table(table)
	ins.Exists = exists
	if !exists {
		ins.Diffs = compare(sp, live, want)
		return ins, nil
	}
	if token, ok := lt.Column("token"); ok {
		ins.ClockSeeded = token.Default.Value == ClockToken
	}
	var foreign bool
	ins.CleanupAfter, foreign = cleanupPeriod(lt.RowDeletion)
	if foreign {
		ins.ForeignPolicy = lt.RowDeletion.Reported
	}
	ins.Diffs = append(ins.nameDiffs(), compare(sp, live, definition(table, Latest, ins.ClockSeeded))...)
	for v := Latest; v >= 1; v-- {
		if len(compare(sp, live, definition(table, v, ins.ClockSeeded))) == 0 {
			ins.Version = v
			break
		}
	}
	return ins, nil
}

// nameDiffs finds the live tables of the family that a case-sensitive
// dialect's SQL would not find under their definition's name: Spanner keeps
// Locks from being created next to locks, yet PostgreSQL's "locks" does not
// name Locks. Their shape may match a version; the runtime cannot use them.
func (i Inspection) nameDiffs() []Diff {
	var diffs []Diff
	for _, t := range i.Live.Tables {
		if !i.unreachable(t) {
			continue
		}
		advice := fmt.Sprintf("set the table name to %s", t.LiveName)
		if t.Name != i.Table {
			advice = fmt.Sprintf("rename it to %s, or name the lock table to match it", t.Name)
		}
		diffs = append(diffs, Diff{
			Table: t.Name,
			Problem: fmt.Sprintf("table %s is spelled %s in the database; PostgreSQL names tables case-sensitively, so SQL for %s does not find it",
				t.Name, t.LiveName, i.Dialect.Quote(t.Name)),
			Advice: advice,
		})
	}
	return diffs
}

// Misspelled returns the lock table's name as the database spells it when
// SQL in the inspection's dialect does not find the table under Table:
// PostgreSQL resolves quoted names exactly, so there a table locks is not
// found as "LOCKS", by the runtime or by anything else given that name.
// GoogleSQL resolves names regardless of case, so there it is always found.
func (i Inspection) Misspelled() (live string, misspelled bool) {
	if t, ok := i.Live.Table(i.Table); ok && i.unreachable(t) {
		return t.LiveName, true
	}
	return "", false
}

// unreachable reports that the dialect's SQL does not find live table t
// under its definition's name.
func (i Inspection) unreachable(t Table) bool {
	return i.Dialect.spelling().caseSensitive() && t.LiveName != "" && t.LiveName != t.Name
}

// compare lists how live differs from want, each difference with its repair.
func compare(sp spelling, live, want Schema) []Diff {
	var diffs []Diff
	for _, wt := range want.Tables {
		lt, ok := live.Table(wt.Name)
		if !ok {
			if parent, ok := live.Table(wt.Parent); ok && parent.LiveName != "" {
				wt.Parent = parent.LiveName
			}
			diffs = append(diffs, Diff{Table: wt.Name, Problem: fmt.Sprintf("table %s does not exist", wt.Name), Fix: sp.createTable(wt)})
			continue
		}
		diffs = append(diffs, compareTable(sp, lt, wt)...)
	}
	return diffs
}

func compareTable(sp spelling, lt, wt Table) []Diff {
	var diffs []Diff
	// Statements name the table as Spanner spells it.
	ddlName := wt.Name
	if lt.LiveName != "" {
		ddlName = lt.LiveName
	}
	problem := func(column, format string, args ...any) Diff {
		return Diff{Table: wt.Name, Column: column, Problem: fmt.Sprintf(format, args...)}
	}
	if !strings.EqualFold(strings.Join(lt.Key, ","), strings.Join(wt.Key, ",")) {
		d := problem("", "table %s has primary key (%s), expected (%s)", wt.Name, strings.Join(lt.Key, ", "), strings.Join(wt.Key, ", "))
		d.Advice = "a primary key cannot change in place: create a new table and point spannerlock at it"
		diffs = append(diffs, d)
	}
	if !strings.EqualFold(lt.Parent, wt.Parent) {
		d := problem("", "table %s is interleaved in %q, expected %q", wt.Name, lt.Parent, wt.Parent)
		d.Advice = "interleaving cannot change in place: create a new table and point spannerlock at it"
		diffs = append(diffs, d)
	}
	if wt.RowDeletion != nil && !lt.RowDeletion.Same(wt.RowDeletion) {
		live := ""
		if lt.RowDeletion != nil {
			live = lt.RowDeletion.Reported
		}
		d := problem("", "table %s has row deletion policy %q, expected %q", wt.Name, live, sp.policy(*wt.RowDeletion))
		d.Fix = sp.policyStatement(ddlName, lt.RowDeletion != nil, wt.RowDeletion)
		diffs = append(diffs, d)
	}
	for _, wc := range wt.Columns {
		lc, ok := lt.Column(wc.Name)
		if !ok {
			d := problem(wc.Name, "column %s.%s does not exist", wt.Name, wc.Name)
			if !wc.NotNull || wc.Default.Value != NoDefault {
				d.Fix = addColumnStatement(sp, ddlName, wc)
			} else {
				d.Advice = "a NOT NULL column without a default cannot be added to a table with rows"
			}
			diffs = append(diffs, d)
			continue
		}
		diffs = append(diffs, compareColumn(sp, wt.Name, ddlName, lc, wc)...)
	}
	for _, lc := range lt.Columns {
		if _, ok := wt.Column(lc.Name); ok || !lc.NotNull || lc.Default.Value != NoDefault {
			continue
		}
		d := problem(lc.Name, "column %s.%s is NOT NULL without a default, and spannerlock does not write it", wt.Name, lc.Name)
		d.Advice = "give it a DEFAULT or drop it; spannerlock never drops columns itself"
		diffs = append(diffs, d)
	}
	return diffs
}

func compareColumn(sp spelling, table, ddlName string, lc, wc Column) []Diff {
	var diffs []Diff
	add := func(fix, advice, format string, args ...any) {
		diffs = append(diffs, Diff{Table: table, Column: wc.Name, Problem: fmt.Sprintf(format, args...), Fix: fix, Advice: advice})
	}
	if !lc.Type.Same(wc.Type) {
		add("", "changing a column's type can lose data; convert it by hand with ALTER TABLE if Spanner allows it",
			"column %s.%s is %s, expected %s", table, wc.Name, describeType(sp, lc), sp.typeName(wc))
		// The remaining checks would describe a column that is being replaced.
		return diffs
	}
	if lc.NotNull != wc.NotNull {
		fix, advice := sp.notNullChange(ddlName, wc)
		if wc.NotNull {
			add(fix, advice, "column %s.%s allows NULL, expected NOT NULL", table, wc.Name)
		} else {
			add(fix, advice, "column %s.%s is NOT NULL, expected nullable", table, wc.Name)
		}
	}
	if lc.CommitTimestamp != wc.CommitTimestamp {
		diffs = append(diffs, sp.commitTimestampChange(table, ddlName, lc, wc))
	}
	if lc.Default.Value != wc.Default.Value {
		add(defaultStatement(sp, ddlName, wc), "", "column %s.%s has default %q, expected %q", table, wc.Name, lc.Default.Reported, defaultExpr(sp, wc.Default))
	}
	return diffs
}
