//go:build unix

package main

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A refused permission names the table and the role it needs. (The
// emulator has no IAM, so this is checked on the error Spanner returns.)
func TestExplainPermissionDenied(t *testing.T) {
	c := &conn{db: "projects/p/instances/i/databases/d", table: "job_locks", ctx: context.Background()}
	err := c.explain(status.Error(codes.PermissionDenied, "Caller is missing IAM permission spanner.sessions.create"))
	for _, want := range []string{"permission denied on table job_locks in projects/p/instances/i/databases/d", "roles/spanner.databaseUser", "spanner.sessions.create"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
}
