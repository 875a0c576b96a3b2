package lease_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/api/option"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/chaos"
	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// silentSpanner is a Client whose spanner.Client reaches the emulator
// through a loopback proxy that can be switched to accept connections and
// forward nothing, as an endpoint with nothing behind it does. silenceAt
// switches it when a chosen RPC is about to be sent, so that an operation
// meets the silence at that step: its Commit, say, whose outcome is then
// unknown.
type silentSpanner struct {
	c     *lease.Client
	proxy *chaos.Proxy
	f     *faults
}

// deadlineTTL is the TTL of the silent Clients: its call timeout (TTL less
// the safety margin) is many times callDeadline, so a call that waits out
// the Client's own bound instead of its caller's is plain to see.
const deadlineTTL = 10 * time.Second

func newSilentSpanner(t *testing.T, db string, opts ...lease.Option) silentSpanner {
	t.Helper()
	p, err := chaos.NewProxy(emulator.Shared(t).Host())
	if err != nil {
		t.Fatal(err)
	}
	// Registered first, so it runs after the Client and its spanner.Client
	// are closed (cleanups run last in, first out).
	t.Cleanup(func() { _ = p.Close() })
	f := &faults{}
	sc := spannerClient(t, db, append(f.options(), option.WithEndpoint("passthrough:///"+p.Addr()))...)
	opts = append([]lease.Option{lease.WithTTL(deadlineTTL)}, opts...)
	return silentSpanner{c: newClientWith(t, sc, opts...), proxy: p, f: f}
}

// silence stops the proxy forwarding until the test ends.
func (s silentSpanner) silence(t *testing.T) {
	s.proxy.Hold(true)
	t.Cleanup(s.proxy.Heal) // before the Clients close: they may release
}

// silenceAt silences the proxy as the n-th RPC (from 1) that match selects
// is about to be sent, so that it and every later RPC go unanswered.
func (s silentSpanner) silenceAt(t *testing.T, n int, match func(rpc) bool) {
	var mu sync.Mutex
	seen := 0
	s.f.setHold(func(r rpc, _ any) {
		mu.Lock()
		defer mu.Unlock()
		if match(r) {
			if seen++; seen == n {
				s.proxy.Hold(true)
			}
		}
	})
	t.Cleanup(s.proxy.Heal)
}

func method(name, tag string) func(rpc) bool {
	return func(r rpc) bool { return strings.HasSuffix(r.method, "/"+name) && r.tag == tag }
}

// callDeadline is the deadline the calls below are given: far shorter than
// the Client's own bound, so that a call that outlives it is seen to.
const callDeadline = time.Second

// lateBound is how long after its context ends a call may return. By then
// a call has only local work left (gRPC noticing the context, a lock, a
// goroutine's wake-up): milliseconds on an idle machine; 400ms leaves
// room for a loaded one. The calls that overran did so by a second (a
// rollback's own bound) or by the call timeout (a read that would settle
// an unknown outcome, or the leaving of a line: ~9s at deadlineTTL).
const lateBound = 400 * time.Millisecond

// ending is how a call's context ends: its deadline passes, or its caller
// cancels it (no deadline), callDeadline from now.
type ending int

const (
	byDeadline ending = iota
	byCancel
)

// returnsPromptly runs call with a context that ends callDeadline from now
// and fails the test if it returns more than lateBound after that, or with
// an error that does not match the context's.
func returnsPromptly(t *testing.T, what string, how ending, call func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(emulator.Context(t))
	defer cancel()
	ends := time.Now().Add(callDeadline)
	if how == byDeadline {
		ctx, cancel = context.WithDeadline(ctx, ends)
		defer cancel()
	} else {
		stop := time.AfterFunc(callDeadline, cancel)
		defer stop.Stop()
	}
	err := call(ctx)
	late := time.Since(ends)
	t.Logf("%s returned %s after its context ended: %v", what, late.Round(time.Millisecond), err)
	if late < 0 {
		t.Fatalf("%s returned before its context ended (%v): Spanner answered it", what, err)
	}
	if late > lateBound {
		t.Errorf("%s returned %s after its context ended, want at most %s", what, late.Round(time.Millisecond), lateBound)
	}
	want := context.DeadlineExceeded
	if how == byCancel {
		want = context.Canceled
	}
	if !errors.Is(err, want) {
		t.Errorf("%s against a Spanner that stopped answering = %v, want an error matching %v", what, err, want)
	}
}

