// Command bench measures spannerlock's lease package and
// github.com/flowerinthenight/spindle v2.2.0 on one Spanner emulator in one
// run, and writes the results as a markdown table (results.md) and a chart
// (results.svg): RPC/s against leases held, and failover time per trial.
// spannerlock's RPC counts are measured on a PostgreSQL-dialect database
// too, and compared with GoogleSQL's; spindle speaks GoogleSQL only.
//
//	cd bench && go run ./cmd/bench          # what `make bench` runs (~30 min)
//	cd bench && go run ./cmd/bench -quick   # fewer trials, shorter windows
//
// RPCs are counted by method with a gRPC interceptor on each process's own
// spanner.Client. Session-management RPCs (BatchCreateSessions and the like)
// are counted apart and excluded from every figure; an idle client is
// measured over the whole run to show that it makes no other RPCs. RPCs that
// failed with ABORTED (the emulator runs one read-write transaction per
// database at a time and aborts the rest; the client retries them) are
// included in the counts and also reported on their own.
//
// Failover, cross-process handoff, waiting and holding run in child
// processes (this program re-executed; see child.go), so a holder can be
// SIGKILLed and CPU and memory belong to one process. Nothing here asserts
// on performance: it measures and reports.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"strings"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

const (
	slTable = "locks"
	spTable = "spindle_locks"
	// spindleDDL is the table spindle's README asks for.
	spindleDDL = "CREATE TABLE " + spTable + ` (
  name STRING(MAX) NOT NULL,
  heartbeat TIMESTAMP OPTIONS (allow_commit_timestamp=true),
  token TIMESTAMP OPTIONS (allow_commit_timestamp=true),
  writer STRING(MAX),
) PRIMARY KEY (name)`
)

// config is what the flags set.
type config struct {
	out, svg, logPath string
	quick             bool
	verbose           bool
	// steadyTTL is the TTL (spindle: lease duration) of the holding,
	// waiting and CPU measurements.
	steadyTTL time.Duration
	window    time.Duration // holders of 1 and 100 leases
	window10k time.Duration // the 10,000-lease holder
	waitFor   time.Duration // blocked waiters
	n10k      int
	// trials
	nAcq, nHandoff, nFail3, nFail10, nSpHandoff int
	only                                        string
}

