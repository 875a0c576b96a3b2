package lease_test

import (
	"errors"
	"testing"
	"time"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// Renew returns once a renewal begun after the call is confirmed, so the
// deadline is a full TTL minus the margin from the call, not from the
// keeper's last renewal; and it reports a lease the renewal found taken.
func TestRenewMovesTheDeadlineFromTheCall(t *testing.T) {
	ctx := emulator.Context(t)
	db := newDatabase(t)
	// A renewal interval far beyond the test: only Renew renews.
	c := newClient(t, db, lease.WithTTL(30*time.Second), lease.WithRenewInterval(10*time.Second))
	operator := newClient(t, db)
	l := mustAcquire(t, ctx, c, "job")
	time.Sleep(time.Second) // so a deadline from the acquisition is visibly older
	called := time.Now()
	fatalIf(t, l.Renew(ctx), "Renew")
	if want := called.Add(27 * time.Second); l.Deadline().Before(want) {
		t.Fatalf("after Renew, Deadline is %v before the call plus TTL minus the margin", want.Sub(l.Deadline()))
	}
	if _, err := operator.ForceRelease(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	if err := l.Renew(ctx); !errors.Is(err, lease.ErrLeaseLost) || l.Context().Err() == nil {
		t.Fatalf("Renew after a ForceRelease: %v (Context %v), want ErrLeaseLost", err, l.Context().Err())
	}
}
