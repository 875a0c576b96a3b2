package locktable

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// postgreSQL is the PostgreSQL dialect's spelling. Types are written as
// INFORMATION_SCHEMA reports them (character varying, not varchar), so the
// DDL reads like what inspection shows. Every identifier is quoted: names
// keep their letter case, and the runtime's statements name tables the
// same way (Dialect.QuoteTable).
type postgreSQL struct{}

func (postgreSQL) quote(ident string) string {
	return `"` + strings.ReplaceAll(ident, `"`, `""`) + `"`
}

func (postgreSQL) typeName(c Column) string {
	switch c.Type.Kind {
	case StringKind:
		if c.Type.Length == 0 {
			return "character varying"
		}
		return fmt.Sprintf("character varying(%d)", c.Type.Length)
	case Int64Kind:
		return "bigint"
	case TimestampKind:
		if c.CommitTimestamp {
			return "spanner.commit_timestamp"
		}
		return "timestamp with time zone"
	case BytesKind:
		return "bytea"
	}
	return c.Type.Reported
}

var postgreSQLVarchar = regexp.MustCompile(`^character varying(?:\((\d+)\))?$`)

func (postgreSQL) parseType(reported string) (Type, bool) {
	s := strings.ToLower(strings.Join(strings.Fields(reported), " "))
	switch s {
	case "bigint":
		return Type{Kind: Int64Kind, Reported: reported}, false
	case "timestamp with time zone":
		return Type{Kind: TimestampKind, Reported: reported}, false
	case "spanner.commit_timestamp":
		return Type{Kind: TimestampKind, Reported: reported}, true
	case "bytea":
		return Type{Kind: BytesKind, Reported: reported}, false
	}
	if m := postgreSQLVarchar.FindStringSubmatch(s); m != nil {
		t := Type{Kind: StringKind, Reported: reported}
		if m[1] != "" {
			n, err := strconv.ParseInt(m[1], 10, 64)
			if err != nil || n <= 0 {
				return Type{Reported: reported}, false
			}
			t.Length = n
		}
		return t, false
	}
	return Type{Reported: reported}, false
}

// The PostgreSQL dialect has no UNIX_MICROS; EXTRACT(EPOCH ...) is the
// seconds as a numeric with six decimals, so the product is exact.
// INFORMATION_SCHEMA reports both defaults rewritten, with explicit casts
// (verified on the emulator, see TestDefaultsAsReported).
const postgreSQLClock = "CAST(EXTRACT(EPOCH FROM CURRENT_TIMESTAMP) * 1000000 AS bigint)"

func (postgreSQL) defaultSpellings(v DefaultValue) []string {
	switch v {
	case FirstToken:
		return []string{"1", "'1'::bigint"}
	case ClockToken:
		return []string{postgreSQLClock, `(("extract"('epoch'::text, CURRENT_TIMESTAMP) * ('1000000'::bigint)::numeric))::bigint`}
	}
	return nil
}

func (p postgreSQL) columnDefinition(c Column) string {
	def := p.quote(c.Name) + " " + p.typeName(c)
	if c.NotNull {
		def += " NOT NULL"
	}
	if e := defaultExpr(p, c.Default); e != "" {
		def += " DEFAULT (" + e + ")"
	}
	return def
}

func (p postgreSQL) createTable(t Table) string {
	var b strings.Builder
	fmt.Fprintf(&b, "CREATE TABLE %s (\n", p.quote(t.Name))
	for _, c := range t.Columns {
		fmt.Fprintf(&b, "  %s,\n", p.columnDefinition(c))
	}
	fmt.Fprintf(&b, "  PRIMARY KEY (%s)\n)", quoteAll(p, t.Key))
	if t.Parent != "" {
		fmt.Fprintf(&b, " INTERLEAVE IN PARENT %s ON DELETE CASCADE", p.quote(t.Parent))
	}
	if t.RowDeletion != nil {
		fmt.Fprintf(&b, " TTL %s", p.ttl(*t.RowDeletion))
	}
	return b.String()
}

// ttl is the policy as DDL writes it after TTL.
func (p postgreSQL) ttl(rd RowDeletion) string {
	return fmt.Sprintf("INTERVAL '%s' ON %s", days(rd.Days), p.quote(rd.Column))
}

func days(n int) string {
	if n == 1 {
		return "1 day"
	}
	return fmt.Sprintf("%d days", n)
}

func (postgreSQL) policy(rd RowDeletion) string {
	if rd.Days <= 0 {
		return rd.Reported
	}
	return fmt.Sprintf("INTERVAL '%s' ON %s", days(rd.Days), rd.Column)
}

