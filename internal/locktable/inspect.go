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
	// Exists reports whether the lock table itself is in the database.
	Exists bool
	// Version is the highest schema version the live table fully satisfies,
	// 0 when it satisfies none (it drifted, or does not exist).
	Version int
	// Live is what INFORMATION_SCHEMA reports for the tables of the family.
	Live Schema
	// Diffs are the differences from the latest version; empty when current.
	Diffs []Diff
	// CleanupAfter is the period of the live row deletion policy, 0 for none.
	CleanupAfter time.Duration
	// ForeignPolicy is a live row deletion policy spannerlock did not write;
	// it could delete live leases, so every plan replaces or drops it.
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

// Changes returns what differs from the latest version with options o, each
// difference with the statement that repairs it (or, without one, what to
// do): the table's creation when it is missing, else repairs and
// migrations, then the row deletion policy.
func (i Inspection) Changes(o Options) []Diff {
	if !i.Exists {
		var diffs []Diff
		for _, stmt := range CreateDDL(i.Table, o) {
			diffs = append(diffs, Diff{Table: i.Table, Problem: fmt.Sprintf("table %s does not exist", i.Table), Fix: stmt})
		}
		return diffs
	}
	diffs := compare(i.Live, definition(i.Table, Latest, i.ClockSeeded || o.CleanupAfter > 0))
	liveExists := i.CleanupAfter > 0 || i.ForeignPolicy != ""
	for _, stmt := range policyStatements(i.liveName(), i.CleanupAfter, liveExists, o.CleanupAfter) {
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
		stmts = append(stmts, "DROP TABLE "+Quote(i.Live.Tables[t].LiveName))
	}
	return stmts
}

func (i Inspection) liveName() string {
	if lt, ok := i.Live.Table(i.Table); ok && lt.LiveName != "" {
		return lt.LiveName
	}
	return i.Table
}

// Inspect reads the named lock table's schema through INFORMATION_SCHEMA and
// compares it with every version of the definition.
func Inspect(ctx context.Context, db *spanner.Client, table string) (Inspection, error) {
	if err := ValidateTableName(table); err != nil {
		return Inspection{}, err
	}
	want := Definition(table, Latest)
	live, err := readSchema(ctx, db, want)
	if err != nil {
		return Inspection{}, fmt.Errorf("inspect table %s: %w", table, err)
	}
	ins := Inspection{Table: table, Live: live}
	lt, exists := live.Table(table)
	ins.Exists = exists
	if !exists {
		ins.Diffs = compare(live, want)
		return ins, nil
	}
	if token, ok := lt.Column("token"); ok {
		ins.ClockSeeded = normalizeExpression(token.Default) == normalizeExpression(clockToken)
	}
	var foreign bool
	ins.CleanupAfter, foreign = parsePolicy(lt.RowDeletionPolicy)
	if foreign {
		ins.ForeignPolicy = lt.RowDeletionPolicy
	}
	ins.Diffs = compare(live, definition(table, Latest, ins.ClockSeeded))
	for v := Latest; v >= 1; v-- {
		if len(compare(live, definition(table, v, ins.ClockSeeded))) == 0 {
			ins.Version = v
			break
		}
	}
	return ins, nil
}

// compare lists how live differs from want, each difference with its repair.
func compare(live, want Schema) []Diff {
	var diffs []Diff
	for _, wt := range want.Tables {
		lt, ok := live.Table(wt.Name)
		if !ok {
			if parent, ok := live.Table(wt.Parent); ok && parent.LiveName != "" {
				wt.Parent = parent.LiveName
			}
			diffs = append(diffs, Diff{Table: wt.Name, Problem: fmt.Sprintf("table %s does not exist", wt.Name), Fix: createStatement(wt)})
			continue
		}
		diffs = append(diffs, compareTable(lt, wt)...)
	}
	return diffs
}

