package lease_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// queryFaults fails queries of one spanner Client (ExecuteStreamingSql)
// with err: counting from 1 since fail, n of them from query from on (n < 0:
// every one from it). It counts them all.
type queryFaults struct {
	mu      sync.Mutex
	err     error
	from, n int
	queries int
	// then, when set, runs as a query fails (the test's hook).
	then func(queries int)
}

func (q *queryFaults) fail(from, n int, err error, then func(int)) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.from, q.n, q.err, q.queries, q.then = from, n, err, 0, then
}

func (q *queryFaults) count() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.queries
}

func (q *queryFaults) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if !strings.HasSuffix(method, "/ExecuteStreamingSql") {
		return streamer(ctx, desc, cc, method, opts...)
	}
	q.mu.Lock()
	q.queries++
	k := q.queries
	failing := q.err != nil && k >= q.from && (q.n < 0 || k < q.from+q.n)
	err, then := q.err, q.then
	q.mu.Unlock()
	if !failing {
		return streamer(ctx, desc, cc, method, opts...)
	}
	if then != nil {
		then(k)
	}
	return nil, err
}

// Holders and Waiters, which status and the spannerlock_leases data source
// read (status reads Jobs and Semaphores with them), read again when the emulator drops their transaction ("Transaction
// not found", NOT_FOUND, as it does while other transactions run) or aborts
// it, and return the rows they would have; an error that is no outage, a
// connection closing or the caller's context ending is returned at once,
// and all the tries together end within the call timeout.
func TestStatusReadsReadAgainAfterTransientErrors(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		holder := newClient(t, db, lease.WithHolderID("holder"))
		waiter := newClient(t, db, lease.WithHolderID("waiter"))
		q := &queryFaults{}
		ttl := 3 * time.Second // a call timeout of 2.7s
		reader := newClientWith(t, spannerClient(t, db, option.WithGRPCDialOption(grpc.WithChainStreamInterceptor(q.stream))),
			lease.WithTTL(ttl), lease.WithPollInterval(50*time.Millisecond))
		held, err := holder.Acquire(ctx, "a")
		fatalIf(t, err, "Acquire")
		wctx, wcancel := context.WithCancel(ctx)
		defer wcancel()
		waited := make(chan error, 1)
		go func() {
			l, err := waiter.Acquire(wctx, "a")
			if err != nil {
				waited <- nil // its context ended, as the test ends
				return
			}
			_ = l.Release(ctx)
			waited <- errors.New("the waiter acquired a lock held all along")
		}()
		inLine(t, ctx, reader, "a", "waiter")
		fatalIf(t, holder.SetPermits(ctx, "pool", 2), "SetPermits")
		permit, err := holder.AcquirePermit(ctx, "pool")
		fatalIf(t, err, "AcquirePermit")
		defer func() { fatalIf(t, permit.Release(ctx), "the permit's Release") }()
		slot := time.Date(2026, 12, 3, 5, 0, 0, 0, time.UTC)
		if ran, err := holder.RunOnce(ctx, "report", slot, func(context.Context) error { return nil }); !ran || err != nil {
			t.Fatalf("RunOnce = %t, %v", ran, err)
		}
		defer func() {
			wcancel()
			fatalIf(t, <-waited, "the waiter")
			fatalIf(t, held.Release(ctx), "Release")
		}()

		holds := func(hs []lease.Holder) bool {
			return slices.ContainsFunc(hs, func(h lease.Holder) bool { return h.Name == "a" && h.HolderID == "holder" })
		}
		waits := func(ws []lease.Waiter) bool {
			return slices.ContainsFunc(ws, func(w lease.Waiter) bool { return w.Name == "a" && w.HolderID == "waiter" })
		}
		for _, tc := range []struct {
			what string
			err  error
		}{
			{"its transaction gone", status.Error(codes.NotFound, "Transaction not found: 42")},
			{"aborted", status.Error(codes.Aborted, "Transaction 7 aborted due to active transaction 6. The emulator only supports one transaction at a time.")},
		} {
			// Holders reads two queries: the first failing, or the second.
			for _, k := range []int{1, 2} {
				q.fail(k, 1, tc.err, nil)
				hs, err := reader.Holders(ctx)
				fatalIf(t, err, "Holders with query %d %s", k, tc.what)
				if !holds(hs) {
					t.Fatalf("Holders with query %d %s = %+v, want the holder of a", k, tc.what, hs)
				}
				if got, want := q.count(), k+2; got != want {
					t.Fatalf("Holders with query %d %s ran %d queries, want %d (both read again)", k, tc.what, got, want)
				}
			}
			// Semaphores reads two queries too; Jobs one (status reads it
			// with the others).
			for _, k := range []int{1, 2} {
				q.fail(k, 1, tc.err, nil)
				sems, err := reader.Semaphores(ctx)
				fatalIf(t, err, "Semaphores with query %d %s", k, tc.what)
				if len(sems) != 1 || sems[0].Name != "pool" || len(sems[0].Holders) != 1 {
					t.Fatalf("Semaphores with query %d %s = %+v, want pool with one holder", k, tc.what, sems)
				}
				if got, want := q.count(), k+2; got != want {
					t.Fatalf("Semaphores with query %d %s ran %d queries, want %d (both read again)", k, tc.what, got, want)
				}
			}
			q.fail(1, 1, tc.err, nil)
			jobs, err := reader.Jobs(ctx)
			fatalIf(t, err, "Jobs with its query %s", tc.what)
			if len(jobs) != 1 || jobs[0].Job != "report" || !jobs[0].Done {
				t.Fatalf("Jobs with its query %s = %+v, want report done", tc.what, jobs)
			}
			if got := q.count(); got != 2 {
				t.Fatalf("Jobs with its query %s ran %d queries, want 2 (one failed, one read again)", tc.what, got)
			}
			q.fail(1, 1, tc.err, nil)
			ws, err := reader.Waiters(ctx)
			fatalIf(t, err, "Waiters with its query %s", tc.what)
			if !waits(ws) {
				t.Fatalf("Waiters with its query %s = %+v, want waiter of a", tc.what, ws)
			}
			if got := q.count(); got != 2 {
				t.Fatalf("Waiters with its query %s ran %d queries, want 2 (one failed, one read again)", tc.what, got)
			}
		}

		// Errors no retry helps: each is returned after one query.
		for _, tc := range []struct {
			what string
			err  error
		}{
			{"invalid", status.Error(codes.InvalidArgument, "injected: invalid")},
			{"the connection closing", status.Error(codes.Canceled, "grpc: the client connection is closing")},
			{"the connection closing (as an abort)", status.Error(codes.Aborted, "grpc: the client connection is closing")},
			{"permission denied", status.Error(codes.PermissionDenied, "injected: denied")},
		} {
			q.fail(1, -1, tc.err, nil)
			_, err := reader.Waiters(ctx)
			if got := q.count(); err == nil || spanner.ErrCode(err) != status.Code(tc.err) || got != 1 {
				t.Fatalf("Waiters with its query %s = %v after %d queries, want that error after one", tc.what, err, got)
			}
			q.fail(1, -1, tc.err, nil)
			_, err = reader.Holders(ctx)
			// A table at an older version is looked for after an invalid
			// read (holders_old.go): that read fails too.
			if got := q.count(); err == nil || spanner.ErrCode(err) != status.Code(tc.err) || got > 2 {
				t.Fatalf("Holders with its query %s = %v after %d queries, want that error, not read again", tc.what, err, got)
			}
		}

		// The caller's context ending stops the reads: the third query fails
		// as the context is cancelled, and none follows.
		for _, read := range []struct {
			what string
			f    func(context.Context) error
		}{
			{"Holders", func(ctx context.Context) error { _, err := reader.Holders(ctx); return err }},
			{"Waiters", func(ctx context.Context) error { _, err := reader.Waiters(ctx); return err }},
		} {
			cctx, cancel := context.WithCancel(ctx)
			q.fail(1, -1, status.Error(codes.Aborted, "injected: aborted"), func(n int) {
				if n == 3 {
					cancel()
				}
			})
			err := read.f(cctx)
			cancel()
			if got := q.count(); err == nil || got != 3 {
				t.Fatalf("%s with its context cancelled at the third failed query = %v after %d queries, want an error after 3", read.what, err, got)
			}
		}

		// An outage that lasts: the tries end with the call timeout (2.7s),
		// not the caller's context, and say what failed. The bound allows
		// 5s of a loaded machine past it.
		for _, read := range []struct {
			what string
			f    func(context.Context) error
		}{
			{"Holders", func(ctx context.Context) error { _, err := reader.Holders(ctx); return err }},
			{"Waiters", func(ctx context.Context) error { _, err := reader.Waiters(ctx); return err }},
		} {
			q.fail(1, -1, status.Error(codes.Aborted, "injected: aborted"), nil)
			start := time.Now()
			err := read.f(ctx)
			took := time.Since(start)
			q.fail(0, 0, nil, nil)
			if spanner.ErrCode(err) != codes.Aborted {
				t.Fatalf("%s through a lasting outage = %v, want its ABORTED", read.what, err)
			}
			if limit := ttl - ttl/10 + 5*time.Second; took > limit {
				t.Fatalf("%s through a lasting outage took %s, more than the call timeout and %s", read.what, took, limit-(ttl-ttl/10))
			}
		}
	})
}
