package lease_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"cloud.google.com/go/spanner/apiv1/spannerpb"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// commitSizes records the number of mutations of every Commit with a tag.
type commitSizes struct {
	mu    sync.Mutex
	sizes map[string][]int
}

func (c *commitSizes) hook(r rpc, req any) {
	if cr, ok := req.(*spannerpb.CommitRequest); ok {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.sizes[r.tag] = append(c.sizes[r.tag], len(cr.GetMutations()))
	}
}

func (c *commitSizes) max(tag string) (most, commits int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.sizes[tag] {
		most = max(most, n)
	}
	return most, len(c.sizes[tag])
}

// However many leases a Client holds, one renewal checks and stamps a
// bounded number of rows, and every lease is still renewed, checked and
// stamped in turn. The bounds are lowered so that ten leases exceed them.
func TestARenewalCommitsBoundedWorkWhateverTheLeases(t *testing.T) {
	eachDialectInTurn(t, func(t *testing.T) {
		t.Cleanup(lease.SetBatchLimits(3, 2, 1000)) // before any Client, so it runs after they close
		ctx := emulator.Context(t)
		db := newDatabase(t)
		f := &faults{}
		sizes := &commitSizes{sizes: map[string][]int{}}
		var checked atomic.Int64 // largest batch of leases one renewal checked
		f.setHold(func(r rpc, req any) {
			sizes.hook(r, req)
			if q, ok := req.(*spannerpb.ExecuteSqlRequest); ok && renewals(r) {
				n := int64(len(q.GetParams().GetFields()["locks"].GetListValue().GetValues()))
				for prev := checked.Load(); prev < n && !checked.CompareAndSwap(prev, n); prev = checked.Load() {
				}
			}
		})
		a := newClientWith(t, spannerClient(t, db, f.options()...), lease.WithTTL(1500*time.Millisecond))
		var leases []*lease.Lease
		for i := range 10 {
			leases = append(leases, mustAcquire(t, ctx, a, fmt.Sprintf("n%d", i)))
		}
		// Make every row look an hour old, as row deletion policies judge it.
		sc := emulator.Client(t, db)
		_, err := sc.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
			_, err := tx.Update(ctx, testStatement(t,
				"UPDATE locks SET renewed_at = TIMESTAMP_SUB(CURRENT_TIMESTAMP(), INTERVAL 2 HOUR) WHERE STARTS_WITH(name, 'n')",
				"UPDATE locks SET renewed_at = spanner.timestamptz_subtract(now(), '2 hours') WHERE starts_with(name, 'n')", nil, nil))
			return err
		})
		fatalIf(t, err, "age the rows")
		waitFor(t, "every row restamped", 20*time.Second, func() bool {
			var stale int64
			err := sc.Single().Query(ctx, testStatement(t,
				"SELECT COUNT(*) FROM locks WHERE renewed_at < TIMESTAMP_SUB(CURRENT_TIMESTAMP(), INTERVAL 1 HOUR)",
				"SELECT COUNT(*) FROM locks WHERE renewed_at < spanner.timestamptz_subtract(now(), '1 hour')", nil, nil)).
				Do(func(r *spanner.Row) error { return r.Column(0, &stale) })
			return err == nil && stale == 0
		})
		// A stolen lease is noticed although no single renewal checks it every time.
		stealLease(t, ctx, db, "n9")
		waitFor(t, "the stolen lease to be lost", 10*time.Second, func() bool { return leases[9].Context().Err() != nil })

		for _, l := range leases[:9] {
			if l.Context().Err() != nil {
				t.Fatalf("lease %s ended: %v", l.Name(), context.Cause(l.Context()))
			}
		}
		most, commits := sizes.max("spannerlock-renew")
		if most > 1+2 {
			t.Fatalf("a renewal committed %d mutations; the bound is 1 (session) + 2 (restamps)", most)
		}
		if n := checked.Load(); n > 3 {
			t.Fatalf("a renewal checked %d leases; the bound is 3", n)
		}
		t.Logf("%d renewals, at most %d mutations each", commits, most)
	})
}

// However many permits of a semaphore have expired, one grant unlinks a
// bounded number, and the grant still happens: a full semaphore whose
// holders all died commits unlinking alone until there is room.
func TestAGrantReapsBoundedExpiredPermits(t *testing.T) {
	eachDialectInTurn(t, func(t *testing.T) {
		t.Cleanup(lease.SetBatchLimits(1000, 1000, 2))
		ctx := emulator.Context(t)
		db := newDatabase(t)
		admin := newClient(t, db)
		fatalIf(t, admin.SetPermits(ctx, "sem", 6), "SetPermits")
		dead := &faults{}
		d := newClientWith(t, spannerClient(t, db, dead.options()...), lease.WithTTL(time.Second))
		for range 6 {
			_, err := d.TryAcquirePermit(ctx, "sem")
			fatalIf(t, err, "the doomed holder's TryAcquirePermit")
		}
		fatalIf(t, admin.SetPermits(ctx, "sem", 3), "lower the limit")
		dead.partition(true)
		waitFor(t, "the dead holder's permits to expire", 5*time.Second, func() bool {
			s, err := admin.Semaphore(ctx, "sem")
			return err == nil && s.InUse() == 0
		})

		f := &faults{}
		sizes := &commitSizes{sizes: map[string][]int{}}
		f.setHold(sizes.hook)
		b := newClientWith(t, spannerClient(t, db, f.options()...))
		l, err := b.TryAcquirePermit(ctx, "sem")
		fatalIf(t, err, "TryAcquirePermit with six expired permits and a limit of three")
		most, commits := sizes.max("spannerlock-acquire")
		if most > 2+3 {
			t.Fatalf("a grant committed %d mutations; the bound is 2 (unlinked permits) + 3 (token, permit, session)", most)
		}
		if commits < 2 {
			t.Fatalf("%d commits: the grant should have needed unlinking first", commits)
		}
		s, err := admin.Semaphore(ctx, "sem")
		fatalIf(t, err, "Semaphore")
		if s.InUse() != 1 || s.Holders[0].Token != l.Token() {
			t.Fatalf("semaphore after the grant: %+v", s)
		}
	})
}

// Guard reads the lease's row in the caller's transaction, and the
// session's liveness outside it: the session row, which every renewal
// writes, is never read inside a guarded transaction, so a long one cannot
// hold up the renewals of the Client's leases. (The emulator runs one
// read-write transaction at a time, so it cannot show the delay itself.)
func TestGuardKeepsTheSessionRowOutOfTheTransaction(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		f := &faults{}
		sc := spannerClient(t, db, f.options()...)
		a := newClientWith(t, sc)
		l := mustAcquire(t, ctx, a, "job")

		var mu sync.Mutex
		var inTxn []string
		f.setHold(func(r rpc, req any) {
			if r.tag != "guarded" {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			switch q := req.(type) {
			case *spannerpb.ReadRequest:
				inTxn = append(inTxn, "read "+q.GetTable())
			case *spannerpb.ExecuteSqlRequest:
				inTxn = append(inTxn, q.GetSql())
			}
		})
		_, err := sc.ReadWriteTransactionWithOptions(l.Context(), func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
			return l.Guard(ctx, tx)
		}, spanner.TransactionOptions{TransactionTag: "guarded"})
		fatalIf(t, err, "guarded transaction")
		mu.Lock()
		defer mu.Unlock()
		if len(inTxn) == 0 {
			t.Fatal("Guard read nothing in the transaction")
		}
		for _, q := range inTxn {
			if strings.Contains(q, "locks_sessions") {
				t.Fatalf("Guard read the session table in the caller's transaction: %s", q)
			}
		}
	})
}
