package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// instrumentationScope names the tracer of spannerlock's own spans; lease
// and the Spanner client record under their own.
const instrumentationScope = "github.com/spannerlock/terraform-provider-spannerlock/cmd/spannerlock"

// flushTimeout bounds the export of what is left when spannerlock exits:
// a collector that is down must not hold up a cron job's exit for long.
const flushTimeout = 5 * time.Second

// The OpenTelemetry SDK variables spannerlock reads itself. The exporters
// and the SDK read the rest as they always do: headers, TLS, timeout,
// compression, metric temporality, the sampler, the batch and export
// intervals, service name and resource attributes.
const (
	envOTelDisabled = "OTEL_SDK_DISABLED"
	envOTLPEndpoint = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envOTLPProtocol = "OTEL_EXPORTER_OTLP_PROTOCOL"
)

// OTLP protocols, as OTEL_EXPORTER_OTLP_PROTOCOL spells them.
const (
	protocolGRPC         = "grpc"
	protocolHTTPProtobuf = "http/protobuf"
	// defaultProtocol is the specification's default for SDKs.
	defaultProtocol = protocolHTTPProtobuf
)

// otelConfig says what OpenTelemetry should export: each signal's OTLP
// protocol, "" when it is not exported.
type otelConfig struct {
	traces, metrics string
}

func (c otelConfig) enabled() bool { return c.traces != "" || c.metrics != "" }

// readOTelConfig reads the standard variables of the OpenTelemetry SDK: a
// signal is exported when an OTLP endpoint is set for it
// (OTEL_EXPORTER_OTLP_ENDPOINT, or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT and
// OTEL_EXPORTER_OTLP_METRICS_ENDPOINT for one signal), unless
// OTEL_SDK_DISABLED is true or OTEL_TRACES_EXPORTER (OTEL_METRICS_EXPORTER)
// is none; the protocol is OTEL_EXPORTER_OTLP_PROTOCOL, or the signal's own.
// Without an endpoint nothing is exported: an unconfigured spannerlock
// sends nothing anywhere.
func readOTelConfig(getenv func(string) string) (otelConfig, error) {
	var c otelConfig
	if strings.EqualFold(strings.TrimSpace(getenv(envOTelDisabled)), "true") {
		return c, nil
	}
	var err error
	if c.traces, err = signalProtocol(getenv, "TRACES"); err != nil {
		return otelConfig{}, err
	}
	if c.metrics, err = signalProtocol(getenv, "METRICS"); err != nil {
		return otelConfig{}, err
	}
	return c, nil
}

// signalProtocol returns the OTLP protocol of a signal (TRACES, METRICS),
// or "" when it is not exported.
func signalProtocol(getenv func(string) string, signal string) (string, error) {
	if getenv("OTEL_EXPORTER_OTLP_"+signal+"_ENDPOINT") == "" && getenv(envOTLPEndpoint) == "" {
		return "", nil
	}
	exporterVar := "OTEL_" + signal + "_EXPORTER"
	switch exporters := strings.Split(strings.ReplaceAll(getenv(exporterVar), " ", ""), ","); {
	case slices.Contains(exporters, "none"):
		return "", nil
	case !slices.Contains(exporters, "") && !slices.Contains(exporters, "otlp"):
		return "", usageError("%s=%s: spannerlock exports with otlp, or not at all with none", exporterVar, getenv(exporterVar))
	}
	protocolVar := "OTEL_EXPORTER_OTLP_" + signal + "_PROTOCOL"
	protocol := getenv(protocolVar)
	if protocol == "" {
		protocolVar, protocol = envOTLPProtocol, getenv(envOTLPProtocol)
	}
	switch strings.TrimSpace(protocol) {
	case "":
		return defaultProtocol, nil
	case protocolGRPC, protocolHTTPProtobuf:
		return strings.TrimSpace(protocol), nil
	}
	return "", usageError("%s=%s: spannerlock exports OTLP over %s or %s", protocolVar, protocol, protocolGRPC, protocolHTTPProtobuf)
}

