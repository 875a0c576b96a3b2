package lease_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	sppb "cloud.google.com/go/spanner/apiv1/spannerpb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// staleOutsideReads makes the strong single-use reads a Client sends
// while one of its force-release transactions is open read at a fixed
// earlier timestamp instead: as if a write committed after them, before
// the transaction did, which on Spanner nothing prevents for a read that
// takes no lock. (The emulator runs one transaction at a time, so it
// would abort the force release rather than let the write in between.)
type staleOutsideReads struct {
	at       atomic.Pointer[time.Time]
	inForce  atomic.Bool
	rewrites atomic.Int64
}

func (s *staleOutsideReads) options() []option.ClientOption {
	return []option.ClientOption{
		option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			s.rewrite(req)
			return invoker(ctx, method, req, reply, cc, opts...)
		})),
		option.WithGRPCDialOption(grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			cs, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil {
				return nil, err
			}
			return &staleStream{ClientStream: cs, s: s}, nil
		})),
	}
}

type staleStream struct {
	grpc.ClientStream
	s *staleOutsideReads
}

func (st *staleStream) SendMsg(m any) error {
	st.s.rewrite(m)
	return st.ClientStream.SendMsg(m)
}

func (s *staleOutsideReads) rewrite(req any) {
	switch q := req.(type) {
	case *sppb.ExecuteSqlRequest:
		if q.GetRequestOptions().GetTransactionTag() == "spannerlock-force-release" {
			s.inForce.Store(true)
			return
		}
		ro := q.GetTransaction().GetSingleUse().GetReadOnly()
		at := s.at.Load()
		if s.inForce.Load() && ro.GetStrong() && at != nil {
			ro.TimestampBound = &sppb.TransactionOptions_ReadOnly_ReadTimestamp{ReadTimestamp: timestamppb.New(*at)}
			s.rewrites.Add(1)
		}
	case *sppb.CommitRequest:
		if q.GetRequestOptions().GetTransactionTag() == "spannerlock-force-release" {
			s.inForce.Store(false)
		}
	}
}

// ForceReleasePermit of a worker ID carries the holder's latest mark over
// to the ID's next holder even when the holder renewed after the force
// release looked at its session: the next holder's NotBefore is past every
// moment the old holder may still use the ID (its Deadline, until its next
// renewal finds the ID gone). The mark used to be read outside the
// transaction, so a renewal committing in between was missed and the ID
// could be issued twice for the same instants.
func TestForceReleasePermitKeepsAMarkRenewedMeanwhile(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		const ttl = 2 * time.Second
		holder := newClient(t, db, lease.WithTTL(ttl))
		w, err := holder.AcquireWorkerID(ctx, "pool", 1)
		fatalIf(t, err, "AcquireWorkerID")
		// The session as the acquisition left it; then wait for a renewal
		// that moves the holder's deadline (and mark) past that mark.
		acquired := w.Lease().AcquiredAt()
		first := w.Lease().Deadline()
		for !w.Lease().Deadline().After(first.Add(ttl / 5)) {
			select {
			case <-ctx.Done():
				t.Fatal("no renewal")
			case <-time.After(20 * time.Millisecond):
			}
		}
		stale := &staleOutsideReads{}
		stale.at.Store(&acquired)
		op := newClientWith(t, spannerClient(t, db, stale.options()...))
		usableUntil := w.Lease().Deadline()
		_, err = op.ForceReleasePermit(ctx, "pool", int64(w.ID()))
		fatalIf(t, err, "ForceReleasePermit")
		t.Logf("outside reads made stale: %d", stale.rewrites.Load())
		next := newClient(t, db, lease.WithTTL(ttl))
		actx, cancel := context.WithTimeout(ctx, 3*ttl)
		defer cancel()
		nw, err := next.AcquireWorkerID(actx, "pool", 1)
		fatalIf(t, err, "the next holder's AcquireWorkerID")
		if nw.NotBefore().Before(usableUntil) {
			t.Errorf("the next holder's NotBefore %v is %v before the old holder's deadline %v: both may issue IDs for the same instants",
				nw.NotBefore(), usableUntil.Sub(nw.NotBefore()), usableUntil)
		}
	})
}
