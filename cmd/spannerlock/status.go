package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"golang.org/x/sync/errgroup"

	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

func statusCommand() *command {
	return &command{
		name:     "status",
		summary:  "list every live lease and permit of the table, its semaphores, waiters and run-once jobs",
		synopsis: "spannerlock status [-o table|json] [--watch] [flags]",
		help: `
Lists every live lease of the table (locks, semaphore permits, worker IDs
and the locks of run-once slots running) with its kind, holder, fencing
token and expiry, then every declared semaphore with how many of its
permits are in use, idle ones included, then the waiters: of each name
that has a line of acquisitions waiting, how many wait, the first in line
and since when, then the run-once jobs: of each, its last slot done and the
slots after it, and every slot that is running, or failed and not done
since, with its runs and failed runs. It reads through
lease.Client.Holders, lease.Client.Semaphores, lease.Client.Waiters and
lease.Client.Jobs, one read each however many names the table has.

With -o json it prints one object:

  {"table":"locks",
   "leases":[{"name":...,"holder_id":...,"token":...,"acquired_at":...,"renewed_at":...,"expires_at":...,"kind":"lock"}],
   "semaphores":[{"name":"migrations","permits":3,"in_use":2}],
   "jobs":[{"job":"nightly-report","slot":"2026-11-23T03:00:00Z","done":true,
            "completed_at":"2026-11-23T03:04:12.5Z","runs":2,"failures":1,"runner":null}],
   "waiters":[{"name":"deploy","holder_id":...,"shared":false,"since":...}]}

where each lease has the fields of 'spannerlock holder' plus its kind
("lock", "permit", "worker_id" or "run_once", as holder calls a run-once
slot) and, for a permit or worker ID, its slot (the worker ID); a permit's
name is its semaphore's, a run-once slot's is JOB@SLOT, with its job in
job. in_use counts the permits among the leases listed. jobs lists every
slot recorded, by job and slot; runner is the live holder running it (the
fields of holder), or null. waiters lists every acquisition waiting in a
name's line, name by name, in the order each line is served; shared is
set for a --shared lock's.

With --watch it reads the table again every second until SIGINT (Ctrl-C)
or SIGTERM, then exits 0. On a terminal it redraws the table in place, under
a line saying when it was read; elsewhere (a pipe, a file) it prints each
read in full, that line first and a blank line after. With -o json it prints
one object per read, one per line. A read that fails after the first is
reported (on the terminal, in place of the time of the read; elsewhere on
stderr) and retried at the next refresh; a first read that fails ends
spannerlock as without --watch.

Examples:
  spannerlock status
  spannerlock status --watch
  spannerlock status -o json | jq '.leases[] | select(.name == "deploy")'
  # The last slot of nightly-report that was done:
  spannerlock status -o json | jq '[.jobs[] | select(.job == "nightly-report" and .done)] | last'`,
		run: runStatus,
	}
}

type semaphoreJSON struct {
	Name    string `json:"name"`
	Permits int64  `json:"permits"`
	InUse   int    `json:"in_use"`
}

// statusLeaseJSON is a lease as status lists it: the fields of holder, and
// what kind of lease it is.
type statusLeaseJSON struct {
	holderJSON
	Kind string `json:"kind"`
	// Slot is a permit's slot or the worker ID; locks have none.
	Slot *int64 `json:"slot,omitempty"`
	// Job is a run-once slot's job; its name is JOB@SLOT.
	Job string `json:"job,omitempty"`
}

type statusJSON struct {
	Table      string            `json:"table"`
	Leases     []statusLeaseJSON `json:"leases"`
	Semaphores []semaphoreJSON   `json:"semaphores"`
	Jobs       []jobSlotJSON     `json:"jobs"`
	// Waiters are the acquisitions waiting in line, by name, in the order
	// they will be served.
	Waiters []waiterJSON `json:"waiters"`
}

// waiterJSON is one acquisition waiting in a name's line.
type waiterJSON struct {
	Name     string `json:"name"`
	HolderID string `json:"holder_id"`
	Shared   bool   `json:"shared"`
	Since    string `json:"since"` // RFC 3339, as every time status writes
}

