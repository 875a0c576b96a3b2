//go:build unix

package main

import (
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"

	colmetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// collector is a fake OpenTelemetry collector on loopback: it takes OTLP
// over gRPC and over HTTP with protobuf, as a real one does on its ports
// 4317 and 4318, and keeps what it gets.
type collector struct {
	grpcAddr, httpAddr string

	mu      sync.Mutex
	spans   []span
	metrics []*metricspb.ResourceMetrics
}

// span is an exported span with its resource, its IDs in hex and its
// attributes as strings.
type span struct {
	name                    string
	scope                   string
	traceID, id, parentID   string
	attrs, resource         map[string]string
	statusError             bool
	statusMessage           string
	kind                    tracepb.Span_SpanKind
	startNanos, finishNanos uint64
}

func startCollector(t *testing.T) *collector {
	t.Helper()
	col := &collector{}

	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(gs, traceService{col: col})
	colmetricspb.RegisterMetricsServiceServer(gs, metricsService{col: col})
	go func() { _ = gs.Serve(gl) }()
	t.Cleanup(gs.Stop)
	col.grpcAddr = gl.Addr().String()

	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, r *http.Request) {
		var req coltracepb.ExportTraceServiceRequest
		if !readProto(w, r, &req) {
			return
		}
		col.addSpans(req.GetResourceSpans())
		writeProto(w, &coltracepb.ExportTraceServiceResponse{})
	})
	mux.HandleFunc("POST /v1/metrics", func(w http.ResponseWriter, r *http.Request) {
		var req colmetricspb.ExportMetricsServiceRequest
		if !readProto(w, r, &req) {
			return
		}
		col.addMetrics(req.GetResourceMetrics())
		writeProto(w, &colmetricspb.ExportMetricsServiceResponse{})
	})
	hs := &http.Server{Handler: mux}
	go func() { _ = hs.Serve(hl) }()
	t.Cleanup(func() { _ = hs.Close() })
	col.httpAddr = hl.Addr().String()
	return col
}

// endpoint is OTEL_EXPORTER_OTLP_ENDPOINT for protocol.
func (col *collector) endpoint(protocol string) string {
	if protocol == protocolGRPC {
		return "http://" + col.grpcAddr
	}
	return "http://" + col.httpAddr
}

func readProto(w http.ResponseWriter, r *http.Request, m proto.Message) bool {
	body, err := io.ReadAll(r.Body)
	if err == nil {
		err = proto.Unmarshal(body, m)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

func writeProto(w http.ResponseWriter, m proto.Message) {
	b, err := proto.Marshal(m)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(b)
}

type traceService struct {
	coltracepb.UnimplementedTraceServiceServer
	col *collector
}

func (s traceService) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	s.col.addSpans(req.GetResourceSpans())
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

type metricsService struct {
	colmetricspb.UnimplementedMetricsServiceServer
	col *collector
}

func (s metricsService) Export(_ context.Context, req *colmetricspb.ExportMetricsServiceRequest) (*colmetricspb.ExportMetricsServiceResponse, error) {
	s.col.addMetrics(req.GetResourceMetrics())
	return &colmetricspb.ExportMetricsServiceResponse{}, nil
}

func (col *collector) addSpans(rss []*tracepb.ResourceSpans) {
	col.mu.Lock()
	defer col.mu.Unlock()
	for _, rs := range rss {
		res := attrMap(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				col.spans = append(col.spans, span{
					name:          s.GetName(),
					scope:         ss.GetScope().GetName(),
					traceID:       hex.EncodeToString(s.GetTraceId()),
					id:            hex.EncodeToString(s.GetSpanId()),
					parentID:      hex.EncodeToString(s.GetParentSpanId()),
					attrs:         attrMap(s.GetAttributes()),
					resource:      res,
					statusError:   s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR,
					statusMessage: s.GetStatus().GetMessage(),
					kind:          s.GetKind(),
					startNanos:    s.GetStartTimeUnixNano(),
					finishNanos:   s.GetEndTimeUnixNano(),
				})
			}
		}
	}
}

func (col *collector) addMetrics(rms []*metricspb.ResourceMetrics) {
	col.mu.Lock()
	defer col.mu.Unlock()
	col.metrics = append(col.metrics, rms...)
}

// allSpans returns the spans received so far.
func (col *collector) allSpans() []span {
	col.mu.Lock()
	defer col.mu.Unlock()
	return append([]span(nil), col.spans...)
}

// point is one data point of a metric, with its attributes as strings.
type point struct {
	attrs map[string]string
	// value is a sum's value, or a histogram's count.
	value float64
}

// metric is the last value of each data point of the named metric that
// the process with pid exported, with its unit.
func (col *collector) metric(name, pid string) (unit string, points []point) {
	col.mu.Lock()
	defer col.mu.Unlock()
	for _, rm := range col.metrics {
		if attrMap(rm.GetResource().GetAttributes())["process.pid"] != pid {
			continue
		}
		for _, sm := range rm.GetScopeMetrics() {
			for _, m := range sm.GetMetrics() {
				if m.GetName() != name {
					continue
				}
				unit, points = m.GetUnit(), nil // cumulative: the last export has it all
				for _, dp := range m.GetSum().GetDataPoints() {
					v := float64(dp.GetAsInt()) + dp.GetAsDouble()
					points = append(points, point{attrs: attrMap(dp.GetAttributes()), value: v})
				}
				for _, dp := range m.GetHistogram().GetDataPoints() {
					points = append(points, point{attrs: attrMap(dp.GetAttributes()), value: float64(dp.GetCount())})
				}
			}
		}
	}
	return unit, points
}

func attrMap(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch v.GetValue().(type) {
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = strconv.FormatInt(v.GetIntValue(), 10)
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = strconv.FormatBool(v.GetBoolValue())
		case *commonpb.AnyValue_DoubleValue:
			m[kv.GetKey()] = strconv.FormatFloat(v.GetDoubleValue(), 'g', -1, 64)
		default:
			m[kv.GetKey()] = v.GetStringValue()
		}
	}
	return m
}
