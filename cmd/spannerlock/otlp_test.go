//go:build unix

package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// spanNamed returns the spans of trace named name.
func spanNamed(spans []span, trace, name string) []span {
	var out []span
	for _, s := range spans {
		if s.traceID == trace && s.name == name {
			out = append(out, s)
		}
	}
	return out
}

// oneSpan returns the one span of trace named name, failing the test
// unless there is exactly one.
func oneSpan(t *testing.T, spans []span, trace, name string) span {
	t.Helper()
	found := spanNamed(spans, trace, name)
	if len(found) != 1 {
		t.Fatalf("%d spans %q in trace %s, want 1; spans:\n%s", len(found), name, trace, describeSpans(spans))
	}
	return found[0]
}

// runOf returns the span of the run of spannerlock that exited with code.
func runOf(t *testing.T, spans []span, command string, code int) span {
	t.Helper()
	var found []span
	for _, s := range spans {
		if s.name == "spannerlock "+command && s.attrs["process.exit.code"] == strconv.Itoa(code) {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d spans of a spannerlock %s that exited %d, want 1; spans:\n%s", len(found), command, code, describeSpans(spans))
	}
	return found[0]
}

func describeSpans(spans []span) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "  %s %s parent %s: %q (%s) %v\n", s.traceID, s.id, s.parentID, s.name, s.scope, s.attrs)
	}
	return b.String()
}

// With an OTLP endpoint set, spannerlock exports its spans, lease's and the
// Spanner client's, and lease's metrics, before it exits, whatever its exit
// status and also when a signal ended it: over gRPC when
// OTEL_EXPORTER_OTLP_PROTOCOL says so, else over HTTP, also to the
// endpoints of OTEL_EXPORTER_OTLP_TRACES_ENDPOINT and
// OTEL_EXPORTER_OTLP_METRICS_ENDPOINT. A run joins the trace of the
// TRACEPARENT it was started with; CMD runs in a span of its own, whose
// trace context it gets as TRACEPARENT and TRACESTATE.
func TestOTLPExport(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     func(col *collector) []string
		service string
	}{
		{"grpc", func(col *collector) []string {
			return []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + col.endpoint(protocolGRPC), "OTEL_EXPORTER_OTLP_PROTOCOL=grpc"}
		}, "spannerlock"},
		{"http-by-default-to-signal-endpoints", func(col *collector) []string {
			base := col.endpoint(protocolHTTPProtobuf)
			return []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=" + base + "/v1/traces", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=" + base + "/v1/metrics",
				"OTEL_SERVICE_NAME=nightly-report"}
		}, "nightly-report"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			col := startCollector(t)
			c := newCLI(t)
			c.env = append(c.env, tc.env(col)...)

			// CMD exits 3 within the trace of the caller's TRACEPARENT.
			const callerTrace, callerSpan = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
			callerEnv := append(slices.Clone(c.env), "TRACEPARENT=00-"+callerTrace+"-"+callerSpan+"-01", "TRACESTATE=vendor=value")
			r := run(t, c.dir, callerEnv, nil, "lock", "deploy", "--", "sh", "-c", `echo "$TRACEPARENT $TRACESTATE" > trace; exit 3`)
			if r.code != 3 {
				t.Fatalf("exit %d, want CMD's 3; stderr:\n%s", r.code, r.stderr)
			}
			spans := col.allSpans()
			root := runOf(t, spans, "lock", 3)
			if root.traceID != callerTrace || root.parentID != callerSpan || !root.statusError || root.resource["service.name"] != tc.service {
				t.Errorf("the run's span %+v: want it in the caller's trace, under the caller's span, failed, of service %s", root, tc.service)
			}
			acquire := oneSpan(t, spans, callerTrace, "spannerlock.TryAcquire")
			cmd := oneSpan(t, spans, callerTrace, "sh")
			release := oneSpan(t, spans, callerTrace, "spannerlock.Release")
			for _, s := range []span{acquire, cmd, release} {
				if s.parentID != root.id {
					t.Errorf("span %q is not a child of the run's span", s.name)
				}
			}
			if acquire.attrs["spannerlock.name"] != "deploy" || acquire.attrs["spannerlock.outcome"] != "acquired" {
				t.Errorf("TryAcquire's attributes %v", acquire.attrs)
			}
			if cmd.attrs["process.exit.code"] != "3" || !cmd.statusError || acquire.finishNanos > cmd.startNanos || cmd.finishNanos > release.startNanos {
				t.Errorf("CMD's span %+v: want exit code 3, failed, between the acquisition and the release", cmd)
			}
			if got, want := c.read("trace"), fmt.Sprintf("00-%s-%s-01 vendor=value\n", callerTrace, cmd.id); got != want {
				t.Errorf("CMD got TRACEPARENT and TRACESTATE %q, want %q: its own span in the exported trace", got, want)
			}
			var spannerSpans int
			for _, s := range spans {
				if s.traceID == callerTrace && strings.HasPrefix(s.scope, "cloud.google.com/go/spanner") {
					spannerSpans++
				}
			}
			if spannerSpans == 0 {
				t.Errorf("no span of the Spanner client in the trace:\n%s", describeSpans(spans))
			}
			pid := root.resource["process.pid"]
			if unit, points := col.metric("spannerlock.lease.acquisitions", pid); unit != "{acquisition}" ||
				!slices.ContainsFunc(points, func(p point) bool {
					return p.attrs["spannerlock.kind"] == "lock" && p.attrs["spannerlock.result"] == "acquired" &&
						p.attrs["spannerlock.table"] == table && p.value == 1
				}) {
				t.Errorf("spannerlock.lease.acquisitions of the run: unit %q, points %+v; want one lock acquired", unit, points)
			}
			if _, points := col.metric("spannerlock.lease.held", pid); !slices.ContainsFunc(points, func(p point) bool {
				return p.attrs["spannerlock.kind"] == "lock" && p.value == 0
			}) {
				t.Errorf("spannerlock.lease.held of the run: %+v; want none held at the end", points)
			}

			// --try finds the lock held: exit 75.
			held, err := c.client(lease.WithHolderID("rival")).Acquire(testContext(t), "deploy")
			if err != nil {
				t.Fatal(err)
			}
			c.expect(exitNotAcquired, "lock", "--try", "deploy", "--", "true")
			spans = col.allSpans()
			root = runOf(t, spans, "lock", exitNotAcquired)
			if refused := oneSpan(t, spans, root.traceID, "spannerlock.TryAcquire"); refused.attrs["spannerlock.outcome"] != "not_acquired" {
				t.Errorf("refused TryAcquire's attributes %v", refused.attrs)
			}
			if _, points := col.metric("spannerlock.lease.acquisitions", root.resource["process.pid"]); !slices.ContainsFunc(points, func(p point) bool {
				return p.attrs["spannerlock.result"] == "not_acquired" && p.value == 1
			}) {
				t.Errorf("spannerlock.lease.acquisitions of the refused run: %+v", points)
			}
			if err := held.Release(testContext(t)); err != nil {
				t.Fatal(err)
			}

			// SIGTERM, forwarded to CMD, ends the run: CMD's status 143.
			p := c.start("lock", "deploy", "--", "sh", "-c", "echo ready > ready; exec sleep 300")
			c.waitFile("ready")
			p.signal(syscall.SIGTERM)
			p.expect(128 + int(syscall.SIGTERM))
			spans = col.allSpans()
			root = runOf(t, spans, "lock", 128+int(syscall.SIGTERM))
			if cmd := oneSpan(t, spans, root.traceID, "sh"); cmd.attrs["process.exit.code"] != strconv.Itoa(128+int(syscall.SIGTERM)) {
				t.Errorf("CMD's span after SIGTERM: %v", cmd.attrs)
			}
			oneSpan(t, spans, root.traceID, "spannerlock.Release")

			// run-once and elect run CMD from lease's callbacks: CMD's span
			// is still in the run's trace, and its TRACEPARENT names it.
			for _, args := range [][]string{{"run-once", "job", "--slot", slot}, {"elect", "leader"}} {
				c.expect(4, append(args, "--", "sh", "-c", `echo "$TRACEPARENT" > traceparent; exit 4`)...)
				spans = col.allSpans()
				root = runOf(t, spans, args[0], 4)
				cmd := oneSpan(t, spans, root.traceID, "sh")
				if got, want := c.read("traceparent"), "00-"+root.traceID+"-"+cmd.id+"-01\n"; got != want || cmd.attrs["process.exit.code"] != "4" {
					t.Errorf("%s: CMD's span %v, TRACEPARENT %q; want exit code 4 and %q", args[0], cmd.attrs, got, want)
				}
			}
		})
	}
}

