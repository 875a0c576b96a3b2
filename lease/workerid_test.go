package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"github.com/bwmarrin/snowflake"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
	"github.com/spannerlock/terraform-provider-spannerlock/lease/idgen"
)

func TestWorkerIDsAreUniqueAndTheNinthWaits(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		const (
			poolSize   = 8
			acquirers  = 12
			overflow   = acquirers - poolSize
			pool       = "snowflake"
			acquireTTL = 10 * time.Second
		)
		ctx := emulator.Context(t)
		db := newDatabase(t)

		var (
			mu      sync.Mutex
			holders = map[int]string{} // live ID -> who holds it
			ids     = make(chan *lease.WorkerID, acquirers)
			wg      sync.WaitGroup
		)
		for i := range acquirers {
			c := newClient(t, db, lease.WithTTL(acquireTTL), lease.WithHolderID(fmt.Sprintf("node-%d", i)))
			wg.Add(1)
			go func() {
				defer wg.Done()
				w, err := c.AcquireWorkerID(ctx, pool, poolSize)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if other, taken := holders[w.ID()]; taken {
					t.Errorf("ID %d given to node-%d while %s holds it", w.ID(), i, other)
				}
				holders[w.ID()] = fmt.Sprintf("node-%d", i)
				mu.Unlock()
				ids <- w
			}()
		}
		var got []*lease.WorkerID
		for range poolSize {
			got = append(got, <-ids)
		}
		for _, w := range got {
			if w.ID() < 0 || w.ID() >= poolSize {
				t.Fatalf("ID %d outside [0, %d)", w.ID(), poolSize)
			}
		}
		// All eight are taken: the others wait.
		select {
		case w := <-ids:
			t.Fatalf("a ninth acquirer got ID %d while %d were held", w.ID(), poolSize)
		case <-time.After(300 * time.Millisecond):
		}
		// Each release lets one waiter in, with the freed ID.
		for _, w := range got[:overflow] {
			mu.Lock()
			delete(holders, w.ID())
			mu.Unlock()
			freed := w.ID()
			fatalIf(t, w.Release(ctx), "Release")
			select {
			case next := <-ids:
				if next.ID() != freed {
					t.Fatalf("a waiter got ID %d, want the freed ID %d", next.ID(), freed)
				}
			case <-time.After(acquireTTL / 2):
				t.Fatalf("no waiter took freed ID %d", freed)
			}
		}
		wg.Wait()
	})
}

// A reacquired ID must not let a generator go back in time: the new holder
// waits until its wall clock passes the latest moment the previous holder
// recorded it might use the ID, even when the previous holder's clock ran
// ahead of ours.
func TestReacquiredWorkerIDWaitsPastThePreviousHighWaterMark(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		a := newClient(t, db)
		first, err := a.AcquireWorkerID(ctx, "pool", 1)
		fatalIf(t, err, "first")
		fatalIf(t, first.Release(ctx), "release")
		// What a previous holder whose clock runs 1.5s ahead would have recorded.
		ahead := time.Now().Add(1500 * time.Millisecond)
		_, err = emulator.Client(t, db).Apply(ctx, []*spanner.Mutation{
			spanner.Update("locks_permits", []string{"name", "slot", "high_water"}, []any{"pool", int64(0), ahead}),
		})
		fatalIf(t, err, "record a high-water mark ahead of this clock")

		second, err := newClient(t, db).AcquireWorkerID(ctx, "pool", 1)
		fatalIf(t, err, "second")
		if now := time.Now(); now.Before(ahead) {
			t.Fatalf("ID handed on at %s, before the previous holder's high-water mark %s", now.Format(time.RFC3339Nano), ahead.Format(time.RFC3339Nano))
		}
		if second.ID() != 0 || second.Token() <= first.Token() {
			t.Fatalf("second holding: ID %d token %d; want ID 0 and a token above %d", second.ID(), second.Token(), first.Token())
		}
	})
}

func TestReleasedWorkerIDPassesOnAtOnce(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		first, err := newClient(t, db, lease.WithTTL(10*time.Second)).AcquireWorkerID(ctx, "pool", 1)
		fatalIf(t, err, "first")
		fatalIf(t, first.Release(ctx), "release")
		// Release stops the holder before it commits, so its mark is the release.
		short, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if _, err := newClient(t, db).AcquireWorkerID(short, "pool", 1); err != nil {
			t.Fatalf("AcquireWorkerID right after a release: %v", err)
		}
	})
}

func TestWorkerIDContextEndsAtTheLossDeadline(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		sc := emulator.Client(t, db)
		w, err := newClientWith(t, sc, lease.WithTTL(time.Second)).AcquireWorkerID(ctx, "pool", 4)
		fatalIf(t, err, "AcquireWorkerID")
		sc.Close()
		waitDone(t, w.Context(), "worker ID context after renewals stopped")
		if !errors.Is(context.Cause(w.Context()), lease.ErrLeaseLost) {
			t.Fatalf("cause = %v", context.Cause(w.Context()))
		}
		if err := w.Release(ctx); !errors.Is(err, lease.ErrLeaseLost) {
			t.Fatalf("Release of a lost worker ID: err = %v, want ErrLeaseLost", err)
		}
	})
}

