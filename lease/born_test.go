package lease_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/api/option"
	"google.golang.org/grpc"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// slowNextCommit delays the next Commit, once armed, by delay before it is
// sent: an acquisition on a loaded machine, or against a slow Spanner.
type slowNextCommit struct {
	delay time.Duration
	armed atomic.Bool
}

func (s *slowNextCommit) options() []option.ClientOption {
	return []option.ClientOption{
		option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, conn *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if strings.HasSuffix(method, "/Commit") && s.armed.CompareAndSwap(true, false) {
				select {
				case <-time.After(s.delay):
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return invoker(ctx, method, req, reply, conn, opts...)
		})),
	}
}

// An acquisition that took most of its session's time (here its Commit is
// held back for 75% of the TTL, in a session idle since its last lease)
// never hands out a lease with less than a quarter of its TTL ahead: it
// returns once the renewal its registration started is confirmed. Without
// that wait, Acquire returned a lease with about an eighth of its TTL left, lost
// moments later (seen under load as 133 ms of a 2 s TTL).
func TestALeaseIsNeverBornWithLessThanAQuarterOfItsTTL(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		const ttl = 4 * time.Second
		slow := &slowNextCommit{delay: ttl * 3 / 4}
		c := newClientWith(t, spannerClient(t, newDatabase(t), slow.options()...), lease.WithTTL(ttl))

		// The session starts with this lease and idles once it is let go:
		// no renewal runs while the next acquisition's Commit is held back.
		fatalIf(t, mustAcquire(t, ctx, c, "first").Release(ctx), "Release(first)")
		slow.armed.Store(true)
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		l, err := c.Acquire(actx, "second")
		fatalIf(t, err, "Acquire(second)")
		left := time.Until(l.Deadline())
		defer func() { _ = l.Release(ctx) }()
		if slow.armed.Load() {
			t.Fatal("the acquisition made no Commit: the test held nothing back")
		}
		// The wait ends with at least TTL/4 ahead; the slack covers this
		// goroutine being descheduled between Acquire's return and the
		// reading of the clock on a loaded machine (a TTL/20 pause, 200 ms).
		t.Logf("Acquire returned the lease %s before its deadline", left)
		if left < ttl/4-ttl/20 {
			t.Fatalf("Acquire returned a lease %s before its deadline (TTL %s); want at least a quarter of the TTL", left, ttl)
		}
		if err := l.Context().Err(); err != nil {
			t.Fatalf("the lease was born lost: %v", context.Cause(l.Context()))
		}
	})
}
