package lease_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// observed is a Client's telemetry read back through the OpenTelemetry SDK.
type observed struct {
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	opts   []lease.Option
}

// observe sets up an SDK meter and tracer provider. The tracer provider is
// also made global for the test, as an application's would be, so the
// Spanner client's spans are recorded too.
func observe(t *testing.T) *observed {
	o := &observed{reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(o.reader))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(o.spans))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	o.opts = []lease.Option{lease.WithMeterProvider(mp), lease.WithTracerProvider(tp)}
	return o
}

// metric returns the named metric, failing if it is missing.
func (o *observed) metric(t *testing.T, name string) metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	fatalIf(t, o.reader.Collect(context.Background(), &rm), "collect metrics")
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != "github.com/spannerlock/terraform-provider-spannerlock/lease" {
			continue
		}
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m
			}
		}
	}
	t.Fatalf("metric %s not recorded", name)
	return metricdata.Metrics{}
}

// sum returns the value of a counter's point with exactly attrs.
func (o *observed) sum(t *testing.T, name string, attrs ...attribute.KeyValue) int64 {
	t.Helper()
	m := o.metric(t, name)
	want := attribute.NewSet(attrs...)
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			if p.Attributes.Equals(&want) {
				return p.Value
			}
		}
		return 0
	}
	t.Fatalf("%s is a %T, want a sum", name, m.Data)
	return 0
}

// histogram returns the count and sum of a histogram's point with attrs.
func (o *observed) histogram(t *testing.T, name string, attrs ...attribute.KeyValue) (uint64, float64) {
	t.Helper()
	m := o.metric(t, name)
	if m.Unit != "s" {
		t.Fatalf("%s has unit %q, want s", name, m.Unit)
	}
	want := attribute.NewSet(attrs...)
	d, ok := m.Data.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("%s is a %T, want a histogram", name, m.Data)
	}
	for _, p := range d.DataPoints {
		if p.Attributes.Equals(&want) {
			return p.Count, p.Sum
		}
	}
	return 0, 0
}

// span returns the last ended span named name.
func (o *observed) span(t *testing.T, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	spans := o.spans.Ended()
	for i := len(spans) - 1; i >= 0; i-- {
		if spans[i].Name() == name {
			return spans[i]
		}
	}
	t.Fatalf("no span %s among %d", name, len(spans))
	return nil
}

