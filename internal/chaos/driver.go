package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/chaos/record"
	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// Config describes one run. Zero fields take the defaults of withDefaults.
type Config struct {
	// Seed drives every random choice of the driver and the workers
	// (which nemesis, whom, how long; which lock, how many writes).
	Seed     uint64
	Duration time.Duration
	Workers  int
	Locks    int
	// Permits of the semaphore "sem"; negative for no semaphore.
	Permits int64
	// SemShare is the fraction of critical sections on the semaphore.
	SemShare float64
	TTL      time.Duration
	// Ambiguous is the probability that a worker reports a successful
	// Commit as DEADLINE_EXCEEDED, besides the NAmbiguous nemesis.
	Ambiguous float64
	// FaultInjection runs the emulator with --enable_fault_injection.
	FaultInjection bool
	// Nemeses to schedule; nil means AllNemeses, empty none.
	Nemeses []string
	// WorkerBinary is the worker program (BuildWorker).
	WorkerBinary string
	// Emulator to use; nil starts one (with FaultInjection) for the run.
	Emulator *emulator.Emulator
	// Dialect of the run's database; empty means GoogleSQL. Workers, driver
	// and checker all speak it: their lease.Clients read it from the
	// database, and every other statement comes from record.In(Dialect).
	Dialect lease.Dialect
	// Database on Emulator, with record.In(Dialect).DDL() applied (tests
	// pass one emulator.DatabaseIn drops at cleanup); empty creates one.
	Database string
	// Dir receives the logs; empty means a new temporary directory.
	Dir string
	// Progress, when set, receives a line per fault as the run goes.
	Progress io.Writer
}

func (c Config) withDefaults() Config {
	if c.Duration == 0 {
		c.Duration = 30 * time.Second
	}
	if c.Workers == 0 {
		c.Workers = 5
	}
	if c.Locks == 0 {
		c.Locks = 2
	}
	if c.Permits == 0 {
		c.Permits = 2
	}
	if c.TTL == 0 {
		c.TTL = time.Second
	}
	if c.Nemeses == nil {
		c.Nemeses = AllNemeses
	}
	if c.Dialect == "" {
		c.Dialect = lease.GoogleSQL
	}
	return c
}

// Semaphore is the name of the run's semaphore.
const Semaphore = "sem"

// Result is one run: its history, the faults injected, and the verdict.
type Result struct {
	Config     Config
	Dir        string
	Database   string
	Build      string
	Start, End time.Time
	History    History
	Faults     []Fault
	Violations []Violation
	// Processes counts worker processes, restarts included.
	Processes int
	// TornLines counts log lines cut short (by SIGKILL) and skipped.
	TornLines int
}

// OK reports whether the checker found nothing wrong.
func (r *Result) OK() bool { return len(r.Violations) == 0 }

type runner struct {
	cfg       Config
	sql       record.Spelling
	db        *spanner.Client
	lc        *lease.Client
	semaphore string
	slots     []*slot
	args      workerArgs
	progress  io.Writer

	mu     sync.Mutex
	faults []Fault
	ending bool
}

