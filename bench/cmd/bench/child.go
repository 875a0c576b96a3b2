package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"cloud.google.com/go/spanner"
	spindle "github.com/flowerinthenight/spindle/v2"
	"github.com/flowerinthenight/spindle/v2/lock"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// A child is this program re-executed as a separate holder or waiter
// process, so that failover can be measured with SIGKILL, handoff crosses a
// process boundary, and CPU and memory belong to one process only. It reads
// commands from stdin, one per line, and writes events to stdout as JSON
// lines; every time it reports is its wall clock (the parent's too: same
// machine, same clock).
//
// Commands for -lib spannerlock:
//
//	acquire NAME        Acquire in the background; events "acquiring", "acquired"
//	hold N PREFIX       Acquire N leases PREFIX-00000.. one after another; event "held"
//	release NAME        Release; event "released" (t0 = call, t = return)
//	loop NAME HOLDMS    Acquire, hold HOLDMS ms, Release, again; events per round
//	stop NAME           end a loop; event "stopped"
//
// Commands for -lib spindle (v2.2.0):
//
//	run NAME            spindle.New(...).Run; events "acquired" (its first
//	                    "got the lock") and "leading" (first heartbeat round)
//	hold N PREFIX       N spindle locks in this process (one spanner.Client),
//	                    started together; event "held" once all lead
//	lock NAME           lock.SpindleLock.Lock (blocking); events "acquiring", "acquired"
//	unlock NAME         stop the lock's loop (spindle has no release); event "released"
//
// Both: "stats" (event "stats"), "gcstats" (after a forced GC), "exit".
type event struct {
	Ev    string     `json:"ev"`
	Name  string     `json:"name,omitempty"`
	N     int        `json:"n,omitempty"`
	T0    int64      `json:"t0,omitempty"` // unix ns
	T     int64      `json:"t,omitempty"`  // unix ns
	Err   string     `json:"err,omitempty"`
	Stats *procStats `json:"stats,omitempty"`
}

// procStats describes the child process at one instant.
type procStats struct {
	Wall       int64  `json:"wall"` // unix ns
	CPU        int64  `json:"cpu"`  // user+system ns (getrusage RUSAGE_SELF)
	RSS        int64  `json:"rss"`  // bytes, VmRSS
	HWM        int64  `json:"hwm"`  // bytes, VmHWM
	HeapAlloc  uint64 `json:"heap_alloc"`
	HeapInuse  uint64 `json:"heap_inuse"`
	GoSys      uint64 `json:"go_sys"`
	Goroutines int    `json:"goroutines"`
	// Held and Lost count the spannerlock leases the child acquired whose
	// Context is still live, and those it has lost.
	Held int      `json:"held"`
	Lost int      `json:"lost"`
	RPC  rpcStats `json:"rpc"`
}

type childProc struct {
	ctx     context.Context
	counter *rpcCounter
	sc      *spanner.Client
	table   string
	verbose bool

	outMu sync.Mutex
	out   *json.Encoder

	// spannerlock
	lc     *lease.Client
	leases map[string]*lease.Lease

	// spindle
	ttl      time.Duration
	mu       sync.Mutex
	runs     map[string]context.CancelFunc
	spLocks  map[string]*lock.SpindleLock
	spinners []*spindle.Lock
}

func runChild(args []string) error {
	fs := flag.NewFlagSet("child", flag.ContinueOnError)
	lib := fs.String("lib", "spannerlock", "spannerlock or spindle")
	host := fs.String("host", "", "emulator host:port")
	db := fs.String("db", "", "database path")
	table := fs.String("table", "locks", "table")
	ttl := fs.Duration("ttl", 10*time.Second, "lease TTL (spindle: WithDuration)")
	poll := fs.Duration("poll", lease.DefaultPollInterval, "spannerlock poll interval")
	id := fs.String("id", "", "holder ID")
	verbose := fs.Bool("v", false, "library logs to stderr")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx := context.Background()
	emu, err := emulator.External(ctx, *host)
	if err != nil {
		return err
	}
	defer func() { _ = emu.Stop() }()
	p := &childProc{ctx: ctx, counter: newRPCCounter(), table: *table, verbose: *verbose, out: json.NewEncoder(os.Stdout),
		ttl: *ttl, leases: map[string]*lease.Lease{}, runs: map[string]context.CancelFunc{}, spLocks: map[string]*lock.SpindleLock{}}
	if p.sc, err = emu.NewClient(ctx, *db, p.counter.options()...); err != nil {
		return err
	}
	defer p.sc.Close()

	var handle func([]string) error
	switch *lib {
	case "spannerlock":
		level := slog.LevelError
		if *verbose {
			level = slog.LevelWarn
		}
		logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
		opts := []lease.Option{lease.WithTTL(*ttl), lease.WithPollInterval(*poll), lease.WithLogger(logger)}
		if *id != "" {
			opts = append(opts, lease.WithHolderID(*id))
		}
		if p.lc, err = lease.NewClient(p.sc, *table, opts...); err != nil {
			return err
		}
		defer func() { _ = p.lc.Close() }()
		handle = p.spannerlock
	case "spindle":
		handle = p.spindle
	default:
		return fmt.Errorf("unknown -lib %q", *lib)
	}

	p.emit(event{Ev: "ready", T: now()})
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "exit":
			return nil
		case "stats", "gcstats":
			if f[0] == "gcstats" {
				runtime.GC()
			}
			st := p.stats()
			p.emit(event{Ev: "stats", T: st.Wall, Stats: &st})
		default:
			if err := handle(f); err != nil {
				p.emit(event{Ev: "error", Err: err.Error()})
			}
		}
	}
	return in.Err() // stdin closed: the parent is gone
}

