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
	"google.golang.org/grpc/metadata"
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
	// holdsLocks cuts the RPC's transaction off from Spanner as it is
	// sent: a statement still runs and takes its locks, a Commit or
	// Rollback never arrives, and the caller waits until its deadline. Its
	// later RPCs are not sent, and (in the lock model) its locks last until
	// its deadline: a client paused or partitioned mid-transaction.
	holdsLocks
	// cancelled fails the RPC unsent with CANCELLED, though its caller's
	// context is live: something between the caller and Spanner cancelled
	// it. Not among allFaults: review_test.go tries it where it matters.
	cancelled
)

func (f fault) String() string {
	return [...]string{"pass", "not sent", "reply lost", "delayed past the deadline", "holds its locks until its deadline", "cancelled"}[f]
}

var allFaults = []fault{notSent, replyLost, delayed, holdsLocks}

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
	// model, when set, models Spanner's locks across the spanner Clients
	// that share it (lockmodel_test.go).
	model *lockModel
	// clearTimedOut is when a release or background clear (clearTag) with
	// no fault planned and no lock-model wait last ran out of its deadline
	// before Spanner answered: what a loaded machine does to a call, which
	// no fault of the case explains. An abort is retried within the
	// attempt, so only the attempt's end counts.
	clearTimedOut time.Time
}

// noteAnswer records a clear that ran out of its deadline on Spanner's side
// (see clearTimedOut).
func (f *faults) noteAnswer(r rpc, k fault, err error) {
	if k != pass || r.tag != clearTag || status.Code(err) != codes.DeadlineExceeded {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.clearTimedOut = time.Now()
}

// lastClearTimeout returns when a clear last ran out of its deadline on
// Spanner's side, or zero.
func (f *faults) lastClearTimeout() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.clearTimedOut
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

// dataPlane reports whether a method reads or writes data, or begins or
// ends a transaction; the session pool's own RPCs are not part of any
// operation's sequence.
func dataPlane(method string) bool {
	for _, m := range []string{"/ExecuteSql", "/ExecuteStreamingSql", "/ExecuteBatchDml", "/Read", "/StreamingRead", "/Commit", "/BeginTransaction", "/Rollback"} {
		if strings.HasSuffix(method, m) {
			return true
		}
	}
	return false
}

// tagOf is a request's transaction tag. Rollback and BeginTransaction
// requests carry none; the lock model knows the transaction they belong to.
func (f *faults) tagOf(req any) string {
	if r, ok := req.(interface {
		GetRequestOptions() *spannerpb.RequestOptions
	}); ok && r.GetRequestOptions().GetTransactionTag() != "" {
		return r.GetRequestOptions().GetTransactionTag()
	} else if ok && r.GetRequestOptions().GetRequestTag() != "" {
		return r.GetRequestOptions().GetRequestTag() // a tagged read outside transactions
	}
	if f.model != nil {
		return f.model.tagOf(req)
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
	errCancelled = status.Error(codes.Canceled, "injected: context canceled")
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
	if !dataPlane(method) || ctx.Value(unfaulted{}) != nil {
		return invoke(ctx, method, req, reply, cc, opts...)
	}
	r := rpc{method: method, tag: f.tagOf(req)}
	k := f.decide(ctx, r)
	p := f.model.before(ctx, req, r.tag, cc)
	if p.refuse != nil {
		return p.refuse
	}
	f.holdFor(r, req)
	isEnd := strings.HasSuffix(method, "/Commit") || strings.HasSuffix(method, "/Rollback")
	switch {
	case k == cancelled:
		f.model.after(p, method, false, nil)
		return errCancelled
	case k == notSent:
		f.model.after(p, method, false, nil)
		if strings.HasSuffix(method, "/Rollback") {
			abandon(cc, openTransaction(req))
		}
		return errNotSent
	case k == delayed:
		abandon(cc, openTransaction(req))
		waitDeadline(ctx)
		f.model.after(p, method, false, nil)
		return errDelayed
	case k == holdsLocks && isEnd:
		f.model.stick(p, cc)
		waitDeadline(ctx)
		return errDelayed
	}
	err := invoke(ctx, method, req, reply, cc, opts...)
	f.noteAnswer(r, k, err)
	f.model.answered(p, method, err, transactionID(reply))
	if k == holdsLocks {
		f.model.stick(p, cc)
		waitDeadline(ctx)
		return errDelayed
	}
	f.mu.Lock()
	onReply := f.reply
	f.mu.Unlock()
	if onReply != nil {
		onReply(r)
	}
	if k == replyLost && err == nil {
		if sel, session := selectorOf(req); sel.GetBegin() != nil {
			abandon(cc, txnRef{session, transactionID(reply)})
		}
		return errReplyLost
	}
	return err
}

// abandon rolls back, on the emulator, a transaction whose client can no
// longer use it after a fault: a Commit or Rollback that will never be
// sent, a statement held past its deadline, or a transaction whose ID only
// the lost reply of its first statement carried. On Spanner such a
// transaction lies idle, keeping the locks of what it read (the lock
// model keeps them until its deadline) without holding up transactions
// that do not conflict with it; the emulator, which runs one transaction
// at a time, would refuse or hold up every other meanwhile.
func abandon(cc grpc.ClientConnInterface, t txnRef) {
	if cc == nil || t.session == "" || len(t.id) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), unfaulted{}, true), 5*time.Second)
	defer cancel()
	_, _ = spannerpb.NewSpannerClient(cc).Rollback(ctx, &spannerpb.RollbackRequest{Session: t.session, TransactionId: t.id})
}