func TestCloseReleasesWorkerIDs(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		a := newClient(t, db)
		w, err := a.AcquireWorkerID(ctx, "pool", 1)
		fatalIf(t, err, "AcquireWorkerID")
		fatalIf(t, a.Close(), "Close")
		if !errors.Is(context.Cause(w.Context()), lease.ErrClosed) {
			t.Fatalf("cause after Close = %v", context.Cause(w.Context()))
		}
		short, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if _, err := newClient(t, db).AcquireWorkerID(short, "pool", 1); err != nil {
			t.Fatalf("AcquireWorkerID after the holder closed: %v", err)
		}
	})
}

func TestAcquireWorkerIDValidates(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		c := newClient(t, newDatabase(t))
		for _, size := range []int{0, -1, lease.MaxWorkerIDs + 1} {
			if _, err := c.AcquireWorkerID(ctx, "pool", size); err == nil {
				t.Errorf("AcquireWorkerID with a pool of %d succeeded", size)
			}
		}
		fatalIf(t, c.SetPermits(ctx, "sem", 1), "SetPermits")
		if _, err := c.AcquireWorkerID(ctx, "sem", 4); err == nil {
			t.Error("AcquireWorkerID on a semaphore's name succeeded")
		}
	})
}

// A Client that lost its worker ID (renewals cut off) and then closes must
// leave the mark its renewals recorded: the next holder waits past the
// last moment the lost holder could still use the ID.
func TestCloseAfterALossKeepsTheWorkerIDMark(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		f := &faults{}
		ttl := 2 * time.Second
		a := newClientWith(t, spannerClient(t, db, f.options()...), lease.WithTTL(ttl))
		w, err := a.AcquireWorkerID(ctx, "ids", 1)
		fatalIf(t, err, "AcquireWorkerID")
		// Let renewals move the mark past the one recorded at acquisition.
		h0, err := a.Holders(ctx)
		fatalIf(t, err, "Holders")
		waitFor(t, "two renewals", 3*ttl, func() bool {
			h, err := a.Holders(ctx)
			return err == nil && len(h) == 1 && h[0].RenewedAt.Sub(h0[0].RenewedAt) > ttl/2
		})
		f.partition(true)
		waitDone(t, w.Context(), "the cut-off worker ID")
		lastUse := w.Lease().Deadline() // Use refuses from here on
		f.partition(false)
		fatalIf(t, a.Close(), "Close")

		b := newClient(t, db, lease.WithTTL(ttl))
		next, err := b.AcquireWorkerID(ctx, "ids", 1)
		fatalIf(t, err, "the next holder's AcquireWorkerID")
		if next.NotBefore().Before(lastUse) {
			t.Fatalf("the next holder waits only until %s, but the lost holder could use the ID until %s",
				next.NotBefore().Format(time.StampMicro), lastUse.Format(time.StampMicro))
		}
	})
}

// Release records its mark after the ID stopped being used: no ID issued
// under the released worker ID carries a later timestamp than the mark,
// however the generator races the release, and the next holder's IDs are
// all larger.
func TestAReleasedWorkerIDsMarkCoversEveryIssuedID(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		a := newClient(t, db)
		w, err := a.AcquireWorkerID(ctx, "ids", 1)
		fatalIf(t, err, "AcquireWorkerID")
		node, err := idgen.Snowflake(w)
		fatalIf(t, err, "Snowflake")

		var last snowflake.ID
		issued := make(chan int)
		go func() {
			n := 0
			for {
				id, err := node.Generate()
				if err != nil {
					issued <- n
					return
				}
				last, n = id, n+1
			}
		}()
		time.Sleep(10 * time.Millisecond) // let it issue IDs while Release runs
		fatalIf(t, w.Release(ctx), "Release")
		if n := <-issued; n == 0 {
			t.Fatal("no ID was issued before the release")
		}

		b := newClient(t, db)
		next, err := b.AcquireWorkerID(ctx, "ids", 1)
		fatalIf(t, err, "the next holder's AcquireWorkerID")
		// idgen.SnowflakeTime, not ID.Time: the other dialect's subtest runs
		// snowflake.NewNode concurrently.
		lastAt := idgen.SnowflakeTime(last)
		if lastAt.UnixMilli() > next.NotBefore().UnixMilli() {
			t.Fatalf("an ID issued at %d ms is later than the released ID's mark %d ms", lastAt.UnixMilli(), next.NotBefore().UnixMilli())
		}
		node2, err := idgen.Snowflake(next)
		fatalIf(t, err, "Snowflake for the next holder")
		first, err := node2.Generate()
		fatalIf(t, err, "Generate")
		if firstAt := idgen.SnowflakeTime(first); !firstAt.After(lastAt) {
			t.Fatalf("the next holder's first ID (%d ms) is not in a later millisecond than the last ID issued before (%d ms)", firstAt.UnixMilli(), lastAt.UnixMilli())
		}
	})
}
