//go:build unix

package main

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
)

// permit runs CMD with one of a semaphore's permits: with every permit in
// use, --try exits 75; an undeclared semaphore is an error saying how to
// declare it.
func TestPermit(t *testing.T) {
	inEachDialect(t, func(t *testing.T, d locktable.Dialect) {
		c := newCLIIn(t, d)
		if err := c.client().SetPermits(testContext(t), "crawlers", 2); err != nil {
			t.Fatal(err)
		}
		var holders []*proc
		for _, n := range []string{"1", "2"} {
			holders = append(holders, c.start("permit", "crawlers", "--shell", "--",
				"echo $SPANNERLOCK_NAME $SPANNERLOCK_TOKEN > ready"+n+"; sleep 300 & wait"))
			c.waitFile("ready" + n)
		}
		if got := c.read("ready1") + c.read("ready2"); got != "crawlers 1\ncrawlers 2\n" {
			t.Errorf("the permits' environment: %q, want the semaphore's name and a token each", got)
		}
		r := c.expect(exitNotAcquired, "permit", "--try", "crawlers", "--", "touch", "ran")
		if !strings.Contains(r.stderr, "2 of 2") || c.exists("ran") {
			t.Errorf("--try with every permit in use: stderr %q, ran %v", r.stderr, c.exists("ran"))
		}
		waiter := c.start("--poll-interval", "100ms", "permit", "crawlers", "--", "touch", "ran")
		holders[0].signal(syscall.SIGTERM)
		holders[0].expect(128 + int(syscall.SIGTERM))
		waiter.expect(0)
		if !c.exists("ran") {
			t.Fatal("the waiter did not run CMD once a permit was free")
		}
		holders[1].signal(syscall.SIGTERM)
		holders[1].expect(128 + int(syscall.SIGTERM))

		r = c.expect(exitFailure, "permit", "undeclared", "--", "true")
		if !strings.Contains(r.stderr, `semaphore "undeclared" is not declared`) || !strings.Contains(r.stderr, "spannerlock_semaphore") {
			t.Errorf("undeclared semaphore: %s", r.stderr)
		}
	})
}

// semaphore set declares a semaphore (and changes its number of permits)
// for permit to use; semaphore get prints its number of permits, how many
// are in use and by whom, as text or JSON.
func TestSemaphoreCommand(t *testing.T) {
	inEachDialect(t, func(t *testing.T, d locktable.Dialect) {
		c := newCLIIn(t, d)
		r := c.expect(exitFailure, "semaphore", "get", "crawlers")
		if !strings.Contains(r.stderr, `semaphore "crawlers" is not declared`) || !strings.Contains(r.stderr, "spannerlock semaphore set crawlers N") {
			t.Errorf("get of an undeclared semaphore:\n%s", r.stderr)
		}
		c.expect(exitUsage, "semaphore", "set", "crawlers", "0")
		c.expect(0, "semaphore", "set", "crawlers", "2")
		holder := c.start("--holder-id", "crawler-1", "permit", "crawlers", "--shell", "--", "echo ready > ready; sleep 300 & wait")
		c.waitFile("ready")

		r = c.expect(0, "semaphore", "get", "crawlers", "-o", "json")
		var s struct {
			Name    string `json:"name"`
			Permits int64  `json:"permits"`
			InUse   int    `json:"in_use"`
			Holders []struct {
				HolderID string `json:"holder_id"`
				Slot     *int64 `json:"slot"`
				Token    int64  `json:"token"`
			} `json:"holders"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &s); err != nil {
			t.Fatalf("%q: %v", r.stdout, err)
		}
		if s.Name != "crawlers" || s.Permits != 2 || s.InUse != 1 || len(s.Holders) != 1 || s.Holders[0].HolderID != "crawler-1" || s.Holders[0].Slot == nil {
			t.Errorf("semaphore get -o json: %+v", s)
		}
		r = c.expect(0, "semaphore", "get", "crawlers")
		for _, want := range []string{"SEMAPHORE  PERMITS  IN USE\ncrawlers   2        1\n", "SLOT", "crawler-1"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("semaphore get lacks %q:\n%s", want, r.stdout)
			}
		}

		// holder on a semaphore lists its permits in use.
		r = c.expect(0, "holder", "crawlers")
		if !strings.Contains(r.stdout, `"holder_id":"crawler-1"`) || !strings.Contains(r.stdout, `"kind":"permit"`) || strings.Count(r.stdout, "\n") != 1 {
			t.Errorf("holder on a semaphore with one permit in use:\n%s", r.stdout)
		}

		r = c.expect(0, "semaphore", "set", "crawlers", "1")
		if !strings.Contains(r.stderr, "Semaphore crawlers has 1 permit (it had 2)") {
			t.Errorf("lowering the limit: %s", r.stderr)
		}
		c.expect(exitNotAcquired, "permit", "--try", "crawlers", "--", "true")
		holder.signal(syscall.SIGTERM)
		holder.expect(128 + int(syscall.SIGTERM))
		c.expect(0, "permit", "--try", "crawlers", "--", "true")
		r = c.expect(exitNoHolder, "holder", "crawlers")
		if !strings.Contains(r.stderr, `nobody holds a permit of semaphore "crawlers"`) {
			t.Errorf("holder on an idle semaphore:\n%s", r.stderr)
		}
	})
}
