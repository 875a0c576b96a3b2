//go:build unix

package provider

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// hungWork is a run whose work never ends: one of its processes always
// runs, long after Terraform is gone.
type hungWork struct{}

func (hungWork) terraformAlive() bool      { return false }
func (hungWork) scan() (n int, known bool) { return 1, true }
func (hungWork) detach()                   {}

// A lease Terraform never closed stays held, and renewed, while what the
// run started still runs, but not for ever: once the work limit has passed
// the provider releases it, however long the work still runs, so that a job
// hung for ever does not hold the lease for ever.
func TestLifetime_keepsAHungRunsLeaseForAtMostTheWorkLimit(t *testing.T) {
	ctx := emulator.Context(t)
	db := emulator.Database(t, locktable.DDL("locks")...)
	const ttl = time.Second
	lc, err := lease.NewClient(emulator.Client(t, db), "locks", lease.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lc.Close() })
	reader, err := lease.NewClient(emulator.Client(t, db), "locks")
	if err != nil {
		t.Fatal(err)
	}
	l, err := lc.Acquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	var leases leaseRegistry
	if _, ok := leases.put(newLeaseKey(db, "locks", "job"), lc, l); !ok {
		t.Fatal("the registry refused the lease")
	}
	// Four TTLs: the lease lives that long only if it is renewed.
	const limit = 4 * ttl
	life := &lifetime{leases: &leases, work: hungWork{}, workLimit: limit, ended: make(chan struct{}), served: make(chan struct{})}
	ended := make(chan time.Time, 1)
	began := time.Now()
	go func() {
		life.end(errors.New("the run was interrupted"))
		ended <- time.Now()
	}()

	// Still held, and renewed, until the limit.
	for time.Since(began) < limit-ttl {
		if l.Context().Err() != nil {
			t.Fatalf("the lease ended %s after the run ended, before the work limit (%s): %v", time.Since(began), limit, context.Cause(l.Context()))
		}
		select {
		case at := <-ended:
			t.Fatalf("the run's end let go %s after it began, before the work limit (%s), while its work still ran", at.Sub(began), limit)
		case <-time.After(100 * time.Millisecond):
		}
	}
	if h, err := reader.Holder(ctx, "job"); err != nil || h.Token != l.Token() {
		t.Fatalf("Holder %s after the run ended, with its work running: %+v, %v; want the lease, token %d", time.Since(began), h, err, l.Token())
	}

	// Released once the limit passed: the provider's poll (workPoll) and
	// the release (releaseTimeout) are the only delays, but a loaded
	// machine may add seconds to either; what matters is that it ends.
	select {
	case at := <-ended:
		if d := at.Sub(began); d < limit {
			t.Fatalf("let go %s after the run ended, before the work limit (%s)", d, limit)
		}
	case <-time.After(limit + time.Minute):
		t.Fatalf("the lease is still held %s after the run ended, past the work limit (%s)", time.Since(began), limit)
	}
	// Released, not left to expire: the release committed before end
	// returned.
	if h, err := reader.Holder(ctx, "job"); !errors.Is(err, lease.ErrNoHolder) {
		t.Fatalf("Holder right after the run's end let go: %+v, %v; want ErrNoHolder (released)", h, err)
	}
}