// jobSlotJSON is a run-once slot as status lists it.
type jobSlotJSON struct {
	Job  string `json:"job"`
	Slot string `json:"slot"`
	Done bool   `json:"done"`
	// CompletedAt is when the slot's run succeeded; null while not done.
	CompletedAt *string `json:"completed_at"`
	// Runs counts the runs started, Failures those that failed, crashed
	// or were broken.
	Runs     int64 `json:"runs"`
	Failures int64 `json:"failures"`
	// Runner is the live holder running the slot now; null when none.
	Runner *holderJSON `json:"runner"`
}

func toJobSlotJSON(s lease.JobSlot) jobSlotJSON {
	j := jobSlotJSON{Job: s.Job, Slot: formatTime(s.Slot), Done: s.Done, Runs: s.Runs, Failures: s.Failures}
	if s.Done {
		t := formatTime(s.CompletedAt)
		j.CompletedAt = &t
	}
	if s.Runner != nil {
		h := toJSON(*s.Runner)
		j.Runner = &h
	}
	return j
}

func runStatus(a *app, args []string) error {
	fs := a.newFlagSet("status")
	output := outputFlag(fs, "table", "json")
	timeout := readTimeoutFlag(fs)
	watch := fs.Bool("watch", false, "read again every second until interrupted, redrawing in place on a terminal")
	pos, argv, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError("status takes no arguments, got %q", pos[0])
	}
	if err := noCommand(fs, argv); err != nil {
		return err
	}
	c, err := a.connect()
	if err != nil {
		return err
	}
	defer c.close()
	if *watch {
		return a.watchStatus(c, timeout.get(), *output)
	}
	var st statusJSON
	err = a.read(c, timeout.get(), func(ctx context.Context) error {
		var err error
		st, err = readStatus(ctx, c)
		return err
	})
	if err != nil {
		return err
	}
	if *output == "json" {
		return writeJSON(a.stdout, st)
	}
	return printStatus(a.stdout, st)
}

// readStatus reads the live leases and the declared semaphores, in one
// read-only transaction each, side by side.
func readStatus(ctx context.Context, c *conn) (statusJSON, error) {
	var (
		holders []lease.Holder
		sems    []lease.Semaphore
		jobs    []lease.JobSlot
		waiters []lease.Waiter
	)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) {
		waiters, err = c.lease.Waiters(gctx)
		return err
	})
	g.Go(func() (err error) {
		jobs, err = c.lease.Jobs(gctx)
		return err
	})
	g.Go(func() (err error) {
		holders, err = c.lease.Holders(gctx)
		return err
	})
	g.Go(func() (err error) {
		sems, err = c.lease.Semaphores(gctx)
		return err
	})
	if err := g.Wait(); err != nil {
		return statusJSON{}, err
	}
	st := newStatus(c.table, holders, sems, jobs)
	for _, w := range waiters {
		st.Waiters = append(st.Waiters, waiterJSON{Name: w.Name, HolderID: w.HolderID, Shared: w.Shared, Since: formatTime(w.Since)})
	}
	return st, nil
}

// newStatus puts the two reads together. A semaphore's permits in use are
// counted among the leases listed, so the output adds up even when a permit
// changed hands between the reads.
func newStatus(table string, holders []lease.Holder, sems []lease.Semaphore, jobs []lease.JobSlot) statusJSON {
	st := statusJSON{Table: table, Leases: []statusLeaseJSON{}, Semaphores: []semaphoreJSON{}, Jobs: []jobSlotJSON{}, Waiters: []waiterJSON{}}
	for _, j := range jobs {
		st.Jobs = append(st.Jobs, toJobSlotJSON(j))
	}
	inUse := map[string]int{}
	for _, h := range holders {
		if h.Kind != lockKind {
			inUse[h.Name]++
		}
		st.Leases = append(st.Leases, statusLeaseOf(h))
	}
	for _, s := range sems {
		st.Semaphores = append(st.Semaphores, semaphoreJSON{Name: s.Name, Permits: s.Permits, InUse: inUse[s.Name]})
	}
	return st
}

