package locktable

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Options are the settings of a lock table beside its schema version.
type Options struct {
	// CleanupAfter, when positive, has Spanner delete lock rows whose
	// renewed_at is older than this (a whole number of days). The runtime
	// stamps the row of every lock it holds at least hourly, so a held lock
	// is never deleted. Deleting a row would lose its token counter, so
	// cleanup also makes a name's first token Spanner's clock
	// (CURRENT_TIMESTAMP) in microseconds: a name whose row was deleted
	// resumes above every token it had, because tokens grow by one per
	// acquisition, far slower than that clock. The clock stays the token
	// default once set, even if cleanup is turned off, because deleted names
	// must still resume above their tokens.
	CleanupAfter time.Duration
}

const day = 24 * time.Hour

// ParseCleanupAfter reads a cleanup period written as a Go duration ("720h")
// or in days ("30d"). It must be a positive whole number of days, because
// Spanner row deletion policies count days.
func ParseCleanupAfter(s string) (time.Duration, error) {
	var d time.Duration
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil {
			return 0, fmt.Errorf("cleanup period %q: %q is not a whole number of days", s, n)
		}
		d = time.Duration(days) * day
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("cleanup period %q is not a duration like \"720h\" or \"30d\"", s)
		}
	}
	if d <= 0 || d%day != 0 {
		return 0, fmt.Errorf("cleanup period %q must be a positive whole number of days (Spanner row deletion policies count days), like \"720h\" or \"30d\"", s)
	}
	return d, nil
}

// FormatCleanupAfter writes a cleanup period the way ParseCleanupAfter reads it.
func FormatCleanupAfter(d time.Duration) string {
	return strconv.Itoa(int(d/day)) + "d"
}

// cleanupColumn is the column the cleanup policy reads: the runtime stamps it
// at least hourly on every lock it holds.
const cleanupColumn = "renewed_at"

// cleanupPolicy is the row deletion policy of a cleanup period.
func cleanupPolicy(d time.Duration) *RowDeletion {
	return &RowDeletion{Column: cleanupColumn, Days: int(d / day)}
}

// cleanupPeriod reads a live row deletion policy of the lock table: ours
// gives its period, any other is foreign (it could delete live leases).
func cleanupPeriod(p *RowDeletion) (period time.Duration, foreign bool) {
	switch {
	case p == nil:
		return 0, false
	case p.Days > 0 && strings.EqualFold(p.Column, cleanupColumn):
		return time.Duration(p.Days) * day, false
	}
	return 0, true
}

// policyStatements turn the live policy into the wanted one.
func policyStatements(sp spelling, table string, live time.Duration, liveExists bool, want time.Duration) []string {
	switch {
	case want > 0 && !liveExists:
		return []string{sp.policyStatement(table, false, cleanupPolicy(want))}
	case want > 0 && live != want:
		return []string{sp.policyStatement(table, true, cleanupPolicy(want))}
	case want == 0 && liveExists:
		return []string{sp.policyStatement(table, false, nil)}
	}
	return nil
}
