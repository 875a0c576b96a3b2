package main

import (
	"context"
	"fmt"
	"math"
	"strings"
	"syscall"
	"time"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// otelArm is one way of giving lease its OpenTelemetry providers.
type otelArm struct {
	name   string
	opts   []lease.Option
	client *lease.Client
	// each measured cycle's RPCs (renewals left out) and CPU seconds
	rpcs, cpu []float64
}

// otelCost measures what lease's OpenTelemetry instrumentation costs. Every
// other figure of this run is taken with OpenTelemetry's global providers,
// which are no-op until an application installs an SDK, so they already
// include that cost; this phase makes it visible. Clients on one database
// take turns, one TryAcquire + Release cycle each: two with the global
// providers (the default; the second is the control, whose difference from
// the first is what two identical Clients differ by), one given no-op
// providers explicitly, and one given the SDK's, recording every span and
// metric. The SDK does everything the no-op providers do and more, so if
// even its cost is within the noise, the no-op one is unmeasurable. CPU is
// this process's (getrusage), which also spends it on the Spanner client's
// RPCs; taking turns cycle by cycle spreads drift in the machine's load, and
// background work of the process, over all Clients alike.
func (b *bench) otelCost() error {
	cycles := 300
	if b.quick {
		cycles = 60
	}
	db, err := b.newDB("spannerlock")
	if err != nil {
		return err
	}
	sc, counter, err := b.newSpanner(db)
	if err != nil {
		return err
	}
	defer sc.Close()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()

	def := &otelArm{name: "default (global) providers"}
	control := &otelArm{name: "a second Client with the default providers (the control)"}
	noop := &otelArm{name: "no-op providers passed explicitly", opts: []lease.Option{
		lease.WithMeterProvider(metricnoop.NewMeterProvider()), lease.WithTracerProvider(tracenoop.NewTracerProvider())}}
	sdk := &otelArm{name: "the SDK recording every span and metric", opts: []lease.Option{
		lease.WithMeterProvider(mp), lease.WithTracerProvider(tp)}}
	arms := []*otelArm{def, control, noop, sdk}
	defer func() {
		for _, a := range arms {
			if a.client != nil {
				_ = a.client.Close()
			}
		}
	}()
	for i, a := range arms {
		opts := append([]lease.Option{lease.WithTTL(b.steadyTTL), lease.WithLogger(quietLogger())}, a.opts...)
		if a.client, err = lease.NewClient(sc, slTable, opts...); err != nil {
			return err
		}
		// Unmeasured: the first cycles insert the names and the Client's
		// session row.
		for j := range 10 {
			if _, _, err := b.otelCycle(a.client, counter, fmt.Sprintf("otel-%d-%d", i, j)); err != nil {
				return err
			}
		}
	}
	for j := range cycles {
		// Each round of turns starts with another Client.
		for k := range arms {
			i := (j + k) % len(arms)
			a := arms[i]
			rpcs, cpu, err := b.otelCycle(a.client, counter, fmt.Sprintf("otel-%d-%d", i, j%10))
			if err != nil {
				return err
			}
			a.rpcs, a.cpu = append(a.rpcs, rpcs), append(a.cpu, cpu)
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(b.ctx, &rm); err != nil {
		return err
	}
	instruments := 0
	for _, sm := range rm.ScopeMetrics {
		instruments += len(sm.Metrics)
	}

	// Noise: twice the standard error of a difference of two means, or
	// what the two identical default Clients differ by, whichever is more.
	noise := max(2*stdErrDiff(def.cpu, control.cpu), math.Abs(mean(control.cpu)-mean(def.cpu)))
	within := func(a *otelArm) bool {
		return math.Abs(mean(a.cpu)-mean(def.cpu)) <= max(noise, 2*stdErrDiff(def.cpu, a.cpu))
	}
	// A cycle's RPCs are the same by every Client unless the emulator
	// aborted one (then retried): instrumentation that sent an RPC would
	// show in every cycle, so the typical cycle is compared.
	rpcsEqual := true
	for _, a := range arms {
		rpcsEqual = rpcsEqual && median(a.rpcs) == median(def.rpcs)
	}
	verdict := "unmeasurable"
	if !rpcsEqual || !within(noop) || !within(sdk) {
		verdict = "measurable"
	}
	b.results.row(resultRow{
		measure: "cost of lease's OpenTelemetry instrumentation with a no-op provider (the default, as in every other row): RPCs and this process's CPU per TryAcquire + Release",
		target:  "unmeasurable",
		sl: fmt.Sprintf("%s: %s RPCs and %s CPU by default; %s and %s with no-op providers passed explicitly; %s and %s with the SDK recording everything; noise ±%s",
			verdict, num(median(def.rpcs)), msCPU(mean(def.cpu)), num(median(noop.rpcs)), msCPU(mean(noop.cpu)),
			num(median(sdk.rpcs)), msCPU(mean(sdk.cpu)), msCPU(noise)),
		slv: math.NaN(), spv: math.NaN(), met: met(verdict == "unmeasurable"),
	})
	var parts []string
	for _, a := range arms {
		parts = append(parts, fmt.Sprintf("%s: RPCs per cycle median %s, mean %s, max %s; CPU per cycle mean %s (standard error %s)",
			a.name, num(median(a.rpcs)), num(mean(a.rpcs)), num(maxOf(a.rpcs)), msCPU(mean(a.cpu)), msCPU(stdErr(a.cpu))))
	}
	b.results.detail("OpenTelemetry instrumentation (%d TryAcquire + Release cycles per Client, the Clients taking turns cycle by cycle on one database; "+
		"the SDK recorded %d spans and %d instruments, so its instrumentation ran): %s. "+
		"Differences from the default Client: the control %s, no-op providers %s, the SDK %s; the noise (twice the standard error of a difference, or the control's difference if larger) is %s. "+
		"Every other figure in this file was measured with the default providers, which are no-op until an application installs an SDK.",
		cycles, len(spans.Ended()), instruments, strings.Join(parts, "; "),
		msCPU(mean(control.cpu)-mean(def.cpu)), msCPU(mean(noop.cpu)-mean(def.cpu)), msCPU(mean(sdk.cpu)-mean(def.cpu)), msCPU(noise))
	return nil
}

// otelCycle acquires and releases name with c and returns the RPCs
// (renewals left out) and the CPU seconds this process spent meanwhile.
func (b *bench) otelCycle(c *lease.Client, counter *rpcCounter, name string) (rpcs, cpu float64, err error) {
	before := counter.snapshot()
	cpu0 := selfCPU()
	l, err := c.TryAcquire(b.ctx, name)
	if err != nil {
		return 0, 0, err
	}
	if err := l.Release(b.ctx); err != nil {
		return 0, 0, err
	}
	cpu1 := selfCPU()
	return withoutRenewals(counter.snapshot().sub(before)), (cpu1 - cpu0).Seconds(), nil
}

// stdErr is the standard error of the mean of xs.
func stdErr(xs []float64) float64 {
	if len(xs) < 2 {
		return math.NaN()
	}
	m := mean(xs)
	var ss float64
	for _, x := range xs {
		ss += (x - m) * (x - m)
	}
	return math.Sqrt(ss / float64(len(xs)-1) / float64(len(xs)))
}

// stdErrDiff is the standard error of the difference of two means.
func stdErrDiff(a, b []float64) float64 {
	return math.Hypot(stdErr(a), stdErr(b))
}

// selfCPU is the user and system CPU time this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// msCPU formats CPU seconds in milliseconds, precisely enough to compare.
func msCPU(x float64) string { return fmt.Sprintf("%.3f ms", x*1000) }