// jobLines are the slots the table shows: of each job, its last slot done
// and every slot after it, and every slot that is running or failed and not
// done since. The JSON lists every slot.
func jobLines(jobs []jobSlotJSON) []jobSlotJSON {
	lastDone := map[string]int{}
	for i, j := range jobs {
		if j.Done {
			lastDone[j.Job] = i
		}
	}
	var out []jobSlotJSON
	for i, j := range jobs {
		last, done := lastDone[j.Job]
		if !done || i >= last || j.Runner != nil || (!j.Done && j.Failures > 0) {
			out = append(out, j)
		}
	}
	return out
}

// jobState says where a slot stands, for the table.
func jobState(j jobSlotJSON) string {
	switch {
	case j.Done:
		return "done at " + shortTime(*j.CompletedAt)
	case j.Runner != nil:
		return fmt.Sprintf("running on %s (token %d)", printable(j.Runner.HolderID), j.Runner.Token)
	case j.Failures > 0:
		return "failed, open"
	}
	return "open"
}

// statusLeaseOf is h as status lists it. The lock of a run-once slot
// (JOB@SLOT) is of kind run_once, with its job, as holder calls it.
func statusLeaseOf(h lease.Holder) statusLeaseJSON {
	l := statusLeaseJSON{holderJSON: toJSON(h), Kind: h.Kind}
	if h.Kind != lockKind {
		l.Slot = &h.Slot
	} else if job, _, ok := jobSlotOf(h.Name); ok {
		l.Kind, l.Job = runOnceKind, job
	}
	return l
}

// lockKind is lease.Holder.Kind of a lock; runOnceKind is what status and
// holder call the lock of a run-once slot.
const (
	lockKind    = "lock"
	runOnceKind = "run_once"
)

func printStatus(w io.Writer, st statusJSON) error {
	var b strings.Builder
	if len(st.Leases) == 0 {
		say(&b, "No live leases in table %s.\n", st.Table)
	} else {
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		say(tw, "NAME\tKIND\tHOLDER\tTOKEN\tEXPIRES\n")
		for _, l := range st.Leases {
			kind := l.Kind
			if l.Slot != nil {
				kind = fmt.Sprintf("%s %d", kind, *l.Slot)
			}
			say(tw, "%s\t%s\t%s\t%d\t%s\n", printable(l.Name), kind, printable(l.HolderID), l.Token, shortTime(l.ExpiresAt))
		}
		_ = tw.Flush() // into a strings.Builder, which cannot fail
	}
	if len(st.Semaphores) > 0 {
		b.WriteString("\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		say(tw, "SEMAPHORE\tIN USE\n")
		for _, s := range st.Semaphores {
			say(tw, "%s\t%d of %d\n", printable(s.Name), s.InUse, s.Permits)
		}
		_ = tw.Flush()
	}
	if len(st.Waiters) > 0 {
		b.WriteString("\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		say(tw, "WAITING FOR\tIN LINE\tFIRST\tSINCE\n")
		for i := 0; i < len(st.Waiters); {
			first, n := st.Waiters[i], 0
			for i < len(st.Waiters) && st.Waiters[i].Name == first.Name {
				i, n = i+1, n+1
			}
			say(tw, "%s\t%d\t%s\t%s\n", printable(first.Name), n, printable(first.HolderID), shortTime(first.Since))
		}
		_ = tw.Flush()
	}
	if len(st.Jobs) > 0 {
		b.WriteString("\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		say(tw, "JOB\tSLOT\tSTATE\tRUNS\tFAILURES\n")
		for _, j := range jobLines(st.Jobs) {
			say(tw, "%s\t%s\t%s\t%d\t%d\n", printable(j.Job), j.Slot, jobState(j), j.Runs, j.Failures)
		}
		_ = tw.Flush()
	}
	_, err := io.WriteString(w, b.String())
	return err
}
