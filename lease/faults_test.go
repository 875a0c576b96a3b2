package lease_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
)

// commitFaults fails Commit RPCs on demand, the way a network does: before
// the request reaches Spanner, or after Spanner committed (an ambiguous
// commit). DEADLINE_EXCEEDED is used because the client does not retry it.
type commitFaults struct {
	mu     sync.Mutex
	before int // fail the next n commits without sending them
	after  int // send the next n commits, then report failure
}

func (f *commitFaults) failBefore(n int) { f.mu.Lock(); f.before = n; f.mu.Unlock() }
func (f *commitFaults) failAfter(n int)  { f.mu.Lock(); f.after = n; f.mu.Unlock() }

func (f *commitFaults) remaining() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.before + f.after
}

func (f *commitFaults) options() []option.ClientOption {
	return []option.ClientOption{option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(f.intercept))}
}

func (f *commitFaults) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if !strings.HasSuffix(method, "/Commit") {
		return invoke(ctx, method, req, reply, cc, opts...)
	}
	f.mu.Lock()
	before, after := f.before > 0, f.before == 0 && f.after > 0
	if before {
		f.before--
	} else if after {
		f.after--
	}
	f.mu.Unlock()
	if before {
		return status.Error(codes.DeadlineExceeded, "injected: commit never sent")
	}
	err := invoke(ctx, method, req, reply, cc, opts...)
	if after && err == nil {
		return status.Error(codes.DeadlineExceeded, "injected: commit applied, reply lost")
	}
	return err
}

func TestAmbiguousAcquireCommitIsResolvedByReading(t *testing.T) {
	ctx := emulator.Context(t)
	db := newDatabase(t)
	faults := &commitFaults{}
	a := newClientWith(t, spannerClient(t, db, faults.options()...))
	rival := newClient(t, db)

	faults.failAfter(1)
	l, err := a.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatalf("TryAcquire whose commit applied but reported DEADLINE_EXCEEDED: %v; it holds the lease and must say so", err)
	}
	if faults.remaining() != 0 {
		t.Fatal("the injected fault was never hit")
	}
	if l.Token() != 1 {
		t.Fatalf("token = %d, want 1", l.Token())
	}
	h, err := rival.Holder(ctx, "job")
	fatalIf(t, err, "Holder")
	if h.Token != l.Token() || h.HolderID != a.HolderID() {
		t.Fatalf("Spanner says %+v holds it; the resolved lease says token %d", h, l.Token())
	}
}

func TestFailedAcquireCommitIsNotMistakenForSuccess(t *testing.T) {
	ctx := emulator.Context(t)
	db := newDatabase(t)
	faults := &commitFaults{}
	a := newClientWith(t, spannerClient(t, db, faults.options()...))
	rival := newClient(t, db)

	faults.failBefore(1)
	if _, err := a.TryAcquire(ctx, "job"); err == nil {
		t.Fatal("TryAcquire whose commit never reached Spanner reported success")
	}
	l, err := rival.TryAcquire(ctx, "job")
	fatalIf(t, err, "rival TryAcquire after the failed attempt")
	if l.Token() != 1 {
		t.Fatalf("rival token = %d, want 1: the failed attempt must not have taken one", l.Token())
	}
}

func TestAmbiguousReleaseCommitIsResolvedByReading(t *testing.T) {
	ctx := emulator.Context(t)
	db := newDatabase(t)
	faults := &commitFaults{}
	a := newClientWith(t, spannerClient(t, db, faults.options()...))
	rival := newClient(t, db)
	l := mustAcquire(t, ctx, a, "job")

	faults.failAfter(1)
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release whose commit applied but reported DEADLINE_EXCEEDED: %v", err)
	}
	if _, err := rival.TryAcquire(ctx, "job"); err != nil {
		t.Fatalf("rival TryAcquire after the release: %v", err)
	}
}
