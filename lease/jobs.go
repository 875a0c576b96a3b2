package lease

import (
	"context"
	"strings"
	"time"

	"cloud.google.com/go/spanner"
)

// JobSlot is one schedule slot of a RunOnce job, as its row records it.
type JobSlot struct {
	Job  string
	Slot time.Time
	// Done says the slot's run succeeded, at CompletedAt.
	Done        bool
	CompletedAt time.Time
	// Runs counts the runs started, on any replica; Failures those that
	// failed, crashed or were force-released.
	Runs, Failures int64
	// Runner is the live holder running the slot now, if any.
	Runner *Holder
}

// Jobs returns every RunOnce slot recorded in the table, ordered by job
// and then slot, in one read. Like Holders, it reads the whole table: it is
// for people and tools (spannerlock status), not for a hot path. Slots of a
// table with cleanup_after disappear that long after they were last run.
func (c *Client) Jobs(ctx context.Context) ([]JobSlot, error) {
	if err := c.st.prepare(ctx); err != nil {
		return nil, err
	}
	var slots []JobSlot
	err := c.st.readAgain(ctx, func(ctx context.Context) error {
		slots = nil
		return c.st.db.Single().Query(ctx, c.st.sql.selectJobs.bind(nil)).Do(func(sr *spanner.Row) error {
			var (
				r           row
				completedAt spanner.NullTime
			)
			if err := r.scan(sr, append(r.lockFields(), &completedAt)...); err != nil {
				return err
			}
			job, slot, ok := parseJobSlotName(r.name)
			if !ok {
				return nil // not a name RunOnce makes
			}
			j := JobSlot{Job: job, Slot: slot, Done: r.completed, CompletedAt: completedAt.Time, Runs: r.attempts.Int64}
			j.Failures = j.Runs
			if j.Done {
				j.Failures--
			}
			if r.live {
				h := r.holder()
				j.Runner = &h
				j.Failures--
			}
			j.Failures = max(0, j.Failures)
			slots = append(slots, j)
			return nil
		})
	})
	if err != nil {
		return nil, c.st.explain(err)
	}
	return slots, nil
}

// parseJobSlotName is JobSlotName's inverse: it reports whether name is one
// that JobSlotName makes, and from which job and slot.
func parseJobSlotName(name string) (job string, slot time.Time, ok bool) {
	i := strings.LastIndex(name, "@")
	if i < 0 {
		return "", time.Time{}, false
	}
	slot, err := time.Parse(time.RFC3339Nano, name[i+1:])
	if err != nil || JobSlotName(name[:i], slot) != name {
		return "", time.Time{}, false
	}
	return name[:i], slot, true
}
