package lease_test

import (
	"context"
	"errors"
	"sync/atomic"
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

// closingConn fails every RPC, once closing is set, as gRPC does on a
// connection that is closing (grpc.ErrClientConnClosing): CANCELLED with
// the message "grpc: the client connection is closing". A closed
// spanner.Client says "invalid session pool" before it gets that far; a
// connection closed under a live pool (a process shutting down, a client
// whose pool outlives its connection) says this.
type closingConn struct {
	closing atomic.Bool
	sent    atomic.Int64 // RPCs failed
}

var errConnClosing = status.Error(codes.Canceled, "grpc: the client connection is closing")

func (cc *closingConn) options() []option.ClientOption {
	return []option.ClientOption{
		option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, conn *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if cc.closing.Load() {
				cc.sent.Add(1)
				return errConnClosing
			}
			return invoker(ctx, method, req, reply, conn, opts...)
		})),
		option.WithGRPCDialOption(grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, conn *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			if cc.closing.Load() {
				cc.sent.Add(1)
				return nil, errConnClosing
			}
			return streamer(ctx, desc, conn, method, opts...)
		})),
	}
}

// An acquisition whose connection is closing, or whose spanner.Client was
// closed, fails at once: no retry mends either. A closing connection used
// to be retried as CANCELLED (from inside a transaction, as ABORTED
// wrapping it) until the caller's context ended.
func TestAcquireOverAClosingConnectionFailsPromptly(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		for _, mode := range []string{"closing", "closing, warm", "closed", "closed, warm"} {
			cc := &closingConn{}
			sc := spannerClient(t, db, cc.options()...)
			c := newClientWith(t, sc, lease.WithTTL(2*time.Second))
			if mode == "closing, warm" || mode == "closed, warm" {
				fatalIf(t, mustAcquire(t, ctx, c, "warm").Release(ctx), "Release")
			}
			if mode == "closed" || mode == "closed, warm" {
				sc.Close()
			}
			cc.closing.Store(true)
			actx, cancel := context.WithTimeout(ctx, 20*time.Second)
			_, err := c.Acquire(actx, "job")
			ended := actx.Err()
			cancel()
			switch {
			case err == nil:
				t.Fatalf("%s: Acquire succeeded", mode)
			case ended != nil || errors.Is(err, context.DeadlineExceeded):
				t.Errorf("%s: Acquire returned only when its context ended (%d RPCs failed): %v", mode, cc.sent.Load(), err)
			case errors.Is(err, lease.ErrNotAcquired):
				t.Errorf("%s: Acquire reported an outage as contention: %v", mode, err)
			}
			t.Logf("%s: %d RPCs failed: %v", mode, cc.sent.Load(), err)
		}
	})
}

// A waiter whose connection starts closing while it waits in line stops
// waiting at once with an error, rather than poll until its context ends.
func TestWaiterOverAClosingConnectionFailsPromptly(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		holder := newClient(t, db, lease.WithTTL(2*time.Second))
		held := mustAcquire(t, ctx, holder, "job")
		defer func() { _ = held.Release(ctx) }()
		cc := &closingConn{}
		c := newClientWith(t, spannerClient(t, db, cc.options()...), lease.WithTTL(2*time.Second))
		actx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		got := make(chan error, 1)
		go func() {
			_, err := c.Acquire(actx, "job")
			got <- err
		}()
		waitForWaiter(t, ctx, holder, "job")
		cc.closing.Store(true)
		err := <-got
		switch {
		case err == nil:
			t.Fatal("a waiter whose connection is closing acquired")
		case actx.Err() != nil:
			t.Errorf("a waiter whose connection is closing returned only when its context ended (%d RPCs failed): %v", cc.sent.Load(), err)
		case spanner.ErrCode(err) != codes.Canceled:
			t.Errorf("the waiter's error does not carry the closing connection's CANCELLED: %v", err)
		}
		t.Logf("%d RPCs failed: %v", cc.sent.Load(), err)
	})
}