func spanAttr(s sdktrace.ReadOnlySpan, key string) attribute.Value {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

var (
	tableLocks  = attribute.String("spannerlock.table", table)
	kindLock    = attribute.String("spannerlock.kind", "lock")
	acquired    = attribute.String("spannerlock.result", "acquired")
	notAcquired = attribute.String("spannerlock.result", "not_acquired")
)

func TestMetricsAndSpansOfAcquireRefusalWaitLossAndRelease(t *testing.T) {
	eachDialectInTurn(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		o := observe(t)
		a := newClient(t, db, append(o.opts, lease.WithTTL(time.Second))...)
		b := newClient(t, db, append(o.opts, lease.WithTTL(time.Second))...)

		// An acquisition, under the caller's span.
		parentCtx, parent := otel.Tracer("test").Start(ctx, "caller")
		l, err := a.Acquire(parentCtx, "job")
		parent.End()
		fatalIf(t, err, "Acquire")
		if n := o.sum(t, "spannerlock.lease.acquisitions", tableLocks, kindLock, acquired); n != 1 {
			t.Fatalf("acquisitions{acquired} = %d, want 1", n)
		}
		if n := o.sum(t, "spannerlock.lease.held", tableLocks, kindLock); n != 1 {
			t.Fatalf("held = %d, want 1", n)
		}
		s := o.span(t, "spannerlock.Acquire")
		if s.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Fatal("spannerlock.Acquire is not a child of the caller's span")
		}
		if got := spanAttr(s, "spannerlock.name").AsString(); got != "job" {
			t.Fatalf("span name attribute %q", got)
		}
		if got := spanAttr(s, "spannerlock.token").AsInt64(); got != l.Token() {
			t.Fatalf("span token %d, want %d", got, l.Token())
		}
		if got := spanAttr(s, "spannerlock.outcome").AsString(); got != "acquired" {
			t.Fatalf("span outcome %q", got)
		}
		spannerChild := false
		for _, c := range o.spans.Ended() {
			if strings.HasPrefix(c.Name(), "cloud.google.com/go/spanner.") && c.Parent().SpanID() == s.SpanContext().SpanID() {
				spannerChild = true
			}
		}
		if !spannerChild {
			t.Fatal("no span of the Spanner client under spannerlock.Acquire")
		}

		// A refused TryAcquire counts once as not acquired.
		if _, err := b.TryAcquire(ctx, "job"); !errors.Is(err, lease.ErrNotAcquired) {
			t.Fatalf("TryAcquire of a held lease: %v", err)
		}
		if n := o.sum(t, "spannerlock.lease.acquisitions", tableLocks, kindLock, notAcquired); n != 1 {
			t.Fatalf("acquisitions{not_acquired} = %d, want 1", n)
		}
		if got := spanAttr(o.span(t, "spannerlock.TryAcquire"), "spannerlock.outcome").AsString(); got != "not_acquired" {
			t.Fatalf("TryAcquire span outcome %q", got)
		}

		// A blocking Acquire that waits for a release counts once, with its wait.
		hold := 300 * time.Millisecond
		go func() {
			time.Sleep(hold)
			_ = l.Release(context.Background())
		}()
		waited, err := b.Acquire(ctx, "job")
		fatalIf(t, err, "blocking Acquire")
		if n := o.sum(t, "spannerlock.lease.acquisitions", tableLocks, kindLock, acquired); n != 2 {
			t.Fatalf("acquisitions{acquired} = %d after the blocking Acquire, want 2 (polls do not count)", n)
		}
		count, secs := o.histogram(t, "spannerlock.acquire.wait", tableLocks, kindLock, acquired)
		if count != 2 || secs < hold.Seconds() {
			t.Fatalf("acquire.wait: %d acquisitions waited %.3fs in all, want 2 and at least %s", count, secs, hold)
		}
		if got := spanAttr(o.span(t, "spannerlock.Release"), "spannerlock.outcome").AsString(); got != "released" {
			t.Fatalf("Release span outcome %q", got)
		}

		// A lease taken from under its holder is a loss, reason "taken".
		stealLease(t, ctx, db, "job")
		waitDone(t, waited.Context(), "the stolen lease")
		if n := o.sum(t, "spannerlock.lease.losses", tableLocks, kindLock, attribute.String("spannerlock.reason", "taken")); n != 1 {
			t.Fatalf("losses{taken} = %d, want 1", n)
		}
		if n := o.sum(t, "spannerlock.lease.held", tableLocks, kindLock); n != 0 {
			t.Fatalf("held = %d after a release and a loss, want 0", n)
		}
		if count, _ := o.histogram(t, "spannerlock.renewal.duration", tableLocks); count == 0 {
			t.Fatal("no renewal duration recorded")
		}
		if o.span(t, "spannerlock.Renew") == nil {
			t.Fatal("no renewal span")
		}
	})
}

// A loss counts under the reason that ended the lease: its session gone from
// Spanner, or no renewal confirmed before the local deadline.
func TestLossReasonsSessionGoneAndDeadline(t *testing.T) {
	eachDialectInTurn(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		o := observe(t)
		reason := func(r string) attribute.KeyValue { return attribute.String("spannerlock.reason", r) }

		a := newClient(t, db, append(o.opts, lease.WithTTL(2*time.Second))...)
		gone := mustAcquire(t, ctx, a, "gone")
		sc := emulator.Client(t, db)
		_, err := sc.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
			_, err := tx.Update(ctx, spanner.Statement{SQL: "DELETE FROM locks_sessions WHERE TRUE"})
			return err
		})
		fatalIf(t, err, "delete the session row")
		waitDone(t, gone.Context(), "a lease whose session row was deleted")
		if n := o.sum(t, "spannerlock.lease.losses", tableLocks, kindLock, reason("session_gone")); n != 1 {
			t.Fatalf("losses{session_gone} = %d, want 1", n)
		}

		holderSC := emulator.Client(t, db)
		b := newClientWith(t, holderSC, append(o.opts, lease.WithTTL(2*time.Second))...)
		cut := mustAcquire(t, ctx, b, "cut")
		holderSC.Close() // renewals fail from here on
		waitDone(t, cut.Context(), "a lease that can no longer be renewed")
		if n := o.sum(t, "spannerlock.lease.losses", tableLocks, kindLock, reason("deadline")); n != 1 {
			t.Fatalf("losses{deadline} = %d, want 1", n)
		}
		if n := o.sum(t, "spannerlock.lease.held", tableLocks, kindLock); n != 0 {
			t.Fatalf("held = %d after both losses, want 0", n)
		}
	})
}

