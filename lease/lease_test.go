package lease_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

func TestTokensStartAtOneAndGrowAcrossReleasesAndHolders(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		a := newClient(t, db, lease.WithHolderID("a"))
		b := newClient(t, db, lease.WithHolderID("b"))

		var tokens []int64
		for i, c := range []*lease.Client{a, a, b, a} {
			l := mustAcquire(t, ctx, c, "job")
			tokens = append(tokens, l.Token())
			fatalIf(t, l.Release(ctx), "release %d", i)
		}
		if want := []int64{1, 2, 3, 4}; !equalTokens(tokens, want) {
			t.Fatalf("tokens = %v, want %v", tokens, want)
		}
		other := mustAcquire(t, ctx, b, "other-job")
		if other.Token() != 1 {
			t.Fatalf("a new name's first token = %d, want 1", other.Token())
		}
	})
}

func equalTokens(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestTryAcquireWhileHeld(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		a := newClient(t, db, lease.WithHolderID("holder-a"))
		b := newClient(t, db, lease.WithHolderID("holder-b"))
		l := mustAcquire(t, ctx, a, "cron")

		_, err := b.TryAcquire(ctx, "cron")
		if !errors.Is(err, lease.ErrNotAcquired) {
			t.Fatalf("TryAcquire by another client: err = %v, want ErrNotAcquired", err)
		}
		var held *lease.HeldError
		if !errors.As(err, &held) || held.Holder.HolderID != "holder-a" || held.Holder.Token != l.Token() {
			t.Fatalf("TryAcquire error %v does not name holder-a with token %d", err, l.Token())
		}

		if _, err := a.TryAcquire(ctx, "cron"); !errors.Is(err, lease.ErrNotAcquired) {
			t.Fatalf("TryAcquire by the holding client: err = %v, want ErrNotAcquired (not re-entrant)", err)
		}
	})
}

func TestHolder(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		a := newClient(t, db, lease.WithHolderID("pod-7"), lease.WithTTL(4*time.Second))
		reader := newClient(t, db)

		if _, err := reader.Holder(ctx, "leader"); !errors.Is(err, lease.ErrNoHolder) {
			t.Fatalf("Holder of a never-acquired lease: err = %v, want ErrNoHolder", err)
		}
		l := mustAcquire(t, ctx, a, "leader", lease.WithPayload([]byte("10.0.0.7:8080")))
		h, err := reader.Holder(ctx, "leader")
		fatalIf(t, err, "Holder")
		if h.Name != "leader" || h.HolderID != "pod-7" || h.Token != 1 || !bytes.Equal(h.Payload, []byte("10.0.0.7:8080")) {
			t.Fatalf("Holder = %+v", h)
		}
		if !h.AcquiredAt.Equal(l.AcquiredAt()) || h.RenewedAt.Before(h.AcquiredAt) {
			t.Fatalf("Holder times: acquired %s (lease says %s), renewed %s", h.AcquiredAt, l.AcquiredAt(), h.RenewedAt)
		}
		if ttl := h.ExpiresAt.Sub(h.RenewedAt); ttl != 4*time.Second {
			t.Fatalf("ExpiresAt - RenewedAt = %s, want the holder's TTL 4s", ttl)
		}

		fatalIf(t, l.Release(ctx), "Release")
		if _, err := reader.Holder(ctx, "leader"); !errors.Is(err, lease.ErrNoHolder) {
			t.Fatalf("Holder after release: err = %v, want ErrNoHolder", err)
		}
	})
}

func TestExpiryIsJudgedByTheHoldersTTL(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		holderSC := emulator.Client(t, db)
		a := newClientWith(t, holderSC, lease.WithTTL(time.Second))
		longTTL := newClient(t, db, lease.WithTTL(time.Minute))
		mustAcquire(t, ctx, a, "job")
		// Stop the holder's renewals without releasing: its spanner.Client goes away.
		holderSC.Close()

		start := time.Now()
		acquireCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		l, err := longTTL.Acquire(acquireCtx, "job")
		fatalIf(t, err, "Acquire after the 1s holder stopped renewing")
		if waited := time.Since(start); waited > 5*time.Second {
			t.Fatalf("waited %s for a 1s lease: expiry was not judged by the holder's TTL", waited)
		}
		if l.Token() != 2 {
			t.Fatalf("token after expiry = %d, want 2", l.Token())
		}
	})
}

func TestReleaseHandsOffToAWaiter(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		ttl := 10 * time.Second
		a := newClient(t, db, lease.WithTTL(ttl))
		b := newClient(t, db, lease.WithTTL(ttl))
		first := mustAcquire(t, ctx, a, "migration")

		type result struct {
			l   *lease.Lease
			err error
		}
		got := make(chan result, 1)
		// Far shorter than the TTL: only a release can let b in before this ends.
		waitCtx, cancel := context.WithTimeout(ctx, ttl/2)
		defer cancel()
		go func() {
			l, err := b.Acquire(waitCtx, "migration")
			got <- result{l, err}
		}()
		select {
		case r := <-got:
			t.Fatalf("Acquire returned while the lease was held: %v, %v", r.l, r.err)
		case <-time.After(200 * time.Millisecond):
		}
		fatalIf(t, first.Release(ctx), "Release")
		r := <-got
		fatalIf(t, r.err, "Acquire after Release")
		if r.l.Token() != first.Token()+1 {
			t.Fatalf("handoff token = %d, want %d", r.l.Token(), first.Token()+1)
		}
		if err := context.Cause(first.Context()); !errors.Is(err, lease.ErrReleased) {
			t.Fatalf("released lease's context cause = %v, want ErrReleased", err)
		}
	})
}