// A call given a context returns soon after that context ends, with its
// error, even when Spanner stops answering at any step: what it could not
// do is left to the TTL and the Client's background clear, not waited for
// under the Client's own, longer bounds.
func TestCallsReturnWhenTheirContextEndsWhileSpannerIsSilent(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		// From the start: every call's first RPC goes unanswered.
		t.Run("silent", func(t *testing.T) {
			db := newDatabase(t)
			ctx := emulator.Context(t)
			s := newSilentSpanner(t, db)
			fatalIf(t, s.c.SetPermits(ctx, "sem", 2), "SetPermits")
			l := mustAcquire(t, ctx, s.c, "held")
			mustAcquire(t, ctx, newClient(t, db), "taken")
			s.silence(t)
			returnsPromptly(t, "Release", byDeadline, l.Release)
			returnsPromptly(t, "TryAcquire", byDeadline, func(ctx context.Context) error {
				_, err := s.c.TryAcquire(ctx, "free")
				return err
			})
			returnsPromptly(t, "Acquire", byDeadline, func(ctx context.Context) error {
				_, err := s.c.Acquire(ctx, "taken")
				return err
			})
			returnsPromptly(t, "AcquirePermit", byDeadline, func(ctx context.Context) error {
				_, err := s.c.AcquirePermit(ctx, "sem")
				return err
			})
			returnsPromptly(t, "ForceRelease", byDeadline, func(ctx context.Context) error {
				_, err := s.c.ForceRelease(ctx, "taken")
				return err
			})
		})
		// The caller cancels (no deadline): Release ends with it.
		t.Run("cancelled", func(t *testing.T) {
			db := newDatabase(t)
			s := newSilentSpanner(t, db)
			l := mustAcquire(t, emulator.Context(t), s.c, "held")
			s.silence(t)
			returnsPromptly(t, "Release", byCancel, l.Release)
		})
		// The Commit is sent and never answered: the outcome is unknown,
		// and the read that would settle it goes unanswered too.
		t.Run("commit", func(t *testing.T) {
			db := newDatabase(t)
			s := newSilentSpanner(t, db)
			l := mustAcquire(t, emulator.Context(t), s.c, "held")
			s.silenceAt(t, 1, method("Commit", "spannerlock-release"))
			returnsPromptly(t, "Release", byDeadline, l.Release)
		})
		t.Run("acquire commit", func(t *testing.T) {
			s := newSilentSpanner(t, newDatabase(t))
			s.silenceAt(t, 1, method("Commit", "spannerlock-acquire"))
			returnsPromptly(t, "TryAcquire", byDeadline, func(ctx context.Context) error {
				_, err := s.c.TryAcquire(ctx, "free")
				return err
			})
		})
		// Spanner answers the transaction's first read and not the next (a
		// shared acquisition reads twice): the transaction has begun, and
		// its rollback goes unanswered too.
		t.Run("second read", func(t *testing.T) {
			s := newSilentSpanner(t, newDatabase(t))
			s.silenceAt(t, 2, method("ExecuteStreamingSql", "spannerlock-acquire"))
			returnsPromptly(t, "TryAcquireShared", byDeadline, func(ctx context.Context) error {
				_, err := s.c.TryAcquireShared(ctx, "free")
				return err
			})
		})
		// A blocked Acquire in line when Spanner falls silent: leaving the
		// line goes unanswered.
		t.Run("in line", func(t *testing.T) {
			db := newDatabase(t)
			ctx := emulator.Context(t)
			s := newSilentSpanner(t, db, lease.WithHolderID("waiter"))
			other := newClient(t, db)
			mustAcquire(t, ctx, other, "taken")
			t.Cleanup(s.proxy.Heal)
			inLine := make(chan struct{})
			returnsPromptly(t, "Acquire", byDeadline, func(actx context.Context) error {
				go func() {
					// Silence Spanner once the waiter is in line.
					for actx.Err() == nil {
						ws, err := other.Waiters(ctx)
						if err == nil && len(ws) > 0 && ws[0].HolderID == "waiter" {
							s.proxy.Hold(true)
							close(inLine)
							return
						}
						time.Sleep(20 * time.Millisecond)
					}
				}()
				_, err := s.c.Acquire(actx, "taken")
				return err
			})
			select {
			case <-inLine:
			default:
				t.Fatal("the waiter was not seen in line before its deadline")
			}
		})
	})
}

// A Release given a context derived from the lease's own Context (as
// Campaign's leader work is) is not ended by the release ending that
// Context: the lease is released, not left to the background.
func TestAReleaseFromTheLeasesOwnContextReleases(t *testing.T) {
	eachDialect(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		c := newClient(t, db)
		observer := newClient(t, db)
		for i := range 5 {
			l := mustAcquire(t, ctx, c, "lock")
			work, cancel := context.WithCancel(l.Context())
			err := l.Release(work)
			cancel()
			fatalIf(t, err, "Release #%d from the lease's own Context", i)
			set, err := c.AcquireAll(ctx, "a", "b")
			fatalIf(t, err, "AcquireAll")
			work, cancel = context.WithCancel(set.Context())
			err = set.Release(work)
			cancel()
			fatalIf(t, err, "LeaseSet.Release #%d from the set's own Context", i)
		}
		for _, name := range []string{"lock", "a", "b"} {
			if h, err := observer.Holder(ctx, name); !errors.Is(err, lease.ErrNoHolder) {
				t.Errorf("Holder(%s) after the releases = %+v, %v; want ErrNoHolder", name, h, err)
			}
		}
	})
}
