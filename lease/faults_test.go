package lease_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// fault is what happens to one RPC, as a network does it.
type fault int

const (
	pass fault = iota
	// notSent fails the RPC before it reaches Spanner, as a refused or cut
	// connection does (UNAVAILABLE: the Spanner client may retry it).
	notSent
	// replyLost lets Spanner apply the RPC, then reports DEADLINE_EXCEEDED:
	// for a Commit, an ambiguous outcome.
	replyLost
	// delayed holds the RPC until its deadline and fails it unsent, as a
	// blackholed connection does.
	delayed
)

func (f fault) String() string {
	return [...]string{"pass", "not sent", "reply lost", "delayed past the deadline"}[f]
}

var allFaults = []fault{notSent, replyLost, delayed}

// rpc is one data-plane call: its method and its transaction tag, if any.
type rpc struct{ method, tag string }

func (r rpc) String() string {
	m := r.method[strings.LastIndex(r.method, "/")+1:]
	if r.tag == "" {
		return m
	}
	return m + "[" + r.tag + "]"
}

// renewals counts only the Client's renewal transactions.
func renewals(r rpc) bool { return r.tag == "spannerlock-renew" }

// notRenewals counts every RPC but the Client's background renewals. It
// also leaves out untagged BeginTransaction RPCs: the Spanner client sends
// the BeginTransaction that retries an aborted transaction without its tag,
// and the emulator aborts a renewal whenever another transaction is open,
// so such a retry is as likely a renewal's as the operation's. Counting it
// let a fault planned for an operation's next RPC strike a renewal instead.
func notRenewals(r rpc) bool { return r.tag != "spannerlock-renew" && !untaggedBegin(r) }

func untaggedBegin(r rpc) bool {
	return r.tag == "" && strings.HasSuffix(r.method, "/BeginTransaction")
}

// maxBound is the furthest deadline any RPC of the lease package may have:
// every call is bounded by the Client (at most 10s), never by the Spanner
// client's defaults (up to an hour for a commit) nor by a test's context.
const maxBound = lease.MaxCallTimeout

// faults injects failures into the data-plane RPCs of one spanner.Client
// (session management is left alone). Armed, it counts the RPCs a filter
// selects and applies a plan of faults by index; partitioned, it fails
// every RPC. It also records every counted RPC without a bound.
type faults struct {
	mu        sync.Mutex
	armed     bool
	counts    func(rpc) bool
	plan      map[int]fault
	n         int
	trace     []string
	hits      int
	cut       bool
	unbounded []string
	// hold, when set, is called for every data-plane RPC with its request
	// before it is sent, and may block it.
	hold func(rpc, any)
	// reply, when set, is called for every unary data-plane RPC after
	// Spanner answered it and before the caller sees the answer.
	reply func(rpc)
}

func (f *faults) options() []option.ClientOption {
	return []option.ClientOption{
		option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(f.unary)),
		option.WithGRPCDialOption(grpc.WithChainStreamInterceptor(f.stream)),
	}
}

// arm starts counting the RPCs counts selects, applying plan by index.
func (f *faults) arm(counts func(rpc) bool, plan map[int]fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armed, f.counts, f.plan, f.n, f.trace, f.hits = true, counts, plan, 0, nil, 0
}

// disarm stops counting and returns the RPCs seen, marked with their faults.
func (f *faults) disarm() (trace []string, hits int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armed = false
	return f.trace, f.hits
}

// counted returns how many RPCs were counted since arm.
func (f *faults) counted() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

// lastPlanned returns the index of the last planned fault, or -1.
func (f *faults) lastPlanned() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	last := -1
	for k := range f.plan {
		last = max(last, k)
	}
	return last
}

// partition fails every RPC from now on, or stops doing so.
func (f *faults) partition(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cut = on
}

func (f *faults) unboundedRPCs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.unbounded
}

// dataPlane reports whether a method reads or writes data; the session
// pool's own RPCs and rollbacks are not part of any operation's sequence.
func dataPlane(method string) bool {
	for _, m := range []string{"/ExecuteSql", "/ExecuteStreamingSql", "/ExecuteBatchDml", "/Read", "/StreamingRead", "/Commit", "/BeginTransaction"} {
		if strings.HasSuffix(method, m) {
			return true
		}
	}
	return false
}