func compareTable(lt, wt Table) []Diff {
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
	if wt.RowDeletionPolicy != "" && normalizeExpression(lt.RowDeletionPolicy) != normalizeExpression(wt.RowDeletionPolicy) {
		verb := "REPLACE"
		if lt.RowDeletionPolicy == "" {
			verb = "ADD"
		}
		diffs = append(diffs, Diff{
			Table:   wt.Name,
			Problem: fmt.Sprintf("table %s has row deletion policy %q, expected %q", wt.Name, lt.RowDeletionPolicy, wt.RowDeletionPolicy),
			Fix:     fmt.Sprintf("ALTER TABLE %s %s ROW DELETION POLICY (%s)", Quote(ddlName), verb, wt.RowDeletionPolicy),
		})
	}
	for _, wc := range wt.Columns {
		lc, ok := lt.Column(wc.Name)
		if !ok {
			d := problem(wc.Name, "column %s.%s does not exist", wt.Name, wc.Name)
			if !wc.NotNull || wc.Default != "" {
				d.Fix = addColumnStatement(ddlName, wc)
			} else {
				d.Advice = "a NOT NULL column without a default cannot be added to a table with rows"
			}
			diffs = append(diffs, d)
			continue
		}
		diffs = append(diffs, compareColumn(wt.Name, ddlName, lc, wc)...)
	}
	for _, lc := range lt.Columns {
		if _, ok := wt.Column(lc.Name); ok || !lc.NotNull || lc.Default != "" {
			continue
		}
		d := problem(lc.Name, "column %s.%s is NOT NULL without a default, and spannerlock does not write it", wt.Name, lc.Name)
		d.Advice = "give it a DEFAULT or drop it; spannerlock never drops columns itself"
		diffs = append(diffs, d)
	}
	return diffs
}

func compareColumn(table, ddlName string, lc, wc Column) []Diff {
	var diffs []Diff
	add := func(fix, format string, args ...any) {
		diffs = append(diffs, Diff{Table: table, Column: wc.Name, Problem: fmt.Sprintf(format, args...), Fix: fix})
	}
	if !strings.EqualFold(lc.Type, wc.Type) {
		diffs = append(diffs, Diff{
			Table: table, Column: wc.Name,
			Problem: fmt.Sprintf("column %s.%s is %s, expected %s", table, wc.Name, lc.Type, wc.Type),
			Advice:  "changing a column's type can lose data; convert it by hand with ALTER TABLE if Spanner allows it",
		})
		// The remaining checks would describe a column that is being replaced.
		return diffs
	}
	switch {
	case wc.NotNull && !lc.NotNull:
		// Spanner validates the rows and refuses the change if any is NULL.
		add(fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s %s NOT NULL", Quote(ddlName), Quote(wc.Name), wc.Type),
			"column %s.%s allows NULL, expected NOT NULL", table, wc.Name)
	case !wc.NotNull && lc.NotNull:
		add(relaxNotNullStatement(ddlName, wc), "column %s.%s is NOT NULL, expected nullable", table, wc.Name)
	}
	if lc.CommitTimestamp != wc.CommitTimestamp {
		add(commitTimestampStatement(ddlName, wc), "column %s.%s has allow_commit_timestamp = %t, expected %t", table, wc.Name, lc.CommitTimestamp, wc.CommitTimestamp)
	}
	if normalizeExpression(lc.Default) != normalizeExpression(wc.Default) {
		add(defaultStatement(ddlName, wc), "column %s.%s has default %q, expected %q", table, wc.Name, lc.Default, wc.Default)
	}
	return diffs
}

// normalizeExpression makes two spellings of one default expression compare
// equal: INFORMATION_SCHEMA reports it without the DDL's outer parentheses and
// with its own spacing.
func normalizeExpression(e string) string {
	e = strings.ToUpper(strings.Join(strings.Fields(e), ""))
	for strings.HasPrefix(e, "(") && strings.HasSuffix(e, ")") && balanced(e[1:len(e)-1]) {
		e = e[1 : len(e)-1]
	}
	return e
}

func balanced(s string) bool {
	depth := 0
	for _, r := range s {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
			if depth < 0 {
				return false
			}
		}
	}
	return depth == 0
}