// telemetry is the OpenTelemetry SDK spannerlock set up as the global
// providers, so that lease's instruments and spans and the Spanner
// client's spans are exported with its own.
type telemetry struct {
	traces  *sdktrace.TracerProvider // nil when traces are not exported
	metrics *sdkmetric.MeterProvider // nil when metrics are not exported
}

// setUpTelemetry creates the exporters of cfg and makes them global.
// Nothing is sent until there is something to export.
func setUpTelemetry(ctx context.Context, cfg otelConfig, log *slog.Logger) (*telemetry, error) {
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("OpenTelemetry reported an error", "err", err)
	}))
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName("spannerlock"), semconv.ServiceVersion(buildVersion())),
		// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES take precedence.
		resource.WithFromEnv(),
		resource.WithTelemetrySDK(),
		resource.WithHost(),
		resource.WithProcessPID(),
	)
	if err != nil {
		// A detector failed; what the others found is still worth having.
		log.Warn("OpenTelemetry resource incomplete", "err", err)
	}
	t := &telemetry{}
	if cfg.traces != "" {
		exp, err := newSpanExporter(ctx, cfg.traces)
		if err != nil {
			return nil, fmt.Errorf("setting up the OTLP trace exporter: %w", err)
		}
		t.traces = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
		otel.SetTracerProvider(t.traces)
		otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	}
	if cfg.metrics != "" {
		exp, err := newMetricExporter(ctx, cfg.metrics)
		if err != nil {
			_ = t.shutdown(ctx)
			return nil, fmt.Errorf("setting up the OTLP metric exporter: %w", err)
		}
		t.metrics = sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp)), sdkmetric.WithResource(res))
		otel.SetMeterProvider(t.metrics)
	}
	return t, nil
}

// The exporters read their endpoint, headers, TLS and timeout from the
// environment themselves; only the protocol is the caller's choice.
func newSpanExporter(ctx context.Context, protocol string) (sdktrace.SpanExporter, error) {
	if protocol == protocolGRPC {
		return otlptracegrpc.New(ctx)
	}
	return otlptracehttp.New(ctx)
}

func newMetricExporter(ctx context.Context, protocol string) (sdkmetric.Exporter, error) {
	if protocol == protocolGRPC {
		return otlpmetricgrpc.New(ctx)
	}
	return otlpmetrichttp.New(ctx)
}

// shutdown exports what is left and stops the exporters.
func (t *telemetry) shutdown(ctx context.Context) error {
	var errs []error
	if t.traces != nil {
		errs = append(errs, t.traces.Shutdown(ctx))
	}
	if t.metrics != nil {
		errs = append(errs, t.metrics.Shutdown(ctx))
	}
	return errors.Join(errs...)
}

// startTelemetry sets up OpenTelemetry if the environment asks for it,
// once, and starts the span of this run of spannerlock: a child of the
// trace context in spannerlock's own environment (TRACEPARENT), if any.
// Commands call it through connect, so that usage errors and --help
// export nothing.
func (a *app) startTelemetry() error {
	if a.telemetry != nil {
		return nil
	}
	cfg, err := readOTelConfig(envLookup(a.environ))
	if err != nil {
		return err
	}
	if !cfg.enabled() {
		return nil
	}
	log := a.logger()
	a.telemetry, err = setUpTelemetry(context.Background(), cfg, log)
	if err != nil {
		return err
	}
	log.Debug("exporting OpenTelemetry data over OTLP", "traces", cfg.traces, "metrics", cfg.metrics)
	parent := otel.GetTextMapPropagator().Extract(context.Background(), envCarrier(environMap(a.environ)))
	a.ctx, a.runSpan = otel.Tracer(instrumentationScope).Start(parent, "spannerlock "+a.command,
		trace.WithAttributes(attrCommand.String(a.command), semconv.ProcessPID(os.Getpid())))
	return nil
}

// attrCommand is the spannerlock command a run span is of.
const attrCommand = attribute.Key("spannerlock.command")

