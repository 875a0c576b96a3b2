package resourcelock_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	rl "k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/spannerlock/terraform-provider-spannerlock/kubernetes/resourcelock"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
	"github.com/spannerlock/terraform-provider-spannerlock/lease/leasetest"
)

// timeout bounds a test's calls, so a dead emulator fails it instead of
// hanging it.
func timeout(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func eachDialect(t *testing.T, test func(t *testing.T, d lease.Dialect)) {
	for _, d := range []lease.Dialect{lease.GoogleSQL, lease.PostgreSQL} {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			test(t, d)
		})
	}
}

// newLock returns a lock for an elector whose lease duration is
// leaseDuration, with client-go's default proportions for the rest.
func newLock(t *testing.T, db *spanner.Client, identity string, leaseDuration time.Duration) *resourcelock.Lock {
	t.Helper()
	l, err := resourcelock.New(db, leasetest.DefaultTable, "controller", identity,
		resourcelock.WithElectorTimings(leaseDuration, leaseDuration*2/3, leaseDuration*2/15))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// recordOf is what the elector passes to Create and Update for identity.
func recordOf(identity string, leaseDuration time.Duration) rl.LeaderElectionRecord {
	now := metav1.Now()
	return rl.LeaderElectionRecord{HolderIdentity: identity, LeaseDurationSeconds: int(leaseDuration / time.Second), AcquireTime: now, RenewTime: now}
}

func TestGetWithoutARecordIsNotFound(t *testing.T) {
	eachDialect(t, func(t *testing.T, d lease.Dialect) {
		db, _ := leasetest.New(t, leasetest.WithDialect(d))
		_, _, err := newLock(t, db, "a", 15*time.Second).Get(timeout(t))
		if !apierrors.IsNotFound(err) {
			t.Fatalf("Get with no record: %v, want a Kubernetes NotFound", err)
		}
	})
}

func TestCreateThenGetReportsTheHolder(t *testing.T) {
	eachDialect(t, func(t *testing.T, d lease.Dialect) {
		ctx := timeout(t)
		db, _ := leasetest.New(t, leasetest.WithDialect(d))
		a, b := newLock(t, db, "a", 7*time.Second), newLock(t, db, "b", 7*time.Second)
		if err := a.Create(ctx, recordOf("a", 7*time.Second)); err != nil {
			t.Fatalf("Create: %v", err)
		}
		held := a.Lease()
		if held == nil || held.Context().Err() != nil {
			t.Fatalf("after Create, Lease() = %v, want a live lease", held)
		}
		// Another elector reads what Spanner says.
		rec, raw, err := b.Get(ctx)
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		if rec.HolderIdentity != "a" || rec.LeaseDurationSeconds != 7 || rec.LeaderTransitions != int(held.Token()-1) {
			t.Fatalf("record %+v; want holder a, 7s, transitions %d", rec, held.Token()-1)
		}
		var decoded struct{ Token int64 }
		if err := json.Unmarshal(raw, &decoded); err != nil || decoded.Token != held.Token() {
			t.Fatalf("raw record %s: token %d (%v), want %d", raw, decoded.Token, err, held.Token())
		}
		if b.Lease() != nil {
			t.Fatal("an elector that did not acquire has a Lease")
		}
	})
}

func TestRawRecordChangesOnEveryRenewal(t *testing.T) {
	eachDialect(t, func(t *testing.T, d lease.Dialect) {
		ctx := timeout(t)
		db, _ := leasetest.New(t, leasetest.WithDialect(d))
		a, b := newLock(t, db, "a", 3*time.Second), newLock(t, db, "b", 3*time.Second)
		// A 3s TTL renews every second.
		if err := a.Create(ctx, recordOf("a", 3*time.Second)); err != nil {
			t.Fatalf("Create: %v", err)
		}
		_, first, err := b.Get(ctx)
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		// Each renewal must show within a lease duration, or a follower's
		// elector would take the live leader for dead.
		last, changes := first, 0
		deadline := time.Now().Add(3 * 3 * time.Second)
		for changes < 3 && time.Now().Before(deadline) {
			rec, raw, err := b.Get(ctx)
			if err != nil {
				t.Fatalf("Get: %v", err)
			}
			if rec.HolderIdentity != "a" {
				t.Fatalf("holder changed to %q while a renews", rec.HolderIdentity)
			}
			if string(raw) != string(last) {
				changes++
				last = raw
			}
			time.Sleep(100 * time.Millisecond) // a poll, as the elector's
		}
		if changes < 3 {
			t.Fatalf("the raw record changed %d times in three lease durations of renewals, want at least 3", changes)
		}
	})
}

func TestUpdateIsACompareAndSet(t *testing.T) {
	eachDialect(t, func(t *testing.T, d lease.Dialect) {
		ctx := timeout(t)
		db, _ := leasetest.New(t, leasetest.WithDialect(d))
		a, b := newLock(t, db, "a", 10*time.Second), newLock(t, db, "b", 10*time.Second)
		if err := a.Create(ctx, recordOf("a", 10*time.Second)); err != nil {
			t.Fatalf("a Create: %v", err)
		}
		tokenA := a.Lease().Token()
		// The elector's fast path: Update without a Get.
		if err := b.Update(ctx, recordOf("b", 10*time.Second)); !apierrors.IsConflict(err) {
			t.Fatalf("b Update while a holds: %v, want Conflict", err)
		}
		if err := b.Create(ctx, recordOf("b", 10*time.Second)); !apierrors.IsAlreadyExists(err) {
			t.Fatalf("b Create while a holds: %v, want AlreadyExists", err)
		}
		if rec, _, err := b.Get(ctx); err != nil || rec.HolderIdentity != "a" {
			t.Fatalf("after b's failed writes: record %+v, %v; want a still holding", rec, err)
		}
		// a renews: no change of token.
		if err := a.Update(ctx, recordOf("a", 10*time.Second)); err != nil || a.Lease().Token() != tokenA {
			t.Fatalf("a's renewal: %v, token %d; want nil and token %d", err, a.Lease().Token(), tokenA)
		}
		// ReleaseOnCancel's Update: no holder.
		released := a.Lease().Context()
		if err := a.Update(ctx, rl.LeaderElectionRecord{LeaseDurationSeconds: 1}); err != nil {
			t.Fatalf("a release: %v", err)
		}
		if !errors.Is(context.Cause(released), lease.ErrReleased) || a.Lease() != nil {
			t.Fatalf("after release: cause %v, Lease %v; want ErrReleased and nil", context.Cause(released), a.Lease())
		}
		if _, _, err := b.Get(ctx); !apierrors.IsNotFound(err) {
			t.Fatalf("Get after release: %v, want NotFound", err)
		}
		// Update never acquires: only Create does, after Get said no one holds it.
		if err := b.Update(ctx, recordOf("b", 10*time.Second)); !apierrors.IsConflict(err) || b.Lease() != nil {
			t.Fatalf("b Update of a free lease: %v, Lease %v; want Conflict and nil", err, b.Lease())
		}
		if err := b.Create(ctx, recordOf("b", 10*time.Second)); err != nil {
			t.Fatalf("b Create after a released: %v", err)
		}
		if got := b.Lease().Token(); got <= tokenA {
			t.Fatalf("b's fencing token %d is not above a's %d", got, tokenA)
		}
	})
}

func TestUpdateWritesOnlyItsOwnIdentity(t *testing.T) {
	ctx := timeout(t)
	db, _ := leasetest.New(t)
	a := newLock(t, db, "a", 10*time.Second)
	if err := a.Update(ctx, recordOf("mallory", 10*time.Second)); err == nil {
		t.Fatal("Update with another identity succeeded")
	}
	if _, _, err := a.Get(ctx); !apierrors.IsNotFound(err) {
		t.Fatalf("after a refused Update: Get = %v, want NotFound", err)
	}
}

func TestTTLIsTheLeaseDuration(t *testing.T) {
	ctx := timeout(t)
	db, _ := leasetest.New(t)
	a, b := newLock(t, db, "a", 5*time.Second), newLock(t, db, "b", 5*time.Second)
	if err := a.Create(ctx, recordOf("a", 5*time.Second)); err != nil {
		t.Fatalf("Create: %v", err)
	}
	rec, _, err := b.Get(ctx)
	if err != nil || rec.LeaseDurationSeconds != 5 {
		t.Fatalf("record %+v (%v), want LeaseDurationSeconds 5: the lease's TTL", rec, err)
	}
}

func TestIdentityAndDescribe(t *testing.T) {
	db, _ := leasetest.New(t)
	l := newLock(t, db, "pod-1_6f1c", 15*time.Second)
	if l.Identity() != "pod-1_6f1c" || l.Describe() != "locks/controller" {
		t.Fatalf("Identity %q, Describe %q", l.Identity(), l.Describe())
	}
}

func TestNewRejectsBadInput(t *testing.T) {
	db, _ := leasetest.New(t)
	for _, c := range []struct{ table, name, identity string }{
		{"locks", "controller", ""},
		{"locks", "", "a"},
		{"no such table!", "controller", "a"},
	} {
		if _, err := resourcelock.New(db, c.table, c.name, c.identity); err == nil {
			t.Errorf("New(%q, %q, %q) succeeded", c.table, c.name, c.identity)
		}
	}
}

func TestCloseReleasesTheLease(t *testing.T) {
	ctx := timeout(t)
	db, _ := leasetest.New(t)
	a, b := newLock(t, db, "a", 30*time.Second), newLock(t, db, "b", 30*time.Second)
	if err := a.Create(ctx, recordOf("a", 30*time.Second)); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// Free at once, not after the 30s lease duration.
	if err := b.Create(ctx, recordOf("b", 30*time.Second)); err != nil {
		t.Fatalf("b Create after a closed: %v", err)
	}
	if err := a.Update(ctx, recordOf("a", 30*time.Second)); err == nil {
		t.Fatal("a closed lock acquired again")
	}
}