func (p *childProc) emit(e event) {
	p.outMu.Lock()
	defer p.outMu.Unlock()
	_ = p.out.Encode(e)
}

func (p *childProc) fail(name string, err error) {
	p.emit(event{Ev: "error", Name: name, Err: err.Error()})
}

func (p *childProc) stats() procStats {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	rss, hwm := procStatus()
	held, lost := 0, 0
	p.mu.Lock()
	for _, l := range p.leases {
		if l.Context().Err() != nil {
			lost++
		} else {
			held++
		}
	}
	p.mu.Unlock()
	return procStats{
		Wall:       now(),
		CPU:        ru.Utime.Nano() + ru.Stime.Nano(),
		RSS:        rss,
		HWM:        hwm,
		HeapAlloc:  ms.HeapAlloc,
		HeapInuse:  ms.HeapInuse,
		GoSys:      ms.Sys,
		Goroutines: runtime.NumGoroutine(),
		Held:       held,
		Lost:       lost,
		RPC:        p.counter.snapshot(),
	}
}

// procStatus reads VmRSS and VmHWM of this process, in bytes.
func procStatus() (rss, hwm int64) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb << 10
		case "VmHWM:":
			hwm = kb << 10
		}
	}
	return rss, hwm
}

func now() int64 { return time.Now().UnixNano() }

func (p *childProc) spannerlock(f []string) error {
	switch {
	case f[0] == "acquire" && len(f) == 2:
		name := f[1]
		go func() {
			t0 := now()
			p.emit(event{Ev: "acquiring", Name: name, T: t0})
			l, err := p.lc.Acquire(p.ctx, name)
			t := now()
			if err != nil {
				p.fail(name, err)
				return
			}
			p.mu.Lock()
			p.leases[name] = l
			p.mu.Unlock()
			p.emit(event{Ev: "acquired", Name: name, T0: t0, T: t})
		}()
	case f[0] == "hold" && len(f) == 3:
		n, err := strconv.Atoi(f[1])
		if err != nil {
			return err
		}
		prefix := f[2]
		go func() {
			t0 := now()
			for i := range n {
				name := fmt.Sprintf("%s-%05d", prefix, i)
				l, err := p.lc.Acquire(p.ctx, name)
				if err != nil {
					p.fail(name, err)
					return
				}
				p.mu.Lock()
				p.leases[name] = l
				p.mu.Unlock()
				if (i+1)%1000 == 0 && i+1 < n {
					p.emit(event{Ev: "progress", N: i + 1, T0: t0, T: now()})
				}
			}
			p.emit(event{Ev: "held", N: n, T0: t0, T: now()})
		}()
	case f[0] == "loop" && len(f) == 3:
		// Acquire, hold for HOLDMS, release, again, until "stop NAME";
		// events "acquiring", "acquired" and "released" for each round.
		name := f[1]
		hold, err := time.ParseDuration(f[2] + "ms")
		if err != nil {
			return err
		}
		ctx, cancel := context.WithCancel(p.ctx)
		done := make(chan struct{})
		p.mu.Lock()
		p.runs[name] = func() { cancel(); <-done }
		p.mu.Unlock()
		go func() {
			defer close(done)
			for ctx.Err() == nil {
				t0 := now()
				p.emit(event{Ev: "acquiring", Name: name, T: t0})
				l, err := p.lc.Acquire(ctx, name)
				if err != nil {
					if ctx.Err() == nil {
						p.fail(name, err)
					}
					return
				}
				p.emit(event{Ev: "acquired", Name: name, T0: t0, T: now()})
				time.Sleep(hold)
				t1 := now()
				if err := l.Release(p.ctx); err != nil {
					p.fail(name, err)
					return
				}
				p.emit(event{Ev: "released", Name: name, T0: t1, T: now()})
			}
		}()
	case f[0] == "stop" && len(f) == 2:
		p.mu.Lock()
		stop := p.runs[f[1]]
		delete(p.runs, f[1])
		p.mu.Unlock()
		if stop == nil {
			return fmt.Errorf("stop %s: no loop", f[1])
		}
		stop()
		p.emit(event{Ev: "stopped", Name: f[1], T: now()})
	case f[0] == "release" && len(f) == 2:
		p.mu.Lock()
		l := p.leases[f[1]]
		delete(p.leases, f[1])
		p.mu.Unlock()
		if l == nil {
			return fmt.Errorf("release %s: not held", f[1])
		}
		t0 := now()
		err := l.Release(p.ctx)
		t := now()
		if err != nil {
			return err
		}
		p.emit(event{Ev: "released", Name: f[1], T0: t0, T: t})
	default:
		return fmt.Errorf("unknown command %q", strings.Join(f, " "))
	}
	return nil
}