// stopTelemetry ends the run's span with its exit status and exports what
// is left, within flushTimeout.
func (a *app) stopTelemetry(code int) {
	if a.runSpan != nil {
		a.runSpan.SetAttributes(semconv.ProcessExitCode(code))
		if code != exitOK {
			a.runSpan.SetStatus(codes.Error, fmt.Sprintf("exit status %d", code))
		}
		a.runSpan.End()
	}
	if a.telemetry == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	err := a.telemetry.shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("no answer from the OTLP collector within %s", flushTimeout)
	}
	if err != nil {
		a.logger().Warn("exporting OpenTelemetry data on exit failed", "err", err)
	}
}

// runCommand runs CMD under l as runChild does, in a span of its own under
// ctx's span, whose trace context CMD gets in its environment (TRACEPARENT,
// and TRACESTATE and BAGGAGE if there are any), so that CMD's own
// instrumentation joins the trace.
func (a *app) runCommand(ctx context.Context, l *lease.Lease, spec *childSpec, killAfter time.Duration, log *slog.Logger) (runOutcome, error) {
	name := filepath.Base(spec.argv[0])
	if a.runSpan != nil && !trace.SpanContextFromContext(ctx).IsValid() {
		// lease hands RunOnce's and Campaign's callbacks the lease's
		// context, which carries no span: CMD's is then the run's child.
		ctx = trace.ContextWithSpan(ctx, a.runSpan)
	}
	ctx, span := otel.Tracer(instrumentationScope).Start(ctx, name,
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(semconv.ProcessExecutableName(name)))
	defer span.End()
	out, err := a.runChild(l, spec.withTraceContext(ctx), killAfter, log)
	switch {
	case err != nil:
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	case out.lost:
		span.SetAttributes(semconv.ProcessExitCode(out.status))
		span.SetStatus(codes.Error, "the lease was lost while CMD ran")
	default:
		span.SetAttributes(semconv.ProcessExitCode(out.status))
		if out.status != exitOK {
			span.SetStatus(codes.Error, fmt.Sprintf("exit status %d", out.status))
		}
	}
	return out, err
}

// withTraceContext returns the spec with the trace context of ctx in CMD's
// environment, in place of any inherited. Without OpenTelemetry set up
// there is none, and CMD inherits spannerlock's environment unchanged.
func (s *childSpec) withTraceContext(ctx context.Context) *childSpec {
	prop := otel.GetTextMapPropagator()
	carrier := envCarrier{}
	prop.Inject(ctx, carrier)
	if len(carrier) == 0 {
		return s
	}
	drop := map[string]bool{}
	for _, f := range prop.Fields() {
		drop[envKey(f)] = true
	}
	out := *s
	out.env = nil
	for _, kv := range s.env {
		if k, _, _ := strings.Cut(kv, "="); !drop[k] {
			out.env = append(out.env, kv)
		}
	}
	for _, k := range carrier.Keys() {
		out.env = append(out.env, k+"="+carrier[k])
	}
	return &out
}

// envCarrier carries trace context in environment variables as
// OpenTelemetry's environment-variable propagation names them: a
// propagator's key in upper case, with anything but letters, digits and
// underscores made an underscore (traceparent is TRACEPARENT).
// go.opentelemetry.io/contrib/propagators/envcar does the same, but needs a
// newer OpenTelemetry than lease is built with.
type envCarrier map[string]string

func (c envCarrier) Get(key string) string { return c[envKey(key)] }

func (c envCarrier) Set(key, value string) { c[envKey(key)] = value }

func (c envCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func envKey(key string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			return r
		}
		return '_'
	}, key)
}

// environMap is environ (KEY=value) as a map; a later value of a key wins,
// as it does for a process started with environ.
func environMap(environ []string) map[string]string {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

// envLookup is os.Getenv over environ.
func envLookup(environ []string) func(string) string {
	m := environMap(environ)
	return func(key string) string { return m[key] }
}