// Permits and worker IDs count under their own kinds.
func TestMetricsOfPermitsAndWorkerIDs(t *testing.T) {
	eachDialectInTurn(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		o := observe(t)
		a := newClient(t, db, o.opts...)
		fatalIf(t, a.SetPermits(ctx, "sem", 1), "SetPermits")
		p, err := a.AcquirePermit(ctx, "sem")
		fatalIf(t, err, "AcquirePermit")
		w, err := a.AcquireWorkerID(ctx, "ids", 4)
		fatalIf(t, err, "AcquireWorkerID")
		for _, kind := range []string{"permit", "worker_id"} {
			k := attribute.String("spannerlock.kind", kind)
			if n := o.sum(t, "spannerlock.lease.held", tableLocks, k); n != 1 {
				t.Fatalf("held{%s} = %d, want 1", kind, n)
			}
			if n := o.sum(t, "spannerlock.lease.acquisitions", tableLocks, k, acquired); n != 1 {
				t.Fatalf("acquisitions{%s} = %d, want 1", kind, n)
			}
		}
		fatalIf(t, p.Release(ctx), "Release permit")
		fatalIf(t, w.Release(ctx), "Release worker ID")
		for _, kind := range []string{"permit", "worker_id"} {
			if n := o.sum(t, "spannerlock.lease.held", tableLocks, attribute.String("spannerlock.kind", kind)); n != 0 {
				t.Fatalf("held{%s} = %d after release, want 0", kind, n)
			}
		}
		if got := spanAttr(o.span(t, "spannerlock.AcquireWorkerID"), "spannerlock.slot").AsInt64(); got != int64(w.ID()) {
			t.Fatalf("AcquireWorkerID span slot %d, want %d", got, w.ID())
		}
	})
}

// The work of a RunOnce job and of a leader belongs to the trace of the
// call that started it.
func TestCallbacksRunUnderTheCallersSpan(t *testing.T) {
	eachDialectInTurn(t, func(t *testing.T) {
		ctx := emulator.Context(t)
		db := newDatabase(t)
		o := observe(t)
		a := newClient(t, db, o.opts...)

		var jobSpan trace.SpanContext
		_, err := a.RunOnce(ctx, "job", time.Date(2026, 11, 23, 3, 0, 0, 0, time.UTC), func(ctx context.Context) error {
			jobSpan = trace.SpanContextFromContext(ctx)
			return nil
		})
		fatalIf(t, err, "RunOnce")
		if want := o.span(t, "spannerlock.RunOnce").SpanContext(); !jobSpan.Equal(want) {
			t.Fatalf("RunOnce's job ran under span %v, want spannerlock.RunOnce's %v", jobSpan.SpanID(), want.SpanID())
		}

		callerCtx, caller := otel.Tracer("test").Start(ctx, "caller")
		campaignCtx, stop := context.WithCancel(callerCtx)
		var leaderSpan trace.SpanContext
		err = a.Campaign(campaignCtx, "leader", lease.LeaderCallbacks{OnStartedLeading: func(ctx context.Context, _ *lease.Lease) {
			leaderSpan = trace.SpanContextFromContext(ctx)
			stop()
		}})
		caller.End()
		fatalIf(t, err, "Campaign")
		if !leaderSpan.Equal(caller.SpanContext()) {
			t.Fatalf("the leader's work ran under span %v, want the caller's %v", leaderSpan.SpanID(), caller.SpanContext().SpanID())
		}
	})
}