var postgreSQLPolicy = regexp.MustCompile(`(?i)^\s*INTERVAL\s+'([^']*)'\s+ON\s+"?(\w+)"?\s*$`)

func (postgreSQL) parsePolicy(reported string) *RowDeletion {
	if reported == "" {
		return nil
	}
	rd := &RowDeletion{Reported: reported}
	if m := postgreSQLPolicy.FindStringSubmatch(reported); m != nil {
		if n, ok := intervalDays(m[1]); ok && n > 0 {
			rd.Column, rd.Days = m[2], n
		}
	}
	return rd
}

// intervalSeconds are the lengths of the units Spanner writes intervals in.
// Spanner normalises a TTL's interval when it stores it, counting a month as
// 30 days and a year as 12 months: '30 days' reads back as '4 WEEKS 2 DAYS',
// '31 days' as '1 MONTHS 24 HOURS', '365 days' as '12 MONTHS 5 DAYS' (all
// verified on the emulator, see TestIntervalsCompareByMeaning).
var intervalSeconds = map[string]int64{
	"year": 360 * 86400, "years": 360 * 86400,
	"month": 30 * 86400, "months": 30 * 86400, "mon": 30 * 86400, "mons": 30 * 86400,
	"week": 7 * 86400, "weeks": 7 * 86400,
	"day": 86400, "days": 86400,
	"hour": 3600, "hours": 3600,
	"minute": 60, "minutes": 60, "min": 60, "mins": 60,
	"second": 1, "seconds": 1, "sec": 1, "secs": 1,
}

// intervalDays reads an interval written as numbers and units ("4 WEEKS 2
// DAYS") as a whole number of days; ok is false for anything else.
func intervalDays(s string) (n int, ok bool) {
	f := strings.Fields(strings.ToLower(s))
	if len(f) == 0 || len(f)%2 != 0 {
		return 0, false
	}
	var total int64
	for i := 0; i < len(f); i += 2 {
		count, err := strconv.ParseInt(f[i], 10, 32)
		unit, known := intervalSeconds[f[i+1]]
		if err != nil || count < 0 || !known {
			return 0, false
		}
		total += count * unit
	}
	if total%86400 != 0 {
		return 0, false
	}
	return int(total / 86400), true
}

func (p postgreSQL) policyStatement(table string, replace bool, rd *RowDeletion) string {
	switch {
	case rd == nil:
		return fmt.Sprintf("ALTER TABLE %s DROP TTL", p.quote(table))
	case replace:
		return fmt.Sprintf("ALTER TABLE %s ALTER TTL %s", p.quote(table), p.ttl(*rd))
	}
	return fmt.Sprintf("ALTER TABLE %s ADD TTL %s", p.quote(table), p.ttl(*rd))
}

// commitTimestampChange changes the column's type: in PostgreSQL taking
// commit timestamps is the type SPANNER.COMMIT_TIMESTAMP. The emulator
// rewrites a column whose type changes as nullable without a default, so
// the statement is the fix only for a column that is meant to be so.
func (p postgreSQL) commitTimestampChange(table, ddlName string, lc, wc Column) Diff {
	d := Diff{
		Table: table, Column: wc.Name,
		Problem: fmt.Sprintf("column %s.%s is %s, expected %s", table, wc.Name, p.typeName(lc), p.typeName(wc)),
	}
	stmt := fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s TYPE %s", p.quote(ddlName), p.quote(wc.Name), p.typeName(wc))
	if !wc.NotNull && wc.Default.Value == NoDefault {
		d.Fix = stmt
	} else {
		d.Advice = "change its type by hand with " + stmt + ", and check that the column keeps NOT NULL and its default"
	}
	return d
}

// notNullChange has no fix: the emulator fails ALTER COLUMN ... SET NOT
// NULL and DROP NOT NULL with an internal error, so spannerlock cannot test
// them. No schema version changes a column's nullability; this is drift.
func (p postgreSQL) notNullChange(table string, c Column) (fix, advice string) {
	action := "DROP NOT NULL"
	if c.NotNull {
		action = "SET NOT NULL"
	}
	return "", fmt.Sprintf("change it by hand with ALTER TABLE %s ALTER COLUMN %s %s", p.quote(table), p.quote(c.Name), action)
}

func (postgreSQL) schemaName() string { return "public" }

func (postgreSQL) nameIn(expr string) string { return expr + " = ANY($1)" }

// nameParams binds $1, which the Go client names p1.
func (postgreSQL) nameParams(names []string) map[string]any { return map[string]any{"p1": names} }

func (postgreSQL) commitTimestampOptions() bool { return false }

func (postgreSQL) caseSensitive() bool { return true }
