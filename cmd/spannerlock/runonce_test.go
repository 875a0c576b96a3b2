//go:build unix

package main

import (
	"encoding/json"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
)

const slot = "2026-11-23T03:00:00Z"

// Three concurrent run-once calls for one slot run CMD once: the one that
// ran it exits 0, the others 77 once it is done (they did not run it), and
// so does a late one; --done-exit-code changes 77.
func TestRunOnceExactlyOnce(t *testing.T) {
	inEachDialect(t, func(t *testing.T, d locktable.Dialect) {
		c := newCLIIn(t, d)
		script := `echo "$SPANNERLOCK_NAME $SPANNERLOCK_SLOT $SPANNERLOCK_TOKEN" >> ran; sleep 0.5`
		var procs []*proc
		for range 3 {
			procs = append(procs, c.start("--poll-interval", "100ms", "run-once", "nightly", "--slot", slot, "--shell", "--", script))
		}
		var codes []int
		for _, p := range procs {
			codes = append(codes, p.wait())
		}
		slices.Sort(codes)
		if want := []int{0, exitAlreadyDone, exitAlreadyDone}; !slices.Equal(codes, want) {
			t.Fatalf("exit statuses %v, want %v", codes, want)
		}
		c.expect(exitAlreadyDone, "run-once", "nightly", "--slot", slot, "--shell", "--", script)
		c.expect(0, "run-once", "--done-exit-code", "0", "nightly", "--slot", slot, "--shell", "--", script)
		if got := c.lines("ran"); !slices.Equal(got, []string{"nightly " + slot + " 1"}) {
			t.Fatalf("CMD ran %d times: %q; want once, with the job, slot and token in its environment", len(got), got)
		}
		// Flags after JOB or before it: the same job and slot.
		c.expect(exitAlreadyDone, "run-once", "--slot", slot, "nightly", "--", "touch", "again")
		if c.exists("again") {
			t.Fatal("a done slot ran again")
		}
	})
}

// A failed CMD leaves the slot open: run-once exits with CMD's status and a
// later call runs the slot.
func TestRunOnceFailureLeavesSlotOpen(t *testing.T) {
	inEachDialect(t, func(t *testing.T, d locktable.Dialect) {
		c := newCLIIn(t, d)
		c.expect(3, "run-once", "job", "--slot", slot, "--", "sh", "-c", "echo failed >> ran; exit 3")
		c.expect(0, "run-once", "job", "--slot", slot, "--", "sh", "-c", "echo succeeded >> ran")
		c.expect(exitAlreadyDone, "run-once", "job", "--slot", slot, "--", "sh", "-c", "echo again >> ran")
		if got := c.lines("ran"); !slices.Equal(got, []string{"failed", "succeeded"}) {
			t.Fatalf("runs: %q, want failed then succeeded", got)
		}
	})
}

// A call that finds the slot running waits; if the runner dies, it runs the
// slot itself once the runner's lease expires.
func TestRunOnceTakesOverFromDeadRunner(t *testing.T) {
	inEachDialect(t, func(t *testing.T, d locktable.Dialect) {
		c := newCLIIn(t, d)
		first := c.start("--ttl", "2s", "run-once", "job", "--slot", slot, "--shell", "--", "echo first >> ran; sleep 300")
		waitFor(t, "the first run", func() bool { return c.read("ran") == "first\n" })
		second := c.start("--ttl", "2s", "--poll-interval", "100ms", "run-once", "job", "--slot", slot, "--shell", "--", "echo second >> ran")
		first.signal(syscall.SIGKILL)
		first.wait()
		second.expect(0)
		if got := c.lines("ran"); !slices.Equal(got, []string{"first", "second"}) {
			t.Fatalf("runs: %q, want first, then second after the first runner died", got)
		}
	})
}

