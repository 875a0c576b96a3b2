package resourcelock_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"k8s.io/client-go/tools/leaderelection"

	"github.com/spannerlock/terraform-provider-spannerlock/kubernetes/resourcelock"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
	"github.com/spannerlock/terraform-provider-spannerlock/lease/leasetest"
)

func TestNewRefusesTimingsTheLeaseCannotCover(t *testing.T) {
	db, _ := leasetest.New(t)
	s := time.Second
	for _, c := range []struct {
		ld, rd, rp time.Duration
		opts       []resourcelock.Option
		want       string // a piece of the error, or "" for none
	}{
		{ld: 15 * s, rd: 10 * s, rp: 2 * s},
		{ld: 6 * s, rd: 4 * s, rp: s},
		{ld: 6 * s, rd: 5 * s, rp: s / 2, want: "90%"}, // 5.5s of leading, 5.4s of lease
		{ld: 15 * s, rd: 12 * s, rp: 2 * s, want: "90%"},
		{ld: 6 * s, rd: 4 * s, rp: s, opts: []resourcelock.Option{resourcelock.WithLeaseOptions(lease.WithTTL(5 * s))}, want: "90%"},
		{ld: 10 * s, rd: 10 * s, rp: 2 * s, want: "greater than RenewDeadline"},
		{ld: 15 * s, rd: 10 * s, rp: 9 * s, want: "RetryPeriod"},
		{ld: 15 * s, rd: 10 * s, rp: 0, want: "greater than zero"},
		{ld: s / 2, rd: s / 4, rp: s / 8, want: "at least 1s"},
	} {
		opts := append([]resourcelock.Option{resourcelock.WithElectorTimings(c.ld, c.rd, c.rp)}, c.opts...)
		l, err := resourcelock.New(db, leasetest.DefaultTable, "controller", "a", opts...)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v/%v/%v: %v", c.ld, c.rd, c.rp, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v/%v/%v: %v, want an error saying %q", c.ld, c.rd, c.rp, err, c.want)
		}
		if l != nil {
			_ = l.Close()
		}
	}
}

func TestARecordOfAnotherLeaseDurationIsRefused(t *testing.T) {
	db, _ := leasetest.New(t)
	l, err := resourcelock.New(db, leasetest.DefaultTable, "controller", "a") // client-go's defaults
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	if err := l.Create(timeout(t), recordOf("a", 6*time.Second)); err == nil || !strings.Contains(err.Error(), "WithElectorTimings") {
		t.Fatalf("Create of a 6s record on a lock for 15s: %v, want an error naming WithElectorTimings", err)
	}
	if l.Lease() != nil {
		t.Fatal("the refused Create acquired")
	}
}

// Lease never waits for Spanner, and never returns a lease whose local
// deadline has passed, even while the lease's Context has not ended yet.
func TestLeaseNeverWaitsForSpannerNorOutlivesItsDeadline(t *testing.T) {
	db, _ := leasetest.New(t)
	proxy := newPausingProxy(t, os.Getenv("SPANNER_EMULATOR_HOST"))
	t.Setenv("SPANNER_EMULATOR_HOST", proxy.addr())
	pdb, err := spanner.NewClient(timeout(t), db.DatabaseName())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pdb.Close)
	lock := newLock(t, pdb, "a", 6*time.Second)
	if err := lock.Create(timeout(t), recordOf("a", 6*time.Second)); err != nil {
		t.Fatalf("Create: %v", err)
	}
	held := lock.Lease()
	proxy.pause()
	// Until the lease is lost: every lease Lease returns was before its
	// deadline when Lease was called.
	for {
		before := time.Now()
		l := lock.Lease()
		if l == nil {
			break
		}
		if !before.Before(l.Deadline()) {
			t.Errorf("Lease returned a lease %v past its local deadline (its Context live: %v)", before.Sub(l.Deadline()), l.Context().Err() == nil)
			break
		}
		time.Sleep(time.Millisecond)
	}
	// The elector's calls after the loss, each allowed its renew deadline,
	// must not hold Lease up: Lease does no I/O, so a second is far more
	// than it takes however loaded the machine, and much less than the 4s
	// a call blocked in the partition takes.
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- lock.Update(ctx, recordOf("a", 6*time.Second)) }()
	var slowest time.Duration
	for running := true; running; {
		select {
		case err := <-done:
			running = false
			if err == nil || lock.Lease() != nil {
				t.Errorf("Update of a lost lease in a partition: %v, Lease %v; want an error and nil", err, lock.Lease())
			}
		default:
		}
		began := time.Now()
		if l := lock.Lease(); l != nil {
			t.Fatalf("Lease after the loss returned token %d", l.Token())
		}
		slowest = max(slowest, time.Since(began))
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("the lease was lost (%v); the slowest Lease call meanwhile took %v", context.Cause(held.Context()), slowest)
	if slowest > time.Second {
		t.Errorf("Lease took %v while Update waited on Spanner", slowest)
	}
	if !errors.Is(context.Cause(held.Context()), lease.ErrLeaseLost) {
		t.Errorf("the lease ended with %v, want ErrLeaseLost", context.Cause(held.Context()))
	}
}

func TestCheckRefusesConfigsTheLockDoesNotSupport(t *testing.T) {
	db, _ := leasetest.New(t)
	l := newLock(t, db, "a", 6*time.Second) // 6s, 4s, 800ms
	other := newLock(t, db, "b", 6*time.Second)
	good := leaderelection.LeaderElectionConfig{Lock: l, LeaseDuration: 6 * time.Second, RenewDeadline: 4 * time.Second, RetryPeriod: 800 * time.Millisecond}
	if err := l.Check(good); err != nil {
		t.Fatalf("Check of the lock's own config: %v", err)
	}
	for name, mod := range map[string]func(c *leaderelection.LeaderElectionConfig){
		"Coordinated":   func(c *leaderelection.LeaderElectionConfig) { c.Coordinated = true },
		"RenewDeadline": func(c *leaderelection.LeaderElectionConfig) { c.RenewDeadline = 5 * time.Second },
		"RetryPeriod":   func(c *leaderelection.LeaderElectionConfig) { c.RetryPeriod = time.Second },
		"Lock":          func(c *leaderelection.LeaderElectionConfig) { c.Lock = other },
	} {
		c := good
		mod(&c)
		if err := l.Check(c); err == nil {
			t.Errorf("Check accepted a config with another %s", name)
		}
	}
}

// A restarted process with the same identity must not take the lease its
// predecessor's session still holds for its own: Get says so rather than
// return a record the elector would read as "I lead".
func TestGetRefusesARecordOfItsIdentityThatIsNotItsLease(t *testing.T) {
	ctx := timeout(t)
	db, _ := leasetest.New(t)
	before, after := newLock(t, db, "pod-0", 6*time.Second), newLock(t, db, "pod-0", 6*time.Second)
	if err := before.Create(ctx, recordOf("pod-0", 6*time.Second)); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if rec, _, err := after.Get(ctx); err == nil || !strings.Contains(err.Error(), "same identity") {
		t.Fatalf("Get by another lock of the same identity: %+v, %v; want an error saying the identity is shared", rec, err)
	}
	if rec, _, err := before.Get(ctx); err != nil || rec.HolderIdentity != "pod-0" {
		t.Fatalf("Get by the holder: %+v, %v", rec, err)
	}
}