// Run runs the fault suite once: N worker processes contend for M locks and
// a semaphore on the emulator while nemeses strike, then the checker judges
// the logs and the fenced resource. The error is for a run that could not
// be carried out; violations are in the Result.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg = cfg.withDefaults()
	if cfg.WorkerBinary == "" {
		return nil, errors.New("chaos: Config.WorkerBinary is empty: build it with BuildWorker")
	}
	res := &Result{Config: cfg, Dir: cfg.Dir}
	if res.Dir == "" {
		d, err := os.MkdirTemp("", "spannerlock-chaos-")
		if err != nil {
			return nil, err
		}
		res.Dir = d
	} else if err := os.MkdirAll(res.Dir, 0o755); err != nil {
		return nil, err
	}
	e := cfg.Emulator
	if e == nil {
		logf, err := os.Create(filepath.Join(res.Dir, "emulator.log"))
		if err != nil {
			return nil, err
		}
		defer func() { _ = logf.Close() }()
		if e, err = emulator.Start(ctx, emulator.Options{FaultInjection: cfg.FaultInjection, Log: logf}); err != nil {
			return nil, err
		}
		defer func() { _ = e.Stop() }()
	}
	db := cfg.Database
	if db == "" {
		var err error
		if db, err = e.CreateDatabaseIn(ctx, string(cfg.Dialect), record.In(cfg.Dialect).DDL()...); err != nil {
			return nil, err
		}
	}
	res.Database = db
	sc, err := e.NewClient(ctx, db)
	if err != nil {
		return nil, err
	}
	defer sc.Close()
	if err := checkDialect(ctx, sc, cfg.Dialect); err != nil {
		return nil, err
	}
	lc, err := lease.NewClient(sc, record.Table, lease.WithHolderID("chaos-driver"))
	if err != nil {
		return nil, err
	}
	defer func() { _ = lc.Close() }()
	r := &runner{cfg: cfg, sql: record.In(cfg.Dialect), db: sc, lc: lc, progress: cfg.Progress}
	if cfg.Permits > 0 {
		r.semaphore = Semaphore
		if err := lc.SetPermits(ctx, Semaphore, cfg.Permits); err != nil {
			return nil, err
		}
	}
	r.args = workerArgs{binary: cfg.WorkerBinary, database: db, dir: res.Dir, cfg: cfg, semaphore: r.semaphore}

	for i := range cfg.Workers {
		p, err := NewProxy(e.Host())
		if err != nil {
			return nil, err
		}
		defer func() { _ = p.Close() }()
		r.slots = append(r.slots, &slot{idx: i, proxy: p})
	}
	defer r.killAll()
	for _, s := range r.slots {
		if err := s.start(r.args, true, r.late); err != nil {
			return nil, err
		}
	}
	if err := r.waitReady(ctx); err != nil {
		return nil, err
	}

	// The start-together case: every worker is connected and blocked on
	// stdin; one write each releases them within microseconds, and each
	// first contends for lock-0, a name no one has acquired yet.
	res.Start = time.Now()
	until := res.Start.Add(cfg.Duration)
	r.args.until = until
	var skew time.Duration
	for _, s := range r.slots {
		if err := s.release(until); err != nil {
			return nil, fmt.Errorf("chaos: releasing %d: %w", s.idx, err)
		}
		skew = time.Since(res.Start)
	}
	r.record(Fault{At: res.Start, Kind: "start-together", Target: "all",
		Detail: fmt.Sprintf("%d workers released onto lock-0 within %s", cfg.Workers, skew.Round(time.Microsecond))})

	nctx, stopNemeses := context.WithCancel(ctx)
	nemDone := make(chan struct{})
	go func() {
		defer close(nemDone)
		(&nemesis{r: r, rng: rand.New(rand.NewPCG(cfg.Seed, 0xc4a05))}).schedule(nctx, until)
	}()
	sleepCtx(ctx, time.Until(until))
	// Let a fault in progress finish, within bounds, then heal everything.
	select {
	case <-nemDone:
	case <-time.After(3 * cfg.TTL):
	}
	stopNemeses()
	<-nemDone
	r.mu.Lock()
	r.ending = true
	r.mu.Unlock()
	r.healAll()
	r.waitExit(until.Add(8*cfg.TTL + 20*time.Second))
	res.End = time.Now()

	r.mu.Lock()
	res.Faults = append([]Fault(nil), r.faults...)
	r.mu.Unlock()
	sort.SliceStable(res.Faults, func(i, j int) bool { return res.Faults[i].At.Before(res.Faults[j].At) })
	if err := r.collect(ctx, res); err != nil {
		return res, err
	}
	res.Violations = Check(res.History)
	return res, nil
}

// checkDialect refuses a database of another dialect than the run's, so
// that a report never claims a dialect its run did not use.
func checkDialect(ctx context.Context, db *spanner.Client, want lease.Dialect) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	got, err := locktable.DatabaseDialect(ctx, db)
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	if lease.Dialect(got) != want {
		return fmt.Errorf("chaos: database %s is %s, but the run's Dialect is %s", db.DatabaseName(), got, want)
	}
	return nil
}

