package lease

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// instrumentationScope names the package's meter and tracer.
const instrumentationScope = "github.com/spannerlock/terraform-provider-spannerlock/lease"

// Attribute keys. Lock names are unbounded, so they go on spans, never on
// metrics.
const (
	attrTable   = attribute.Key("spannerlock.table")
	attrKind    = attribute.Key("spannerlock.kind")
	attrResult  = attribute.Key("spannerlock.result")
	attrReason  = attribute.Key("spannerlock.reason")
	attrName    = attribute.Key("spannerlock.name")
	attrToken   = attribute.Key("spannerlock.token")
	attrSlot    = attribute.Key("spannerlock.slot")
	attrOutcome = attribute.Key("spannerlock.outcome")
	attrLeases  = attribute.Key("spannerlock.leases")
)

// Kinds of lease (spannerlock.kind).
const (
	kindLock     = "lock"
	kindPermit   = "permit"
	kindWorkerID = "worker_id"
)

// Results of an acquisition (spannerlock.result): acquired; not_acquired
// when another held it until TryAcquire refused or a blocking call's
// context ended; error for anything else.
const (
	resultAcquired    = "acquired"
	resultNotAcquired = "not_acquired"
	resultError       = "error"
)

// lossReason is why a held lease was lost (spannerlock.reason).
type lossReason string

const (
	// lossDeadline: no renewal was confirmed before the local deadline.
	lossDeadline lossReason = "deadline"
	// lossTaken: a renewal, Guard or Release found the lease's row released
	// or holding another token.
	lossTaken lossReason = "taken"
	// lossSessionGone: Spanner says the Client's session expired or was
	// deleted.
	lossSessionGone lossReason = "session_gone"
	// lossClosed ends a session Close ended; its leases end with ErrClosed,
	// which is not a loss.
	lossClosed lossReason = "closed"
)

// telemetry is a Client's OpenTelemetry instruments and tracer.
type telemetry struct {
	tracer       trace.Tracer
	held         metric.Int64UpDownCounter
	acquisitions metric.Int64Counter
	losses       metric.Int64Counter
	renewal      metric.Float64Histogram
	wait         metric.Float64Histogram
	table        attribute.KeyValue
}

func newTelemetry(table string, mp metric.MeterProvider, tp trace.TracerProvider) telemetry {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	m := mp.Meter(instrumentationScope)
	t := telemetry{tracer: tp.Tracer(instrumentationScope), table: attrTable.String(table)}
	var errs []error
	var err error
	t.held, err = m.Int64UpDownCounter("spannerlock.lease.held", metric.WithUnit("{lease}"),
		metric.WithDescription("Leases this process holds now."))
	errs = append(errs, err)
	t.acquisitions, err = m.Int64Counter("spannerlock.lease.acquisitions", metric.WithUnit("{acquisition}"),
		metric.WithDescription("Acquisition calls by result; a blocking call counts once, when it ends."))
	errs = append(errs, err)
	t.losses, err = m.Int64Counter("spannerlock.lease.losses", metric.WithUnit("{loss}"),
		metric.WithDescription("Held leases lost, by reason."))
	errs = append(errs, err)
	t.renewal, err = m.Float64Histogram("spannerlock.renewal.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of each renewal transaction."))
	errs = append(errs, err)
	t.wait, err = m.Float64Histogram("spannerlock.acquire.wait", metric.WithUnit("s"),
		metric.WithDescription("How long a blocking acquisition waited, until it acquired or gave up."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		otel.Handle(err) // the instruments returned still work, as no-ops
	}
	return t
}

// start starts a span for op, a child of the caller's span in ctx.
func (t telemetry) start(ctx context.Context, op string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return t.tracer.Start(ctx, "spannerlock."+op, trace.WithAttributes(append(attrs, t.table)...))
}

// end ends a span with its outcome, marking it failed when err is set.
func end(span trace.Span, outcome string, err error) {
	span.SetAttributes(attrOutcome.String(outcome))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// acquired records the end of one acquisition call under the caller's ctx:
// its result, and for a blocking call how long it waited.
func (t telemetry) acquired(ctx context.Context, kind string, try bool, began time.Time, err error) string {
	result := resultAcquired
	var gaveUp *WaitError
	switch {
	case err == nil:
	case errors.Is(err, ErrNotAcquired), errors.Is(err, errCompleted):
		result = resultNotAcquired
	case errors.As(err, &gaveUp) && gaveUp.Last == nil:
		// The caller gave up before Spanner answered: no outage was seen.
		result = resultNotAcquired
	default:
		// Including a wait that ended during an outage: an outage is never
		// counted as contention.
		result = resultError
	}
	attrs := metric.WithAttributes(t.table, attrKind.String(kind), attrResult.String(result))
	t.acquisitions.Add(ctx, 1, attrs)
	if !try {
		t.wait.Record(ctx, time.Since(began).Seconds(), attrs)
	}
	return result
}

func (t telemetry) heldChanged(kind string, delta int64) {
	t.held.Add(context.Background(), delta, metric.WithAttributes(t.table, attrKind.String(kind)))
}

func (t telemetry) lost(kind string, reason lossReason) {
	t.losses.Add(context.Background(), 1, metric.WithAttributes(t.table, attrKind.String(kind), attrReason.String(string(reason))))
}

func (t telemetry) renewed(ctx context.Context, d time.Duration) {
	t.renewal.Record(ctx, d.Seconds(), metric.WithAttributes(t.table))
}