func (p *childProc) spindleLogger(onGot, onLead func()) *log.Logger {
	w := io.Discard
	if p.verbose {
		w = os.Stderr
	}
	return log.New(&hookWriter{w: w, onGot: onGot, onLead: onLead}, "[spindle] ", log.LstdFlags)
}

// hookWriter watches spindle's log lines for the two moments it does not
// otherwise expose without an RPC: the lock acquired, and the first
// heartbeat round as leader.
type hookWriter struct {
	w             io.Writer
	onGot, onLead func()
	got, led      sync.Once
}

func (h *hookWriter) Write(b []byte) (int, error) {
	s := string(b)
	if h.onGot != nil && strings.Contains(s, "got the lock") {
		h.got.Do(h.onGot)
	}
	if h.onLead != nil && strings.Contains(s, "leader active (me)") {
		h.led.Do(h.onLead)
	}
	return h.w.Write(b)
}

func (p *childProc) spindle(f []string) error {
	switch {
	case f[0] == "run" && len(f) == 2:
		name := f[1]
		ctx, cancel := context.WithCancel(p.ctx)
		p.mu.Lock()
		p.runs[name] = cancel
		p.mu.Unlock()
		logger := p.spindleLogger(
			func() { p.emit(event{Ev: "acquired", Name: name, T: now()}) },
			func() { p.emit(event{Ev: "leading", Name: name, T: now()}) })
		l := spindle.New(p.sc, p.table, name, spindle.WithDuration(p.ttl.Milliseconds()), spindle.WithLogger(logger))
		p.spinners = append(p.spinners, l)
		return l.Run(ctx)
	case f[0] == "hold" && len(f) == 3:
		n, err := strconv.Atoi(f[1])
		if err != nil {
			return err
		}
		t0 := now()
		var wg sync.WaitGroup
		wg.Add(n)
		for i := range n {
			name := fmt.Sprintf("%s-%05d", f[2], i)
			ctx, cancel := context.WithCancel(p.ctx)
			p.mu.Lock()
			p.runs[name] = cancel
			p.mu.Unlock()
			l := spindle.New(p.sc, p.table, name, spindle.WithDuration(p.ttl.Milliseconds()), spindle.WithLogger(p.spindleLogger(nil, wg.Done)))
			p.spinners = append(p.spinners, l)
			if err := l.Run(ctx); err != nil {
				return err
			}
		}
		go func() {
			wg.Wait()
			p.emit(event{Ev: "held", N: n, T0: t0, T: now()})
		}()
	case f[0] == "lock" && len(f) == 2:
		name := f[1]
		l := lock.NewSpindleLock(&lock.SpindleLockOptions{
			Client: p.sc, Table: p.table, Name: name, Duration: p.ttl.Milliseconds(), Logger: p.spindleLogger(nil, nil),
		})
		p.mu.Lock()
		p.spLocks[name] = l
		p.mu.Unlock()
		go func() {
			t0 := now()
			p.emit(event{Ev: "acquiring", Name: name, T: t0})
			if err := l.Lock(p.ctx); err != nil {
				p.fail(name, err)
				return
			}
			p.emit(event{Ev: "acquired", Name: name, T0: t0, T: now()})
		}()
	case f[0] == "unlock" && len(f) == 2:
		p.mu.Lock()
		cancel, l := p.runs[f[1]], p.spLocks[f[1]]
		p.mu.Unlock()
		t0 := now()
		switch {
		case l != nil:
			_ = l.Unlock()
		case cancel != nil:
			cancel()
		default:
			return fmt.Errorf("unlock %s: not running", f[1])
		}
		p.emit(event{Ev: "released", Name: f[1], T0: t0, T: now()})
	default:
		return fmt.Errorf("unknown command %q", strings.Join(f, " "))
	}
	return nil
}