// A collector that does not answer costs the run nothing but a warning and
// a bounded wait at exit: the exit status is CMD's.
func TestOTLPCollectorDown(t *testing.T) {
	c := newCLI(t)
	c.env = append(c.env, "OTEL_EXPORTER_OTLP_ENDPOINT=http://"+emulator.ClosedPort(t), "OTEL_EXPORTER_OTLP_TIMEOUT=500")
	r := c.expect(3, "lock", "x", "--", "sh", "-c", "touch ran; exit 3")
	if !c.exists("ran") || r.stderr == "" {
		t.Fatalf("CMD ran: %v; stderr %q: want CMD run and the failed export reported", c.exists("ran"), r.stderr)
	}
}

func TestReadOTelConfig(t *testing.T) {
	for _, tc := range []struct {
		env     map[string]string
		want    otelConfig
		wantErr string
	}{
		{env: nil, want: otelConfig{}},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, want: otelConfig{}},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, want: otelConfig{traces: "http/protobuf", metrics: "http/protobuf"}},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, want: otelConfig{traces: "grpc", metrics: "grpc"}},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/protobuf"},
			want: otelConfig{traces: "grpc", metrics: "http/protobuf"}},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, want: otelConfig{traces: "http/protobuf"}},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://c:4318/v1/metrics"}, want: otelConfig{metrics: "http/protobuf"}},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_METRICS_EXPORTER": "none"}, want: otelConfig{traces: "http/protobuf"}},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "otlp"}, want: otelConfig{traces: "http/protobuf", metrics: "http/protobuf"}},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}, want: otelConfig{}},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"},
			wantErr: "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/json: spannerlock exports OTLP over grpc or http/protobuf"},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "zipkin"},
			wantErr: "OTEL_TRACES_EXPORTER=zipkin: spannerlock exports with otlp, or not at all with none"},
	} {
		got, err := readOTelConfig(func(k string) string { return tc.env[k] })
		switch {
		case tc.wantErr != "" && (err == nil || err.Error() != tc.wantErr):
			t.Errorf("%v: error %v, want %q", tc.env, err, tc.wantErr)
		case tc.wantErr == "" && (err != nil || got != tc.want):
			t.Errorf("%v: %+v, %v; want %+v", tc.env, got, err, tc.want)
		}
	}
}

func TestEnvCarrierKeys(t *testing.T) {
	for key, want := range map[string]string{"traceparent": "TRACEPARENT", "tracestate": "TRACESTATE", "baggage": "BAGGAGE", "x-b3-traceid": "X_B3_TRACEID"} {
		if got := envKey(key); got != want {
			t.Errorf("envKey(%q) = %q, want %q", key, got, want)
		}
	}
}
