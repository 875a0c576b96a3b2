package lease_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// Holders reads a table at every older schema version, as the applications
// of that version judge their leases, so that a table can be checked for
// live leases before it is migrated or dropped (spannerlock_table's
// destroy does): a held lease is listed, an expired or a released one is
// not. Before version 3 a lock row carried its holder's renewal and TTL;
// from it, a lease lives while its holder's session does.
func TestHoldersReadsOlderSchemaVersions(t *testing.T) {
	for v := 1; v < locktable.Latest; v++ {
		t.Run(fmt.Sprint("version", v), func(t *testing.T) {
			eachDialect(t, func(t *testing.T) {
				testHoldersReadsVersion(t, v)
			})
		})
	}
}

func testHoldersReadsVersion(t *testing.T, version int) {
	ctx := emulator.Context(t)
	d := locktable.Dialect(dialectOf(t))
	db := emulator.DatabaseIn(t, string(d), d.DDLAt(table, version)...)
	sc := emulator.Client(t, db)
	// An hour ago is expired for every TTL here: the read is seconds after.
	hourAgo := time.Now().Add(-time.Hour)
	ttl := (10 * time.Minute).Milliseconds()
	lockColumns := []string{"name", "token", "holder_id", "session_id", "ttl_ms", "acquired_at", "renewed_at"}
	var ms []*spanner.Mutation
	if version < 3 {
		ms = []*spanner.Mutation{
			spanner.Insert(table, lockColumns, []any{"held", 5, "app", "s1", ttl, hourAgo, spanner.CommitTimestamp}),
			spanner.Insert(table, lockColumns, []any{"expired", 6, "app", "s2", ttl, hourAgo, hourAgo}),
			spanner.Insert(table, lockColumns, []any{"released", 7, "app", nil, ttl, hourAgo, spanner.CommitTimestamp}),
		}
	} else {
		sessions := locktable.SessionsTable(table)
		sessionColumns := []string{"session_id", "holder_id", "ttl_ms", "renewed_at"}
		ms = []*spanner.Mutation{
			spanner.Insert(sessions, sessionColumns, []any{"live", "app", ttl, spanner.CommitTimestamp}),
			spanner.Insert(sessions, sessionColumns, []any{"dead", "app", ttl, hourAgo}),
			spanner.Insert(table, lockColumns, []any{"held", 5, "app", "live", ttl, hourAgo, hourAgo}),
			spanner.Insert(table, lockColumns, []any{"expired", 6, "app", "dead", ttl, hourAgo, hourAgo}),
			spanner.Insert(table, lockColumns, []any{"released", 7, "app", nil, ttl, hourAgo, hourAgo}),
			spanner.Insert(table, []string{"name", "token", "kind", "permits"}, []any{"jobs", 3, "semaphore", 2}),
			spanner.Insert(locktable.PermitsTable(table), []string{"name", "slot", "token", "holder_id", "session_id", "ttl_ms", "acquired_at"},
				[]any{"jobs", 1, 2, "app", "live", ttl, hourAgo}),
			spanner.Insert(locktable.PermitsTable(table), []string{"name", "slot", "token", "holder_id", "session_id", "ttl_ms", "acquired_at"},
				[]any{"jobs", 0, 1, "app", "dead", ttl, hourAgo}),
		}
	}
	if _, err := sc.Apply(ctx, ms); err != nil {
		t.Fatal(err)
	}
	holders, err := newClientWith(t, sc).Holders(ctx)
	if err != nil {
		t.Fatalf("Holders on a version-%d table: %v", version, err)
	}
	var got []string
	for _, h := range holders {
		got = append(got, fmt.Sprintf("%s %s/%d %s token %d", h.Kind, h.Name, h.Slot, h.HolderID, h.Token))
		if !h.ExpiresAt.After(time.Now().Add(5 * time.Minute)) {
			t.Errorf("%s/%d expires at %v; want about ten minutes from its renewal, which is now", h.Name, h.Slot, h.ExpiresAt)
		}
	}
	want := []string{"lock held/0 app token 5"}
	if version >= 3 {
		want = append(want, "permit jobs/1 app token 2")
	}
	if !slices.Equal(got, want) {
		t.Errorf("Holders on a version-%d table = %q, want %q", version, got, want)
	}
}

// What a migration means for a live lease of an application of an older
// release, as spannerlock_table's plan warns: one of version 3, whose
// leases live by their holder's session already, stays held; one of
// version 2, whose leases live by their own row, is free to this release
// once the table is migrated.
func TestOlderApplicationsLeasesAcrossMigration(t *testing.T) {
	for _, v := range []int{2, 3} {
		t.Run(fmt.Sprint("version", v), func(t *testing.T) {
			eachDialect(t, func(t *testing.T) {
				ctx := emulator.Context(t)
				d := locktable.Dialect(dialectOf(t))
				db := emulator.DatabaseIn(t, string(d), d.DDLAt(table, v)...)
				sc := emulator.Client(t, db)
				ttl := (10 * time.Minute).Milliseconds()
				ms := []*spanner.Mutation{spanner.Insert(table, []string{"name", "token", "holder_id", "session_id", "ttl_ms", "acquired_at", "renewed_at"},
					[]any{"deploy", 5, "old-app", "s1", ttl, spanner.CommitTimestamp, spanner.CommitTimestamp})}
				if v >= 3 {
					ms = append(ms, spanner.Insert(locktable.SessionsTable(table), []string{"session_id", "holder_id", "ttl_ms", "renewed_at"},
						[]any{"s1", "old-app", ttl, spanner.CommitTimestamp}))
				}
				if _, err := sc.Apply(ctx, ms); err != nil {
					t.Fatal(err)
				}
				ins, err := d.Inspect(ctx, sc, table)
				if err != nil {
					t.Fatal(err)
				}
				stmts, err := ins.Plan(locktable.Options{})
				if err != nil {
					t.Fatal(err)
				}
				if err := emulator.Shared(t).UpdateDDL(ctx, db, stmts...); err != nil {
					t.Fatal(err)
				}
				l, err := newClientWith(t, sc).TryAcquire(ctx, "deploy")
				switch {
				case v >= 3 && !errors.Is(err, lease.ErrNotAcquired):
					t.Fatalf("after migrating from version %d, TryAcquire of a lease an application of that version holds: %v, %v; want ErrNotAcquired", v, l, err)
				case v < 3 && err != nil:
					t.Fatalf("after migrating from version %d, TryAcquire of a lease an application of that version holds: %v; want it free", v, err)
				}
			})
		})
	}
}
