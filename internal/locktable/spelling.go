package locktable

import "strings"

// spelling is how one dialect writes the definition as DDL and reads a live
// table's INFORMATION_SCHEMA back into it. Everything that differs between
// the dialects is here; the definition, the comparison and the plans are
// written once.
type spelling interface {
	quote(ident string) string

	// typeName spells c's type as DDL writes it and INFORMATION_SCHEMA
	// reports it; in PostgreSQL a commit-timestamp column has a type of its own.
	typeName(c Column) string
	// defaultSpellings lists the ways the dialect spells v: first what DDL
	// writes, then what INFORMATION_SCHEMA reports for it.
	defaultSpellings(v DefaultValue) []string
	columnDefinition(c Column) string
	createTable(t Table) string
	// policy spells a row deletion policy as INFORMATION_SCHEMA reports it.
	policy(p RowDeletion) string
	// policyStatement changes the row deletion policy of table: adds or
	// replaces it with p, or drops it when p is nil.
	policyStatement(table string, replace bool, p *RowDeletion) string
	// commitTimestampChange describes live column lc, in table ddlName,
	// taking commit timestamps or not, unlike wc, with the statement that
	// makes it take them as wc does, or advice when there is none.
	commitTimestampChange(table, ddlName string, lc, wc Column) Diff
	// notNullChange returns the statement that makes column c of table
	// NOT NULL or nullable as c says, or advice when there is none.
	notNullChange(table string, c Column) (fix, advice string)

	// schemaName is INFORMATION_SCHEMA's TABLE_SCHEMA of the default schema.
	schemaName() string
	// nameIn is the condition that expr is one of the names bound by
	// nameParams; statements with it take nameParams as their parameters.
	nameIn(expr string) string
	nameParams(names []string) map[string]any
	// commitTimestampOptions reports that commit-timestamp columns are
	// marked in INFORMATION_SCHEMA.COLUMN_OPTIONS rather than by their type.
	commitTimestampOptions() bool
	// parseType reads a type as INFORMATION_SCHEMA reports it, and whether
	// it takes commit timestamps by its type.
	parseType(reported string) (t Type, commitTimestamp bool)
	parsePolicy(reported string) *RowDeletion
	// caseSensitive reports that SQL resolves quoted names exactly, so a
	// live table spelled in another letter case is not the table SQL names.
	caseSensitive() bool
}

// parseDefault reads a live default expression as sp reports it.
func parseDefault(sp spelling, reported string) Default {
	if reported == "" {
		return Default{}
	}
	for _, v := range []DefaultValue{FirstToken, ClockToken} {
		for _, s := range sp.defaultSpellings(v) {
			if normalizeExpression(s) == normalizeExpression(reported) {
				return Default{Value: v, Reported: reported}
			}
		}
	}
	return Default{Value: OtherDefault, Reported: reported}
}

// defaultExpr spells d as DDL writes it, or as it was reported.
func defaultExpr(sp spelling, d Default) string {
	switch d.Value {
	case NoDefault:
		return ""
	case OtherDefault:
		return d.Reported
	}
	return sp.defaultSpellings(d.Value)[0]
}

// describeType spells c's type for a message: as reported when live.
func describeType(sp spelling, c Column) string {
	if c.Type.Kind == OtherKind {
		return c.Type.Reported
	}
	return sp.typeName(c)
}

// normalizeExpression makes two spellings of one expression compare equal:
// INFORMATION_SCHEMA reports it without the DDL's outer parentheses, with
// its own spacing and letter case.
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
