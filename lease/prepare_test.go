package lease_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/api/option"
	"google.golang.org/grpc"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// stallFirstQueries makes the first n streaming RPCs (queries: the first
// is the Client's read of the database's dialect) hang until their caller's
// deadline, as a Spanner too slow to answer does.
type stallFirstQueries struct {
	n       int64
	stalled atomic.Int64
}

func (s *stallFirstQueries) options() []option.ClientOption {
	return []option.ClientOption{
		option.WithGRPCDialOption(grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, conn *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			if s.stalled.Add(1) <= s.n {
				<-ctx.Done()
				return nil, ctx.Err()
			}
			return streamer(ctx, desc, conn, method, opts...)
		})),
	}
}

// A blocking acquisition rides out a Spanner that does not answer the
// Client's first call (its read of the database's dialect) as it rides out
// any outage, until its own context ends; a TryAcquire reports the outage.
// Without the retry, Acquire failed at once with the dialect read's
// deadline, whatever time its caller had given it.
func TestABlockingAcquireRidesOutAnUnansweredFirstCall(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)

		stall := &stallFirstQueries{n: 2}
		c := newClientWith(t, spannerClient(t, newDatabase(t), stall.options()...), lease.WithTTL(2*time.Second))
		// 2 stalled reads of at most the TTL each, and the acquisition:
		// 30 s leaves a loaded machine room many times over.
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		l, err := c.Acquire(actx, "job")
		fatalIf(t, err, "Acquire after %d stalled queries", stall.stalled.Load())
		fatalIf(t, l.Release(ctx), "Release")

		stall = &stallFirstQueries{n: 1}
		try := newClientWith(t, spannerClient(t, newDatabase(t), stall.options()...), lease.WithTTL(2*time.Second))
		tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if _, err := try.TryAcquire(tctx, "job"); err == nil || errors.Is(err, lease.ErrNotAcquired) || tctx.Err() != nil {
			t.Fatalf("TryAcquire with its first query unanswered: %v (context: %v); want the outage, at once", err, tctx.Err())
		}
	})
}