func TestAcquireReturnsContextError(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		a := newClient(t, db)
		b := newClient(t, db)
		mustAcquire(t, ctx, a, "busy")

		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, err := b.Acquire(short, "busy")
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire past its deadline: err = %v, want one wrapping context.DeadlineExceeded", err)
		}
	})
}

func TestReleaseOfALostLease(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		a := newClient(t, db, lease.WithTTL(time.Second))
		l := mustAcquire(t, ctx, a, "job")
		stealLease(t, ctx, db, "job")
		waitDone(t, l.Context(), "context of a stolen lease")

		if err := l.Release(ctx); !errors.Is(err, lease.ErrLeaseLost) {
			t.Fatalf("first Release of a lost lease: err = %v, want ErrLeaseLost", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("second Release: err = %v, want nil", err)
		}
	})
}

func TestSecondReleaseIsNil(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		a := newClient(t, newDatabase(t))
		l := mustAcquire(t, ctx, a, "job")
		fatalIf(t, l.Release(ctx), "first Release")
		fatalIf(t, l.Release(ctx), "second Release")
	})
}

func TestCloseReleasesEverything(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		a := newClient(t, db)
		b := newClient(t, db)
		leases := []*lease.Lease{mustAcquire(t, ctx, a, "one"), mustAcquire(t, ctx, a, "two")}
		fatalIf(t, a.Close(), "Close")
		for _, l := range leases {
			if err := context.Cause(l.Context()); !errors.Is(err, lease.ErrClosed) {
				t.Fatalf("lease %s after Close: cause %v, want ErrClosed", l.Name(), err)
			}
			if _, err := b.TryAcquire(ctx, l.Name()); err != nil {
				t.Fatalf("TryAcquire(%s) after the holder closed: %v", l.Name(), err)
			}
		}
		if _, err := a.TryAcquire(ctx, "three"); !errors.Is(err, lease.ErrClosed) {
			t.Fatalf("TryAcquire on a closed client: err = %v, want ErrClosed", err)
		}
	})
}

func TestCloseWakesBlockedAcquire(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		a := newClient(t, db)
		b := newClient(t, db)
		mustAcquire(t, ctx, a, "job")
		errc := make(chan error, 1)
		go func() {
			_, err := b.Acquire(ctx, "job")
			errc <- err
		}()
		select {
		case err := <-errc:
			t.Fatalf("Acquire returned while the lease was held: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
		fatalIf(t, b.Close(), "Close")
		select {
		case err := <-errc:
			if !errors.Is(err, lease.ErrClosed) {
				t.Fatalf("blocked Acquire after Close: err = %v, want ErrClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("blocked Acquire did not return after Close")
		}
	})
}

func TestNewClientValidates(t *testing.T) {
	sc := emulator.Client(t, newDatabase(t))
	cases := []struct {
		name  string
		table string
		opts  []lease.Option
		want  string
	}{
		{"ttl below 1s", table, []lease.Option{lease.WithTTL(500 * time.Millisecond)}, "outside [1s, 24h0m0s]"},
		{"renew above ttl/3", table, []lease.Option{lease.WithTTL(3 * time.Second), lease.WithRenewInterval(1500 * time.Millisecond)}, "at most TTL/3"},
		{"table with a dash", "my-locks", nil, "letters, digits and underscores"},
		{"table starting with a digit", "1locks", nil, "start with a letter"},
		{"holder ID too long", table, []lease.Option{lease.WithHolderID(strings.Repeat("x", 1025))}, "limit is 1024"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := lease.NewClient(sc, tc.table, tc.opts...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewClient error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestMissingTableErrorSaysHowToCreateIt(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		sc := emulator.Client(t, emulator.DatabaseIn(t, string(dialectOf(t))))
		c, err := lease.NewClient(sc, "no_such_table")
		fatalIf(t, err, "NewClient")
		defer func() { _ = c.Close() }()
		_, err = c.TryAcquire(ctx, "job")
		advice := inDialect(t, "lease.DDL)", "lease.PostgreSQL.DDL")
		if err == nil || !strings.Contains(err.Error(), advice) {
			t.Fatalf("TryAcquire on a missing table: err = %v, want advice naming %s", err, advice)
		}
	})
}

func TestDDLYieldsTheLatestSchemaVersion(t *testing.T) {
	ctx := emulator.Context(t)
	db := newDatabase(t) // made from lease.DDL
	ins, err := locktable.Inspect(ctx, emulator.Client(t, db), table)
	fatalIf(t, err, "Inspect")
	if !ins.Current() || ins.Version != locktable.Latest {
		t.Fatalf("table from lease.DDL inspects as version %d with diffs %v, want version %d", ins.Version, ins.Diffs, locktable.Latest)
	}
}

func TestConcurrentReleasesAgree(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		a := newClient(t, newDatabase(t))
		l := mustAcquire(t, ctx, a, "job")
		errs := make(chan error, 2)
		for range 2 {
			go func() { errs <- l.Release(ctx) }()
		}
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatalf("one of two concurrent Releases of a held lease failed: %v", err)
			}
		}
	})
}

