//go:build unix

package main

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"

	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// Small habits of issue 28, item 10: what spannerlock writes on stderr, in
// which format, and which names it keeps for itself.

// jsonRecords parses stderr as one JSON object per line, failing the test
// on any line that is not one.
func jsonRecords(t *testing.T, what, stderr string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil || rec["time"] == nil || rec["level"] == nil || rec["msg"] == nil {
			t.Fatalf("%s: a line of stderr that is not a JSON log record: %q (%v)\nstderr:\n%s", what, line, err, stderr)
		}
		out = append(out, rec)
	}
	return out
}

// --try --conflict-exit-code 0 is silent when the lock (or the slot) is
// held, as flock -n -E 0, so that cron mails nothing for a skipped run;
// --timeout with it too. With --verbose the skip is logged, naming the
// holder, at level INFO.
func TestConflictExitCodeZeroIsSilent(t *testing.T) {
	c := newCLI(t)
	if _, err := c.client(lease.WithHolderID("the-holder")).Acquire(testContext(t), "x"); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"lock", "--try", "--conflict-exit-code", "0", "x", "--", "touch", "ran"},
		// 5s: the lock stays held, so this waits it all out; it is room
		// for a loaded machine's first answer from Spanner, without which
		// the run is an exit 1 "no answer", not a conflict.
		{"lock", "--timeout", "5s", "--conflict-exit-code", "0", "x", "--", "touch", "ran"},
	} {
		if r := c.expect(0, args...); r.stderr != "" || r.stdout != "" || c.exists("ran") {
			t.Errorf("%v: ran %v, stdout %q, stderr %q: want nothing", args, c.exists("ran"), r.stdout, r.stderr)
		}
	}

	runner := c.start("--holder-id", "runner", "run-once", "job", "--slot", slot, "--shell", "--", "echo ready > ready; sleep 300 & wait")
	c.waitFile("ready")
	if r := c.expect(0, "run-once", "--try", "--conflict-exit-code", "0", "job", "--slot", slot, "--", "touch", "ran"); r.stderr != "" || c.exists("ran") {
		t.Errorf("run-once --try --conflict-exit-code 0: ran %v, stderr %q: want nothing", c.exists("ran"), r.stderr)
	}
	runner.signal(syscall.SIGTERM)
	runner.expect(128 + int(syscall.SIGTERM))

	r := c.expect(0, "--verbose", "--log-format", "json", "lock", "--try", "--conflict-exit-code", "0", "x", "--", "touch", "ran")
	logged := false
	for _, rec := range jsonRecords(t, "--verbose --conflict-exit-code 0", r.stderr) {
		msg, _ := rec["msg"].(string)
		logged = logged || rec["level"] == "INFO" && strings.Contains(msg, `"the-holder"`)
	}
	if !logged || c.exists("ran") {
		t.Errorf("--verbose --conflict-exit-code 0 does not log who holds the lock (ran %v):\n%s", c.exists("ran"), r.stderr)
	}
}

// With --log-format json every line spannerlock writes on stderr is a JSON
// record: the final error, with its exit status (and for a usage error the
// help to read), and what break and semaphore set report.
func TestLogFormatJSONEveryLine(t *testing.T) {
	c := newCLI(t)
	if _, err := c.client(lease.WithHolderID("the-holder")).Acquire(testContext(t), "x"); err != nil {
		t.Fatal(err)
	}
	finalError := func(r result, code int) map[string]any {
		t.Helper()
		for _, rec := range jsonRecords(t, "the final error", r.stderr) {
			if rec["level"] == "ERROR" && rec["exit_status"] == float64(code) {
				return rec
			}
		}
		t.Fatalf("no ERROR record with exit_status %d:\n%s", code, r.stderr)
		return nil
	}
	r := c.expect(exitNotAcquired, "--log-format", "json", "lock", "--try", "x", "--", "true")
	if msg, _ := finalError(r, exitNotAcquired)["msg"].(string); !strings.Contains(msg, `"the-holder"`) {
		t.Errorf("the error record does not name the holder:\n%s", r.stderr)
	}
	r = c.expect(exitUsage, "lock", "--log-format", "json")
	if finalError(r, exitUsage)["usage"] != "spannerlock lock --help" {
		t.Errorf("the usage error record does not point to the command's help:\n%s", r.stderr)
	}

	r = c.expect(0, "--log-format", "json", "semaphore", "set", "sem", "2")
	if recs := jsonRecords(t, "semaphore set", r.stderr); len(recs) != 1 || recs[0]["level"] != "INFO" {
		t.Errorf("semaphore set: want one INFO record:\n%s", r.stderr)
	}
	r = c.expect(0, "--log-format", "json", "break", "--yes", "x")
	broke := false // besides the library's WARN record of the force-release
	for _, rec := range jsonRecords(t, "break", r.stderr) {
		broke = broke || rec["level"] == "INFO"
	}
	if !broke {
		t.Errorf("break: want an INFO record of what it broke:\n%s", r.stderr)
	}
	if h := holderOf(t, c.client(), "x"); h != nil {
		t.Errorf("break left x held by %q", h.HolderID)
	}
}

