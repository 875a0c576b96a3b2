package lease_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// A session-creating commit that applied while its reply was lost, and a
// read that could not settle it: the next acquisition of a name the Client
// knows must still get a lease with a local deadline that ends before a
// rival can take the name.
func TestUnknownSessionCreationLeavesNoLeaseWithoutADeadline(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		f := &faults{}
		ttl := 2 * time.Second
		a := newClientWith(t, spannerClient(t, db, f.options()...), lease.WithTTL(ttl))
		rival := newClient(t, db, lease.WithTTL(ttl), lease.WithPollInterval(50*time.Millisecond))

		// a learns that "k" exists, so it later acquires it by reading its row
		// (and its own session's) rather than by inserting it.
		held := mustAcquire(t, ctx, rival, "k")
		if _, err := a.TryAcquire(ctx, "k"); !errors.Is(err, lease.ErrNotAcquired) {
			t.Fatalf("TryAcquire of a held name: %v, want ErrNotAcquired", err)
		}
		// RPC 0 inserts "x", 1 commits it with a's session (reply lost), 2
		// reads to settle it (reply lost). The Rollback that follows the
		// failed Commit is not counted.
		f.arm(func(r rpc) bool { return notRenewals(r) && !strings.HasSuffix(r.method, "/Rollback") },
			map[int]fault{1: replyLost, 2: replyLost})
		if _, err := a.TryAcquire(ctx, "x"); err == nil {
			t.Fatal("TryAcquire whose outcome could not be learnt reported success")
		}
		if trace, hits := f.disarm(); hits != 2 {
			t.Fatalf("faults hit %d of 2: %v", hits, trace)
		}
		fatalIf(t, held.Release(ctx), "rival Release")

		l, err := a.TryAcquire(ctx, "k")
		fatalIf(t, err, "TryAcquire of the known name")
		if l.Deadline().IsZero() {
			t.Fatal("the lease has no local deadline")
		}
		f.partition(true)
		taken, err := rival.Acquire(ctx, "k")
		fatalIf(t, err, "rival Acquire after a was cut off")
		if ended := lease.EndedAt(l); ended.IsZero() || !ended.Before(taken.AcquiredAt()) {
			t.Fatalf("the rival acquired at %s while a's lease was live (ended at %v)", taken.AcquiredAt().Format(time.StampMicro), ended)
		}

		// And the Client is not stuck on the session it could not confirm.
		f.partition(false)
		if _, err := a.TryAcquire(ctx, "y"); err != nil {
			t.Fatalf("TryAcquire of a new name afterwards: %v", err)
		}
	})
}

// Two first acquisitions on a fresh Client, the second starting while the
// first's commit is in flight, both succeed: a Client is safe for
// concurrent use from its first call.
func TestConcurrentFirstAcquisitionsOfAFreshClient(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		f := &faults{}
		a := newClientWith(t, spannerClient(t, db, f.options()...))

		// The first commit applies; its reply is held until the second
		// acquisition has started.
		firstCommit := make(chan struct{})
		secondRPC := make(chan struct{})
		release := make(chan struct{})
		var once, onceSecond sync.Once
		f.setHold(func(rpc, any) {
			select {
			case <-firstCommit:
				onceSecond.Do(func() { close(secondRPC) })
			default:
			}
		})
		f.setReply(func(r rpc) {
			if strings.HasSuffix(r.method, "/Commit") {
				held := false
				once.Do(func() { close(firstCommit); held = true })
				if held {
					<-release
				}
			}
		})
		type result struct {
			l   *lease.Lease
			err error
		}
		results := make(chan result, 2)
		acquire := func(name string) {
			l, err := a.TryAcquire(ctx, name)
			results <- result{l, err}
		}
		go acquire("one")
		<-firstCommit
		go acquire("two")
		// Let the second start; it must either wait for the session or make
		// its own RPCs, and must not fail either way.
		select {
		case <-secondRPC:
		case <-time.After(300 * time.Millisecond):
		}
		close(release)
		reader := newClient(t, db)
		both := []result{<-results, <-results}
		for _, r := range both {
			if r.err != nil {
				t.Fatalf("concurrent first acquisition failed: %v", r.err)
			}
		}
		for _, r := range both {
			if r.l.Context().Err() != nil {
				t.Fatalf("concurrent first acquisition of %q returned a lost lease: %v", r.l.Name(), context.Cause(r.l.Context()))
			}
			if h, err := reader.Holder(ctx, r.l.Name()); err != nil || h.Token != r.l.Token() {
				t.Fatalf("%q: Spanner says %+v, %v; the lease says token %d", r.l.Name(), h, err, r.l.Token())
			}
		}
	})
}

// A Client that has held nothing for a while gives a new lease (close to) a
// full TTL, not what is left of its idle session's.
func TestAnIdleClientsNewLeaseStartsWithAFullTTL(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		ttl := 2 * time.Second
		// Idle for 0.6 TTL the session has 0.3 TTL left, and the
		// acquisition renews it; idle for 0.8 TTL it has 0.1 TTL left, and
		// the acquisition starts a new one rather than risk committing after
		// the old one's deadline.
		for _, idle := range []time.Duration{ttl * 6 / 10, ttl * 8 / 10} {
			a := newClient(t, db, lease.WithTTL(ttl))
			began := time.Now() // before the session's creation began
			first := mustAcquire(t, ctx, a, "first")
			fatalIf(t, first.Release(ctx), "Release")
			time.Sleep(time.Until(began.Add(idle))) // nothing renews it
			l := mustAcquire(t, ctx, a, "second")
			if left := time.Until(l.Deadline()); left < ttl/2 {
				t.Fatalf("after idling %s, a new lease has %s until its local deadline, want more than TTL/2 = %s", idle, left, ttl/2)
			}
			fatalIf(t, l.Release(ctx), "Release")
			fatalIf(t, a.Close(), "Close")
		}
	})
}

// A session row deleted behind the Client's back (by hand): no transaction
// reads the row, so the Client learns of it from its next renewal, which
// fails to find the row; every lease of the session is lost then, including
// one acquired since, and the next acquisition starts a new session that
// Spanner considers live.
func TestAcquisitionAfterTheSessionRowWasDeleted(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		a := newClient(t, db, lease.WithTTL(2*time.Second))
		reader := newClient(t, db)
		first := mustAcquire(t, ctx, a, "first")

		sc := emulator.Client(t, db)
		_, err := sc.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
			_, err := tx.Update(ctx, spanner.Statement{SQL: inDialect(t, "DELETE FROM locks_sessions WHERE TRUE", "DELETE FROM locks_sessions")})
			return err
		})
		fatalIf(t, err, "delete the session row")

		since := mustAcquire(t, ctx, a, "since")
		for _, l := range []*lease.Lease{first, since} {
			waitDone(t, l.Context(), "a lease of the deleted session")
			if !errors.Is(context.Cause(l.Context()), lease.ErrLeaseLost) {
				t.Fatalf("lease %q ended with %v, want ErrLeaseLost", l.Name(), context.Cause(l.Context()))
			}
		}
		for _, try := range []func(context.Context, string, ...lease.AcquireOption) (*lease.Lease, error){a.TryAcquire, a.Acquire} {
			name := "new" + time.Now().Format("150405.000000")
			l, err := try(ctx, name)
			fatalIf(t, err, "acquire %s", name)
			h, err := reader.Holder(ctx, name)
			if err != nil || h.Token != l.Token() {
				t.Fatalf("acquired %q with token %d, but Spanner says holder %+v, err %v", name, l.Token(), h, err)
			}
		}
	})
}
