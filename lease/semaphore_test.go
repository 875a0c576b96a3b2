package lease_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// activeDDL is the fenced resource of the semaphore test: how many permit
// holders are inside their critical section, and the most ever seen.
func activeDDL(t *testing.T) string {
	return inDialect(t,
		`CREATE TABLE active (name STRING(MAX) NOT NULL, now INT64 NOT NULL, peak INT64 NOT NULL) PRIMARY KEY (name)`,
		`CREATE TABLE active (name varchar NOT NULL, now bigint NOT NULL, peak bigint NOT NULL, PRIMARY KEY (name))`)
}

// enter and leave change the active count inside transactions guarded by
// the permit, so the count is exact in Spanner's commit order.
func enter(ctx context.Context, sc *spanner.Client, l *lease.Lease, delta int64) error {
	_, err := sc.ReadWriteTransaction(ctx, func(ctx context.Context, txn *spanner.ReadWriteTransaction) error {
		if err := l.Guard(ctx, txn); err != nil {
			return err
		}
		r, err := txn.ReadRow(ctx, "active", spanner.Key{"a"}, []string{"now", "peak"})
		if err != nil {
			return err
		}
		var now, peak int64
		if err := r.Columns(&now, &peak); err != nil {
			return err
		}
		now += delta
		return txn.BufferWrite([]*spanner.Mutation{spanner.Update("active", []string{"name", "now", "peak"}, []any{"a", now, max(now, peak)})})
	})
	return err
}

func TestSemaphoreNeverGrantsMoreThanItsLimit(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		const (
			limit      = 3
			contenders = 10
			rounds     = 3
		)
		ctx := emulator.Context(t)
		db := newDatabase(t, activeDDL(t))
		setup := emulator.Client(t, db)
		_, err := setup.Apply(ctx, []*spanner.Mutation{spanner.Insert("active", []string{"name", "now", "peak"}, []any{"a", 0, 0})})
		fatalIf(t, err, "seed")
		fatalIf(t, newClientWith(t, setup).SetPermits(ctx, "migrations", limit), "SetPermits")

		type grant struct {
			token    int64
			acquired time.Time
		}
		var (
			mu     sync.Mutex
			grants []grant
			wg     sync.WaitGroup
			// inside counts the holders between their two enters.
			inside atomic.Int64
		)
		errs := make(chan error, contenders)
		for i := range contenders {
			sc := emulator.Client(t, db)
			// Ten Clients holding or waiting renew ten sessions on an
			// emulator that runs one transaction at a time: a long TTL
			// gives each renewal room on a loaded machine, so that only the
			// limit is under test.
			c := newClientWith(t, sc, lease.WithHolderID(fmt.Sprintf("worker-%d", i)), lease.WithTTL(30*time.Second))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					l, err := c.AcquirePermit(ctx, "migrations")
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					grants = append(grants, grant{l.Token(), l.AcquiredAt()})
					mu.Unlock()
					err = enter(l.Context(), sc, l, +1)
					if err == nil {
						// The work the permit protects lasts until another
						// holder is inside too (at most 2 s): on a loaded
						// machine 20 ms of work let the holders go one at
						// a time, and the peak proved nothing.
						inside.Add(1)
						for waited := time.Duration(0); inside.Load() < 2 && waited < 2*time.Second; waited += 5 * time.Millisecond {
							time.Sleep(5 * time.Millisecond)
						}
						time.Sleep(20 * time.Millisecond)
						inside.Add(-1)
						err = enter(l.Context(), sc, l, -1)
					}
					// A Release whose commit Spanner did not answer in time
					// (ten Clients contend, on a loaded machine) is left to
					// the Client, which clears the permit in the background:
					// the package's promise, not a breach of the limit. A
					// live permit reported lost is one.
					switch rerr := l.Release(ctx); {
					case rerr == nil:
					case errors.Is(rerr, lease.ErrLeaseLost):
						if err == nil {
							err = rerr
						}
					default:
						t.Logf("worker %d: a release left to the background: %v", i, rerr)
					}
					if err != nil {
						errs <- fmt.Errorf("worker %d: %w", i, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}

		r, err := setup.Single().ReadRow(ctx, "active", spanner.Key{"a"}, []string{"now", "peak"})
		fatalIf(t, err, "read")
		var now, peak int64
		fatalIf(t, r.Columns(&now, &peak), "decode")
		if peak > limit || now != 0 {
			t.Fatalf("peak of %d holders inside at once (limit %d), %d left inside", peak, limit, now)
		}
		if peak < 2 {
			t.Fatalf("peak %d: the contenders never held permits concurrently, so the test proved nothing", peak)
		}
		// One token per permit, growing in the order Spanner granted them.
		slices.SortFunc(grants, func(a, b grant) int { return a.acquired.Compare(b.acquired) })
		for i := 1; i < len(grants); i++ {
			if grants[i].token != grants[i-1].token+1 {
				t.Fatalf("permit tokens in grant order: %d then %d; want each one more than the last", grants[i-1].token, grants[i].token)
			}
		}
		if len(grants) != contenders*rounds {
			t.Fatalf("%d permits granted, want %d", len(grants), contenders*rounds)
		}
	})
}