func tagOf(req any) string {
	if r, ok := req.(interface {
		GetRequestOptions() *spannerpb.RequestOptions
	}); ok {
		return r.GetRequestOptions().GetTransactionTag()
	}
	return ""
}

// decide returns the fault for one RPC and records it.
func (f *faults) decide(ctx context.Context, r rpc) fault {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cut {
		return notSent
	}
	if !f.armed || !f.counts(r) {
		return pass
	}
	if d, ok := ctx.Deadline(); !ok || time.Until(d) > maxBound {
		f.unbounded = append(f.unbounded, r.String())
	}
	k := f.plan[f.n]
	f.n++
	if k != pass {
		f.hits++
		f.trace = append(f.trace, fmt.Sprintf("%s (%s)", r, k))
	} else {
		f.trace = append(f.trace, r.String())
	}
	return k
}

func (f *faults) holdFor(r rpc, req any) {
	f.mu.Lock()
	hold := f.hold
	f.mu.Unlock()
	if hold != nil {
		hold(r, req)
	}
}

// setReply installs a reply hook.
func (f *faults) setReply(reply func(rpc)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reply = reply
}

// setHold installs a hold hook.
func (f *faults) setHold(hold func(rpc, any)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hold = hold
}

var (
	errNotSent   = status.Error(codes.Unavailable, "injected: not sent")
	errReplyLost = status.Error(codes.DeadlineExceeded, "injected: applied, reply lost")
	errDelayed   = status.Error(codes.DeadlineExceeded, "injected: delayed past the deadline")
)

// waitDeadline blocks as a blackholed call does, until its deadline (capped,
// so an unbounded call, recorded by decide, fails the test rather than hang it).
func waitDeadline(ctx context.Context) {
	t := time.NewTimer(2 * maxBound)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (f *faults) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if !dataPlane(method) {
		return invoke(ctx, method, req, reply, cc, opts...)
	}
	r := rpc{method: method, tag: tagOf(req)}
	k := f.decide(ctx, r)
	f.holdFor(r, req)
	switch k {
	case notSent:
		return errNotSent
	case delayed:
		waitDeadline(ctx)
		return errDelayed
	}
	err := invoke(ctx, method, req, reply, cc, opts...)
	f.mu.Lock()
	onReply := f.reply
	f.mu.Unlock()
	if onReply != nil {
		onReply(r)
	}
	if k == replyLost && err == nil {
		return errReplyLost
	}
	return err
}

func (f *faults) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if !dataPlane(method) {
		return streamer(ctx, desc, cc, method, opts...)
	}
	sctx, cancel := context.WithCancel(ctx)
	cs, err := streamer(sctx, desc, cc, method, opts...)
	if err != nil {
		cancel()
		return nil, err
	}
	return &faultyStream{ClientStream: cs, f: f, ctx: ctx, cancel: cancel, method: method}, nil
}

// faultyStream decides its fault when the request is sent, since the
// request carries the tag.
type faultyStream struct {
	grpc.ClientStream
	f      *faults
	ctx    context.Context
	cancel context.CancelFunc
	method string
	fault  fault
}

func (s *faultyStream) SendMsg(m any) error {
	r := rpc{method: s.method, tag: tagOf(m)}
	s.fault = s.f.decide(s.ctx, r)
	s.f.holdFor(r, m)
	if s.fault == notSent || s.fault == delayed {
		s.cancel()
		return nil // the error surfaces in RecvMsg, as gRPC's does
	}
	return s.ClientStream.SendMsg(m)
}

func (s *faultyStream) CloseSend() error {
	if s.fault == notSent || s.fault == delayed {
		return nil
	}
	return s.ClientStream.CloseSend()
}

func (s *faultyStream) RecvMsg(m any) error {
	switch s.fault {
	case notSent:
		return errNotSent
	case delayed:
		waitDeadline(s.ctx)
		return errDelayed
	case replyLost:
		// Let Spanner run it to the end, then lose every reply.
		for {
			if err := s.ClientStream.RecvMsg(m); err != nil {
				s.cancel()
				if err == io.EOF {
					return errReplyLost
				}
				return err
			}
		}
	}
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		s.cancel()
	}
	return err
}

// waitFor polls cond until it holds, failing the test after limit; for
// conditions that a background loop makes true.
func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not so after %s", what, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
