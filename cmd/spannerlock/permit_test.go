//go:build unix

package main

import (
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
