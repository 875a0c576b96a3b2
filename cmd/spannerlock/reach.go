package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/spanner"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// connectTimeout bounds the TCP connection spannerlock opens to Spanner's
// endpoint before anything else, so that an endpoint where nothing listens
// fails in seconds, saying so, instead of after the Spanner client's
// retries (a minute and more) with a message about its session pool. It
// also bounds each of gRPC's connections, up to the server's HTTP/2
// preface, which any gRPC server sends at once: an endpoint that accepts
// connections and never answers (a load balancer or a tunnel with nothing
// behind it) fails its calls then, not at their own deadlines (9s at the
// default TTL) or at gRPC's 20s.
const connectTimeout = 3 * time.Second

// defaultEndpoint is where the Spanner client connects unless
// SPANNER_EMULATOR_HOST says otherwise.
const defaultEndpoint = "spanner.googleapis.com:443"

// endpoint is the host:port the Spanner client dials, and what set it.
type endpoint struct {
	addr, source string
}

func (e endpoint) String() string {
	if e.source == "" {
		return e.addr
	}
	return e.addr + " (" + e.source + ")"
}

func (a *app) endpoint() endpoint {
	if h, ok := a.lookupEnv("SPANNER_EMULATOR_HOST"); ok && h != "" {
		for _, scheme := range []string{"http://", "https://", "passthrough:///"} {
			h = strings.TrimPrefix(h, scheme)
		}
		return endpoint{addr: h, source: "SPANNER_EMULATOR_HOST"}
	}
	return endpoint{addr: defaultEndpoint}
}

// reach opens and closes one TCP connection to the endpoint, within
// connectTimeout and ctx. Through a proxy it would test the wrong
// connection, so it is skipped there; the Spanner client's own failures
// then say what happened (health).
func reach(ctx context.Context, ep endpoint) error {
	if proxy, err := http.ProxyFromEnvironment(&http.Request{URL: &url.URL{Scheme: "https", Host: ep.addr}}); err == nil && proxy == nil {
		d := net.Dialer{Timeout: connectTimeout}
		conn, err := d.DialContext(ctx, "tcp", ep.addr)
		if err != nil {
			return fmt.Errorf("cannot connect to Spanner at %s: %w", ep, err)
		}
		_ = conn.Close()
	}
	return nil
}

// health records how Spanner's endpoint has been answering, from every RPC
// the Spanner client makes: when the calls started failing for want of an
// answer (unreachable, or no answer in time), and the last such failure,
// which explains a timeout better than the deadline the client reports.
type health struct {
	ep endpoint
	// connected is when the connection to the endpoint was opened.
	connected time.Time

	mu sync.Mutex
	// failingSince is when the first call failed for want of an answer
	// since the last call Spanner answered, zero while it answers.
	failingSince time.Time
	lastFailure  string
	// answered is set once Spanner answered a call.
	answered bool
}

// observe records the outcome of one RPC attempt.
func (h *health) observe(method string, err error) {
	if errors.Is(err, io.EOF) {
		err = nil
	}
	s := status.Convert(err)
	h.mu.Lock()
	defer h.mu.Unlock()
	switch s.Code() {
	case codes.Canceled:
	case codes.Unavailable, codes.DeadlineExceeded:
		if h.failingSince.IsZero() {
			h.failingSince = time.Now()
		}
		msg := s.Message()
		if strings.Contains(msg, "error reading server preface") && strings.Contains(msg, "use of closed network connection") {
			// gRPC closed the connection at connectTimeout (see dialOptions).
			msg = fmt.Sprintf("the endpoint accepted the connection but sent nothing back within %s (no gRPC handshake)",
				formatDuration(connectTimeout))
		}
		h.lastFailure = fmt.Sprintf("%s: %s: %s", method[strings.LastIndex(method, "/")+1:], s.Code(), msg)
	default:
		// An answer, even an error, means Spanner is there.
		h.failingSince, h.answered = time.Time{}, true
	}
}

// failing returns since when every call has failed for want of an answer,
// the last failure, and whether Spanner ever answered; failing is false
// while Spanner answers.
func (h *health) failing() (since time.Time, last string, answered, failing bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.failingSince, h.lastFailure, h.answered, !h.failingSince.IsZero()
}

// dialOptions make every RPC report to h, and bound each connection's
// handshake by connectTimeout.
func (h *health) dialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.DefaultConfig, MinConnectTimeout: connectTimeout}),
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
			invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			err := invoker(ctx, method, req, reply, cc, opts...)
			h.observe(method, err)
			return err
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
			streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			s, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil {
				h.observe(method, err)
				return nil, err
			}
			return &observedStream{ClientStream: s, method: method, h: h}, nil
		}),
	}
}

// observedStream reports the outcome of a streaming call, which arrives
// with its messages.
type observedStream struct {
	grpc.ClientStream
	method string
	h      *health
}

func (s *observedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	s.h.observe(s.method, err)
	return err
}

// unanswered reports whether err says that Spanner did not answer: the
// endpoint is unreachable, or a call ran out of time (the Spanner client
// reports a session it could not get within the deadline as
// DeadlineExceeded, with advice about session leaks).
func unanswered(err error) bool {
	switch spanner.ErrCode(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return errors.Is(err, context.DeadlineExceeded)
}

// noAnswer explains a call that Spanner did not answer: where spannerlock
// connects, and what the last failed attempt said.
func (h *health) noAnswer(within string, err error) error {
	msg := fmt.Sprintf("no answer from Spanner at %s%s", h.ep, within)
	if _, last, _, ok := h.failing(); ok {
		msg += "; the last failed call said: " + last
	}
	return &noAnswerError{msg: msg + ": check --database, the network or SPANNER_EMULATOR_HOST", err: err}
}

// noAnswerError says that Spanner did not answer, and why as far as known.
// It wraps the Spanner client's error without repeating it: that one is a
// deadline, with advice about session leaks that does not apply.
type noAnswerError struct {
	msg string
	err error
}

func (e *noAnswerError) Error() string { return e.msg }
func (e *noAnswerError) Unwrap() error { return e.err }
