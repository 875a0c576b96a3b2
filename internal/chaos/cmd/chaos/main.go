// Command chaos runs the fault suite once and prints its report: worker
// processes contend for locks and a semaphore on a Spanner emulator it
// starts, nemeses strike, and the checker judges the result. It exits 1 when
// the checker finds a violation and 2 when the run could not be carried out.
// With -planted the workers are built with the spannerlock_plantedbug tag
// (Guard checks nothing) and the exit status is inverted: 0 when the checker
// caught the bug, 1 when it passed the run.
//
//	go run ./internal/chaos/cmd/chaos -duration 5m
//	go run ./internal/chaos/cmd/chaos -dialect postgresql -duration 5m   # on a PostgreSQL-dialect database
//	go run ./internal/chaos/cmd/chaos -seed 42 -duration 45s   # replay a run's choices
//	go run ./internal/chaos/cmd/chaos -planted -nemeses pause-after-guard -permits -1
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/chaos"
	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
)

func main() {
	var (
		cfg     chaos.Config
		nemeses string
		dialect string
		planted bool
		quiet   bool
	)
	flag.Uint64Var(&cfg.Seed, "seed", 0, "random seed (0: pick one and print it)")
	flag.DurationVar(&cfg.Duration, "duration", time.Minute, "how long workers run")
	flag.StringVar(&dialect, "dialect", "googlesql", "dialect of the run's database: googlesql or postgresql")
	flag.IntVar(&cfg.Workers, "workers", 5, "worker processes")
	flag.IntVar(&cfg.Locks, "locks", 2, "locks")
	flag.Int64Var(&cfg.Permits, "permits", 2, "permits of the semaphore (negative: no semaphore)")
	flag.Float64Var(&cfg.SemShare, "sem-share", 0.3, "fraction of critical sections on the semaphore")
	flag.DurationVar(&cfg.TTL, "ttl", time.Second, "lease TTL")
	flag.Float64Var(&cfg.Ambiguous, "ambiguous", 0.02, "probability that a worker reports a successful Commit as DEADLINE_EXCEEDED")
	flag.BoolVar(&cfg.FaultInjection, "emulator-faults", true, "run the emulator with --enable_fault_injection")
	flag.StringVar(&nemeses, "nemeses", strings.Join(chaos.AllNemeses, ","), "nemeses to schedule, comma-separated (empty: none)")
	flag.BoolVar(&planted, "planted", false, "build the worker with the spannerlock_plantedbug tag (Guard checks nothing) and exit 0 only if the checker catches it")
	flag.StringVar(&cfg.Dir, "dir", "", "directory for logs (default: a new temporary directory)")
	flag.BoolVar(&quiet, "q", false, "do not print faults as they happen")
	flag.Parse()

	var err error
	if cfg.Dialect, err = chaos.ParseDialect(dialect); err != nil {
		fmt.Fprintln(os.Stderr, "chaos: -dialect:", err)
		os.Exit(2)
	}
	emulator.QuietClientBanner()
	if cfg.Seed == 0 {
		cfg.Seed = rand.Uint64N(1 << 31)
	}
	cfg.Nemeses = []string{}
	for n := range strings.SplitSeq(nemeses, ",") {
		if n = strings.TrimSpace(n); n != "" {
			cfg.Nemeses = append(cfg.Nemeses, n)
		}
	}
	if !quiet {
		cfg.Progress = os.Stdout
	}
	fmt.Printf("chaos: seed %d, %s database\n", cfg.Seed, chaos.DialectName(cfg.Dialect))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code, err := run(ctx, cfg, planted)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
	}
	os.Exit(code)
}

func run(ctx context.Context, cfg chaos.Config, planted bool) (int, error) {
	bin, err := os.MkdirTemp("", "spannerlock-chaos-bin-")
	if err != nil {
		return 2, err
	}
	defer func() { _ = os.RemoveAll(bin) }()
	var tags []string
	if planted {
		tags = append(tags, "spannerlock_plantedbug")
	}
	if cfg.WorkerBinary, err = chaos.BuildWorker(ctx, bin, tags...); err != nil {
		return 2, err
	}
	res, err := chaos.Run(ctx, cfg)
	if res != nil && res.History.Counters != nil {
		fmt.Print("\n" + res.Report())
	}
	if err != nil {
		return 2, err
	}
	switch {
	case planted && res.OK():
		fmt.Println("chaos: the checker passed a run whose Guard checks nothing: the suite is blind to the planted bug")
		return 1, nil
	case planted:
		fmt.Println("chaos: the planted bug was caught")
		return 0, nil
	case !res.OK():
		return 1, nil
	}
	return 0, nil
}
