package chaos

import (
	"fmt"
	"strings"

	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// dialectNames are the dialects as the chaos command's -dialect flag names
// them.
var dialectNames = map[lease.Dialect]string{lease.GoogleSQL: "googlesql", lease.PostgreSQL: "postgresql"}

// ParseDialect reads a dialect as -dialect takes it: googlesql or
// postgresql, or as Spanner's API spells it (GOOGLE_STANDARD_SQL,
// POSTGRESQL), in any letter case.
func ParseDialect(s string) (lease.Dialect, error) {
	for d, name := range dialectNames {
		if strings.EqualFold(s, name) || strings.EqualFold(s, string(d)) {
			return d, nil
		}
	}
	return "", fmt.Errorf("dialect %q is neither googlesql nor postgresql", s)
}

// DialectName is d as -dialect names it; the zero Dialect is GoogleSQL.
func DialectName(d lease.Dialect) string {
	if d == "" {
		d = lease.GoogleSQL
	}
	if name, ok := dialectNames[d]; ok {
		return name
	}
	return string(d)
}
