package lease_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	sppb "cloud.google.com/go/spanner/apiv1/spannerpb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// begun is a read-write transaction seen beginning: by which RPC, with
// which tag, at which isolation level.
type begun struct {
	method string
	tag    string
	level  sppb.TransactionOptions_IsolationLevel
}

// isolations records the isolation level of every read-write transaction
// begun through a spanner.Client: an explicit BeginTransaction, a
// statement or read that begins one inline, or a Commit of a single-use
// one (Apply).
type isolations struct {
	mu    sync.Mutex
	begun []begun
}

func (r *isolations) options() []option.ClientOption {
	return []option.ClientOption{
		option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			r.record(method, req)
			return invoker(ctx, method, req, reply, cc, opts...)
		})),
		option.WithGRPCDialOption(grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			s, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil {
				return nil, err
			}
			return &recordedStream{ClientStream: s, r: r, method: method}, nil
		})),
	}
}

type recordedStream struct {
	grpc.ClientStream
	r      *isolations
	method string
}

func (s *recordedStream) SendMsg(m any) error {
	s.r.record(s.method, m)
	return s.ClientStream.SendMsg(m)
}

func (r *isolations) record(method string, req any) {
	var (
		opts *sppb.TransactionOptions
		tag  string
	)
	switch q := req.(type) {
	case *sppb.BeginTransactionRequest:
		opts, tag = q.GetOptions(), q.GetRequestOptions().GetTransactionTag()
	case *sppb.ExecuteSqlRequest:
		opts, tag = q.GetTransaction().GetBegin(), q.GetRequestOptions().GetTransactionTag()
	case *sppb.ReadRequest:
		opts, tag = q.GetTransaction().GetBegin(), q.GetRequestOptions().GetTransactionTag()
	case *sppb.ExecuteBatchDmlRequest:
		opts, tag = q.GetTransaction().GetBegin(), q.GetRequestOptions().GetTransactionTag()
	case *sppb.CommitRequest:
		opts, tag = q.GetSingleUseTransaction(), q.GetRequestOptions().GetTransactionTag()
	}
	if opts.GetReadWrite() == nil {
		return // not a read-write transaction's beginning
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.begun = append(r.begun, begun{method: method[strings.LastIndex(method, "/")+1:], tag: tag, level: opts.GetIsolationLevel()})
}

func (r *isolations) seen() []begun {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]begun(nil), r.begun...)
}

// repeatableReadClient is a spanner.Client whose read-write transactions
// default to repeatable read, as an application may configure its own,
// with extra client options.
func repeatableReadClient(t *testing.T, db string, opts ...option.ClientOption) *spanner.Client {
	t.Helper()
	cfg := spanner.ClientConfig{TransactionOptions: spanner.TransactionOptions{IsolationLevel: sppb.TransactionOptions_REPEATABLE_READ}}
	sc, err := emulator.Shared(t).NewClientWithConfig(emulator.Context(t), db, cfg, opts...)
	if err != nil {
		t.Fatalf("spanner client: %v", err)
	}
	t.Cleanup(sc.Close)
	return sc
}

