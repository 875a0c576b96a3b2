package chaos

import (
	"testing"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/chaos/record"
	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// Every statement of the suite, in each dialect, on a database of that
// dialect: the DDL creates the tables the workers write, and the driver's
// and checker's queries read back what they wrote.
func TestSpellingInBothDialects(t *testing.T) {
	for _, d := range []lease.Dialect{lease.GoogleSQL, lease.PostgreSQL} {
		t.Run(DialectName(d), func(t *testing.T) {
			t.Parallel()
			sql := record.In(d)
			sc := emulator.Client(t, emulator.DatabaseIn(t, string(d), sql.DDL()...))
			ctx := emulator.Context(t)

			// Two accepted writes to lock-0, by tokens 1 and 2, committed
			// one after the other, as workers write them.
			write := func(op string, token, prev int64) time.Time {
				t.Helper()
				ts, err := sc.Apply(ctx, []*spanner.Mutation{
					spanner.InsertOrUpdate(record.CountersTable, []string{"name", "value"}, []any{"lock-0", prev + 1}),
					spanner.Insert(record.WritesTable, record.WritesColumns,
						[]any{op, spanner.CommitTimestamp, "lock-0", false, token, "w" + op, prev, prev + 1}),
				})
				if err != nil {
					t.Fatal(err)
				}
				return ts
			}
			first := write("1", 1, 0)
			second := write("2", 2, 1)

			var got []record.Write
			err := sc.Single().Query(ctx, sql.Writes()).Do(func(r *spanner.Row) error {
				var w record.Write
				if err := r.ToStruct(&w); err != nil {
					return err
				}
				got = append(got, w)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]record.Write{
				"1": {Op: "1", CommittedAt: first, Name: "lock-0", Token: 1, Holder: "w1", Prev: 0, Value: 1},
				"2": {Op: "2", CommittedAt: second, Name: "lock-0", Token: 2, Holder: "w2", Prev: 1, Value: 2},
			}
			if len(got) != len(want) {
				t.Fatalf("Writes read %d rows, want %d: %+v", len(got), len(want), got)
			}
			for _, w := range got {
				if !w.CommittedAt.Equal(want[w.Op].CommittedAt) {
					t.Errorf("write %s committed at %s, want %s", w.Op, w.CommittedAt, want[w.Op].CommittedAt)
				}
				w.CommittedAt = want[w.Op].CommittedAt
				if w != want[w.Op] {
					t.Errorf("Writes read %+v, want %+v", w, want[w.Op])
				}
			}

			counters := map[string]int64{}
			err = sc.Single().Query(ctx, sql.Counters()).Do(func(r *spanner.Row) error {
				var name string
				var v int64
				if err := r.Columns(&name, &v); err != nil {
					return err
				}
				counters[name] = v
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(counters) != 1 || counters["lock-0"] != 2 {
				t.Errorf("Counters read %v, want lock-0 = 2", counters)
			}

			var now time.Time
			if err := sc.Single().Query(ctx, sql.Now()).Do(func(r *spanner.Row) error { return r.Column(0, &now) }); err != nil {
				t.Fatal(err)
			}
			if !now.After(second) {
				t.Errorf("Now read %s, not after the last commit at %s", now, second)
			}

			for _, c := range []struct {
				token int64
				since time.Time
				want  bool
			}{
				{1, first, true},   // token 2 wrote after token 1's write
				{2, first, false},  // token 1 wrote, but not after first
				{1, second, false}, // nothing after the last write
			} {
				found := false
				err := sc.Single().Query(ctx, sql.RivalWrite("lock-0", c.token, c.since)).Do(func(*spanner.Row) error { found = true; return nil })
				if err != nil {
					t.Fatal(err)
				}
				if found != c.want {
					t.Errorf("RivalWrite(lock-0, token %d, since %s) = %v, want %v", c.token, c.since, found, c.want)
				}
			}
		})
	}
}
