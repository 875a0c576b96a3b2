//go:build unix

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
)

// electScript is CMD of a replica: it logs its start and a SIGTERM, and runs
// until its stop file appears, then exits 4.
func electScript(id string) string {
	return `trap 'echo ` + id + ` term >> log; exit 0' TERM
		echo ` + id + ` start >> log
		while [ ! -e ` + id + `-stop ]; do sleep 0.05; done
		exit 4`
}

// One replica runs CMD at a time. A replica that loses leadership has its
// CMD terminated and campaigns again; one whose CMD exits steps down at
// once and exits with CMD's status.
func TestElect(t *testing.T) {
	inEachDialect(t, func(t *testing.T, d locktable.Dialect) {
		c := newCLIIn(t, d)
		flags := []string{"--ttl", "2s", "--poll-interval", "100ms"}
		a := c.start(append(flags, "--holder-id", "A", "elect", "scheduler", "--shell", "--", electScript("A"))...)
		waitFor(t, "A to lead", func() bool { return slices.Contains(c.lines("log"), "A start") })
		b := c.start(append(flags, "--holder-id", "B", "elect", "scheduler", "--shell", "--", electScript("B"))...)

		a.signal(syscall.SIGSTOP) // past its TTL: B takes over
		waitFor(t, "B to lead", func() bool { return slices.Contains(c.lines("log"), "B start") })
		waitFor(t, "A's CMD to be terminated", func() bool { return slices.Contains(c.lines("log"), "A term") })
		a.signal(syscall.SIGCONT)

		if err := touch(c, "B-stop"); err != nil {
			t.Fatal(err)
		}
		b.expect(4)
		waitFor(t, "A to lead again", func() bool { return len(c.lines("log")) == 4 })
		if err := touch(c, "A-stop"); err != nil {
			t.Fatal(err)
		}
		a.expect(4)
		// A's CMD was stopped at A's lease's deadline, while A was paused
		// (see TestPausedHolderStopsCMD); B starts a safety margin later.
		got := c.lines("log")
		if len(got) != 4 || got[0] != "A start" || got[3] != "A start" || !slices.Contains(got[1:3], "A term") || !slices.Contains(got[1:3], "B start") {
			t.Fatalf("log %q, want A start, A term and B start, A start", got)
		}
	})
}

func touch(c *cli, name string) error {
	return os.WriteFile(c.path(name), nil, 0o644)
}

// --observe prints the leader at every change, vacancy included, until
// SIGINT; -o json prints the fields of holder, null when there is none.
// elect without CMD prints its token when it leads.
func TestElectObserve(t *testing.T) {
	inEachDialect(t, func(t *testing.T, d locktable.Dialect) {
		c := newCLIIn(t, d)
		watcher := c.start("--poll-interval", "50ms", "elect", "--observe", "-o", "json", "scheduler")
		var lines []map[string]any
		next := func(what string) map[string]any {
			t.Helper()
			waitFor(t, what, func() bool { return strings.Count(watcher.stdout.String(), "\n") > len(lines) })
			line := strings.Split(watcher.stdout.String(), "\n")[len(lines)]
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("line %q: %v", line, err)
			}
			lines = append(lines, m)
			return m
		}
		if m := next("the first line"); m["holder_id"] != nil || m["token"] != nil || m["name"] != "scheduler" {
			t.Fatalf("vacancy: %v", m)
		}
		leader := c.start("--holder-id", "leader-1", "--ttl", "1m", "elect", "scheduler")
		waitFor(t, "the leader's token", func() bool { return strings.HasSuffix(leader.stdout.String(), "\n") })
		m := next("the leader")
		if m["holder_id"] != "leader-1" || strings.TrimSpace(leader.stdout.String()) != jsonNumber(m["token"]) {
			t.Fatalf("leader line %v, leader printed token %q", m, leader.stdout.String())
		}
		leader.signal(syscall.SIGTERM)
		leader.expect(0)
		if m := next("the vacancy"); m["holder_id"] != nil {
			t.Fatalf("after the leader stepped down: %v", m)
		}
		watcher.signal(syscall.SIGINT)
		watcher.expect(0)

		text := c.start("elect", "--observe", "scheduler")
		waitFor(t, "a text line", func() bool { return strings.Contains(text.stdout.String(), "\n") })
		if got := text.stdout.String(); got != "scheduler: no leader\n" {
			t.Fatalf("text output %q", got)
		}
		text.signal(syscall.SIGTERM)
		text.expect(0)
	})
}

func jsonNumber(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// --restart runs CMD again while this process leads, under the same
// token, after a backoff that doubles from 1s (so a CMD that fails at once
// is not run in a tight loop), until a stopping signal; --value is
// published with the leadership and shown by holder and --observe.
func TestElectRestartAndValue(t *testing.T) {
	c := newCLI(t)
	leader := c.start("elect", "--restart", "--value", "10.0.0.7:8080", "scheduler", "--shell", "--",
		`echo "$SPANNERLOCK_TOKEN $(date +%s.%N)" >> runs; exit 3`)
	waitFor(t, "CMD to run a third time", func() bool { return len(c.lines("runs")) >= 3 })
	var tokens []string
	var at []float64
	for _, line := range c.lines("runs")[:3] {
		var token string
		var when float64
		if _, err := fmt.Sscan(line, &token, &when); err != nil {
			t.Fatalf("run line %q: %v", line, err)
		}
		tokens, at = append(tokens, token), append(at, when)
	}
	if tokens[0] != tokens[1] || tokens[1] != tokens[2] {
		t.Fatalf("the runs had tokens %q: a restart must stay in the same leadership", tokens)
	}
	// Lower bounds only: a loaded machine makes the gaps longer, never shorter.
	if first, second := at[1]-at[0], at[2]-at[1]; first < 0.9 || second < 1.9 {
		t.Errorf("CMD ran again after %.2fs and then %.2fs; want a backoff of 1s, then 2s", first, second)
	}
	r := c.expect(0, "holder", "scheduler")
	if !strings.Contains(r.stdout, `"value":"10.0.0.7:8080"`) {
		t.Errorf("holder does not show the value:\n%s", r.stdout)
	}
	w := c.start("elect", "--observe", "scheduler")
	waitFor(t, "the leader line", func() bool { return strings.Contains(w.stdout.String(), "\n") })
	if !strings.Contains(w.stdout.String(), "value 10.0.0.7:8080") {
		t.Errorf("--observe does not show the value: %q", w.stdout.String())
	}
	w.signal(syscall.SIGTERM)
	w.expect(0)
	leader.signal(syscall.SIGTERM)
	leader.expect(128 + int(syscall.SIGTERM))
	c.expect(exitNoHolder, "holder", "scheduler")
}