// A spanner.Client that defaults to repeatable read does not make the
// Client's transactions run at it: every read-write transaction the Client
// begins (acquisitions of every kind, handoffs, releases, renewals,
// SetPermits, ForceRelease, RunOnce's completion, Close) asks for
// serializable. A transaction of the application's own on the same client
// is recorded at repeatable read, so the recorder sees the client's default.
func TestEveryTransactionIsSerializableWhateverTheClientDefault(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		rec := &isolations{}
		c := newClientWith(t, repeatableReadClient(t, db, rec.options()...), lease.WithTTL(2*time.Second))
		other := newClient(t, db, lease.WithTTL(2*time.Second))

		l := mustAcquire(t, ctx, c, "lock")
		if _, err := c.TryAcquire(ctx, "lock"); !errors.Is(err, lease.ErrNotAcquired) {
			t.Fatalf("TryAcquire of a held lock: %v, want ErrNotAcquired", err)
		}
		fatalIf(t, l.Release(ctx), "Release")
		r1, err := c.AcquireShared(ctx, "shared")
		fatalIf(t, err, "AcquireShared")
		fatalIf(t, r1.Release(ctx), "Release shared")
		set, err := c.AcquireAll(ctx, "a", "b")
		fatalIf(t, err, "AcquireAll")
		for _, l := range set.Leases() {
			fatalIf(t, l.Release(ctx), "Release %s", l.Name())
		}
		fatalIf(t, c.SetPermits(ctx, "sem", 1), "SetPermits")
		p, err := c.TryAcquirePermit(ctx, "sem")
		fatalIf(t, err, "TryAcquirePermit")
		fatalIf(t, p.Release(ctx), "Release permit")
		w, err := c.AcquireWorkerID(ctx, "pool", 4)
		fatalIf(t, err, "AcquireWorkerID")
		fatalIf(t, w.Release(ctx), "Release worker ID")
		ran, err := c.RunOnce(ctx, "job", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), func(context.Context) error { return nil })
		if err != nil || !ran {
			t.Fatalf("RunOnce: ran %v, %v", ran, err)
		}
		// A release that hands the name to a waiter of another Client, and a
		// wait for one.
		held := mustAcquire(t, ctx, c, "handoff")
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		got := make(chan error, 1)
		go func() {
			l, err := other.Acquire(wctx, "handoff")
			if err == nil {
				err = l.Release(wctx)
			}
			got <- err
		}()
		waitForWaiter(t, ctx, c, "handoff")
		fatalIf(t, held.Release(ctx), "Release to a waiter")
		fatalIf(t, <-got, "waiter of another Client")
		theirs := mustAcquire(t, ctx, other, "theirs")
		acquired := make(chan *lease.Lease, 1)
		go func() {
			l, err := c.Acquire(wctx, "theirs")
			if err != nil {
				t.Errorf("Acquire after a wait: %v", err)
			}
			acquired <- l
		}()
		waitForWaiter(t, ctx, other, "theirs")
		fatalIf(t, theirs.Release(ctx), "Release of the other Client's lease")
		mine := <-acquired
		if mine == nil {
			t.FailNow()
		}
		// Renewals, then a ForceRelease and Close.
		renewed := mine.Deadline()
		for !mine.Deadline().After(renewed) {
			select {
			case <-wctx.Done():
				t.Fatal("no renewal within 20s")
			case <-time.After(50 * time.Millisecond):
			}
		}
		if _, err := c.ForceRelease(ctx, "theirs"); err != nil {
			t.Fatalf("ForceRelease: %v", err)
		}
		mustAcquire(t, ctx, c, "last") // for Close to end
		fatalIf(t, c.Close(), "Close")

		mineCount := len(rec.seen())
		sc := repeatableReadClient(t, db, rec.options()...)
		_, err = sc.ReadWriteTransactionWithOptions(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
			return tx.Query(ctx, spanner.Statement{SQL: "SELECT 1"}).Do(func(*spanner.Row) error { return nil })
		}, spanner.TransactionOptions{TransactionTag: "application"})
		fatalIf(t, err, "the application's own transaction")

		tags := map[string]int{}
		all := rec.seen()
		for _, b := range all[:mineCount] {
			tags[b.tag]++
			if b.level != sppb.TransactionOptions_SERIALIZABLE {
				t.Errorf("%s of %q began at %v, want SERIALIZABLE", b.method, b.tag, b.level)
			}
		}
		for _, want := range []string{"spannerlock-acquire", "spannerlock-release", "spannerlock-renew", "spannerlock-set-permits", "spannerlock-force-release", "spannerlock-end-session"} {
			if tags[want] == 0 {
				t.Errorf("no transaction tagged %s recorded; saw %v", want, tags)
			}
		}
		if len(all) != mineCount+1 || all[mineCount].level != sppb.TransactionOptions_REPEATABLE_READ {
			t.Errorf("the application's own transaction was recorded as %v, want one at REPEATABLE_READ", all[mineCount:])
		}
		t.Logf("transactions begun by tag: %v", tags)
	})
}

// waitForWaiter waits until name has a waiter in line.
func waitForWaiter(t *testing.T, ctx context.Context, c *lease.Client, name string) {
	t.Helper()
	for {
		ws, err := c.Waiters(ctx)
		fatalIf(t, err, "Waiters")
		for _, w := range ws {
			if w.Name == name {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no waiter for %q", name)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