// txnRef names a read-write transaction on Spanner.
type txnRef struct {
	session string
	id      []byte
}

// openTransaction names the read-write transaction, already begun, that a
// request belongs to, if any.
func openTransaction(req any) txnRef {
	switch r := req.(type) {
	case *spannerpb.CommitRequest:
		return txnRef{r.GetSession(), r.GetTransactionId()}
	case *spannerpb.RollbackRequest:
		return txnRef{r.GetSession(), r.GetTransactionId()}
	}
	sel, session := selectorOf(req)
	return txnRef{session, sel.GetId()}
}

// transactionID is the ID of the transaction a response begins, if any.
func transactionID(reply any) []byte {
	switch r := reply.(type) {
	case *spannerpb.ResultSet:
		return r.GetMetadata().GetTransaction().GetId()
	case *spannerpb.PartialResultSet:
		return r.GetMetadata().GetTransaction().GetId()
	case *spannerpb.Transaction:
		return r.GetId()
	case *spannerpb.ExecuteBatchDmlResponse:
		if rs := r.GetResultSets(); len(rs) > 0 {
			return rs[0].GetMetadata().GetTransaction().GetId()
		}
	}
	return nil
}

func (f *faults) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if !dataPlane(method) {
		return streamer(ctx, desc, cc, method, opts...)
	}
	// The real stream is opened when the request is sent, once its fault is
	// known: a request that is not sent never opens one.
	return &faultyStream{f: f, ctx: ctx, open: func(ctx context.Context) (grpc.ClientStream, error) {
		return streamer(ctx, desc, cc, method, opts...)
	}, method: method, cc: cc}, nil
}

// faultyStream decides its fault when the request is sent, since the
// request carries the tag.
type faultyStream struct {
	f      *faults
	ctx    context.Context
	open   func(context.Context) (grpc.ClientStream, error)
	cs     grpc.ClientStream // nil until the request is sent
	cancel context.CancelFunc
	method string
	cc     *grpc.ClientConn
	r      rpc
	fault  fault
	p      pending
	// failed is the error every call returns when the request was not sent.
	failed error
	// first is set once the first response (which names a transaction
	// begun inline) has been seen.
	first bool
	// session and begins describe the request: its Spanner session, and
	// whether it begins its transaction; began is the ID the first
	// response gave that transaction.
	session string
	begins  bool
	began   []byte
}

func (s *faultyStream) SendMsg(m any) error {
	r := rpc{method: s.method, tag: s.f.tagOf(m)}
	s.r = r
	s.fault = s.f.decide(s.ctx, r)
	s.p = s.f.model.before(s.ctx, m, r.tag, s.cc)
	if s.p.refuse != nil {
		s.failed = s.p.refuse
		return nil //nolint:nilerr // as in gRPC, a stream's error surfaces when the caller reads
	}
	s.f.holdFor(r, m)
	sel, session := selectorOf(m)
	s.session, s.begins = session, sel.GetBegin() != nil
	switch s.fault {
	case notSent, cancelled:
		s.f.model.after(s.p, s.method, false, nil)
		s.failed = errNotSent
		if s.fault == cancelled {
			s.failed = errCancelled
		}
		return nil
	case delayed:
		s.f.model.after(s.p, s.method, false, nil)
		abandon(s.cc, openTransaction(m))
		waitDeadline(s.ctx)
		s.failed = errDelayed
		return nil
	}
	sctx, cancel := context.WithCancel(s.ctx)
	cs, err := s.open(sctx)
	if err != nil {
		cancel()
		s.f.noteAnswer(r, s.fault, err)
		s.failed = err
		return nil //nolint:nilerr // as in gRPC, a stream's error surfaces when the caller reads
	}
	s.cs, s.cancel = cs, cancel
	err = cs.SendMsg(m)
	s.f.noteAnswer(r, s.fault, err)
	return err
}

func (s *faultyStream) Context() context.Context { return s.ctx }

func (s *faultyStream) Trailer() metadata.MD {
	if s.cs == nil {
		return nil
	}
	return s.cs.Trailer()
}

func (s *faultyStream) Header() (metadata.MD, error) {
	if s.cs == nil {
		return nil, s.failed
	}
	return s.cs.Header()
}

func (s *faultyStream) CloseSend() error {
	if s.cs == nil {
		return nil
	}
	return s.cs.CloseSend()
}

func (s *faultyStream) RecvMsg(m any) error {
	if s.cs == nil {
		return s.failed
	}
	if s.fault == replyLost || s.fault == holdsLocks {
		// Let Spanner run it to the end, then lose every reply.
		for {
			err := s.recv(m)
			if err != nil {
				s.cancel()
				if s.fault == holdsLocks {
					s.f.model.stick(s.p, s.cc)
					waitDeadline(s.ctx)
					return errDelayed
				}
				if err == io.EOF {
					if s.begins {
						abandon(s.cc, txnRef{s.session, s.began})
					}
					return errReplyLost
				}
				return err
			}
		}
	}
	err := s.recv(m)
	if err != nil {
		s.cancel()
	}
	return err
}

// recv receives one response, telling the lock model what the first says.
func (s *faultyStream) recv(m any) error {
	err := s.cs.RecvMsg(m)
	s.f.noteAnswer(s.r, s.fault, err)
	if !s.first {
		s.first = true
		answer := err
		if answer == io.EOF {
			answer = nil
		}
		s.began = transactionID(m)
		s.f.model.answered(s.p, s.method, answer, s.began)
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