func TestHoldersListsLiveLeases(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		a := newClient(t, db, lease.WithHolderID("a"))
		b := newClient(t, db, lease.WithHolderID("b"))
		mustAcquire(t, ctx, a, "x")
		mustAcquire(t, ctx, b, "y")
		released := mustAcquire(t, ctx, a, "z")
		fatalIf(t, released.Release(ctx), "Release")

		fatalIf(t, a.SetPermits(ctx, "sem", 2), "SetPermits")
		_, err := b.TryAcquirePermit(ctx, "sem")
		fatalIf(t, err, "permit")
		_, err = a.AcquireWorkerID(ctx, "pool", 4)
		fatalIf(t, err, "worker ID")

		holders, err := b.Holders(ctx)
		fatalIf(t, err, "Holders")
		var got []string
		for _, h := range holders {
			got = append(got, fmt.Sprintf("%s=%s/%s/%d", h.Name, h.HolderID, h.Kind, h.Slot))
		}
		want := "x=a/lock/0,y=b/lock/0,pool=a/worker_id/0,sem=b/permit/0"
		if strings.Join(got, ",") != want {
			t.Fatalf("Holders = %v, want %s (released z omitted; permits after locks)", got, want)
		}
	})
}

func TestSemaphoresListsDeclaredSemaphores(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		a := newClient(t, db, lease.WithHolderID("a"))
		fatalIf(t, a.SetPermits(ctx, "busy", 3), "SetPermits")
		fatalIf(t, a.SetPermits(ctx, "idle", 2), "SetPermits")
		fatalIf(t, a.SetPermits(ctx, "gone", 1), "SetPermits")
		fatalIf(t, a.Undeclare(ctx, "gone"), "Undeclare")
		for range 2 {
			_, err := a.AcquirePermit(ctx, "busy")
			fatalIf(t, err, "AcquirePermit")
		}
		_, err := a.AcquireWorkerID(ctx, "pool", 4) // a pool, not a semaphore
		fatalIf(t, err, "AcquireWorkerID")

		sems, err := a.Semaphores(ctx)
		fatalIf(t, err, "Semaphores")
		var got []string
		for _, s := range sems {
			got = append(got, fmt.Sprintf("%s %d/%d", s.Name, s.InUse(), s.Permits))
			for i, h := range s.Holders {
				if h.Kind != "permit" || h.Slot != int64(i) || h.HolderID != "a" {
					t.Fatalf("permit %d of %s: %+v", i, s.Name, h)
				}
			}
		}
		if want := "busy 2/3,idle 0/2"; strings.Join(got, ",") != want {
			t.Fatalf("Semaphores = %v, want %s", got, want)
		}
	})
}

func TestOutdatedTableErrorSaysToMigrate(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := emulator.DatabaseIn(t, string(dialectOf(t)), locktable.Dialect(dialectOf(t)).DDLAt(table, 1)...)
		c := newClient(t, db)
		_, err := c.TryAcquire(ctx, "job")
		if err == nil || !strings.Contains(err.Error(), "schema version") {
			t.Fatalf("TryAcquire on a version 1 table: err = %v, want advice to migrate", err)
		}
	})
}

// With cleanup, Spanner may delete a long-dead row and with it the name's
// token counter; the next acquisition must still get a larger token.
func TestTokensResumeAboveADeletedRowUnderCleanup(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := emulator.DatabaseIn(t, string(dialectOf(t)), locktable.Dialect(dialectOf(t)).CreateDDL(table, locktable.Options{CleanupAfter: 24 * time.Hour})...)
		sc := emulator.Client(t, db)
		a := newClientWith(t, sc)
		var last int64
		for range 3 {
			l := mustAcquire(t, ctx, a, "job")
			if l.Token() <= last {
				t.Fatalf("token %d after %d", l.Token(), last)
			}
			last = l.Token()
			fatalIf(t, l.Release(ctx), "Release")
		}
		// What the row deletion policy does to a row not renewed for a day.
		_, err := sc.Apply(ctx, []*spanner.Mutation{spanner.Delete(table, spanner.Key{"job"})})
		fatalIf(t, err, "delete row")
		l := mustAcquire(t, ctx, a, "job")
		if l.Token() <= last {
			t.Fatalf("token after the row was deleted = %d, want more than the last token %d", l.Token(), last)
		}
	})
}