type bench struct {
	config
	ctx     context.Context
	emu     *emulator.Emulator
	log     io.Writer
	results *results
	// idle is a client that does nothing for the whole run.
	idle      *rpcCounter
	idleSince time.Time
	// sp100 is the RPC/s of spindle holding 100 locks, from the holders phase.
	sp100 float64
	// childHost, when set, is where children dial instead of the emulator:
	// a proxy that adds round-trip latency.
	childHost string
	// baseCPU is the CPU share of a holder process that holds nothing.
	baseCPU float64
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "child" {
		if err := runChild(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		return
	}
	var c config
	flag.StringVar(&c.out, "out", "results.md", "markdown file to write the results to")
	flag.StringVar(&c.svg, "svg", "results.svg", "SVG file to draw the chart in")
	flag.StringVar(&c.logPath, "log", "bench.log", "file for the children's and libraries' logs")
	flag.BoolVar(&c.quick, "quick", false, "fewer trials and shorter windows (for trying the harness; figures are noisier)")
	flag.BoolVar(&c.verbose, "v", false, "library warnings into the log file")
	flag.DurationVar(&c.steadyTTL, "ttl", 10*time.Second, "TTL for holding, waiting and CPU measurements")
	flag.DurationVar(&c.window, "window", 40*time.Second, "measurement window for holders of 1 and 100 leases")
	flag.DurationVar(&c.window10k, "window10k", 40*time.Second, "measurement window for the 10,000-lease holder")
	flag.DurationVar(&c.waitFor, "wait", 25*time.Second, "how long a blocked waiter is measured")
	flag.IntVar(&c.n10k, "n", 10000, "leases held by the large holder")
	flag.IntVar(&c.nAcq, "acquisitions", 20, "uncontended acquisitions measured")
	flag.IntVar(&c.nHandoff, "handoffs", 30, "handoff trials per setting (the handoff is spread over a poll interval: 10 trials gave medians from 418 to 852 ms)")
	flag.IntVar(&c.nFail3, "failovers", 5, "failover trials at TTL 3s, per library")
	flag.IntVar(&c.nFail10, "failovers10", 3, "failover trials at TTL 10s, per library")
	flag.IntVar(&c.nSpHandoff, "spindle-handoffs", 3, "spindle handoff-after-Unlock trials")
	flag.StringVar(&c.only, "only", "", "comma-separated phases to run (acquire,otel,handoff,failover,waiter,holders,large,fairness,rtt); default all")
	flag.Parse()
	if c.quick {
		c.window, c.window10k, c.waitFor = 12*time.Second, 15*time.Second, 12*time.Second
		c.n10k = min(c.n10k, 2000)
		c.nAcq, c.nHandoff, c.nFail3, c.nFail10, c.nSpHandoff = 5, 4, 2, 1, 1
	}
	if err := run(c); err != nil {
		log.Fatal(err)
	}
}

func run(c config) error {
	start := time.Now()
	logf, err := os.Create(c.logPath)
	if err != nil {
		return err
	}
	defer func() { _ = logf.Close() }()
	emulator.QuietClientBanner()
	ctx := context.Background()
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	emu, err := emulator.Start(sctx, emulator.Options{Log: logf})
	cancel()
	if err != nil {
		return err
	}
	defer func() { _ = emu.Stop() }()
	b := &bench{config: c, ctx: ctx, emu: emu, log: logf, results: newResults(c, start)}
	b.results.env = environment()
	progress("emulator %s on %s; logs in %s", b.results.env.emulator, emu.Host(), c.logPath)

	idle, err := b.startIdle()
	if err != nil {
		return err
	}
	defer idle.Close()

	phases := []struct {
		name string
		run  func() error
	}{
		{"acquire", b.acquisitions},
		{"otel", b.otelCost},
		{"handoff", b.handoff},
		{"failover", b.failover},
		{"waiter", b.waiters},
		{"holders", b.holders},
		{"large", b.largeHolder},
		{"fairness", b.fairness},
		{"rtt", b.remote},
	}
	for _, p := range phases {
		if c.only != "" && !strings.Contains(","+c.only+",", ","+p.name+",") {
			continue
		}
		t := time.Now()
		progress("phase %s", p.name)
		if err := p.run(); err != nil {
			b.results.note("phase %s failed: %v", p.name, err)
			progress("phase %s failed: %v", p.name, err)
		}
		progress("phase %s took %s", p.name, time.Since(t).Round(time.Second))
	}
	b.finishIdle()
	b.results.elapsed = time.Since(start)
	b.results.env.loadEnd = loadavg()
	md := b.results.markdown()
	fmt.Print(md)
	if err := os.WriteFile(c.out, []byte(md), 0o644); err != nil {
		return err
	}
	abs, _ := filepath.Abs(c.out)
	progress("wrote %s in %s", abs, b.results.elapsed.Round(time.Second))
	drawn, err := b.results.writeChart(c.svg)
	if err != nil {
		return fmt.Errorf("drawing %s: %w", c.svg, err)
	}
	if drawn {
		abs, _ := filepath.Abs(c.svg)
		progress("drew %s", abs)
	}
	return nil
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench %s: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// newDB creates a fresh GoogleSQL database for one phase and library, so
// phases never see each other's rows.
func (b *bench) newDB(lib string) (string, error) { return b.newDBIn(lib, lease.GoogleSQL) }

// newDBIn is newDB on a database of dialect d. spindle speaks GoogleSQL only.
func (b *bench) newDBIn(lib string, d lease.Dialect) (string, error) {
	ddl := d.DDL(slTable)
	if lib == "spindle" {
		if d != lease.GoogleSQL {
			return "", fmt.Errorf("spindle has no %s support", d)
		}
		ddl = []string{spindleDDL}
	}
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	return b.emu.CreateDatabaseIn(ctx, string(d), ddl...)
}

// newSpanner returns a client of db with its own RPC counter.
func (b *bench) newSpanner(db string) (*spanner.Client, *rpcCounter, error) {
	counter := newRPCCounter()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	sc, err := b.emu.NewClient(ctx, db, counter.options()...)
	return sc, counter, err
}

// startIdle opens a client that sends nothing for the whole run: whatever it
// counts besides session creation is idle session-pool traffic.
func (b *bench) startIdle() (*spanner.Client, error) {
	db, err := b.newDB("spannerlock")
	if err != nil {
		return nil, err
	}
	sc, counter, err := b.newSpanner(db)
	if err != nil {
		return nil, err
	}
	b.idle, b.idleSince = counter, time.Now()
	return sc, nil
}

func (b *bench) finishIdle() {
	s := b.idle.snapshot()
	d := time.Since(b.idleSince)
	b.results.idle = fmt.Sprintf("Idle traffic: a spanner.Client of the same configuration, opened at the start and never used, made %d RPCs in %s (%s) "+
		"besides session management (%s): %.4f RPC/s, which no figure here subtracts because it is below their last digit.",
		s.total(), d.Round(time.Second), s.methods(), sessionSummary(s), float64(s.total())/d.Seconds())
}

func sessionSummary(s rpcStats) string {
	if len(s.Session) == 0 {
		return "none"
	}
	var parts []string
	for k, v := range s.Session {
		parts = append(parts, fmt.Sprintf("%s %d", k, v))
	}
	return strings.Join(parts, ", ")
}
