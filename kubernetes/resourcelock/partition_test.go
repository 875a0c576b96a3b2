//go:build linux

package resourcelock_test

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/spannerlock/terraform-provider-spannerlock/lease/leasetest"
)

// clientGoDefaults are client-go's and controller-runtime's default timings.
var clientGoDefaults = timing{leaseDuration: 15 * time.Second, renewDeadline: 10 * time.Second, retryPeriod: 2 * time.Second}

// A leader cut off from Spanner (its connection paused, not closed) must
// stop leading before a rival starts: its elector's context, the one
// OnStartedLeading got, ends before the rival's OnStartedLeading runs. Both
// moments are stamped by the electors themselves on the host's one wall
// clock; the old leader's stamp is taken when it sees its context end, so
// any lateness counts against it.
func TestAPartitionedLeaderStopsBeforeARivalLeads(t *testing.T) {
	for _, tm := range []timing{clientGoDefaults, electorTiming} {
		for _, release := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/ReleaseOnCancel=%v", tm, release), func(t *testing.T) {
				partitionedLeader(t, tm, release)
			})
		}
	}
}

func partitionedLeader(t *testing.T, tm timing, release bool) {
	db, _ := leasetest.New(t)
	proxy := newPausingProxy(t, os.Getenv("SPANNER_EMULATOR_HOST"))
	s := newElectorSet(t, db, tm)
	rel := releaseEnv + "=" + strconv.FormatBool(release)
	s.start("a", "SPANNER_EMULATOR_HOST="+proxy.addr(), rel)
	first := next(t, s.events, "started", time.Minute)
	s.start("b", rel)
	// Once b knows a leads, it only polls.
	for ev := next(t, s.events, "leader", time.Minute); ev.Identity != "b" || ev.Leader != "a"; ev = next(t, s.events, "leader", time.Minute) {
	}
	// Mid-term: a has renewed since it started.
	time.Sleep(tm.retryPeriod + tm.retryPeriod/2)
	paused := time.Now()
	proxy.pause()

	// The rival cannot start before a's lease expires in Spanner; a's
	// context ends by then. Either may come first if the lock is wrong, so
	// wait for both: the lease duration, the elector's two rounds, a
	// retry, and slack for a loaded machine.
	var ctxDone, leaseDone, second *electorEvent
	deadline := time.After(2*tm.leaseDuration + tm.renewDeadline + aRetry(tm) + 2*rpcSlack)
	for ctxDone == nil || second == nil {
		select {
		case ev := <-s.events:
			switch {
			case ev.Identity == "a" && ev.Event == "ctxdone":
				ctxDone = &ev
			case ev.Identity == "a" && ev.Event == "leasedone":
				leaseDone = &ev
			case ev.Identity == "b" && ev.Event == "started":
				second = &ev
			}
		case <-deadline:
			t.Fatalf("after the partition: a's elector context ended %v, b started %v", ctxDone, second)
		}
	}
	since := func(e *electorEvent) string {
		if e == nil {
			return "never"
		}
		return "+" + e.At.Sub(paused).Round(time.Millisecond).String()
	}
	t.Logf("partitioned a (token %d): its lease's Context ended %s, its elector's %s; b started %s with token %d; a stopped %v before b started",
		first.Token, since(leaseDone), since(ctxDone), since(second), second.Token, second.At.Sub(ctxDone.At).Round(time.Millisecond))
	if !ctxDone.At.Before(second.At) {
		t.Errorf("two leaders for %v: a's elector context was live when b's OnStartedLeading ran", ctxDone.At.Sub(second.At))
	}
	if second.Token <= first.Token {
		t.Errorf("b leads with token %d, not above a's %d", second.Token, first.Token)
	}
}

// After an operator force-releases the lease, the elector must step down
// (its context ends, OnStoppedLeading runs) and a new election must acquire
// the lease anew, calling OnStartedLeading with a new token: it must not
// stay leader on a lease it silently took again, nor hold the name with
// nobody leading.
func TestAForceReleasedLeaderStepsDownAndIsElectedAgain(t *testing.T) {
	for _, release := range []bool{false, true} {
		t.Run(fmt.Sprintf("ReleaseOnCancel=%v", release), func(t *testing.T) {
			tm := electorTiming
			db, locks := leasetest.New(t)
			s := newElectorSet(t, db, tm)
			s.start("a", loopEnv+"=true", releaseEnv+"="+strconv.FormatBool(release))
			first := next(t, s.events, "started", time.Minute)
			forced := time.Now()
			h, err := locks.ForceRelease(timeout(t), "controller")
			if err != nil || h.Token != first.Token {
				t.Fatalf("ForceRelease: %+v, %v; want a's token %d", h, err, first.Token)
			}
			// The loss is seen at the next renewal (a retry period), the
			// elector gives up RenewDeadline after its last success, and
			// its next election takes a retry: the bound has a lease
			// duration of slack on top for a loaded machine.
			bound := tm.retryPeriod + tm.renewDeadline + aRetry(tm) + tm.leaseDuration
			seen := map[string]time.Time{}
			var again *electorEvent
			deadline := time.After(bound)
			for again == nil {
				select {
				case ev := <-s.events:
					if _, ok := seen[ev.Event]; !ok && ev.Event != "started" {
						seen[ev.Event] = ev.At
					}
					if ev.Event == "started" {
						again = &ev
					}
				case <-deadline:
					t.Fatalf("within %v of the force-release, the elector did not lead again; it reported %v "+
						"(no stopped: it kept leading on a lease it no longer holds)", bound, seen)
				}
			}
			for _, e := range []string{"leasedone", "ctxdone", "stopped"} {
				if _, ok := seen[e]; !ok {
					t.Errorf("no %s before leading again", e)
				}
			}
			t.Logf("force-released at 0: lease Context ended +%v, elector context +%v, OnStoppedLeading +%v, leading again +%v with token %d (was %d)",
				seen["leasedone"].Sub(forced).Round(time.Millisecond), seen["ctxdone"].Sub(forced).Round(time.Millisecond),
				seen["stopped"].Sub(forced).Round(time.Millisecond), again.At.Sub(forced).Round(time.Millisecond), again.Token, first.Token)
			if again.Token <= first.Token {
				t.Errorf("leading again with token %d, not above %d", again.Token, first.Token)
			}
		})
	}
}