// A runner paused past its TTL loses the slot: a waiter runs it and records
// it as done, and the paused one, once resumed, exits 76 whether its CMD was
// still running or had just succeeded.
func TestRunOnceLostWhileRunning(t *testing.T) {
	c := newCLI(t)
	script := `echo ran >> ran; while [ ! -e go ]; do sleep 0.05; done`
	first := c.start("--ttl", "2s", "run-once", "job", "--slot", slot, "--shell", "--", script)
	waitFor(t, "the first run", func() bool { return len(c.lines("ran")) == 1 })
	first.signal(syscall.SIGSTOP)
	second := c.start("--ttl", "2s", "--poll-interval", "100ms", "run-once", "job", "--slot", slot, "--shell", "--", script)
	waitFor(t, "the second run, once the first runner's lease expired", func() bool { return len(c.lines("ran")) == 2 })
	if err := touch(c, "go"); err != nil {
		t.Fatal(err)
	}
	second.expect(0)
	first.signal(syscall.SIGCONT)
	first.expect(exitLost)
	c.expect(exitAlreadyDone, "run-once", "job", "--slot", slot, "--", "touch", "third")
	if c.exists("third") {
		t.Fatal("the slot ran again after the second run recorded it")
	}
}

// A waiter gives up with 75 after --timeout while the slot runs elsewhere.
func TestRunOnceTimeout(t *testing.T) {
	c := newCLI(t)
	runner := c.start("run-once", "job", "--slot", slot, "--shell", "--", "echo ready > ready; sleep 300 & wait")
	c.waitFile("ready")
	c.expect(exitNotAcquired, "run-once", "--timeout", "1s", "job", "--slot", slot, "--", "touch", "ran")
	if c.exists("ran") {
		t.Fatal("CMD ran while the slot was running elsewhere")
	}
	runner.signal(syscall.SIGTERM)
	runner.expect(128 + int(syscall.SIGTERM))
}

// --every takes the current slot of a clock-aligned schedule; it takes days
// as --cleanup-after does.
func TestRunOnceEvery(t *testing.T) {
	c := newCLI(t)
	day := time.Now().UTC().Truncate(24 * time.Hour)
	if r := c.expect(0, "run-once", "daily", "--every", "1d", "--", "sh", "-c", "echo $SPANNERLOCK_SLOT"); strings.TrimSpace(r.stdout) != day.Format(time.RFC3339) &&
		strings.TrimSpace(r.stdout) != day.Add(24*time.Hour).Format(time.RFC3339) {
		t.Errorf("--every 1d: slot %q, want %s", r.stdout, day.Format(time.RFC3339))
	}
	before := time.Now().UTC().Truncate(time.Hour)
	r := c.expect(0, "run-once", "hourly", "--every", "1h", "--", "sh", "-c", "echo $SPANNERLOCK_SLOT")
	after := time.Now().UTC().Truncate(time.Hour)
	got := strings.TrimSpace(r.stdout)
	if got != before.Format(time.RFC3339) && got != after.Format(time.RFC3339) {
		t.Fatalf("slot %q, want the hour that started at %s", got, before.Format(time.RFC3339))
	}
}

func TestParseSlot(t *testing.T) {
	now := time.Date(2026, 11, 23, 3, 17, 42, 5, time.FixedZone("CET", 3600))
	for _, tc := range []struct {
		slot  string
		every time.Duration
		want  string
	}{
		{"2026-11-23T03:00:00Z", 0, "2026-11-23T03:00:00Z"},
		{"2026-11-23T04:00:00+01:00", 0, "2026-11-23T03:00:00Z"},
		{"", time.Hour, "2026-11-23T02:00:00Z"},
		{"", 15 * time.Minute, "2026-11-23T02:15:00Z"},
		{"", 24 * time.Hour, "2026-11-23T00:00:00Z"},
		{"", mustParseDuration(t, "1d"), "2026-11-23T00:00:00Z"},
	} {
		got, err := parseSlot(tc.slot, tc.every, now)
		if err != nil || got.Format(time.RFC3339) != tc.want {
			t.Errorf("parseSlot(%q, %s) = %v, %v; want %s", tc.slot, tc.every, got, err, tc.want)
		}
	}
	if _, err := parseSlot(slot, time.Hour, now); err == nil {
		t.Error("--slot with --every was accepted")
	}
}

