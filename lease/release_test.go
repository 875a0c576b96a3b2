package lease_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// expiresWithin polls until name has no live holder with holderID, failing
// if Spanner ever gives it an expiry later than bound: a lease whose owner
// let go must not be renewed. Spanner's expiry times decide, so a slow
// machine only polls slower.
func expiresWithin(t *testing.T, ctx context.Context, c *lease.Client, name, holderID string, bound time.Time) {
	t.Helper()
	for {
		h, err := c.Holder(ctx, name)
		if errors.Is(err, lease.ErrNoHolder) || (err == nil && h.HolderID != holderID) {
			return
		}
		fatalIf(t, err, "Holder(%s)", name)
		if h.ExpiresAt.After(bound) {
			t.Fatalf("%q (token %d) is renewed after its owner let go: live until %s, bound %s",
				name, h.Token, h.ExpiresAt.Format(time.StampMicro), bound.Format(time.StampMicro))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A Release that does not reach Spanner must not leave the lease renewed
// with the Client's other leases: the next renewal releases it, or it
// expires within a TTL.
func TestAFailedReleaseIsNotRenewed(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		f := &faults{}
		ttl := 2 * time.Second
		a := newClientWith(t, spannerClient(t, db, f.options()...), lease.WithTTL(ttl), lease.WithHolderID("a"))
		observer := newClient(t, db)
		anchor := mustAcquire(t, ctx, a, "anchor")
		l := mustAcquire(t, ctx, a, "job")

		// RPC 0 reads the row and 1 commits (never sent); 2 is the read that
		// would settle it (blackholed).
		f.arm(notRenewals, map[int]fault{1: delayed, 2: delayed})
		err := l.Release(ctx)
		let := time.Now()
		if trace, hits := f.disarm(); hits != 2 {
			t.Fatalf("faults hit %d of 2: %v", hits, trace)
		}
		if err == nil {
			t.Fatal("Release that did not reach Spanner returned nil")
		}
		if !errors.Is(context.Cause(l.Context()), lease.ErrReleased) {
			t.Fatalf("cause = %v, want ErrReleased", context.Cause(l.Context()))
		}
		expiresWithin(t, ctx, observer, "job", "a", let.Add(ttl+ttl/3))
		if anchor.Context().Err() != nil {
			t.Fatalf("the Client's other lease ended: %v", context.Cause(anchor.Context()))
		}
	})
}

// Release ends the lease before its commit is sent, so a renewal that
// reads the cleared row in between cannot call it lost: the cause stays
// ErrReleased, and the Client's other leases are renewed on.
func TestReleaseEndsTheLeaseBeforeItCommits(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		f := &faults{}
		a := newClientWith(t, spannerClient(t, db, f.options()...), lease.WithTTL(time.Second))
		anchor := mustAcquire(t, ctx, a, "anchor")
		l := mustAcquire(t, ctx, a, "job")

		var atCommit error
		f.setHold(func(r rpc, _ any) {
			if r.tag == "spannerlock-release" && strings.HasSuffix(r.method, "/Commit") {
				atCommit = context.Cause(l.Context())
			}
		})
		fatalIf(t, l.Release(ctx), "Release")
		f.setHold(nil)
		if !errors.Is(atCommit, lease.ErrReleased) {
			t.Fatalf("when the release committed, the lease's cause was %v, want ErrReleased", atCommit)
		}
		// Two renewals later the cause is unchanged.
		h0, err := a.Holder(ctx, "anchor")
		fatalIf(t, err, "Holder")
		waitFor(t, "two renewals", 3*time.Second, func() bool {
			h, err := a.Holder(ctx, "anchor")
			return err == nil && h.RenewedAt.Sub(h0.RenewedAt) > time.Second/3
		})
		if cause := context.Cause(l.Context()); !errors.Is(cause, lease.ErrReleased) {
			t.Fatalf("cause = %v, want ErrReleased", cause)
		}
		if anchor.Context().Err() != nil {
			t.Fatalf("the other lease ended: %v", context.Cause(anchor.Context()))
		}
	})
}

// While Spanner answers none of a Client's clears in time but its renewals
// commit, a lease let go stays held, since its row is free only once a clear
// commits; the Client's other leases go on being renewed, since a clear that
// waits out its deadline never delays a renewal; and once Spanner answers
// the clears again the row is free after the clear then in flight runs out
// and the next one commits.
func TestUnansweredClearsHoldTheRowButNotTheRenewals(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		f := &faults{}
		ttl := 3 * time.Second
		a := newClientWith(t, spannerClient(t, db, f.options()...), lease.WithTTL(ttl), lease.WithHolderID("a"))
		observer := newClient(t, db)
		anchor := mustAcquire(t, ctx, a, "anchor")
		l := mustAcquire(t, ctx, a, "job")

		// Every Commit of a release or clear is blackholed until its deadline.
		plan := map[int]fault{}
		for i := range 1000 {
			plan[i] = delayed
		}
		f.arm(func(r rpc) bool { return r.tag == clearTag && strings.HasSuffix(r.method, "/Commit") }, plan)
		if err := l.Release(ctx); err == nil {
			t.Fatal("Release whose commit was never sent returned nil")
		}
		// Three TTLs: a session whose renewals waited for the clears would
		// pass its local deadline (TTL minus a tenth after the last renewal)
		// and lose the anchor.
		for until := time.Now().Add(3 * ttl); time.Now().Before(until); time.Sleep(100 * time.Millisecond) {
			if anchor.Context().Err() != nil {
				t.Fatalf("the Client's other lease ended while its clears went unanswered: %v", context.Cause(anchor.Context()))
			}
			h, err := observer.Holder(ctx, "job")
			fatalIf(t, err, "Holder(job) while the clears go unanswered")
			if h.Token != l.Token() {
				t.Fatalf("job is held with token %d, want the lease let go (%d)", h.Token, l.Token())
			}
		}
		answered := time.Now()
		if trace, hits := f.disarm(); hits < 3 {
			t.Fatalf("%d commits of clears were tried in three TTLs, want at least 3: %v", hits, trace)
		}
		// The clear in flight runs out at its deadline (TTL minus a tenth);
		// the next starts within the loop's backoff (at most half a renewal
		// interval and a quarter of that) and commits. Renewals keep the
		// session live meanwhile, so nothing but a clear can free the row;
		// the two seconds more are for a loaded machine's commit.
		bound := ttl - ttl/10 + a.TTL()/3/2*5/4 + 2*time.Second
		waitFor(t, "job free once Spanner answers the clears", bound, func() bool {
			_, err := observer.Holder(ctx, "job")
			return errors.Is(err, lease.ErrNoHolder)
		})
		if anchor.Context().Err() != nil {
			t.Fatalf("the other lease ended: %v", context.Cause(anchor.Context()))
		}
		t.Logf("job free %s after Spanner answered the clears again", time.Since(answered).Round(time.Millisecond))
	})
}