func TestLoweringTheLimitKeepsHoldersAndBlocksNewPermits(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		admin := newClient(t, db)
		fatalIf(t, admin.SetPermits(ctx, "s", 3), "SetPermits 3")
		var held []*lease.Lease
		for i := range 3 {
			l, err := newClient(t, db).TryAcquirePermit(ctx, "s")
			fatalIf(t, err, "permit %d", i)
			held = append(held, l)
		}
		fatalIf(t, admin.SetPermits(ctx, "s", 1), "SetPermits 1")
		contender := newClient(t, db)

		for i, l := range held {
			if _, err := contender.TryAcquirePermit(ctx, "s"); !errors.Is(err, lease.ErrNotAcquired) {
				t.Fatalf("with %d permits held above a limit of 1: err = %v, want ErrNotAcquired", 3-i, err)
			}
			if err := l.Context().Err(); err != nil {
				t.Fatalf("a holder lost its permit when the limit was lowered: %v", context.Cause(l.Context()))
			}
			fatalIf(t, l.Release(ctx), "release")
		}
		if _, err := contender.TryAcquirePermit(ctx, "s"); err != nil {
			t.Fatalf("TryAcquirePermit once all were released: %v", err)
		}
		s, err := admin.Semaphore(ctx, "s")
		fatalIf(t, err, "Semaphore")
		if s.Permits != 1 || s.InUse() != 1 {
			t.Fatalf("Semaphore = %d permits, %d in use; want 1 and 1", s.Permits, s.InUse())
		}
	})
}