func (r *runner) waitReady(ctx context.Context) error {
	timeout := time.After(2 * time.Minute)
	for _, s := range r.slots {
		s.mu.Lock()
		ready, exited, holder := s.ready, s.exited, s.holder
		s.mu.Unlock()
		select {
		case <-ready:
		case <-exited:
			return fmt.Errorf("chaos: worker %s exited before it was ready; see %s", holder, filepath.Join(r.args.dir, holder+".stderr"))
		case <-timeout:
			return fmt.Errorf("chaos: worker %s not ready after 2 minutes", holder)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// restart replaces a killed worker, unless the run is ending.
func (r *runner) restart(s *slot) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ending {
		return errors.New("the run is ending")
	}
	return s.start(r.args, false, r.late)
}

func (r *runner) stop(s *slot) error {
	if err := s.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	r.markStopped(s, true)
	return nil
}

func (r *runner) cont(s *slot) {
	_ = s.signal(syscall.SIGCONT)
	r.markStopped(s, false)
}

func (r *runner) markStopped(s *slot, stopped bool) {
	s.mu.Lock()
	s.stopped = stopped
	s.mu.Unlock()
}

func (r *runner) record(f Fault) {
	r.mu.Lock()
	r.faults = append(r.faults, f)
	r.mu.Unlock()
	if r.progress != nil {
		_, _ = fmt.Fprintf(r.progress, "%s %-18s %-6s %s\n", f.At.Format("15:04:05.000"), f.Kind, f.Target, f.Detail)
	}
}

// healAll ends every fault so the workers can finish: no stopped process,
// no held or slowed traffic.
func (r *runner) healAll() {
	for _, s := range r.slots {
		s.proxy.Heal()
		_ = s.signal(syscall.SIGCONT)
		r.markStopped(s, false)
	}
}

// waitExit waits for the workers to finish on their own, and kills those
// still running at deadline.
func (r *runner) waitExit(deadline time.Time) {
	for _, s := range r.slots {
		s.mu.Lock()
		exited := s.exited
		s.mu.Unlock()
		select {
		case <-exited:
		case <-time.After(time.Until(deadline)):
			_ = s.signal(syscall.SIGKILL)
			<-exited
		}
	}
}

func (r *runner) killAll() {
	for _, s := range r.slots {
		s.mu.Lock()
		exited := s.exited
		s.mu.Unlock()
		if exited == nil {
			continue
		}
		_ = s.signal(syscall.SIGKILL)
		<-exited
	}
}

// collect reads every log and the resource tables.
func (r *runner) collect(ctx context.Context, res *Result) error {
	h := History{Counters: map[string]int64{}, Permits: map[string]int64{}}
	if r.semaphore != "" {
		h.Permits[r.semaphore] = r.cfg.Permits
	}
	for _, s := range r.slots {
		res.Processes += len(s.logs)
		for _, p := range s.logs {
			evs, torn, err := readLog(p)
			if err != nil {
				return err
			}
			res.TornLines += torn
			h.Events = append(h.Events, evs...)
		}
	}
	for _, e := range h.Events {
		if e.Ev == record.EvStart && res.Build == "" {
			res.Build = e.Detail
		}
	}
	err := r.db.Single().Query(ctx, r.sql.Writes()).Do(func(row *spanner.Row) error {
		var w record.Write
		if err := row.ToStruct(&w); err != nil {
			return err
		}
		h.Writes = append(h.Writes, w)
		return nil
	})
	if err != nil {
		return fmt.Errorf("chaos: reading %s: %w", record.WritesTable, err)
	}
	err = r.db.Single().Query(ctx, r.sql.Counters()).Do(func(row *spanner.Row) error {
		var name string
		var v int64
		if err := row.Columns(&name, &v); err != nil {
			return err
		}
		h.Counters[name] = v
		return nil
	})
	if err != nil {
		return fmt.Errorf("chaos: reading %s: %w", record.CountersTable, err)
	}
	res.History = h
	return nil
}

// readLog parses a worker's log; a line cut short by SIGKILL is counted
// and skipped.
func readLog(path string) ([]record.Event, int, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, nil // killed before it opened its log
	}
	if err != nil {
		return nil, 0, err
	}
	defer func() { _ = f.Close() }()
	var evs []record.Event
	torn := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var e record.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			torn++
			continue
		}
		evs = append(evs, e)
	}
	return evs, torn, sc.Err()
}