func mustParseDuration(t *testing.T, s string) time.Duration {
	t.Helper()
	d, err := parseDuration(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// run-once --try does not wait for a run elsewhere: it exits 75 at once
// (or --conflict-exit-code), naming the runner; on a free slot it runs CMD.
func TestRunOnceTry(t *testing.T) {
	c := newCLI(t)
	runner := c.start("--holder-id", "runner", "run-once", "job", "--slot", slot, "--shell", "--", "echo ready > ready; sleep 300 & wait")
	c.waitFile("ready")
	r := c.expect(exitNotAcquired, "run-once", "--try", "job", "--slot", slot, "--", "touch", "ran")
	if c.exists("ran") || !strings.Contains(r.stderr, `running elsewhere (run by "runner"`) {
		t.Fatalf("--try with the slot running elsewhere: ran %v, stderr:\n%s", c.exists("ran"), r.stderr)
	}
	c.expect(9, "run-once", "--try", "--conflict-exit-code", "9", "job", "--slot", slot, "--", "touch", "ran")
	runner.signal(syscall.SIGTERM)
	runner.expect(128 + int(syscall.SIGTERM))
	c.expect(0, "run-once", "--try", "job", "--slot", slot, "--", "touch", "ran")
	if !c.exists("ran") {
		t.Fatal("--try on an open slot did not run CMD")
	}
	c.expect(exitAlreadyDone, "run-once", "--try", "job", "--slot", slot, "--", "touch", "again")
}

// TestRunOnceTryLeavesNothingBehind: run-once --try never waits in the
// slot's line, and never mistakes its own run for one elsewhere. A --try
// that finds the slot running exits 75 leaving no waiter; a --try on an
// open slot runs CMD every time (issue 28, item 11: a --try read the slot's
// holder beside a waiting RunOnce, and when the RunOnce took the open slot
// first, the read found this process's own lease and the --try exited 75
// as if the slot ran elsewhere). A fast poll interval makes those reads
// come as often as spannerlock allows.
func TestRunOnceTryLeavesNothingBehind(t *testing.T) {
	c := newCLI(t)
	lc := c.client()
	runner := c.start("--holder-id", "runner", "run-once", "job", "--slot", slot, "--shell", "--", "echo ready > ready; sleep 300 & wait")
	c.waitFile("ready")
	c.expect(exitNotAcquired, "--poll-interval", "50ms", "run-once", "--try", "job", "--slot", slot, "--", "touch", "ran")
	waiters, err := lc.Waiters(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(waiters) > 0 || c.exists("ran") {
		t.Fatalf("a --try that found the slot running left waiters %+v (CMD ran: %v)", waiters, c.exists("ran"))
	}
	runner.signal(syscall.SIGTERM)
	runner.expect(128 + int(syscall.SIGTERM))
	start, _ := time.Parse(time.RFC3339, slot)
	for i := range 10 {
		s := start.Add(time.Duration(i) * time.Hour).Format(time.RFC3339)
		r := c.run("--poll-interval", "50ms", "run-once", "--try", "job", "--slot", s, "--", "true")
		if r.code != 0 {
			t.Fatalf("--try on the open slot %s exited %d, want 0 (CMD runs)\nstderr:\n%s", s, r.code, r.stderr)
		}
	}
}

// --max-failures stops running a slot whose runs failed that many times, on
// any host; status lists each job's slots, done, running or failed, with
// their runs (the table shows a job's last slot done, not the ones before
// it), and holder JOB prints the runner of a running slot.
func TestRunOnceMaxFailuresStatusAndHolder(t *testing.T) {
	inEachDialect(t, func(t *testing.T, d locktable.Dialect) {
		c := newCLIIn(t, d)
		const failing = "2026-11-23T04:00:00Z"
		c.expect(3, "run-once", "--max-failures", "2", "job", "--slot", failing, "--", "sh", "-c", "echo run >> runs; exit 3")
		c.expect(3, "run-once", "--max-failures", "2", "job", "--slot", failing, "--", "sh", "-c", "echo run >> runs; exit 3")
		r := c.expect(exitFailure, "run-once", "--max-failures", "2", "job", "--slot", failing, "--", "sh", "-c", "echo run >> runs; exit 3")
		if len(c.lines("runs")) != 2 || !strings.Contains(r.stderr, "failed 2 times or more, so it does not run again (--max-failures 2)") {
			t.Fatalf("runs %q; stderr:\n%s", c.lines("runs"), r.stderr)
		}
		const earlier = "2026-11-23T02:00:00Z"
		c.expect(0, "run-once", "job", "--slot", earlier, "--", "true")
		c.expect(0, "run-once", "job", "--slot", slot, "--", "true")
		runner := c.start("--holder-id", "runner-1", "run-once", "job", "--slot", "2026-11-23T05:00:00Z", "--shell", "--",
			"echo ready > ready; sleep 300 & wait")
		c.waitFile("ready")

		r = c.expect(0, "holder", "job")
		var h struct {
			HolderID string `json:"holder_id"`
			Kind     string `json:"kind"`
			Job      string `json:"job"`
			Slot     string `json:"slot"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &h); err != nil || h.HolderID != "runner-1" || h.Kind != "run_once" || h.Job != "job" ||
			h.Slot != "2026-11-23T05:00:00Z" {
			t.Errorf("holder job: %q (%v)", r.stdout, err)
		}

		r = c.expect(0, "status", "-o", "json")
		var st struct {
			Jobs []struct {
				Job         string          `json:"job"`
				Slot        string          `json:"slot"`
				Done        bool            `json:"done"`
				CompletedAt *string         `json:"completed_at"`
				Runs        int64           `json:"runs"`
				Failures    int64           `json:"failures"`
				Runner      json.RawMessage `json:"runner"`
			} `json:"jobs"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || len(st.Jobs) != 4 {
			t.Fatalf("status -o json: %q (%v)", r.stdout, err)
		}
		if st.Jobs[0].Slot != earlier || !st.Jobs[0].Done {
			t.Errorf("the earlier done slot: %+v", st.Jobs[0])
		}
		done, failed, running := st.Jobs[1], st.Jobs[2], st.Jobs[3]
		if done.Slot != slot || !done.Done || done.CompletedAt == nil || done.Runs != 1 || done.Failures != 0 || string(done.Runner) != "null" {
			t.Errorf("the done slot: %+v", done)
		}
		if failed.Slot != failing || failed.Done || failed.Runs != 2 || failed.Failures != 2 {
			t.Errorf("the failed slot: %+v", failed)
		}
		if running.Done || !strings.Contains(string(running.Runner), `"holder_id":"runner-1"`) {
			t.Errorf("the running slot: %+v", running)
		}
		r = c.expect(0, "status")
		for _, want := range []string{"JOB", "SLOT", "STATE", slot, "done at ", "failed, open", "running on runner-1"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("the status table lacks %q:\n%s", want, r.stdout)
			}
		}
		if strings.Contains(r.stdout, earlier) {
			t.Errorf("the status table shows a slot done before the job's last slot done:\n%s", r.stdout)
		}
		runner.signal(syscall.SIGTERM)
		runner.expect(128 + int(syscall.SIGTERM))
	})
}

// A run whose process was killed counts as a failed run for --max-failures,
// as its help says: once the dead runner's lease expires, a call with
// --max-failures 1 does not run the slot again.
func TestRunOnceCrashCountsAsFailure(t *testing.T) {
	c := newCLI(t)
	first := c.start("--ttl", "2s", "run-once", "job", "--slot", slot, "--shell", "--", "echo run >> runs; sleep 300")
	waitFor(t, "the first run", func() bool { return len(c.lines("runs")) == 1 })
	first.signal(syscall.SIGKILL)
	first.wait()
	r := c.expect(exitFailure, "--poll-interval", "100ms", "run-once", "--max-failures", "1", "job", "--slot", slot, "--shell", "--", "echo run >> runs")
	if len(c.lines("runs")) != 1 || !strings.Contains(r.stderr, "--max-failures 1") {
		t.Fatalf("runs %q after a crashed run; stderr:\n%s", c.lines("runs"), r.stderr)
	}
	c.expect(0, "--poll-interval", "100ms", "run-once", "job", "--slot", slot, "--shell", "--", "echo run >> runs")
	if len(c.lines("runs")) != 2 {
		t.Fatalf("runs %q: without --max-failures the slot runs", c.lines("runs"))
	}
}