func TestUndeclaredSemaphore(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		c := newClient(t, db)
		_, err := c.TryAcquirePermit(ctx, "nope")
		if !errors.Is(err, lease.ErrUnknownSemaphore) || !strings.Contains(err.Error(), "SetPermits") {
			t.Fatalf("TryAcquirePermit of an undeclared semaphore: err = %v, want ErrUnknownSemaphore saying how to declare it", err)
		}
		if _, err := c.AcquirePermit(ctx, "nope"); !errors.Is(err, lease.ErrUnknownSemaphore) {
			t.Fatalf("AcquirePermit of an undeclared semaphore: err = %v, want ErrUnknownSemaphore", err)
		}
		if _, err := c.Semaphore(ctx, "nope"); !errors.Is(err, lease.ErrUnknownSemaphore) {
			t.Fatalf("Semaphore of an undeclared semaphore: err = %v", err)
		}

		// A lock's name is not a semaphore, nor the other way round, whether
		// or not anyone holds the lock.
		free := mustAcquire(t, ctx, c, "free-lock")
		fatalIf(t, free.Release(ctx), "Release")
		if _, err := c.Semaphore(ctx, "free-lock"); !errors.Is(err, lease.ErrWrongKind) {
			t.Fatalf("Semaphore of a free lock's name: err = %v, want ErrWrongKind", err)
		}
		if _, err := c.TryAcquirePermit(ctx, "free-lock"); !errors.Is(err, lease.ErrWrongKind) {
			t.Fatalf("TryAcquirePermit of a free lock's name: err = %v, want ErrWrongKind", err)
		}
		mustAcquire(t, ctx, c, "a-lock")
		if err := c.SetPermits(ctx, "a-lock", 2); err == nil || !strings.Contains(err.Error(), "is a lock") {
			t.Fatalf("SetPermits on a lock's name: err = %v", err)
		}
		fatalIf(t, c.SetPermits(ctx, "a-sem", 2), "SetPermits")
		if _, err := c.TryAcquire(ctx, "a-sem"); err == nil || !strings.Contains(err.Error(), "is a semaphore") {
			t.Fatalf("TryAcquire on a semaphore's name: err = %v", err)
		}
		// A mistake, not an outage: a blocking Acquire must not retry it.
		if _, err := c.Acquire(ctx, "a-sem"); err == nil || !strings.Contains(err.Error(), "is a semaphore") {
			t.Fatalf("Acquire on a semaphore's name: err = %v", err)
		}

		// Undeclaring keeps the token counter: permits continue above old tokens.
		p1, err := c.TryAcquirePermit(ctx, "a-sem")
		fatalIf(t, err, "permit")
		fatalIf(t, p1.Release(ctx), "release")
		fatalIf(t, c.Undeclare(ctx, "a-sem"), "Undeclare")
		if _, err := c.TryAcquirePermit(ctx, "a-sem"); !errors.Is(err, lease.ErrUnknownSemaphore) {
			t.Fatalf("after Undeclare: err = %v, want ErrUnknownSemaphore", err)
		}
		fatalIf(t, c.SetPermits(ctx, "a-sem", 2), "declare again")
		p2, err := c.TryAcquirePermit(ctx, "a-sem")
		fatalIf(t, err, "permit after declaring again")
		if p2.Token() <= p1.Token() {
			t.Fatalf("token after declaring again = %d, want more than %d", p2.Token(), p1.Token())
		}
	})
}

func TestDeadHoldersFreeTheirPermits(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		fatalIf(t, newClient(t, db).SetPermits(ctx, "s", 1), "SetPermits")
		holderSC := emulator.Client(t, db)
		holder := newClientWith(t, holderSC, lease.WithTTL(time.Second))
		dead, err := holder.TryAcquirePermit(ctx, "s")
		fatalIf(t, err, "permit")
		holderSC.Close() // the holder stops renewing without releasing

		waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		l, err := newClient(t, db).AcquirePermit(waitCtx, "s")
		fatalIf(t, err, "AcquirePermit after the holder died")
		if l.Token() != dead.Token()+1 {
			t.Fatalf("token = %d, want %d", l.Token(), dead.Token()+1)
		}
		waitDone(t, dead.Context(), "the dead holder's context")
		if err := dead.Release(ctx); !errors.Is(err, lease.ErrLeaseLost) {
			t.Fatalf("Release of a lost permit: err = %v, want ErrLeaseLost", err)
		}
	})
}

func TestAcquirePermitReturnsContextError(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		c := newClient(t, db)
		fatalIf(t, c.SetPermits(ctx, "s", 1), "SetPermits")
		_, err := c.TryAcquirePermit(ctx, "s")
		fatalIf(t, err, "permit")
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		if _, err := newClient(t, db).AcquirePermit(short, "s"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("AcquirePermit past its deadline: err = %v, want one wrapping context.DeadlineExceeded", err)
		}
	})
}

