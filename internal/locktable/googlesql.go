package locktable

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// googleSQL is the GoogleSQL dialect's spelling. Its DDL is byte for byte
// what spannerlock wrote before it spoke PostgreSQL, so tables created then
// inspect as current.
type googleSQL struct{}

func (googleSQL) quote(ident string) string { return "`" + ident + "`" }

func (googleSQL) typeName(c Column) string {
	switch c.Type.Kind {
	case StringKind:
		return "STRING(" + googleSQLLength(c.Type.Length) + ")"
	case Int64Kind:
		return "INT64"
	case TimestampKind:
		return "TIMESTAMP"
	case BytesKind:
		return "BYTES(" + googleSQLLength(c.Type.Length) + ")"
	}
	return c.Type.Reported
}

func googleSQLLength(n int64) string {
	if n == 0 {
		return "MAX"
	}
	return strconv.FormatInt(n, 10)
}

var googleSQLLengthType = regexp.MustCompile(`^(STRING|BYTES)\((MAX|\d+)\)$`)

func (googleSQL) parseType(reported string) (Type, bool) {
	s := strings.ToUpper(strings.Join(strings.Fields(reported), ""))
	switch s {
	case "INT64":
		return Type{Kind: Int64Kind, Reported: reported}, false
	case "TIMESTAMP":
		return Type{Kind: TimestampKind, Reported: reported}, false
	}
	if m := googleSQLLengthType.FindStringSubmatch(s); m != nil {
		t := Type{Kind: StringKind, Reported: reported}
		if m[1] == "BYTES" {
			t.Kind = BytesKind
		}
		if m[2] != "MAX" {
			n, err := strconv.ParseInt(m[2], 10, 64)
			if err != nil || n <= 0 {
				return Type{Reported: reported}, false
			}
			t.Length = n
		}
		return t, false
	}
	return Type{Reported: reported}, false
}

func (googleSQL) defaultSpellings(v DefaultValue) []string {
	switch v {
	case FirstToken:
		return []string{"1"}
	case ClockToken:
		return []string{"UNIX_MICROS(CURRENT_TIMESTAMP())"}
	}
	return nil
}

func (g googleSQL) columnDefinition(c Column) string {
	def := g.quote(c.Name) + " " + g.typeName(c)
	if c.NotNull {
		def += " NOT NULL"
	}
	if e := defaultExpr(g, c.Default); e != "" {
		def += " DEFAULT (" + e + ")"
	}
	if c.CommitTimestamp {
		def += " OPTIONS (allow_commit_timestamp = true)"
	}
	return def
}

func (g googleSQL) createTable(t Table) string {
	var b strings.Builder
	fmt.Fprintf(&b, "CREATE TABLE %s (\n", g.quote(t.Name))
	for _, c := range t.Columns {
		fmt.Fprintf(&b, "  %s,\n", g.columnDefinition(c))
	}
	fmt.Fprintf(&b, ") PRIMARY KEY (%s)", quoteAll(g, t.Key))
	if t.Parent != "" {
		fmt.Fprintf(&b, ",\n  INTERLEAVE IN PARENT %s ON DELETE CASCADE", g.quote(t.Parent))
	}
	if t.RowDeletion != nil {
		fmt.Fprintf(&b, ",\n  ROW DELETION POLICY (%s)", g.policy(*t.RowDeletion))
	}
	return b.String()
}

func (googleSQL) policy(p RowDeletion) string {
	if p.Days <= 0 {
		return p.Reported
	}
	return fmt.Sprintf("OLDER_THAN(%s, INTERVAL %d DAY)", p.Column, p.Days)
}

var googleSQLPolicy = regexp.MustCompile("(?i)^\\s*OLDER_THAN\\s*\\(\\s*`?(\\w+)`?\\s*,\\s*INTERVAL\\s+(\\d+)\\s+DAY\\s*\\)\\s*$")

func (googleSQL) parsePolicy(reported string) *RowDeletion {
	if reported == "" {
		return nil
	}
	p := &RowDeletion{Reported: reported}
	if m := googleSQLPolicy.FindStringSubmatch(reported); m != nil {
		if days, err := strconv.Atoi(m[2]); err == nil && days > 0 {
			p.Column, p.Days = m[1], days
		}
	}
	return p
}

func (g googleSQL) policyStatement(table string, replace bool, p *RowDeletion) string {
	switch {
	case p == nil:
		return fmt.Sprintf("ALTER TABLE %s DROP ROW DELETION POLICY", g.quote(table))
	case replace:
		return fmt.Sprintf("ALTER TABLE %s REPLACE ROW DELETION POLICY (%s)", g.quote(table), g.policy(*p))
	}
	return fmt.Sprintf("ALTER TABLE %s ADD ROW DELETION POLICY (%s)", g.quote(table), g.policy(*p))
}

func (g googleSQL) commitTimestampChange(table, ddlName string, lc, wc Column) Diff {
	value := "null"
	if wc.CommitTimestamp {
		value = "true"
	}
	return Diff{
		Table: table, Column: wc.Name,
		Problem: fmt.Sprintf("column %s.%s has allow_commit_timestamp = %t, expected %t", table, wc.Name, lc.CommitTimestamp, wc.CommitTimestamp),
		Fix:     fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s SET OPTIONS (allow_commit_timestamp = %s)", g.quote(ddlName), g.quote(wc.Name), value),
	}
}

func (g googleSQL) notNullChange(table string, c Column) (fix, advice string) {
	// Restating the column's type sets its nullability: with NOT NULL
	// Spanner validates the rows and refuses the change if any is NULL;
	// without, it only widens what the column accepts, safe with rows.
	stmt := fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s %s", g.quote(table), g.quote(c.Name), g.typeName(c))
	if c.NotNull {
		stmt += " NOT NULL"
	}
	return stmt, ""
}

func (googleSQL) schemaName() string { return "" }

func (googleSQL) nameIn(expr string) string { return expr + " IN UNNEST(@names)" }

func (googleSQL) nameParams(names []string) map[string]any { return map[string]any{"names": names} }

func (googleSQL) commitTimestampOptions() bool { return true }

func (googleSQL) caseSensitive() bool { return false }

// quoteAll quotes names and joins them with commas.
func quoteAll(sp spelling, names []string) string {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = sp.quote(n)
	}
	return strings.Join(quoted, ", ")
}
