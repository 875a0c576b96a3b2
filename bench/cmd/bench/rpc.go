package main

import (
	"context"
	"errors"
	"io"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"

	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// sessionMethods manage the client's session pool rather than serve a
// library call. They are counted apart and left out of every RPC figure:
// that is how idle session-pool traffic is subtracted. (An idle client is
// also measured over a full window to show it makes no other RPCs.)
var sessionMethods = map[string]bool{
	"BatchCreateSessions": true,
	"CreateSession":       true,
	"DeleteSession":       true,
	"GetSession":          true,
	"ListSessions":        true,
}

// rpcCounter counts the RPCs one spanner.Client sends, by method, by
// transaction tag, and by error code, with a gRPC interceptor.
type rpcCounter struct {
	mu sync.Mutex
	s  rpcStats
}

// rpcStats is a snapshot of an rpcCounter. Keys of Tags are "Method tag";
// keys of Errors are "Method CODE". Calls counts every attempt, failed or
// not; an RPC that failed with ABORTED is in Calls and in Errors.
type rpcStats struct {
	Calls   map[string]int64 `json:"calls"`
	Session map[string]int64 `json:"session"`
	Tags    map[string]int64 `json:"tags"`
	Errors  map[string]int64 `json:"errors"`
}

func newRPCCounter() *rpcCounter {
	return &rpcCounter{s: newRPCStats()}
}

func newRPCStats() rpcStats {
	return rpcStats{Calls: map[string]int64{}, Session: map[string]int64{}, Tags: map[string]int64{}, Errors: map[string]int64{}}
}

// options install the counter on a spanner.Client.
func (c *rpcCounter) options() []option.ClientOption {
	return []option.ClientOption{
		option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(c.unary)),
		option.WithGRPCDialOption(grpc.WithChainStreamInterceptor(c.stream)),
	}
}

func (c *rpcCounter) snapshot() rpcStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return rpcStats{Calls: maps.Clone(c.s.Calls), Session: maps.Clone(c.s.Session), Tags: maps.Clone(c.s.Tags), Errors: maps.Clone(c.s.Errors)}
}

func (c *rpcCounter) record(method string, req any) {
	name := path.Base(method)
	c.mu.Lock()
	defer c.mu.Unlock()
	if sessionMethods[name] {
		c.s.Session[name]++
		return
	}
	c.s.Calls[name]++
	if tag := transactionTag(req); tag != "" {
		c.s.Tags[name+" "+tag]++
	}
}

func (c *rpcCounter) recordError(method string, err error) {
	if err == nil || errors.Is(err, io.EOF) {
		return
	}
	code := status.Code(err)
	if code == codes.Canceled {
		return // a stream the client stopped reading, not a failure
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.s.Errors[path.Base(method)+" "+code.String()]++
}

func (c *rpcCounter) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	c.record(method, req)
	err := invoker(ctx, method, req, reply, cc, opts...)
	c.recordError(method, err)
	return err
}

// stream counts a streaming RPC once, when its request is sent (the request
// carries the transaction tag), and its error once.
func (c *rpcCounter) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		c.record(method, nil)
		c.recordError(method, err)
		return nil, err
	}
	return &countedStream{ClientStream: s, c: c, method: method}, nil
}

type countedStream struct {
	grpc.ClientStream
	c            *rpcCounter
	method       string
	sent, failed bool
}

func (s *countedStream) SendMsg(m any) error {
	if !s.sent {
		s.sent = true
		s.c.record(s.method, m)
	}
	return s.ClientStream.SendMsg(m)
}

func (s *countedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil && !s.failed {
		s.failed = true
		s.c.recordError(s.method, err)
	}
	return err
}

// transactionTag is the transaction tag a Spanner request carries, if any:
// spannerlock tags its transactions (spannerlock-acquire, -renew, ...).
func transactionTag(req any) string {
	type withOptions interface {
		GetRequestOptions() *spannerpb.RequestOptions
	}
	if r, ok := req.(withOptions); ok {
		return r.GetRequestOptions().GetTransactionTag()
	}
	return ""
}

// sub returns s minus an earlier snapshot of the same counter.
func (s rpcStats) sub(before rpcStats) rpcStats {
	d := newRPCStats()
	for _, p := range []struct{ dst, a, b map[string]int64 }{
		{d.Calls, s.Calls, before.Calls}, {d.Session, s.Session, before.Session},
		{d.Tags, s.Tags, before.Tags}, {d.Errors, s.Errors, before.Errors},
	} {
		for k, v := range p.a {
			if n := v - p.b[k]; n != 0 {
				p.dst[k] = n
			}
		}
	}
	return d
}

// total is every RPC except session management.
func (s rpcStats) total() int64 {
	var n int64
	for _, v := range s.Calls {
		n += v
	}
	return n
}

// aborts is how many RPCs failed with ABORTED: the emulator runs one
// read-write transaction per database at a time and aborts the others,
// which the client retries.
func (s rpcStats) aborts() int64 {
	var n int64
	for k, v := range s.Errors {
		if strings.HasSuffix(k, " "+codes.Aborted.String()) {
			n += v
		}
	}
	return n
}

// okCommits counts Commit RPCs that did not fail. In a window where a
// process only renews, that is the number of renewal ticks.
func (s rpcStats) okCommits() int64 {
	n := s.Calls["Commit"]
	for k, v := range s.Errors {
		if strings.HasPrefix(k, "Commit ") {
			n -= v
		}
	}
	return n
}

// methods formats the per-method counts, e.g. "ExecuteStreamingSql 1, Commit 1".
func (s rpcStats) methods() string {
	keys := slices.Sorted(maps.Keys(s.Calls))
	var b strings.Builder
	for _, k := range keys {
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		b.WriteString(k)
		b.WriteString(" ")
		b.WriteString(itoa(s.Calls[k]))
	}
	if b.Len() == 0 {
		return "none"
	}
	return b.String()
}