func TestReleaseWakesAPermitWaiter(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		a := newClient(t, db, lease.WithTTL(10*time.Second))
		fatalIf(t, a.SetPermits(ctx, "s", 1), "SetPermits")
		first, err := a.TryAcquirePermit(ctx, "s")
		fatalIf(t, err, "permit")
		got := make(chan error, 1)
		waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second) // half the TTL: only a release lets it in
		defer cancel()
		go func() {
			_, err := newClient(t, db).AcquirePermit(waitCtx, "s")
			got <- err
		}()
		select {
		case err := <-got:
			t.Fatalf("AcquirePermit returned while the only permit was held: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
		fatalIf(t, first.Release(ctx), "Release")
		fatalIf(t, <-got, "AcquirePermit after Release")
	})
}

// Guard on a permit reads only its own row; a grant in another slot must
// still conflict with a stale holder's guarded write, or count that holder
// as live. A grant counts every permit whose holder it has not seen expire
// as held; when that leaves no room it reads the holders' sessions and
// writes every expired permit row it frees (clearing its session, keeping
// its worker-ID mark). The emulator runs one transaction at a time, so the
// race itself cannot happen here: this checks the count and the writes.
func TestGrantCountsOrReapsExpiredPermits(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		fatalIf(t, newClient(t, db).SetPermits(ctx, "s", 2), "SetPermits")
		deadSC := emulator.Client(t, db)
		dead := newClientWith(t, deadSC, lease.WithTTL(time.Second))
		first, err := dead.TryAcquirePermit(ctx, "s") // slot 0
		fatalIf(t, err, "first permit")
		second, err := dead.TryAcquirePermit(ctx, "s") // slot 1
		fatalIf(t, err, "second permit")
		deadSC.Close() // both holders stop renewing
		waitDone(t, first.Context(), "the dead holder's permit")
		waitDone(t, second.Context(), "the dead holder's permit")
		watcher := newClient(t, db)
		for { // the holder's Context ends a safety margin before Spanner's expiry
			s, err := watcher.Semaphore(ctx, "s")
			fatalIf(t, err, "Semaphore")
			if s.InUse() == 0 {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}

		sc := emulator.Client(t, db)
		var before spanner.NullTime
		r, err := sc.Single().ReadRow(ctx, "locks_sessions", spanner.Key{sessionOf(t, ctx, sc, "s", 1)}, []string{"high_water"})
		fatalIf(t, err, "read the dead session")
		fatalIf(t, r.Column(0, &before), "decode")

		// A Client that has not seen the holder expire counts both permits
		// as held, finds no room, reads their sessions, takes slot 0 and
		// frees slot 1.
		granted, err := newClient(t, db).TryAcquirePermit(ctx, "s")
		fatalIf(t, err, "TryAcquirePermit over two expired permits")
		r, err = sc.Single().ReadRow(ctx, "locks_permits", spanner.Key{"s", int64(1)}, []string{"session_id", "high_water"})
		fatalIf(t, err, "read slot 1")
		var session spanner.NullString
		var mark spanner.NullTime
		fatalIf(t, r.Columns(&session, &mark), "decode slot 1")
		if session.Valid {
			t.Fatalf("the expired permit in slot 1 still names session %q after a grant of slot %d", session.StringVal, granted.Token())
		}
		if !mark.Valid || mark.Time.Before(before.Time) {
			t.Fatalf("slot 1's high-water mark %v is below its dead session's %v: a worker ID could go back in time", mark, before)
		}
	})
}

func sessionOf(t *testing.T, ctx context.Context, sc *spanner.Client, name string, slot int64) string {
	t.Helper()
	r, err := sc.Single().ReadRow(ctx, "locks_permits", spanner.Key{name, slot}, []string{"session_id"})
	fatalIf(t, err, "read permit")
	var s string
	fatalIf(t, r.Column(0, &s), "decode permit")
	return s
}