// Counts are printed in the singular for one: no "1 permits", "1 times".
func TestCountsOfOne(t *testing.T) {
	c := newCLI(t)
	singular := func(what string, r result) {
		t.Helper()
		for _, wrong := range []string{"1 permits", "1 times", "1 statements", "(s)"} {
			if strings.Contains(r.stderr, wrong) {
				t.Errorf("%s says %q:\n%s", what, wrong, r.stderr)
			}
		}
	}
	singular("semaphore set", c.expect(0, "semaphore", "set", "one", "1"))
	lc := c.client(lease.WithHolderID("the-holder"))
	if _, err := lc.AcquirePermit(testContext(t), "one"); err != nil {
		t.Fatal(err)
	}
	singular("permit --try", c.expect(exitNotAcquired, "--verbose", "permit", "--try", "one", "--", "true"))

	c.expect(3, "run-once", "--max-failures", "1", "job", "--slot", slot, "--", "sh", "-c", "exit 3")
	r := c.expect(exitFailure, "run-once", "--max-failures", "1", "job", "--slot", slot, "--", "touch", "ran")
	if c.exists("ran") || !strings.Contains(r.stderr, "failed 1 time or more") {
		t.Errorf("run-once --max-failures 1 after a failure: ran %v, stderr:\n%s", c.exists("ran"), r.stderr)
	}
	singular("run-once --max-failures 1", r)
}

// status --help documents the waiters it lists, and status calls the lease
// of a running run-once slot what holder calls it: run_once, with its job.
func TestStatusNamesAsHolderDoes(t *testing.T) {
	c := newCLI(t)
	help := c.expect(0, "status", "--help")
	if !strings.Contains(help.stdout, "waiters") {
		t.Errorf("status --help does not mention waiters:\n%s", help.stdout)
	}
	runner := c.start("--holder-id", "runner", "run-once", "job", "--slot", slot, "--shell", "--", "echo ready > ready; sleep 300 & wait")
	c.waitFile("ready")

	var h struct {
		Kind string `json:"kind"`
		Job  string `json:"job"`
	}
	if r := c.expect(0, "holder", "job"); json.Unmarshal([]byte(r.stdout), &h) != nil || h.Kind != "run_once" {
		t.Fatalf("holder job: %q", r.stdout)
	}
	var st struct {
		Leases []struct {
			Name     string `json:"name"`
			HolderID string `json:"holder_id"`
			Kind     string `json:"kind"`
			Job      string `json:"job"`
		} `json:"leases"`
	}
	r := c.expect(0, "status", "-o", "json")
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || len(st.Leases) != 1 {
		t.Fatalf("status -o json: %q (%v)", r.stdout, err)
	}
	if l := st.Leases[0]; l.Kind != h.Kind || l.Job != "job" || l.HolderID != "runner" || l.Name != "job@"+slot {
		t.Errorf("status lists the running slot as %+v; holder calls it kind %q", l, h.Kind)
	}
	table := c.expect(0, "status")
	if !strings.Contains(table.stdout, " run_once ") {
		t.Errorf("status's table does not call the slot run_once:\n%s", table.stdout)
	}
	runner.signal(syscall.SIGTERM)
	runner.expect(128 + int(syscall.SIGTERM))
}

// A name of the form JOB@SLOT is the lock run-once takes for a slot: lock,
// permit, elect and semaphore set refuse it with a usage error, so that it
// cannot take the slot's row and reset its runs (a done slot stays done);
// other names with "@" are anyone's.
func TestJobSlotNameIsReserved(t *testing.T) {
	c := newCLI(t)
	c.expect(0, "run-once", "job", "--slot", slot, "--", "true")
	name := "job@" + slot
	for _, args := range [][]string{
		{"lock", name, "--", "touch", "ran"},
		{"lock", "--try", name, "--", "touch", "ran"},
		{"permit", name, "--", "touch", "ran"},
		{"elect", name, "--", "touch", "ran"},
		{"semaphore", "set", name, "2"},
	} {
		r := c.expect(exitUsage, args...)
		if !strings.Contains(r.stderr, "JOB@SLOT") || !strings.Contains(r.stderr, "run-once") {
			t.Errorf("%v: the usage error does not name the reserved form:\n%s", args, r.stderr)
		}
	}
	if c.exists("ran") {
		t.Error("CMD ran under a slot's name")
	}
	c.expect(exitAlreadyDone, "run-once", "job", "--slot", slot, "--", "touch", "ran")
	c.expect(0, "lock", "deploy@prod", "--", "true")
	c.expect(0, "lock", "job@2026-11-23", "--", "true") // not a slot's RFC 3339 time
}

// 'help signals' tells systemd users to set KillMode=mixed, so that CMD is
// not signalled twice, by systemd and by spannerlock.
func TestHelpSignalsSystemd(t *testing.T) {
	c := newCLI(t)
	if r := c.expect(0, "help", "signals"); !strings.Contains(r.stdout, "KillMode=mixed") {
		t.Errorf("help signals does not mention KillMode=mixed:\n%s", r.stdout)
	}
}
